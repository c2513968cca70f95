"""DPDGC's label messages: the search has the power to catch a wrong bound, the second hop
brute-forced, an independent dense reference of the first hop, only training labels are
read; the ledger of each level; a tiny end-to-end run per level. The first hop's brute
force over every neighbouring pair of small adversarial graphs and labellings is DPDGC's
registered sensitivity check (dpgnn_core/methods/brute_force/dpdgc_labels.py)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator

import numpy as np
import pytest
import torch

from dpgnn_core.data.synthetic import csbm
from dpgnn_core.methods.brute_force.dpdgc_labels import (
    CLASSES,
    Edges,
    N,
    Neighbour,
    edge_pairs,
    feature_pairs,
    k_pairs,
    node_pairs,
)
from dpgnn_core.methods.brute_force.dpdgc_labels import graphs as _graphs
from dpgnn_core.methods.brute_force.dpdgc_labels import hop1 as _hop1_library
from dpgnn_core.methods.brute_force.dpdgc_labels import labellings as _labellings
from dpgnn_core.methods.brute_force.dpdgc_labels import worst as _worst
from dpgnn_core.methods.dpdgc import evaluate_dpdgc, ledger_for, train_dpdgc
from dpgnn_core.methods.dpdgc_messages import (
    aggregation_sensitivity,
    hop_sensitivities,
    label_rows,
    label_sensitivity,
    level_defaults_used,
    propagate,
    released_hops,
)
from dpgnn_core.privacy.pma import aggregation_matrix, row_normalise
from dpgnn_core.specs import DpdgcSpec


def _adj(edges: Edges, n: int) -> torch.Tensor:
    if not edges:
        return torch.zeros(n, n, dtype=torch.float64).to_sparse_csr()
    ei = torch.tensor(sorted(edges), dtype=torch.int64).T.contiguous()
    return aggregation_matrix(ei, n).to(torch.float64)


def _dense(edges: Edges) -> np.ndarray:
    a = np.zeros((N, N))  # a[r, j] = 1: j sends to r
    for j, r in edges:
        a[r, j] = 1.0
    return a


def _clip(h: np.ndarray, c: float | None) -> np.ndarray:
    if c is None:
        return h
    return h * np.minimum(1.0, c / np.maximum(np.linalg.norm(h, axis=1, keepdims=True),
                                              1e-300))


def _hop1(level: str, edges: Edges, y: torch.Tensor, train: torch.Tensor,
          c: float | None) -> np.ndarray:
    """The first hop in dense numpy, an independent reference of the library's path
    (:func:`test_the_reference_is_the_library`)."""
    a = _dense(edges)
    w = np.eye(CLASSES)[y.numpy()] * train.numpy()[:, None]
    if level in ("k_neighbor", "node_feature"):
        w = w / np.sqrt(np.maximum(a.sum(0), 1.0))[:, None]
    return _clip(a @ w, c)


def _hop2(edges: Edges, h1: np.ndarray, c: float | None) -> np.ndarray:
    """The pre-noise second hop over a fixed earlier release ``h1`` (adaptive)."""
    w = h1 / np.maximum(np.linalg.norm(h1, axis=1, keepdims=True), 1e-12)
    return _clip(_dense(edges) @ w, c)


def _sym(edges: set[tuple[int, int]]) -> Edges:
    return frozenset(edges | {(b, a) for a, b in edges})


# --- hop 1 of label messages -----------------------------------------------------------
# The brute force of the first hop at every level (every neighbouring pair of small
# adversarial graphs and labellings, bounds reached where tight) is DPDGC's registered check,
# dpgnn_core/methods/brute_force/dpdgc_labels.py, run by test_sensitivity_contract.py.


def test_smaller_bounds_would_fail() -> None:
    """The search has the power to catch a wrong bound: unnormalised label rows at
    k-neighbour level (a hub's label reaches all its receivers) exceed the fixed-row bound
    √(min(2c, k)² + k) they would get by analogy; sender-normalised rows at node level
    exceed 1 + √D; and every tight bound fails at 0.9 × itself."""
    star = _sym({(i, 0) for i in range(1, N)})
    y, every = torch.zeros(N, dtype=torch.int64), torch.ones(N, dtype=torch.bool)
    # hub 0's record removed, its edges kept: its label leaves N - 1 rows
    no_hub = every.clone()
    no_hub[0] = False
    moved = float(np.linalg.norm(_hop1("edge", star, y, every, None)
                                 - _hop1("edge", star, y, no_hub, None)))
    assert moved > aggregation_sensitivity("k_neighbor", False, k=1)
    assert _worst("node", node_pairs, _graphs(False, 3), False, None) > 0.9 * (
        label_sensitivity("node", False, max_degree=3))
    assert _worst("node_feature", feature_pairs, _graphs(False), False, None) > 0.9


def test_only_training_labels_are_read() -> None:
    """Changing any label outside the training set changes no hop, at any level."""
    rng = np.random.default_rng(3)
    g = _graphs(False)[1]
    y = torch.tensor(rng.integers(0, CLASSES, N))
    train = torch.tensor([True, False, True, False, True, False])
    other = torch.where(train, y, (y + 1) % CLASSES)
    for level in ("edge", "node", "k_neighbor", "node_feature"):
        assert torch.equal(_hop1_library(level, g, y, train, None),
                           _hop1_library(level, g, other, train, None))
    assert label_rows(y, train, CLASSES)[~train].abs().sum() == 0


def test_the_reference_is_the_library() -> None:
    """The dense reference the brute force runs equals the library's sparse path (label
    rows, sender normalisation, A·W, row clipping), at every level, on every graph."""
    for level, c in itertools.product(("edge", "node", "k_neighbor", "node_feature"),
                                      (None, 0.8)):
        for g in _graphs(True) + _graphs(False):
            for y, train in _labellings()[1:]:
                np.testing.assert_allclose(_hop1(level, g, y, train, c),
                                           _hop1_library(level, g, y, train, c).numpy(),
                                           atol=1e-12)
    h1 = np.random.default_rng(2).normal(size=(N, CLASSES))
    g = _graphs(False)[0]
    got = propagate(_adj(g, N), row_normalise(torch.from_numpy(h1)), [0.0], 0.8, None)
    np.testing.assert_allclose(_hop2(g, h1, 0.8), got[:, 0].numpy(), atol=1e-12)


# --- later hops: an adaptive composition over the first hop's noisy output ------------


@pytest.mark.parametrize(("level", "pairs", "opts"), [
    ("node", node_pairs, {"max_degree": 3}), ("k_neighbor", k_pairs(1), {"k": 1}),
    ("edge", edge_pairs, {})])
def test_second_hop_brute_force(level: str, pairs: Callable[..., Iterator[Neighbour]],
                                opts: dict[str, int]) -> None:
    """Hop 2 sums the normalised rows of the released hop 1 (fixed: random noisy rows and
    aligned ones): ≤ the fixed-row bound at every relation's change of the graph."""
    bound = hop_sensitivities("labels", level, 2, False, **opts)[1]
    graphs = _graphs(False, opts.get("max_degree"))
    fixed = [np.random.default_rng(0).normal(size=(N, CLASSES)), np.ones((N, CLASSES))]
    worst = 0.0
    for g, h1 in itertools.product(graphs, fixed):
        base = _hop2(g, h1, None)
        for g2, _ in pairs(g, torch.ones(N, dtype=torch.bool), False):
            worst = max(worst, float(np.linalg.norm(base - _hop2(g2, h1, None))))
    assert worst <= bound + 1e-9
    assert worst == pytest.approx(bound)


