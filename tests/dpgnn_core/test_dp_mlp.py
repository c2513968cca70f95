"""DP-MLP: Poisson-sampled rows, calibrated ε from the ledger, learning, determinism."""

from __future__ import annotations

import pytest
import torch

from dpgnn_core.data.synthetic import csbm
from dpgnn_core.errors import DataError
from dpgnn_core.methods.dp_mlp import evaluate_dp_mlp, train_dp_mlp
from dpgnn_core.privacy import PoissonGaussianEvent, make_accountant
from dpgnn_core.specs import DpMlpSpec

DATA = csbm(num_nodes=1500, feature_signal=3.0, seed=1)
BASE = {"steps": 150, "batch_size": 64, "hidden": 32, "device": "cpu"}


def test_private_run_is_accounted() -> None:
    r = train_dp_mlp(DATA, DpMlpSpec(epsilon=2.0, **BASE))
    n_train = int(DATA.mask("train").sum())
    (entry,) = r.ledger.entries
    assert isinstance(entry.event, PoissonGaussianEvent) and entry.sampler_scheme == "poisson"
    assert entry.event.sampling_rate == pytest.approx(64 / n_train)
    assert entry.event.level == "node" and entry.event.steps == 150
    eps = make_accountant(r.report["accountant"]).epsilon(r.ledger,
                                                          r.report["delta"])
    assert eps == pytest.approx(r.report["epsilon"]) and eps <= 2.0
    assert r.report["noise_std"] == pytest.approx(r.report["noise_multiplier"] * 1.0)


@pytest.mark.slow  # > 4 s of CPU (make test-fast leaves it out)
def test_learns_and_is_deterministic_only_when_asked() -> None:
    flag = {**BASE, "insecure_reproducible_noise": True}
    a = train_dp_mlp(DATA, DpMlpSpec(epsilon=8.0, seed=2, **flag))
    b = train_dp_mlp(DATA, DpMlpSpec(epsilon=8.0, seed=2, **flag))
    assert all(torch.equal(x, y) for x, y in zip(a.model.state_dict().values(),
                                                  b.model.state_dict().values(), strict=True))
    acc = evaluate_dp_mlp(a.model, DATA, "cpu")["test"]["accuracy"]
    assert acc > 0.5  # 5 classes, strong feature signal: chance is 0.2


def test_bad_input() -> None:
    with pytest.raises(DataError, match="exceeds"):
        train_dp_mlp(DATA, DpMlpSpec(epsilon=1.0, **{**BASE, "batch_size": 10**6}))
