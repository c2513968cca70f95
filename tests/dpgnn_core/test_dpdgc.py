"""DPDGC: the sensitivity values, the encoder's closed-form clipped gradient sum, the degree
refusal, the ledger of each level, and learning (the brute force over neighbouring graphs
is DPDGC's registered sensitivity check, run by test_sensitivity_contract.py)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from dpgnn_core.data.store import write_dataset
from dpgnn_core.data.synthetic import csbm
from dpgnn_core.errors import DataError
from dpgnn_core.graph.gap_degree import max_degree_for_pma
from dpgnn_core.methods import preflight
from dpgnn_core.methods._staged import Calibration, run_in_memory
from dpgnn_core.methods.brute_force.dpdgc import Edges, adjacency
from dpgnn_core.methods.brute_force.dpdgc import random_graph as _random_graph
from dpgnn_core.methods.dpdgc import (
    DEGREE_CHECK_NOTE,
    STAGED,
    aggregation_sensitivity,
    clipped_gradient_sum,
    encoder_sensitivity,
    evaluate_dpdgc,
    ledger_for,
    project_rows,
    random_head,
    train_dpdgc,
)
from dpgnn_core.methods.private_run import PrivateRun
from dpgnn_core.privacy import Ledger
from dpgnn_core.specs import DpdgcSpec
from dpgnn_core.training.checkpoint import checkpointing

# The brute force of the aggregation's and the adjacency encoder's sensitivities (every
# neighbouring graph of each level, stars, aligned and random rows) is DPDGC's registered
# check, dpgnn_core/methods/brute_force/dpdgc.py, run by
# tests/dpgnn_core/test_sensitivity_contract.py.


def test_sensitivity_values() -> None:
    assert aggregation_sensitivity("edge", False) == pytest.approx(math.sqrt(2))
    assert aggregation_sensitivity("node", False, max_degree=10) == pytest.approx(
        math.sqrt(110))
    assert aggregation_sensitivity("node", False, max_degree=10, row_clip=3.0) == \
        pytest.approx(math.sqrt(19))
    assert aggregation_sensitivity("k_neighbor", False, k=1) == pytest.approx(math.sqrt(2))
    assert aggregation_sensitivity("k_neighbor", False, k=5) == pytest.approx(math.sqrt(30))
    assert aggregation_sensitivity("k_neighbor", True, k=5) == pytest.approx(5.0)
    assert aggregation_sensitivity("k_neighbor", False, k=5, row_clip=1.0) == \
        pytest.approx(math.sqrt(4 + 5))
    assert encoder_sensitivity("edge", False, 2.0) == 8.0
    assert encoder_sensitivity("node", False, 1.0, max_degree=10) == 21.0
    assert encoder_sensitivity("k_neighbor", True, 0.5, k=2) == 3.0
    with pytest.raises(DataError, match="max_degree"):
        aggregation_sensitivity("node", False)


# --- the adjacency encoder's clipped gradient sum --------------------------------------


def _grad(w: torch.Tensor, head: torch.Tensor, y: torch.Tensor, train: torch.Tensor,
          edges: Edges, n: int, clip: float) -> torch.Tensor:
    adj_t, adj = adjacency(frozenset(edges), n)
    return clipped_gradient_sum(adj_t.to_sparse_csr(), adj.to_sparse_csr(), w, head, y,
                                train, clip)[0]


def test_clipped_gradient_sum_is_the_per_record_gradient() -> None:
    """The closed form equals autograd's per-record gradients, each clipped, summed."""
    n, clip = 6, 0.3
    g = _random_graph(n, 0.5, 0, False)
    w = project_rows(torch.randn(n, 4, dtype=torch.float64)) * 3
    head = random_head(4, 3, 0).double()
    y = torch.tensor([0, 1, 2, 0, 1, 2])
    train = torch.tensor([True, True, False, True, True, True])
    a = torch.zeros(n, n, dtype=torch.float64)
    for s, t in g:
        a[t, s] = 1.0
    want = torch.zeros_like(w)
    for i in range(n):
        if not train[i]:
            continue
        wi = w.clone().requires_grad_(True)
        loss = torch.nn.functional.cross_entropy((a[i] @ wi @ head)[None], y[i:i + 1])
        (gi,) = torch.autograd.grad(loss, wi)
        want += gi * min(1.0, clip / max(float(gi.norm()), 1e-12))
    assert torch.allclose(_grad(w, head, y, train, g, n, clip), want, atol=1e-10)