def test_hop_sensitivities_and_releases() -> None:
    """At node_feature level only hop 1 of label messages is a release (later hops, and
    every hop of adjacency messages, read a public structure and a release)."""
    assert hop_sensitivities("labels", "k_neighbor", 2, False, k=1) == pytest.approx(
        [math.sqrt(2) + 1, math.sqrt(2)])
    assert hop_sensitivities("labels", "node", 1, False, max_degree=100,
                             row_clip=10.0) == pytest.approx([math.sqrt(200)])
    assert released_hops("labels", "node_feature", 3) == [1]
    assert released_hops("adjacency", "node_feature", 2) == []
    assert released_hops("labels", "k_neighbor", 2) == [1, 2]


# --- the recipe -------------------------------------------------------------------------

DATA = csbm(num_nodes=120, avg_degree=8, homophily=0.9, feature_signal=0.3, feature_dim=8,
            seed=2)
FAST = {"epochs": 5, "steps": 3, "device": "cpu", "hidden": 8, "messages": "labels"}


def test_ledger_of_each_level_with_labels() -> None:
    """No encoder event with label messages; one event per released hop; the classifier's
    DP-Adam at node, k-neighbour and node_feature level; node_feature events say so."""
    def kinds(**kw: object) -> list[tuple[str, str]]:
        spec = DpdgcSpec(epsilon=4.0, **{**FAST, **kw})  # type: ignore[arg-type]
        return [(e.kind, e.level) for e in ledger_for(spec, 60)(1.0).events]
    assert kinds(level="edge", hops=2) == [("gaussian", "edge")] * 2
    assert kinds(level="k_neighbor", hops=2) == [("gaussian", "k_neighbor")] * 2 + [
        ("poisson_gaussian", "k_neighbor")]
    assert kinds(level="node_feature", hops=3) == [("gaussian", "node_feature"),
                                                   ("poisson_gaussian", "node_feature")]
    assert kinds(level="node", max_degree=9) == [("gaussian", "node"),
                                                 ("poisson_gaussian", "node")]
    # `budget show` names dpdgc-fdp's unit as DP-GCN's: node_feature
    from dpgnn_core.privacy.odometer import Charge

    fdp = ledger_for(DpdgcSpec(method="dpdgc-fdp", epsilon=4.0, **FAST), 60)(1.0)
    assert Charge(fdp).units() == {"node_feature"}


