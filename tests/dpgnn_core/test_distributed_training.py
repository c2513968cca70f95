"""DP-MLP trained from partitions (issue 51 §3): the ledger, noise and report are the
single-process run's for the same spec; the model is the single-process trainer's on the
very batches the partitions drew (each partition at rate q, its own generator); only
batches reach the trainer; evaluation over the partitions gives the single-process
metrics; the draws are secret."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import Tensor

from dpgnn_core.data.partitioned import node_bounds, read_partitioned, write_partitioned_csbm
from dpgnn_core.distributed.rows import FeatureRows, PartitionedRows
from dpgnn_core.distributed.training import (
    evaluate_dp_mlp_partitioned,
    train_dp_mlp_partitioned,
)
from dpgnn_core.methods.dp_mlp import evaluate_dp_mlp, fit_dp_mlp, plan_dp_mlp, train_dp_mlp
from dpgnn_core.privacy.randomness import Randomness
from dpgnn_core.specs import DpMlpSpec

N, BLOCK = 800, 200
SPEC = {"epsilon": 4.0, "steps": 12, "batch_size": 40, "hidden": 16, "device": "cpu"}


@pytest.fixture
def client(thread_client: Any) -> Any:
    return thread_client


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("rows") / "csbm"
    write_partitioned_csbm(out, partition_nodes=BLOCK, num_nodes=N, feature_dim=8,
                           feature_signal=3.0, seed=2)
    return out


class Replay:
    """Rows in memory whose Poisson batches are given node ids, in turn."""

    def __init__(self, x: np.ndarray, y: np.ndarray, batches: list[np.ndarray],
                 num_rows: int) -> None:
        self.x, self.y, self.batches = torch.from_numpy(x), torch.from_numpy(y), batches
        self.num_rows, self.device, self.has_val = num_rows, torch.device("cpu"), False

    def poisson(self, rate: float) -> tuple[Tensor, Tensor]:
        ids = torch.from_numpy(self.batches.pop(0))
        return self.x[ids], self.y[ids]


def _drawn(data: Any, seed: int, rate: float, steps: int, ahead: int = 8
           ) -> list[np.ndarray]:
    """The node ids each step's batch holds: every block's training nodes, each kept when
    its uniform is < rate; a block draws ``ahead`` batches a round, one uniform per row
    and batch in turn from its stream of the round (a reproducible source here)."""
    train = data.mask("train")
    out = []
    for r in range(1, -(-steps // ahead) + 1):
        rounds: list[list[np.ndarray]] = [[] for _ in range(ahead)]
        for b, (lo, hi) in enumerate(node_bounds(N, BLOCK)):
            rng = Randomness(seed).numpy_generator(f"dp-mlp/batches/round{r}/block{b}")
            mine = lo + np.flatnonzero(train[lo:hi])
            for i in range(ahead):
                rounds[i].append(mine[rng.random(mine.shape[0]) < rate])
        out += [np.concatenate(ids) for ids in rounds]
    return out[:steps]


@pytest.mark.slow
def test_partitioned_dp_mlp_is_the_single_process_run(client: Any, dataset: Path) -> None:
    spec = DpMlpSpec(seed=3, insecure_reproducible_noise=True, **SPEC)
    part, source = train_dp_mlp_partitioned(client, dataset, spec)
    data = read_partitioned(dataset)
    single = train_dp_mlp(data, spec)
    assert part.ledger.to_dict() == single.ledger.to_dict() and part.ledger.entries
    assert part.report == single.report
    n_train = int(data.mask("train").sum())
    resolved, ledger, z, report = plan_dp_mlp(spec, n_train)
    batches = _drawn(data, 3, resolved.batch / n_train, resolved.steps)
    assert source.batch_sizes == [b.shape[0] for b in batches]
    assert resolved.steps > source.ahead  # more than one round of draws
    assert max(source.batch_sizes) < n_train / 4  # batches, never the rows
    replay = fit_dp_mlp(Replay(data.x, data.y, batches, n_train),  # type: ignore[arg-type]
                        resolved, (ledger, z, report), 8, data.num_classes, Randomness(3))
    for a, b in zip(part.model.state_dict().values(), replay.model.state_dict().values(),
                    strict=True):
        torch.testing.assert_close(a, b)
    streamed = evaluate_dp_mlp_partitioned(part.model, source, data.num_classes)
    whole = evaluate_dp_mlp(part.model, data, "cpu")
    for split in ("train", "val", "test"):
        assert streamed[split] == pytest.approx(whole[split], nan_ok=True)


@pytest.mark.slow
def test_partition_draws_are_poisson_and_secret(client: Any, dataset: Path) -> None:
    """Every partition draws its rows at rate q from a fresh secret generator: batch
    sizes average q·N, two sources draw different batches."""
    from dpgnn_core.data.partitioned import verify_partitioned

    manifest = verify_partitioned(dataset)
    sources = [PartitionedRows(client, dataset, manifest, FeatureRows(), torch.nn.Identity(),
                               torch.device("cpu"), Randomness.secret(), "dp-mlp")
               for _ in range(2)]
    n, q = sources[0].num_rows, 0.1
    assert n == manifest["split_counts"]["train"]
    draws = [[s.poisson(q)[1] for _ in range(15)] for s in sources]
    sizes = np.array([len(y) for d in draws for y in d])
    assert abs(sizes.mean() - q * n) < 4 * np.sqrt(q * (1 - q) * n / sizes.size)
    assert any(len(a) != len(b) or not torch.equal(a, b)
               for a, b in zip(draws[0], draws[1], strict=True))


class _Gate:
    """Records what the budget keeper is shown (plans) and told (releases)."""

    def __init__(self) -> None:
        self.plans: list[Any] = []
        self.admitted: list[Any] = []
        self.releases = 0

    def before_release(self, ledger: Any, info: Any) -> None:
        self.plans.append((ledger.to_dict(), dict(info)))

    def admit(self, ledger: Any, info: Any) -> None:
        self.admitted.append((ledger.to_dict(), dict(info)))

    def released(self) -> None:
        self.releases += 1


@pytest.mark.slow
@pytest.mark.parametrize("level", ["edge", "node"])
def test_partitioned_gap_has_the_single_process_ledger(client: Any, dataset: Path,
                                                       tmp_path: Path, level: str) -> None:
    """GAP end to end on partitions (encoder and classifier on gathered batches, PMA
    block by block): the budget keeper sees the same plans and releases, the ledger and
    the report are the single-process run's (at node level: DP-Adam on the partitions'
    Poisson batches, the degree check on the workers), and the EDP model learns."""
    from dpgnn_core.distributed.gap import train_gap_partitioned
    from dpgnn_core.methods.gap import train_gap
    from dpgnn_core.methods.private_run import PrivateRun
    from dpgnn_core.specs import GapSpec

    spec = (GapSpec(level="edge", epsilon=4.0, hops=2, epochs=3, batch_size=100,
                    encoder_dim=8, device="cpu") if level == "edge" else
            GapSpec(level="node", epsilon=8.0, max_degree=60, hops=1, steps=4,
                    batch_size=100, encoder_dim=8, device="cpu", accountant="rdp"))
    seen = {way: _Gate() for way in ("single", "partitioned")}
    part = train_gap_partitioned(client, dataset, spec, tmp_path / "work",
                                 PrivateRun(gate=seen["partitioned"]))
    data = read_partitioned(dataset)
    single = train_gap(data, spec, PrivateRun(gate=seen["single"]))
    assert part.ledger.to_dict() == single.ledger.to_dict() and part.ledger.entries
    assert {k: v for k, v in part.report.items() if k != "ledger"} == \
        {k: v for k, v in single.report.items() if k != "ledger"}
    assert seen["single"].plans == seen["partitioned"].plans and seen["single"].plans
    assert seen["single"].admitted == seen["partitioned"].admitted
    assert seen["single"].releases == seen["partitioned"].releases >= 1
    assert len(part.history) == len(single.history)
    assert part.release.sigma == single.report["pma_noise_std"] > 0
    if level == "edge":
        assert part.metrics["test"]["accuracy"] > 0.5  # 5 classes: chance is 0.2
