"""DP-GNN end to end in the core: calibrated ε from the ledger, learning, determinism."""

from __future__ import annotations

import pytest
import torch

from dpgnn_core.data.synthetic import csbm
from dpgnn_core.errors import DataError
from dpgnn_core.methods.dp_gnn import evaluate_dpgnn, train_dpgnn
from dpgnn_core.privacy import make_accountant, neighbourhood_size
from dpgnn_core.specs import DpgnnSpec

DATA = csbm(num_nodes=2000, homophily=0.9, feature_signal=1.5, seed=0)
BASE = {"steps": 150, "batch_size": 100, "hidden": 32, "max_degree": 5, "device": "cpu"}
# Tests of learning quality fix the noise (they are about learning, not privacy), so they
# do not depend on a lucky draw; the secret default is tested in test_secret_randomness.py.
LEARN = {**BASE, "insecure_reproducible_noise": True}


def test_private_run_spends_at_most_its_budget() -> None:
    r = train_dpgnn(DATA, DpgnnSpec(epsilon=4.0, **BASE))
    n_train = int(DATA.mask("train").sum())
    assert r.report["delta"] == pytest.approx(1 / (10 * n_train))
    eps = make_accountant(r.report["accountant"]).epsilon(r.ledger,
                                                          r.report["delta"])
    assert eps == pytest.approx(r.report["epsilon"]) and eps <= 4.0
    (event,) = r.ledger.events
    assert event.steps == 150 and event.batch_size == 100 and event.num_train == n_train
    assert r.report["noise_std"] == pytest.approx(
        r.report["noise_multiplier"] * 2 * 1.0 * neighbourhood_size(5, 1))
    assert r.ledger.entries[0].sampler_scheme == "fixed_size_without_replacement"


@pytest.mark.slow  # > 4 s of CPU (make test-fast leaves it out)
def test_learns_and_privacy_costs_accuracy() -> None:
    acc = {}
    for eps in (None, 8.0):
        r = train_dpgnn(DATA, DpgnnSpec(epsilon=eps, **LEARN))
        acc[eps] = evaluate_dpgnn(r.model, DATA, "cpu")["test"]["accuracy"]
    assert acc[None] > 0.8
    assert 0.3 < acc[8.0] <= acc[None]  # 5 classes: chance is 0.2


@pytest.mark.slow  # > 4 s of CPU (make test-fast leaves it out)
def test_seed_reproduces_only_with_the_insecure_flag() -> None:
    spec = {**BASE, "steps": 20}
    a, b = (train_dpgnn(DATA, DpgnnSpec(epsilon=2.0, seed=3, **spec)) for _ in range(2))
    assert not all(torch.equal(x, y) for x, y in zip(a.model.state_dict().values(),
                                                      b.model.state_dict().values(),
                                                      strict=True))
    assert a.report["insecure_reproducible_noise"] is False
    flag = {**spec, "insecure_reproducible_noise": True}
    c, d = (train_dpgnn(DATA, DpgnnSpec(epsilon=2.0, seed=3, **flag)) for _ in range(2))
    e = train_dpgnn(DATA, DpgnnSpec(epsilon=2.0, seed=4, **flag))
    sc, sd, se = (x.model.state_dict() for x in (c, d, e))
    assert all(torch.equal(sc[k], sd[k]) for k in sc)
    assert not all(torch.equal(sc[k], se[k]) for k in sc)
    assert "NOT PRIVATE" in c.report["randomness"]


def test_bad_input() -> None:
    with pytest.raises(DataError, match="exceeds"):
        train_dpgnn(DATA, DpgnnSpec(epsilon=1.0, **{**BASE, "batch_size": 10**6}))
    from tests.dpgnn_core.data.test_store import _graph_task

    with pytest.raises(DataError, match="single labels"):
        train_dpgnn(_graph_task(), DpgnnSpec(epsilon=1.0, **BASE))


@pytest.mark.slow  # > 4 s of CPU (make test-fast leaves it out)
@pytest.mark.parametrize(("conv", "layers"), [("gin", 1), ("gat", 1), ("gcn", 2)])
def test_every_conv_trains_privately(conv: str, layers: int) -> None:
    spec = DpgnnSpec(epsilon=8.0, conv=conv, layers=layers,
                     **{**LEARN, "steps": 60, "max_degree": 3})
    r = train_dpgnn(DATA, spec)
    assert r.report["method"] == f"dp-{conv}" and r.report["epsilon"] <= 8.0
    assert r.ledger.events[0].layers == layers
    acc = evaluate_dpgnn(r.model, DATA, "cpu")["test"]["accuracy"]
    if layers == 1:
        assert acc > 0.3  # 5 classes: chance is 0.2
    else:  # N(3, 2) = 13 occurrences: too much noise here; the same path must learn
        free = train_dpgnn(DATA, spec.model_copy(update={"epsilon": None}))
        assert evaluate_dpgnn(free.model, DATA, "cpu")["test"]["accuracy"] > 0.8
    if conv == "gin":
        assert all(float(s.eps.detach()) != 0.0 for s in r.model.eps)  # epsilon was trained