def test_node_level_labels_clip_at_root_d_unless_given() -> None:
    assert DpdgcSpec(level="node", max_degree=16, epsilon=1.0, messages="labels").row_clip == 4
    assert DpdgcSpec(level="node", max_degree=16, epsilon=1.0, messages="labels",
                     row_clip=2.0).row_clip == 2.0
    assert DpdgcSpec(level="node", max_degree=16, epsilon=1.0,
                     messages="adjacency").row_clip is None
    assert DpdgcSpec(method="dpdgc-fdp", epsilon=1.0).level == "node_feature"


@pytest.mark.parametrize(("given", "expected"), [
    ({"method": "dpdgc-ndp", "max_degree": 9},
     {"messages": "labels", "hops": 1, "steps": 60, "budget_split": (1.0, 0.1, 1.0),
      "row_clip": 3.0}),
    ({"method": "dpdgc-kndp"}, {"messages": "labels", "hops": 3, "steps": 60,
                                "budget_split": (1.0, 0.1, 1.0)}),
    ({"method": "dpdgc-fdp", "hops": 1}, {"messages": "labels", "hops": 1}),
    ({"method": "dpdgc-kndp", "messages": "adjacency"},
     {"hops": 1, "steps": 60, "budget_split": (1.0, 1.0, 1.0), "adj_dim": 16}),
    ({"method": "dpdgc-edp"}, {"messages": "adjacency", "hops": 1, "adj_dim": 4}),
])
def test_level_defaults_fill_only_what_is_left_out(given: dict[str, object],
                                                   expected: dict[str, object]) -> None:
    """The validation-chosen label recipe per level; an input asking for adjacency
    messages keeps the adjacency recipe; a given value always wins."""
    spec = DpdgcSpec(epsilon=4.0, **given)  # type: ignore[arg-type]
    assert {k: getattr(spec, k) for k in expected} == expected
    shown = level_defaults_used(spec)  # the run's `defaults` line
    assert {k: shown[k] for k in shown["fields"]} == {
        k: list(v) if isinstance(v, tuple) else v for k, v in
        ((f, getattr(spec, f)) for f in shown["fields"])}
    assert ("hops" in shown["level_default"]) == ("hops" in spec.defaults_for(
        {"messages": spec.messages}).get(spec.level, {}) and "hops" not in given)


@pytest.mark.parametrize(("level", "extra"), [
    ("k_neighbor", {"hops": 2}),  # ~3.5 s CPU each, mostly the PLD calibration
    pytest.param("node_feature", {"hops": 2}, marks=pytest.mark.slow),
    pytest.param("edge", {}, marks=pytest.mark.slow),
    pytest.param("node", {"max_degree": 40}, marks=pytest.mark.slow)])
def test_runs_end_to_end_with_labels(level: str, extra: dict[str, int]) -> None:
    """A tiny run per level: the hops released, ε within the target, no label-bearing
    encoder attached to the model (the training labels are not a release)."""
    spec = DpdgcSpec(level=level, epsilon=4.0, **{**FAST, **extra})
    clf, h, ledger, report, _ = train_dpdgc(DATA, spec)
    assert h.shape == (DATA.num_nodes, spec.hops, DATA.num_classes)
    assert clf.encoder is None and report["messages"] == "labels"
    assert report["epsilon"] <= 4.0 + 1e-9 and ledger.events
    assert len(report["hop_noise_stds"]) == spec.hops
    assert "accuracy" in evaluate_dpdgc(clf, h, DATA, "cpu")["test"]


@pytest.mark.parametrize(("name", "extra"), [
    ("dpdgc-kndp", {"hops": 2}),
    pytest.param("dpdgc-fdp", {}, marks=pytest.mark.slow)])
def test_audit_runs_with_labels(name: str, extra: dict[str, int]) -> None:
    """`dpgnn audit` works with label messages (edge canaries scored against the
    auditor's training labels; node canaries on zero aggregations at node_feature level),
    and its lower bound stays below the reported ε."""
    from dpgnn_core.audit.canaries import audit

    spec = DpdgcSpec(method=name, epsilon=4.0, **{**FAST, **extra})
    result = audit(name, DATA, spec, m=20, rng=np.random.default_rng(0))
    assert result.epsilon_lower <= result.reported_epsilon
