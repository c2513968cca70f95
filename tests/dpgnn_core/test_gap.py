"""GAP: PMA's sensitivity and noise, the composed ledger, learning at every level, bad
input refused before training; adversarial checks of the node-level sensitivity, the
degree check, directedness from metadata, the secret noise, the stored release and ε by
step under the run's accountant."""

from __future__ import annotations

import dataclasses
import itertools
import math

import numpy as np
import pytest
import torch

from dpgnn_core.data.synthetic import csbm
from dpgnn_core.errors import DataError
from dpgnn_core.graph.gap_degree import max_degree_for_pma
from dpgnn_core.methods.brute_force.graphs import removed as _removed
from dpgnn_core.methods.brute_force.graphs import star as _star
from dpgnn_core.methods.contract import write_model
from dpgnn_core.methods.gap import (
    DEGREE_CHECK_NOTE,
    GapClassifier,
    aggregation_matrix,
    calibrate_gap,
    clip_rows,
    epsilon_by_step,
    evaluate_gap,
    pma,
    row_normalise,
    sensitivity,
    train_gap,
)
from dpgnn_core.methods.registry import get
from dpgnn_core.privacy import (
    Ledger,
    PldAccountant,
    PrivacyError,
    RdpAccountant,
    make_accountant,
)
from dpgnn_core.privacy.report import TRAINING_LOSS_NOTE
from dpgnn_core.specs import GapSpec

DATA = csbm(num_nodes=1500, homophily=0.9, feature_signal=0.6, feature_dim=24, seed=3)
FAST = {"epochs": 60, "steps": 60, "batch_size": 100, "device": "cpu"}
# Where only the ledger, the report or the release is asserted (no learning): few steps.
FEW = {**FAST, "epochs": 3, "steps": 3}


def _agg(x: torch.Tensor, ei: np.ndarray, n: int) -> torch.Tensor:
    adj = aggregation_matrix(torch.from_numpy(ei), n)
    return torch.sparse.mm(adj, row_normalise(x))


def test_edge_and_node_sensitivity_bounds() -> None:
    g = csbm(num_nodes=200, avg_degree=6, seed=1)
    x = torch.randn(200, 8)
    ei = g.edge_index
    base = _agg(x, ei, 200)
    u, v = int(ei[0, 0]), int(ei[1, 0])
    # One undirected edge = both directions: the sum moves by exactly sqrt(2) at most.
    keep = ~(((ei[0] == u) & (ei[1] == v)) | ((ei[0] == v) & (ei[1] == u)))
    moved = (base - _agg(x, ei[:, keep], 200)).norm()
    assert moved <= sensitivity("edge", None, directed=False) + 1e-5
    assert moved > 1.0  # one direction alone would allow only 1
    # Removing a node of degree <= D moves the other rows by at most sqrt(D).
    deg = np.bincount(ei[0], minlength=200)
    w = int(np.argmax(deg))
    others = np.arange(200) != w
    cut = (ei[0] != w) & (ei[1] != w)
    moved = (base - _agg(x, ei[:, cut], 200))[others].norm()
    assert moved <= sensitivity("node", int(deg[w]), directed=False) + 1e-5


def test_pma_noise_is_drawn_once_with_the_stated_std() -> None:
    n = 4000
    ei = np.stack([np.arange(n), np.roll(np.arange(n), 1)])
    x = torch.randn(n, 4)
    adj = aggregation_matrix(torch.from_numpy(ei), n)
    clean = torch.sparse.mm(adj, row_normalise(x))
    gen = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    noisy_raw = clean + 0.5 * torch.randn(clean.shape, generator=torch.Generator().manual_seed(0))
    xs = pma(x, adj, 1, 0.5, gen)
    torch.testing.assert_close(xs[1], row_normalise(noisy_raw))
    assert float((noisy_raw - clean).std()) == pytest.approx(0.5, rel=0.03)
    again = pma(x, adj, 1, 0.5, torch.Generator().manual_seed(0))
    assert torch.equal(again[1], xs[1])
    assert all(torch.allclose(t.norm(dim=1), torch.ones(n)) for t in xs)


