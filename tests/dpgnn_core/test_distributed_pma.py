"""Soundness of PMA on partitions (issue 51): on a graph that fits both ways, the
partitioned PMA gives the single-process pre-noise sums, the same σ, clipping, budget
plan and ledger events; its noise is i.i.d. N(0, σ²) from a secret source."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from dpgnn_core.data.partitioned import (
    node_bounds,
    part_name,
    read_edge_block,
    read_partitioned,
    write_partitioned_csbm,
)
from dpgnn_core.distributed.gap import aggregate_partitioned
from dpgnn_core.distributed.pma import (
    Encode,
    add_noise,
    block_sum,
    pma_partitioned,
    write_x0,
)
from dpgnn_core.errors import DataError
from dpgnn_core.methods.gap import aggregate, pma_noise_std
from dpgnn_core.methods.private_run import PrivateRun
from dpgnn_core.models.gap import new_encoder
from dpgnn_core.privacy.pma import aggregation_matrix, clip_rows, row_normalise
from dpgnn_core.privacy.randomness import Randomness
from dpgnn_core.specs.gap import GapSpec

N, BLOCK = 2000, 450  # five blocks, the last one short


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("pma") / "csbm"
    write_partitioned_csbm(out, partition_nodes=BLOCK, num_nodes=N, avg_degree=8,
                           feature_dim=16, seed=5)
    return out


def test_block_sums_regroup_the_single_process_sum(dataset: Path) -> None:
    """The pre-noise, clipped sums of every destination block, concatenated, are the
    single-process ``clip(A^T X)`` (float32 tolerance): the same sums, regrouped."""
    data = read_partitioned(dataset)
    x = row_normalise(torch.from_numpy(data.x))
    whole = clip_rows(torch.sparse.mm(aggregation_matrix(torch.from_numpy(data.edge_index),
                                                         N), x), 2.0)
    bounds = node_bounds(N, BLOCK)
    parts = []
    for i, (lo, hi) in enumerate(bounds):
        src, dst = read_edge_block(dataset, i, bounds, N)
        parts.append(clip_rows(block_sum(src, dst - lo, hi - lo, 16, bounds,
                                         lambda j: x[slice(*bounds[j])].numpy()), 2.0))
    blocked = torch.cat(parts)
    assert (whole.norm(dim=1) > 2.0 - 1e-5).sum() > 100  # the clipping is exercised
    torch.testing.assert_close(blocked, whole, rtol=1e-5, atol=1e-5)


def test_noise_is_iid_gaussian_from_a_secret_source() -> None:
    rand = Randomness.secret()
    a = add_noise(torch.zeros(400, 500), 0.7, rand.torch_generator("pma/noise/hop1/block0"))
    b = add_noise(torch.zeros(400, 500), 0.7, rand.torch_generator("pma/noise/hop1/block0"))
    assert float(a.std()) == pytest.approx(0.7, rel=0.01)
    assert abs(float(a.mean())) < 0.01
    assert not torch.equal(a, b)  # the same stream name twice: two fresh secret seeds
    assert abs(float(np.corrcoef(a.flatten(), b.flatten())[0, 1])) < 0.01


@pytest.fixture(scope="module")
def client() -> Iterator[Any]:
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=2, processes=True, threads_per_worker=1,
                      dashboard_address=None) as cluster, Client(cluster) as c:
        yield c


class _Recorder:
    def __init__(self) -> None:
        self.plans: list[Any] = []
        self.releases = 0

    def before_release(self, ledger: Any, info: Any) -> None:
        self.plans.append((ledger, dict(info)))

    def released(self) -> None:
        self.releases += 1


@pytest.mark.integration
@pytest.mark.slow
def test_partitioned_pma_is_the_single_process_pma(dataset: Path, client: Any,
                                                   tmp_path: Path) -> None:
    """GAP's PMA stage both ways on one graph: without noise (GAP-∞) the releases agree
    at every hop, clipping included; private (GAP-EDP), σ, the budget plan the gate sees
    and the ledger events are the single-process ones, and the noise is fresh."""
    data = read_partitioned(dataset)
    base = {"hops": 2, "epochs": 1, "steps": 1, "batch_size": 100, "device": "cpu",
            "row_clip": 2.0, "encoder_dim": 8}
    spec = GapSpec(level="none", **base)
    torch.manual_seed(0)
    encoder = new_encoder(spec, 16, data.num_classes)
    x0 = write_x0(client, dataset, tmp_path / "x0", Encode(encoder))
    single, _ = aggregate(data, data.edge_index, encoder, spec, 0.0)
    part, events = aggregate_partitioned(client, spec, 0.0, dataset, x0, tmp_path / "inf")
    assert events.entries == ()
    for k in (1, 2):
        np.testing.assert_allclose(part.hop(k), single[:, k - 1].numpy(), rtol=1e-5,
                                   atol=1e-5)
    private = GapSpec(level="edge", epsilon=4.0, **base)
    seen: dict[str, _Recorder] = {}
    for way in ("single", "partitioned"):
        seen[way] = rec = _Recorder()
        if way == "single":
            _, ev_single = aggregate(data, data.edge_index, encoder, private, 1.3,
                                     PrivateRun(gate=rec))
        else:
            rel, ev_part = aggregate_partitioned(client, private, 1.3, dataset, x0,
                                                 tmp_path / "edp", run=PrivateRun(gate=rec))
    assert ev_part == ev_single and ev_part.entries
    assert rel.sigma == pma_noise_std(private, 1.3, directed=False) > 0
    assert seen["single"].plans == seen["partitioned"].plans and seen["single"].plans
    assert seen["single"].releases == seen["partitioned"].releases == 1
    again, _ = aggregate_partitioned(client, private, 1.3, dataset, x0, tmp_path / "edp2")
    assert not np.allclose(rel.hop(1), again.hop(1))  # secret noise: never the same twice
    assert np.allclose(np.linalg.norm(rel.hop(2), axis=1), 1.0, atol=1e-5)


@pytest.mark.integration
@pytest.mark.slow
def test_checks_run_before_any_work(dataset: Path, client: Any, tmp_path: Path) -> None:
    """A tampered partition is refused before a hop runs (nothing written); node level
    refuses a degree above D with the single-process check's words."""
    import shutil

    work = Path(shutil.copytree(dataset, tmp_path / "copy"))
    write_x0(client, work, tmp_path / "x0")
    node = GapSpec(level="node", epsilon=4.0, max_degree=3, hops=1, epochs=1, steps=1,
                   batch_size=100, device="cpu")
    with pytest.raises(DataError, match="D = 3") as err:
        aggregate_partitioned(client, node, 1.0, work, tmp_path / "x0", tmp_path / "ndp")
    assert "exceeds" in str(err.value) and not (tmp_path / "ndp").exists()
    victim = work / part_name("features", 2)
    victim.write_bytes(victim.read_bytes()[:-1] + b"\0")
    with pytest.raises(DataError, match="checksum mismatch") as err:
        pma_partitioned(client, work, tmp_path / "x0", tmp_path / "out", 1, 0.5)
    assert "features/part-00002.parquet" in str(err.value)
    assert not (tmp_path / "out").exists()



def test_a_destination_block_holds_one_source_block_at_a_time(dataset: Path) -> None:
    """A destination block's sum loads the source blocks one after another, each dropped
    before the next but one is loaded: a worker's memory is bounded by blocks, not by X,
    though the block's edges reach every source block."""
    import weakref

    bounds = node_bounds(N, BLOCK)
    src, dst = read_edge_block(dataset, 2, bounds, N)
    assert len(np.unique(np.searchsorted([lo for lo, _ in bounds], src, "right"))) == 5
    alive: list[weakref.ref[np.ndarray]] = []
    most = 0
    rng = np.random.default_rng(0)

    def load(j: int) -> np.ndarray:
        nonlocal most
        most = max(most, sum(r() is not None for r in alive))
        rows = rng.standard_normal((bounds[j][1] - bounds[j][0], 16)).astype(np.float32)
        alive.append(weakref.ref(rows))
        return rows

    block_sum(src, dst - bounds[2][0], BLOCK, 16, bounds, load)
    assert len(alive) == 5 and most <= 1