# --- the recipe ------------------------------------------------------------------------

# dense: the encoder's gradient signal per row grows with the degree, its noise does not
DATA = csbm(num_nodes=600, avg_degree=40, homophily=0.9, feature_signal=0.3, feature_dim=16,
            seed=5)
FAST = {"epochs": 60, "adj_epochs": 60, "steps": 30, "device": "cpu", "hidden": 16,
        "messages": "adjacency"}  # the adjacency recipe (label messages: test_dpdgc_labels)


def test_ledger_of_each_level() -> None:
    n = int(DATA.mask("train").sum())
    edp = ledger_for(DpdgcSpec(level="edge", epsilon=1.0, adj_steps=3, **FAST), n)(2.0)
    assert [(e.kind, e.level, e.relation) for e in edp.events] == [
        ("gaussian", "edge", "add_remove"), ("gaussian", "edge", "add_remove")]
    assert edp.events[0].count == 3 and edp.events[0].noise_multiplier == 2.0
    ndp = ledger_for(DpdgcSpec(level="node", max_degree=5, epsilon=1.0, **FAST), n)(2.0)
    assert [e.kind for e in ndp.events] == ["gaussian", "gaussian", "poisson_gaussian"]
    assert DEGREE_CHECK_NOTE in ndp.unaccounted
    kn = ledger_for(DpdgcSpec(level="k_neighbor", adj_steps=0, epsilon=1.0, **FAST), n)(2.0)
    assert [(e.kind, e.level) for e in kn.events] == [("gaussian", "k_neighbor"),
                                                      ("poisson_gaussian", "k_neighbor")]
    assert ledger_for(DpdgcSpec(level="none", **FAST), n)(0.0).events == ()


def test_names_and_levels_agree() -> None:
    assert DpdgcSpec(method="dpdgc-kndp", epsilon=1.0).level == "k_neighbor"
    assert DpdgcSpec(level="node", max_degree=3, epsilon=1.0).method == "dpdgc-ndp"
    with pytest.raises(ValueError, match="max_degree"):
        DpdgcSpec(method="dpdgc-ndp", epsilon=1.0)
    with pytest.raises(ValueError, match="implies level"):
        DpdgcSpec(method="dpdgc-edp", level="node", max_degree=3, epsilon=1.0)
    with pytest.raises(ValueError, match="not private"):
        DpdgcSpec(method="dpdgc-inf", epsilon=1.0)


def test_node_level_refuses_a_graph_beyond_the_degree_bound(tmp_path: Path) -> None:
    """Refused in training and in the preflight (from the stored edge list), before
    anything trains, naming D only: the observed maximum degree is private and never in
    the message (GAP-NDP's check names it)."""
    observed = max_degree_for_pma(np.asarray(DATA.edge_index), DATA.num_nodes,
                                  directed=False)
    spec = DpdgcSpec(level="node", max_degree=5, epsilon=4.0, **FAST)
    with pytest.raises(DataError, match="D = 5") as err:
        train_dpdgc(DATA, spec)
    assert str(observed) not in str(err.value) and err.value.value == 5
    write_dataset(DATA, tmp_path / "ds")
    manifest = {**json.loads((tmp_path / "ds" / "manifest.json").read_text()),
                "path": str(tmp_path / "ds")}
    with pytest.raises(DataError, match="D = 5") as err:
        preflight.check(spec, manifest)
    assert str(observed) not in str(err.value)
    preflight.check(spec.model_copy(update={"max_degree": observed}), manifest)  # within


@pytest.mark.filterwarnings("ignore:epsilon = 32")
@pytest.mark.parametrize(("level", "eps", "adj_steps", "least"),
                         [("none", None, 2, 0.9), ("edge", 8.0, 2, 0.6),
                          ("k_neighbor", 32.0, 5, 0.3)])
