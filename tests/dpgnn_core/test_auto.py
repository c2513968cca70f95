"""``dpgnn run auto``'s choice (dpgnn_core/methods/auto.py): a function of what the level
makes public only, one rule table that reads degrees only where the structure is public,
and the decisions the measured evidence asks for."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from dpgnn_core.data.store import write_dataset
from dpgnn_core.data.synthetic import csbm
from dpgnn_core.methods.auto import (
    LEVELS,
    PUBLIC_STRUCTURE,
    RULES,
    AutoRequest,
    PublicInputs,
    choose,
    public_inputs,
    resolve,
)
from dpgnn_core.methods.catalog import CATALOG
from dpgnn_core.methods.preflight import release_levels

#: The release levels that bound what each requested level protects (DP-MLP's node level
#: covers a node's features and label, and reads no edge).
COVERS = {"node": {"node"}, "k_neighbor": {"k_neighbor", "node"},
          "node_feature": {"node_feature", "node"}, "edge": {"edge"}}
REQUESTS = {"node": {"max_degree": 60}, "k_neighbor": {"k": 1}, "node_feature": {},
            "edge": {}}


def _request(level: str, epsilon: float) -> AutoRequest:
    return AutoRequest(level=level, epsilon=epsilon, **REQUESTS[level])


def test_the_table_reads_degrees_only_where_the_structure_is_public() -> None:
    for level in LEVELS:
        rules = [r for r in RULES if r.level == level]
        assert rules, level
        last = rules[-1]  # every level ends with a rule that always holds
        assert last.min_epsilon == 0 and not last.reads_degrees() and last.max_k is None
        assert last.max_feature_dim is None
    assert {r.level for r in RULES if r.reads_degrees()} <= set(PUBLIC_STRUCTURE)
    assert all(r.method in CATALOG for r in RULES)


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("epsilon", [1.0, 4.0, 8.0, 16.0])
@pytest.mark.parametrize("median", [2.0, 3.0, 64.0])
def test_every_choice_protects_at_least_the_level_asked(level: str, epsilon: float,
                                                        median: float) -> None:
    """The chosen spec's release bounds the requested unit at the requested ε."""
    from dpgnn_core.methods.auto import spec_for

    degrees = {"median_degree": median, "mean_degree": median} \
        if level in PUBLIC_STRUCTURE else {}
    x = PublicInputs(level=level, epsilon=epsilon, feature_dim=1433, num_nodes=2708,
                     num_train=2033, **{k: v for k, v in REQUESTS[level].items()},
                     **degrees)
    choice = choose(x)
    spec = spec_for(_request(level, epsilon), choice)
    assert spec.epsilon == epsilon
    ((released, _),) = release_levels(spec)
    assert released in COVERS[level], (level, choice.method, released)
    assert choice.epsilon_choice == 0.0


@pytest.mark.parametrize(("level", "epsilon", "extra", "method"), [
    ("node", 16.0, {}, "dpdgc-ndp"),
    ("node", 8.0, {}, "dp-mlp"),
    ("node", 4.0, {}, "dp-mlp"),
    ("k_neighbor", 4.0, {"k": 1}, "dpdgc-kndp"),
    ("k_neighbor", 16.0, {"k": 2}, "dp-mlp"),
    ("k_neighbor", 2.0, {"k": 1}, "dp-mlp"),
    # Cora: median degree 3, 1433 features; DP-MLP wins at ε = 4, DPDGC-FDP at 8
    ("node_feature", 4.0, {"median_degree": 3.0, "feature_dim": 1433}, "dp-mlp"),
    ("node_feature", 8.0, {"median_degree": 3.0, "feature_dim": 1433}, "dpdgc-fdp"),
    # a citation graph of median degree 2, 3703 features (issue 49): DP-MLP at 4 and 8
    ("node_feature", 8.0, {"median_degree": 2.0, "feature_dim": 3703}, "dp-mlp"),
    # a school (median degree 29-70): DPDGC-FDP from ε = 4, DP-MLP below
    ("node_feature", 4.0, {"median_degree": 64.0, "feature_dim": 4693}, "dpdgc-fdp"),
    ("node_feature", 2.0, {"median_degree": 64.0, "feature_dim": 4693}, "dp-mlp"),
    # a sparse CSBM graph with few features: DP-GCN
    ("node_feature", 4.0, {"median_degree": 3.0, "feature_dim": 32}, "dp-gcn"),
    ("edge", 1.0, {}, "progap-edp"),
])
def test_the_rule_follows_the_measured_evidence(level: str, epsilon: float,
                                                extra: dict[str, float], method: str) -> None:
    fields = {"feature_dim": 1433, **extra}
    if level == "node":
        fields["max_degree"] = 168
    x = PublicInputs(level=level, epsilon=epsilon, num_nodes=2708, num_train=2033,
                     **fields)  # type: ignore[arg-type]
    choice = choose(x)
    assert choice.method == method
    if method == "dpdgc-ndp":
        assert choice.options == {"max_degree": 168}
    if method == "dpdgc-kndp":
        assert choice.options == {"k": 1}