@pytest.mark.parametrize("level", ["edge", "node"])
def test_ledger_is_the_composition_and_within_budget(level: str) -> None:
    spec = GapSpec(level=level, epsilon=4.0, hops=2, max_degree=25 if level == "node" else None,
                   **FEW)
    r = train_gap(DATA, spec)
    kinds = [e.kind for e in r.ledger.events]
    assert kinds == (["gaussian"] if level == "edge" else
                     ["poisson_gaussian", "gaussian", "poisson_gaussian"])
    assert all(e.level == level for e in r.ledger.events)
    eps = make_accountant(spec.accountant).epsilon(r.ledger, r.report["delta"])
    assert eps == pytest.approx(r.report["epsilon"]) and eps <= 4.0
    z = r.report["noise_multiplier"]
    expected = z * (math.sqrt(2) if level == "edge" else math.sqrt(25 ** 2 + 25))
    assert r.report["pma_noise_std"] == pytest.approx(expected)
    # No edge is sampled away: the node-level graph is the input graph, checked.
    assert r.report["graph"]["edges_after"] == r.report["graph"]["edges_before"]
    # the raw training loss is not released by default (log_raw_loss), so not listed
    assert list(r.ledger.unaccounted) == ([DEGREE_CHECK_NOTE] if level == "node" else [])
    assert TRAINING_LOSS_NOTE not in r.report["unaccounted"]
    assert r.report["unaccounted"] == list(r.ledger.unaccounted)  # the report says it too
    assert r.report["level"] == level and r.report["relation"] == "add_remove"


@pytest.mark.slow  # > 4 s of CPU (make test-fast leaves it out)
def test_levels_learn_in_order() -> None:
    """A smoke test of learning; the noise is made reproducible (insecure flag) so that the
    thresholds do not depend on one secret draw (over draws EDP spans about 0.42-0.53 and
    NDP 0.22-0.30 here)."""
    acc = {}
    for name, kw in {"inf": {"level": "none"}, "edp": {"level": "edge", "epsilon": 8.0},
                     "ndp": {"level": "node", "epsilon": 8.0, "max_degree": 25,
                             "row_clip": 1.0}}.items():
        r = train_gap(DATA, GapSpec(**kw, **FAST, insecure_reproducible_noise=True))
        acc[name] = evaluate_gap(r.classifier, r.aggregations, DATA, "cpu")["test"]["accuracy"]
    assert acc["inf"] > 0.8
    assert acc["edp"] > 0.4 and acc["ndp"] > 0.24  # 5 classes: chance is 0.2
    assert acc["inf"] >= acc["edp"] - 0.02


@pytest.mark.parametrize("combine", ["cat", "sum", "attn"])
def test_classifier_combinations(combine: str) -> None:
    clf = GapClassifier(3, 8, 16, 4, combine)
    assert clf(torch.randn(10, 4, 8)).shape == (10, 4)


def test_release_noise_is_secret_not_from_the_seed() -> None:
    """The same spec (same seed) gives two different releases: the noise is drawn from OS
    entropy, not from spec.seed; only the insecure flag makes it reproducible."""
    spec = GapSpec(level="edge", epsilon=2.0, **FEW)
    a, b = train_gap(DATA, spec), train_gap(DATA, spec)
    assert not torch.equal(a.aggregations, b.aggregations)
    assert a.report["insecure_reproducible_noise"] is False
    assert "secret" in a.report["randomness"]
    insecure = spec.model_copy(update={"insecure_reproducible_noise": True})
    c, d = train_gap(DATA, insecure), train_gap(DATA, insecure)
    assert torch.equal(c.aggregations, d.aggregations)
    assert c.report["insecure_reproducible_noise"] is True
    assert "NOT PRIVATE" in c.report["randomness"]