@pytest.mark.slow  # > 4 s of CPU (make test-fast leaves it out)
def test_layerwise_clipping_noise_per_group() -> None:
    spec = DpgnnSpec(epsilon=4.0, clipping="layerwise", layer_clips=(0.5, 1.0, 2.0),
                     **{**BASE, "steps": 20})
    r = train_dpgnn(DATA, spec)
    lam, n = r.report["noise_multiplier"], neighbourhood_size(5, 1)
    assert r.report["clips"] == [0.5, 1.0, 2.0]
    assert r.report["noise_stds"] == pytest.approx(
        [lam * 2 * n * c * 3 ** 0.5 for c in (0.5, 1.0, 2.0)])
    assert r.ledger.unaccounted == () and r.report["unaccounted"] == []


@pytest.mark.slow  # > 4 s of CPU (make test-fast leaves it out)
def test_data_dependent_choices_are_flagged() -> None:
    spec = DpgnnSpec(epsilon=4.0, clip_percentile=75, select_on_validation=True,
                     select_every=10, clipping="layerwise", **{**BASE, "steps": 20})
    r = train_dpgnn(DATA, spec)
    notes = r.report["unaccounted"]
    assert len(notes) == 2 and "75th percentile" in notes[0] and "validation" in notes[1]
    assert list(r.ledger.unaccounted) == notes
    assert len(r.report["clips"]) == 3 and all(c > 0 for c in r.report["clips"])
    assert [h["step"] for h in r.history if "selection_score" in h] == [10, 20]


@pytest.mark.slow  # > 4 s of CPU (make test-fast leaves it out)
def test_inductive_evaluation_reads_only_the_test_graph() -> None:
    from dpgnn_core.data.splits import make_disjoint

    disjoint, removed = make_disjoint(DATA)
    assert removed > 0
    r = train_dpgnn(disjoint, DpgnnSpec(epsilon=8.0, **{**LEARN, "steps": 60}))
    assert r.report["inference"].startswith("inductive")
    acc = evaluate_dpgnn(r.model, disjoint, "cpu")["test"]["accuracy"]
    assert acc > 0.3
    # Adding edges from training nodes into the test graph changes nothing on test nodes
    # only when no such edge exists: the disjoint graph has none.
    s = disjoint.split
    assert (s[disjoint.edge_index[0]] == s[disjoint.edge_index[1]]).all()


def test_training_nodes_without_labels_refused() -> None:
    import dataclasses

    import numpy as np

    y = np.asarray(DATA.y).copy()
    y[np.flatnonzero(DATA.mask("train"))[0]] = -1
    with pytest.raises(DataError, match="no label"):
        train_dpgnn(dataclasses.replace(DATA, y=y), DpgnnSpec(epsilon=1.0, **BASE))


def test_batchnorm_model_refused_before_training() -> None:
    from dpgnn_core.privacy import PrivacyError
    from dpgnn_core.training.dp_sgd import Clipping, train_steps

    model = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.BatchNorm1d(3))
    calls = []
    with pytest.raises(PrivacyError, match="BatchNorm"):
        train_steps(model, torch.optim.SGD(model.parameters(), lr=0.1), 5,
                    lambda: calls.append(1) or (model(torch.ones(2, 3)).sum(1), 0.0),
                    clipping=Clipping((1.0,), (1.0,), 2.0), generator=torch.Generator())
    assert calls == []
    with pytest.raises(PrivacyError, match="own noise generator"):  # never the global RNG
        train_steps(torch.nn.Linear(3, 3), torch.optim.SGD(model.parameters(), lr=0.1), 1,
                    lambda: calls.append(1) or (model(torch.ones(2, 3)).sum(1), 0.0),
                    clipping=Clipping((1.0,), (1.0,), 2.0))
    assert calls == []


def test_train_until_the_budget_is_spent() -> None:
    from dpgnn_core.methods.dp_gnn import ledger_for

    base = {k: v for k, v in BASE.items() if k != "steps"}
    spec = DpgnnSpec(epsilon=1.0, noise_multiplier=2.0, **base)
    r = train_dpgnn(DATA, spec)
    t = r.report["steps"]
    n = int(DATA.mask("train").sum())
    acc, delta = make_accountant(r.report["accountant"]), r.report["delta"]

    def eps(steps: int) -> float:
        return acc.epsilon(ledger_for(spec.model_copy(update={"steps": steps}), n)(2.0), delta)

    assert eps(t) <= 1.0 < eps(t + 1)
    assert len(r.history) == t and r.ledger.events[0].steps == t
    assert r.report["noise_multiplier"] == 2.0 and r.report["epsilon"] == pytest.approx(eps(t))
    with pytest.raises(ValueError, match="not both"):
        DpgnnSpec(epsilon=1.0, noise_multiplier=2.0, steps=10)
    with pytest.raises(ValueError, match="target epsilon"):
        DpgnnSpec(noise_multiplier=2.0)


@pytest.mark.slow  # > 4 s of CPU (make test-fast leaves it out)
def test_report_states_scope_public_count_and_what_selection_reads() -> None:
    spec = DpgnnSpec(epsilon=4.0, select_on_validation=True, select_every=10,
                     **{**BASE, "steps": 20})
    r = train_dpgnn(DATA, spec)
    assert "ingested dataset" in r.report["scope"]
    assert any("N is treated as public" in p for p in r.report["public"])
    (flag,) = r.report["unaccounted"]
    assert "full private graph" in flag and "validation labels" in flag
