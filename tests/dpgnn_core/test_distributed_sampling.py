"""DP-GNN's in-degree bound on partitions (issue 51 §2): fed the draws the blocks made,
the single-process SAMPLE-EDGELISTS returns the very same edges and dropped nodes; the
bound holds on adversarial in-degrees; the draws are secret (two runs differ)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dpgnn_core.data.graph import GraphData
from dpgnn_core.data.partitioned import (
    node_bounds,
    read_partitioned,
    write_partitioned,
    write_partitioned_csbm,
)
from dpgnn_core.distributed.sampling import edgelist_stream, sample_edgelists_partitioned
from dpgnn_core.errors import DataError
from dpgnn_core.graph.dpgnn_sampler import candidates, sample_edgelists
from dpgnn_core.privacy.randomness import Randomness


@pytest.fixture
def client(thread_client: Any) -> Any:
    return thread_client


class BlockDraws:
    """A stand-in generator for the single-process sampler: its one call
    ``random(n, dtype=float32)`` returns the uniforms each destination block drew from
    ``randomness`` (its stream :func:`edgelist_stream`), concatenated in block order, the
    order of the single-process candidates."""

    def __init__(self, randomness: Randomness, per_block: list[int]) -> None:
        self.per_block, self.randomness = per_block, randomness

    def random(self, n: int, dtype: Any = np.float64) -> np.ndarray:
        assert n == sum(self.per_block)
        return np.concatenate([
            self.randomness.numpy_generator(edgelist_stream(b)).random(k, dtype=np.float32)
            for b, k in enumerate(self.per_block)]).astype(dtype)


def _candidates_per_block(data: GraphData, bounds: list[tuple[int, int]]) -> list[int]:
    src, dst = data.edge_index
    train = data.mask("train")
    cand = candidates(src, dst, train[src], train[dst])
    owner = np.searchsorted([lo for lo, _ in bounds], dst[cand], side="right") - 1
    return list(np.bincount(owner, minlength=len(bounds)))


def _in_degrees(edge_index: np.ndarray, n: int) -> np.ndarray:
    return np.bincount(edge_index[1], minlength=n)


@pytest.mark.slow
def test_same_draws_give_the_single_process_sample(client: Any, tmp_path: Path) -> None:
    """On a CSBM in five partitions (half the nodes train), the partitioned sampler and the
    single-process one fed the same uniforms agree edge for edge, on the candidates and on
    the nodes dropped above K (the second pass is exercised: some are dropped)."""
    n, block = 1200, 250
    write_partitioned_csbm(tmp_path / "g", partition_nodes=block, num_nodes=n,
                           avg_degree=12, feature_dim=4, seed=3)
    data = read_partitioned(tmp_path / "g")
    rand = Randomness(reproducible_seed=11)
    part = sample_edgelists_partitioned(client, tmp_path / "g", tmp_path / "s", 2, rand)
    draws = BlockDraws(rand, _candidates_per_block(data, node_bounds(n, block)))
    single = sample_edgelists(data.edge_index, n, data.mask("train"), 2,
                              draws)  # type: ignore[arg-type]
    assert part.candidate_edges == single.candidate_edges > 0
    np.testing.assert_array_equal(part.dropped_nodes, single.dropped_nodes)
    assert part.dropped_nodes.size > 0
    np.testing.assert_array_equal(part.edge_index(), single.edge_index)
    assert _in_degrees(part.edge_index(), n).max() <= 2
    assert sum(part.edge_rows) == single.edge_index.shape[1] > 0


def _hubs(n: int, hubs: int) -> GraphData:
    """Every node linked (both ways) to each of ``hubs`` hubs, whose in-degree is n - 1."""
    src = np.concatenate([np.full(n - 1, h) for h in range(hubs)]
                         + [np.delete(np.arange(n), h) for h in range(hubs)])
    dst = np.concatenate([np.delete(np.arange(n), h) for h in range(hubs)]
                         + [np.full(n - 1, h) for h in range(hubs)])
    pairs = np.unique(np.stack([src, dst]), axis=1)
    rng = np.random.default_rng(0)  # input data, not noise
    return GraphData(name="hubs", task="node", x=rng.standard_normal((n, 3)).astype(np.float32),
                     edge_index=pairs, y=np.arange(n) % 2, split=np.zeros(n, dtype=np.int8),
                     num_classes=2, directed=False)


@pytest.mark.slow
def test_bound_holds_on_adversarial_in_degrees(client: Any, tmp_path: Path) -> None:
    """Hubs of in-degree n - 1 whose edges come from every partition: after sampling no
    node's in-degree exceeds K, on each of several secret draws, and two draws differ."""
    n, k = 400, 3
    data = _hubs(n, 6)
    write_partitioned(data, tmp_path / "g", partition_nodes=90)
    assert _in_degrees(data.edge_index, n).max() == n - 1
    kept = []
    for run in range(3):
        out = sample_edgelists_partitioned(client, tmp_path / "g", tmp_path / f"s{run}", k)
        ei = out.edge_index()
        assert _in_degrees(ei, n).max() <= k
        assert set(map(tuple, ei.T)) <= set(map(tuple, data.edge_index.T))
        kept.append(ei)
    assert not all(np.array_equal(kept[0], e) for e in kept[1:])


def test_bad_degree_bound_is_refused_before_any_work(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="max degree K") as err:
        sample_edgelists_partitioned(None, tmp_path / "missing", tmp_path / "s", 0)
    assert err.value.field == "max_degree" and not (tmp_path / "s").exists()