def test_bad_input() -> None:
    with pytest.raises(ValueError, match="greater than or equal to 1"):
        GapSpec(level="edge", epsilon=1.0, hops=0)
    with pytest.raises(ValueError, match="degree bound"):
        GapSpec(level="node", epsilon=1.0)
    with pytest.raises(ValueError, match="greater than or equal to 1"):
        GapSpec(level="node", epsilon=1.0, max_degree=0)
    with pytest.raises(PrivacyError, match="smallest epsilon"):
        train_gap(DATA, GapSpec(level="node", epsilon=1e-3, max_degree=25, **FAST))
    empty = dataclasses.replace(DATA, edge_index=np.zeros((2, 0), dtype=np.int64))
    with pytest.raises(DataError, match="no edge left"):
        train_gap(empty, GapSpec(level="edge", epsilon=1.0, **FAST))
    with pytest.warns(UserWarning, match="encoder_dim"):
        train_gap(DATA, GapSpec(level="none", encoder_dim=64, **{**FEW, "epochs": 2}))


# --- adversarial checks of the privacy analysis ------------------------------------------


def _moved(x: torch.Tensor, ei: np.ndarray, v: int, c: float | None = None) -> float:
    """||M(G) - M(G - v)||_F of one (clipped) aggregation of unit rows."""
    n = x.shape[0]
    return float((clip_rows(_agg(x, ei, n), c)
                  - clip_rows(_agg(x, _removed(ei, v), n), c)).norm())


def test_node_sensitivity_counts_the_removed_nodes_own_row() -> None:
    """A D = 4 star with aligned unit rows: removing the hub moves M by sqrt(D^2 + D) =
    4.47, beyond GAP's sqrt(D) = 2; the implemented bound holds with equality."""
    d = 4
    x = torch.ones(d + 1, 3)  # aligned rows (normalised to unit norm)
    moved = _moved(x, _star(d), 0)
    assert moved == pytest.approx(math.sqrt(d * d + d), rel=1e-5)
    assert moved > math.sqrt(d) + 1  # the old bound sqrt(D) is violated
    assert moved <= sensitivity("node", d, directed=False) + 1e-5
    # Directed, leaves -> hub: the hub's own row is the sum of its D in-neighbours: D.
    moved = _moved(x, _star(d, directed=True), 0)
    assert moved == pytest.approx(d, rel=1e-5)
    assert moved > math.sqrt(d) + 1
    assert sensitivity("node", d, directed=True) == pytest.approx(d)


# The brute force of the PMA hop's sensitivity (every node of random bounded-degree graphs
# and of stars, edge toggles, with and without row clipping) is GAP's registered check,
# dpgnn_core/methods/brute_force/pma.py, run by tests/dpgnn_core/test_sensitivity_contract.py.


def test_row_clip_sensitivity_values() -> None:
    assert sensitivity("node", 10, False, 1.0) == pytest.approx(math.sqrt(11))
    assert sensitivity("node", 10, False, 3.0) == pytest.approx(math.sqrt(19))
    assert sensitivity("node", 10, False, 50.0) == pytest.approx(math.sqrt(110))
    # directed: max over a = d_in of min(c, a)^2 + (D - a)
    assert sensitivity("node", 10, True, 3.0) == pytest.approx(math.sqrt(9 + 7))
    assert sensitivity("node", 10, True, 0.5) == pytest.approx(math.sqrt(10))
    assert sensitivity("edge", None, False, 0.5) == pytest.approx(math.sqrt(2))
    x = torch.randn(50, 3) * 10
    assert float(clip_rows(x, 2.0).norm(dim=1).max()) <= 2.0 + 1e-5


def test_node_level_refuses_a_graph_beyond_the_degree_bound() -> None:
    """Refused naming D only: DATA's maximum degree (23) is private and not in the text."""
    with pytest.raises(DataError, match="exceeds it") as err:
        train_gap(DATA, GapSpec(level="node", epsilon=4.0, max_degree=10, **FAST))
    assert err.value.field == "max_degree" and err.value.value == 10
    assert "23" not in str(err.value)