def _folders(tmp_path: Path) -> tuple[Path, Path, Path, Path]:
    """A dataset; the same with other labels, features and edges (what node level
    protects); the same with other labels and features only (what node_feature level
    protects); the same with a far denser structure."""
    base = csbm(num_nodes=200, avg_degree=3, feature_dim=16, seed=5)
    rng = np.random.default_rng(0)  # input data, not noise
    records = dataclasses.replace(base, y=rng.permutation(base.y),
                                  x=rng.normal(size=base.x.shape).astype(np.float32))
    everything = dataclasses.replace(
        records, edge_index=np.ascontiguousarray(base.edge_index[:, ::2][:, :-10]))
    dense = dataclasses.replace(base, edge_index=csbm(num_nodes=200, avg_degree=40,
                                                      feature_dim=16, seed=5).edge_index)
    out = []
    for name, data in (("a", base), ("b", everything), ("c", records), ("dense", dense)):
        write_dataset(data, tmp_path / name)
        out.append(tmp_path / name)
    return out[0], out[1], out[2], out[3]


def test_the_choice_reads_nothing_the_level_protects(tmp_path: Path) -> None:
    """Other labels and other edges leave the choice at node, k-neighbour and edge level
    unchanged (they are what those levels protect); labels leave node_feature's unchanged,
    while its public structure does change it. Removing the files a level protects does
    not stop the choice: they are never opened."""
    a, b, c, dense = _folders(tmp_path)
    for level in ("node", "k_neighbor", "edge"):
        for eps in (2.0, 4.0, 16.0):
            req = _request(level, eps)
            ca, cb = resolve(req, a)[1], resolve(req, b)[1]
            assert ca == cb
            assert "median_degree" not in ca.inputs
    for eps in (2.0, 4.0, 8.0, 16.0):
        req = _request("node_feature", eps)
        assert resolve(req, a)[1] == resolve(req, c)[1]
    sparse = resolve(_request("node_feature", 4.0), a)[1]
    assert sparse.method == "dp-gcn"  # 16 features, median degree < 10
    assert resolve(_request("node_feature", 4.0), dense)[1].method == "dpdgc-fdp"
    # labels and features never opened at node_feature; nothing but the manifest elsewhere
    manifest = json.loads((a / "manifest.json").read_text())
    (a / "nodes.parquet").unlink()
    (a / "features.parquet").unlink(missing_ok=True)
    assert choose(public_inputs(_request("node_feature", 4.0), manifest, a)) == sparse
    (a / "edges.parquet").unlink()
    for level in ("node", "k_neighbor", "edge"):
        assert choose(public_inputs(_request(level, 4.0), manifest, a)) == \
            resolve(_request(level, 4.0), b)[1]


@pytest.mark.parametrize(("fields", "message"), [
    ({"level": "nodes", "epsilon": 4}, "--level 'nodes': choose one of node, k_neighbor"),
    ({"level": "node", "epsilon": 4}, "--level node needs --max-degree"),
    ({"level": "edge", "epsilon": 4, "max_degree": 5}, "--max-degree 5 applies to --level "
                                                       "node only"),
    ({"level": "node_feature", "epsilon": 4, "k": 2}, "--k 2 applies to --level k_neighbor"),
    ({"level": "edge", "epsilon": float("inf")}, "--epsilon inf: give a finite"),
    ({"level": "node", "epsilon": 4, "max_degree": 0}, "--max-degree 0: give a bound"),
])
def test_a_bad_request_is_one_line(fields: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match="^" + message.replace("(", r"\(")) as e:
        AutoRequest(**fields)  # type: ignore[arg-type]
    assert "\n" not in str(e.value)
