"""DP-GNN end to end in the core: calibrated ε from the ledger, learning, determinism."""

from __future__ import annotations

import pytest
import torch

from dpgnn_core.data.synthetic import csbm
from dpgnn_core.errors import DataError
from dpgnn_core.methods.dp_gnn import evaluate_dpgnn, train_dpgnn
from dpgnn_core.privacy import RdpAccountant, neighbourhood_size
from dpgnn_core.specs import DpgnnSpec

DATA = csbm(num_nodes=2000, homophily=0.9, feature_signal=1.5, seed=0)
BASE = {"steps": 150, "batch_size": 100, "hidden": 32, "max_degree": 5, "device": "cpu"}


def test_private_run_spends_at_most_its_budget() -> None:
    r = train_dpgnn(DATA, DpgnnSpec(epsilon=4.0, **BASE))
    n_train = int(DATA.mask("train").sum())
    assert r.report["delta"] == pytest.approx(1 / (10 * n_train))
    eps = RdpAccountant().epsilon(r.ledger, r.report["delta"])
    assert eps == pytest.approx(r.report["epsilon"]) and eps <= 4.0
    (event,) = r.ledger.events
    assert event.steps == 150 and event.batch_size == 100 and event.num_train == n_train
    assert r.report["noise_std"] == pytest.approx(
        r.report["noise_multiplier"] * 2 * 1.0 * neighbourhood_size(5, 1))
    assert r.ledger.entries[0].sampler_scheme == "fixed_size_without_replacement"


def test_learns_and_privacy_costs_accuracy() -> None:
    acc = {}
    for eps in (None, 8.0):
        r = train_dpgnn(DATA, DpgnnSpec(epsilon=eps, **BASE))
        acc[eps] = evaluate_dpgnn(r.model, DATA, "cpu")["test"]["accuracy"]
    assert acc[None] > 0.8
    assert 0.3 < acc[8.0] <= acc[None]  # 5 classes: chance is 0.2


def test_same_seed_same_model() -> None:
    a = train_dpgnn(DATA, DpgnnSpec(epsilon=2.0, seed=3, **{**BASE, "steps": 20}))
    b = train_dpgnn(DATA, DpgnnSpec(epsilon=2.0, seed=3, **{**BASE, "steps": 20}))
    c = train_dpgnn(DATA, DpgnnSpec(epsilon=2.0, seed=4, **{**BASE, "steps": 20}))
    sa, sb, sc = (x.model.state_dict() for x in (a, b, c))
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert not all(torch.equal(sa[k], sc[k]) for k in sa)


def test_bad_input() -> None:
    with pytest.raises(DataError, match="exceeds"):
        train_dpgnn(DATA, DpgnnSpec(epsilon=1.0, **{**BASE, "batch_size": 10**6}))
    from tests.dpgnn_core.data.test_store import _graph_task

    with pytest.raises(DataError, match="single labels"):
        train_dpgnn(_graph_task(), DpgnnSpec(epsilon=1.0, **BASE))