def test_directedness_comes_from_the_manifest_flag() -> None:
    """A graph flagged directed whose edges happen to be symmetric is a directed graph
    (one record = one directed edge: Δ = 1 at edge level, in + out degree at node level);
    a graph flagged undirected gets sqrt 2. The old code looked at the edges."""
    directed = dataclasses.replace(DATA, directed=True)  # DATA's edges are symmetric
    _, _, rep_dir = calibrate_gap(directed, GapSpec(level="edge", epsilon=2.0, **FAST))
    _, _, rep_und = calibrate_gap(DATA, GapSpec(level="edge", epsilon=2.0, **FAST))
    assert rep_dir["pma_sensitivity"] == 1.0 and rep_dir["directed"] is True
    assert "one directed edge" in rep_dir["protects"]
    assert rep_und["pma_sensitivity"] == pytest.approx(math.sqrt(2))
    # node level on the directed reading: in + out degree = 2 x 23 must be within D
    # (the refusal names D only; the degree it read is checked here directly)
    with pytest.raises(DataError, match="in \\+ out degree in this graph exceeds it"):
        train_gap(directed, GapSpec(level="node", epsilon=4.0, max_degree=25, **FAST))
    assert max_degree_for_pma(directed.edge_index, directed.num_nodes, directed=True) == 46
    _, _, rep = calibrate_gap(directed, GapSpec(level="node", epsilon=4.0, max_degree=46,
                                                **FAST))
    assert rep["pma_sensitivity"] == pytest.approx(46.0)


@pytest.mark.parametrize("level", ["edge", "node"])
def test_epsilon_by_step_uses_the_runs_accountant(level: str) -> None:
    kw = {"max_degree": 25} if level == "node" else {}
    spec = GapSpec(level=level, epsilon=4.0, accountant="pld", **kw, **FAST)
    ledger, z, report = calibrate_gap(DATA, spec)
    n_train = int(DATA.mask("train").sum())
    enc_steps = spec.steps if level == "node" else spec.epochs
    cls_steps = enc_steps
    eps = epsilon_by_step(spec, n_train, z, report["delta"], enc_steps, cls_steps)
    assert len(eps) == enc_steps + cls_steps
    pld = PldAccountant().epsilon(ledger, report["delta"])
    assert eps[-1] == pytest.approx(pld, rel=1e-9)
    assert eps[-1] <= 4.0 + 1e-9
    assert all(a <= b + 1e-9 for a, b in itertools.pairwise(eps))
    # the old RDP-only curve ends above the reported PLD epsilon
    rdp = epsilon_by_step(spec.model_copy(update={"accountant": "rdp"}), n_train, z,
                          report["delta"], enc_steps, cls_steps)
    assert rdp[-1] == pytest.approx(RdpAccountant().epsilon(ledger, report["delta"]))
    assert rdp[-1] > eps[-1]


def test_release_holds_x1_to_xk_and_predictions_recompute_x0(tmp_path: object) -> None:
    spec = GapSpec(level="node", epsilon=8.0, max_degree=25, hops=2, **FAST)
    r = train_gap(DATA, spec)
    assert r.aggregations.shape == (DATA.num_nodes, 2, spec.encoder_dim)  # no X(0)
    x0 = row_normalise(r.encoder.encode(torch.tensor(DATA.x))).detach()
    assert not any(torch.allclose(r.aggregations[:, k], x0) for k in range(2))
    m = evaluate_gap(r.classifier, r.aggregations, DATA, "cpu")
    path = str(tmp_path) + "/model.pt"  # type: ignore[operator]
    write_model(path, r.classifier, spec, DATA.num_features, DATA.num_classes)
    clf, _ = get(spec.method).load(torch.load(path, weights_only=True))
    assert clf.encoder is not None
    assert evaluate_gap(clf, r.aggregations, DATA, "cpu") == m
    text = r.report["protects"]
    assert "X(1..K)" in text and "own features" in text and "not" in text
    assert "predictions against" not in text


def test_finish_run_refuses_stage_events_that_differ_from_the_plan() -> None:
    from dpgnn_core.methods.gap import calibrate_gap, finish_run

    spec = GapSpec(level="edge", epsilon=4.0, device="cpu")
    planned, z, report = calibrate_gap(DATA, spec)
    with pytest.raises(PrivacyError, match="differ from the calibrated plan"):
        finish_run(spec, report, planned, Ledger(), 10, z, [], [])
    out, history = finish_run(spec, report, planned, planned, 10, z, [{"train_loss": 1.0}],
                              [{"train_loss": 0.5}])
    assert out["epsilon_by_step"][-1][1] == pytest.approx(out["epsilon"])
    assert out["epsilon"] <= 4.0
    assert [h["step"] for h in history] == [1, 2] and "classifier_loss" in history[1]
