"""GAP: PMA's sensitivity and noise, the composed ledger, learning at every level, bad
input refused before training."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch

from dpgnn_core.data.synthetic import csbm
from dpgnn_core.errors import DataError
from dpgnn_core.methods.gap import (
    GapClassifier,
    aggregation_matrix,
    evaluate_gap,
    pma,
    row_normalise,
    sensitivity,
    train_gap,
)
from dpgnn_core.privacy import PrivacyError, RdpAccountant
from dpgnn_core.specs import GapSpec

DATA = csbm(num_nodes=1500, homophily=0.9, feature_signal=0.6, feature_dim=24, seed=3)
FAST = {"epochs": 60, "steps": 60, "batch_size": 100, "device": "cpu"}


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
    spec = GapSpec(level=level, epsilon=4.0, hops=2, max_degree=10 if level == "node" else None,
                   **FAST)
    r = train_gap(DATA, spec)
    kinds = [e.kind for e in r.ledger.events]
    assert kinds == (["gaussian"] if level == "edge" else
                     ["poisson_gaussian", "gaussian", "poisson_gaussian"])
    assert all(e.level == level for e in r.ledger.events)
    eps = RdpAccountant().epsilon(r.ledger, r.report["delta"])
    assert eps == pytest.approx(r.report["epsilon"]) and eps <= 4.0
    z = r.report["noise_multiplier"]
    expected = z * (math.sqrt(2) if level == "edge" else math.sqrt(10))
    assert r.report["pma_noise_std"] == pytest.approx(expected)
    if level == "node":
        assert r.report["graph"]["edges_after"] < r.report["graph"]["edges_before"]


def test_levels_learn_in_order() -> None:
    acc = {}
    for name, kw in {"inf": {"level": "none"}, "edp": {"level": "edge", "epsilon": 8.0},
                     "ndp": {"level": "node", "epsilon": 8.0, "max_degree": 20}}.items():
        r = train_gap(DATA, GapSpec(**kw, **FAST))
        acc[name] = evaluate_gap(r.classifier, r.aggregations, DATA, "cpu")["test"]["accuracy"]
    assert acc["inf"] > 0.8
    assert acc["edp"] > 0.5 and acc["ndp"] > 0.3  # 5 classes: chance is 0.2
    assert acc["inf"] >= acc["edp"] - 0.02


@pytest.mark.parametrize("combine", ["cat", "sum", "attn"])
def test_classifier_combinations(combine: str) -> None:
    clf = GapClassifier(3, 8, 16, 4, combine)
    assert clf(torch.randn(10, 4, 8)).shape == (10, 4)


def test_same_seed_same_release() -> None:
    spec = GapSpec(level="edge", epsilon=2.0, **{**FAST, "epochs": 5})
    a, b = train_gap(DATA, spec), train_gap(DATA, spec)
    assert torch.equal(a.aggregations, b.aggregations)


def test_bad_input() -> None:
    with pytest.raises(ValueError, match="greater than or equal to 1"):
        GapSpec(level="edge", epsilon=1.0, hops=0)
    with pytest.raises(ValueError, match="degree bound"):
        GapSpec(level="node", epsilon=1.0)
    with pytest.raises(ValueError, match="greater than or equal to 1"):
        GapSpec(level="node", epsilon=1.0, max_degree=0)
    with pytest.raises(PrivacyError, match="smallest epsilon"):
        train_gap(DATA, GapSpec(level="node", epsilon=1e-3, max_degree=5, **FAST))
    empty = dataclasses.replace(DATA, edge_index=np.zeros((2, 0), dtype=np.int64))
    with pytest.raises(DataError, match="no edge left"):
        train_gap(empty, GapSpec(level="edge", epsilon=1.0, **FAST))
    with pytest.warns(UserWarning, match="encoder_dim"):
        train_gap(DATA, GapSpec(level="none", encoder_dim=64, **{**FAST, "epochs": 2}))