def test_learns_and_reports_its_level(level: str, eps: float | None, adj_steps: int,
                                      least: float) -> None:
    """Above chance (0.2: five classes, features weak): the graph is what it learns."""
    spec = DpdgcSpec(level=level, epsilon=eps, adj_steps=adj_steps, adj_dim=16, **FAST)
    clf, h, ledger, report, history = train_dpdgc(DATA, spec)
    acc = evaluate_dpdgc(clf, h, DATA, "cpu")["test"]["accuracy"]
    assert acc > least, acc
    assert h.shape == (DATA.num_nodes, 1, spec.adj_dim)
    assert float(clf.encoder.weight.norm(dim=1).max()) <= 1 + 1e-5  # released W in the ball
    assert bool(ledger.events) == (eps is not None)
    if eps is not None:
        assert report["level"] == level and report["epsilon"] <= eps + 1e-9
        assert history[-1]["epsilon_spent"] == pytest.approx(report["epsilon"])
        assert report["randomness"].startswith("secret")


def test_one_task_never_checkpoints_the_classifier(tmp_path: Path) -> None:
    """A rerun redraws the aggregation's noise, so the classifier trained on the earlier
    release is never saved for resumption (two releases, one counted)."""
    spec = DpdgcSpec(level="k_neighbor", epsilon=8.0, steps=4, batch_size=32, hidden=8,
                     adj_dim=4, device="cpu")
    with checkpointing(tmp_path, every_seconds=0.0) as ckpt:  # would save after every step
        train_dpdgc(DATA, spec)
    assert not Path(ckpt.path).exists()


@pytest.mark.parametrize(("given", "adj_dim"), [
    ({"method": "dpdgc-edp", "epsilon": 1.0}, 4),
    ({"level": "edge", "epsilon": 1.0}, 4),
    ({"method": "dpdgc-edp", "epsilon": 1.0, "adj_dim": 16}, 16),
    ({"method": "dpdgc-edp", "epsilon": 1.0, "adj_dim": None}, 4),
    ({"method": "dpdgc-kndp", "epsilon": 16.0}, 16),
    ({"method": "dpdgc-ndp", "epsilon": 16.0, "max_degree": 5}, 16),
    ({"method": "dpdgc-inf"}, 16),
])
def test_adjacency_width_defaults_by_level(given: dict, adj_dim: int) -> None:
    """The edge-level width chosen on validation (4) fills in only where it is left out."""
    assert DpdgcSpec(**given).adj_dim == adj_dim


class _Gate:
    """A release gate that records what the engine tells it."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def before_release(self, ledger: Any, info: Any) -> None:
        self.calls.append(f"reserve {len(ledger.entries)}")

    def released(self) -> None:
        self.calls.append("released")


@pytest.mark.parametrize("level", ["edge", "node"])
def test_each_release_is_a_stage_with_its_events_under_one_plan(level: str) -> None:
    """Issue 50 §1: DPDGC declares its stages as GAP does. The encoder, the aggregation and
    the classifier each return the events of what they release (the degree check's note
    with the aggregation), composed into the plan; each private stage reserves the whole
    plan before it computes (one reservation: a real gate keeps the first) and marks it
    spent once its release exists."""
    small = csbm(num_nodes=80, avg_degree=4, seed=7)
    d = max_degree_for_pma(np.asarray(small.edge_index), small.num_nodes,
                           directed=small.directed)
    bound = {"max_degree": d} if level == "node" else {}
    spec = DpdgcSpec(level=level, epsilon=4.0, adj_steps=2, epochs=2, steps=2, batch_size=16,
                     hidden=8, adj_dim=4, device="cpu", messages="adjacency", **bound)
    gate = _Gate()
    out = run_in_memory(STAGED, small, spec, PrivateRun(gate=gate))
    assert list(out) == ["calibrate", "encoder", "aggregate", "train"]
    planned = Calibration.of(out["calibrate"]).planned
    assert out["encoder"].events == Ledger(planned.entries[:1])
    assert out["aggregate"].events.entries == planned.entries[1:2]
    assert out["aggregate"].events.unaccounted == planned.unaccounted
    assert bool(planned.unaccounted) == (level == "node")
    report = out["train"].report
    assert report is not None and report["ledger"].to_dict() == planned.to_dict()
    n = f"reserve {len(planned.entries)}"
    classifier = [n, "released", "released"] if level == "node" else ["released"] * 2
    assert gate.calls == [n, "released", n, "released", *classifier]
