"""No default is invalid for the data: an unset batch size adapts to the number of records
sampled from (the first private runs people try are on Cora's 140 training nodes)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from dpgnn_core.data.synthetic import csbm, er_graphs
from dpgnn_core.graph.gap_degree import max_degree_for_pma
from dpgnn_core.methods.registry import get

BIG = csbm(num_nodes=300, avg_degree=5, feature_dim=8, seed=9)
_split = np.array(BIG.split, copy=True)
_train = np.flatnonzero(_split == 0)
_split[_train[40:]] = 3  # only 40 training nodes are left: "unused"
NODES = dataclasses.replace(BIG, split=_split)
GRAPHS = er_graphs(num_graphs=60, split=(20, 20, 20), seed=9)


@pytest.mark.parametrize(("name", "expected"), [
    ("dp-gcn", 40), ("dp-mlp", 40), ("drw-gcn", 8), ("gap-ndp", 40), ("dp-graph-gcn", 5)])
def test_unset_batch_size_adapts_to_few_records(name: str, expected: int) -> None:
    m = get(name)
    opts = {"epsilon": 8.0, "steps": 3, "hidden": 8, "device": "cpu"}
    if name == "gap-ndp":
        opts.update(max_degree=max_degree_for_pma(NODES.edge_index, NODES.num_nodes,
                                                  directed=NODES.directed), epochs=2)
    if name == "drw-gcn":
        opts["walk_length"] = 4  # ceil(40 / 5) = 8 subgraphs at least: all 8 per batch
    spec = m.spec(**opts)
    assert spec.batch_size is None
    data = GRAPHS if m.task == "graph" else NODES
    fitted = m.fit(data, spec)  # a fixed 256 (64) would be refused here
    assert fitted.report.epsilon <= 8.0
    if name != "gap-ndp":
        assert fitted.report.details["batch_size"] == expected
    n = 20 if m.task == "graph" else 40
    if name == "dp-gcn":  # K unset: chosen from the graph when the run starts (issue 29)
        spec = spec.model_copy(update={"max_degree": fitted.report.details["max_degree"]})
    planned = m.ledger_for(spec, n)(fitted.report.noise_multiplier)
    assert planned.entries == fitted.ledger.entries


def test_batch_size_given_is_kept_and_checked() -> None:
    from dpgnn_core.errors import DataError

    spec = get("dp-gcn").spec(epsilon=8.0, batch_size=41, steps=2, device="cpu")
    assert spec.with_batch_size(40).batch_size == 41
    with pytest.raises(DataError, match="batch size 41 exceeds the 40 training nodes"):
        get("dp-gcn").fit(NODES, spec)
    big = get("dp-gcn").spec(epsilon=8.0).with_batch_size(10**6)
    assert big.batch_size == 16384  # the largest default batch, on large data
    assert get("gap-ndp").spec(epsilon=8.0, max_degree=5).with_batch_size(10**6
                                                                           ).batch_size == 16384
    assert get("drw-gcn").spec(epsilon=8.0).with_batch_size(10**6).batch_size == 16384
