"""The method contract, run on every registered method: a new method gets it for free.

fit on a tiny graph (or graph set) -> save -> load -> evaluate gives the same predictions;
the ledger the plan (``ledger_for``) describes is the ledger the run returns; a private
run's reported ε is within its target; options the method does not take are refused; the
registry maps the spec back to the method.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from dpgnn_core.data.synthetic import csbm, er_graphs
from dpgnn_core.graph.gap_degree import max_degree_for_pma
from dpgnn_core.methods import dp_mlp, registry
from dpgnn_core.methods.private_run import PrivateRun, StepPlan
from dpgnn_core.methods.registry import METHODS, Fitted, UnknownMethodError, get, method_for
from dpgnn_core.privacy import Ledger, PrivacyError, PrivacyReport, make_accountant
from dpgnn_core.privacy.report import TRAINING_LOSS_NOTE

NODES = csbm(num_nodes=300, avg_degree=5, feature_dim=8, seed=5)
GRAPHS = er_graphs(num_graphs=80, split=(50, 15, 15), seed=5)

# Tiny, fast options per family (what the contract needs, not a recipe).
TINY_OPTIONS: dict[str, dict[str, Any]] = {
    "baseline": {"epochs": 3, "hidden": 8},
    "dp-gnn": {"steps": 3, "batch_size": 16, "hidden": 8, "max_degree": 3},
    "drw": {"steps": 3, "batch_size": 8, "hidden": 8, "walk_length": 2},
    "dp-mlp": {"steps": 3, "batch_size": 16, "hidden": 8},
    "gap": {"steps": 3, "epochs": 3, "batch_size": 16, "hidden": 8, "encoder_dim": 4},
    "progap": {"steps": 3, "epochs": 3, "batch_size": 16, "hidden": 4, "stages": 2},
    "graph-cls": {"steps": 3, "batch_size": 8, "hidden": 8},
    "dpdgc": {"steps": 3, "epochs": 3, "adj_epochs": 3, "batch_size": 16, "hidden": 8,
              "adj_dim": 4},
}


def _spec(name: str) -> Any:
    m = get(name)
    # a new family without an entry here runs with small steps and the spec's defaults
    opts: dict[str, Any] = {**TINY_OPTIONS.get(m.family, {"steps": 3}), "device": "cpu"}
    if m.private:
        opts["epsilon"] = 4.0
    if name in ("gap-ndp", "progap-ndp", "dpdgc-ndp"):
        opts["max_degree"] = max_degree_for_pma(NODES.edge_index, NODES.num_nodes,
                                                directed=NODES.directed)
    if name.startswith("drw-r"):
        opts["restarts"] = 2
    return m.spec(**opts)


@pytest.mark.parametrize("name", sorted(METHODS))
def test_method_contract(name: str, tmp_path: Path) -> None:
    m = get(name)
    data = GRAPHS if m.task == "graph" else NODES
    spec = _spec(name)
    assert method_for(spec) is m
    shown: list[dict[str, float]] = []  # what the progress line and any caller would see
    fitted = m.fit(data, spec, on_step=lambda step, rec: shown.append(dict(rec)))

    # save -> load -> evaluate: the same predictions as the fitted model.
    m.save(str(tmp_path / "model.pt"), fitted, spec, data)
    model, loaded_spec = m.load(torch.load(tmp_path / "model.pt", weights_only=True))
    assert loaded_spec == spec
    before = m.evaluate(fitted.model, data, spec, fitted.extra)
    after = m.evaluate(model, data, loaded_spec, fitted.extra)
    for split in ("train", "val", "test"):
        assert after[split]["accuracy"] == pytest.approx(before[split]["accuracy"])
        assert 0.0 <= after[split]["accuracy"] <= 1.0

    # The plan's ledger is the run's ledger; ε from it is the reported one, within target.
    if m.task == "graph":
        n_train = int((np.asarray(data.graph_split) == 0).sum())
    else:
        n_train = int(data.mask("train").sum())
    z = float(fitted.report.noise_multiplier or 0.0)
    chosen = fitted.report.details.get("max_degree") if m.private else None
    if getattr(spec, "max_degree", 0) is None and chosen is not None:
        spec = spec.model_copy(update={"max_degree": chosen})  # DP-GNN's K: from the graph
    if m.private:
        planned = m.ledger_for(spec, n_train)(z)
        assert planned.entries == fitted.ledger.entries
        eps = make_accountant(fitted.report.accountant).epsilon(fitted.ledger,
                                                                fitted.report.delta)
        assert eps == pytest.approx(fitted.report.epsilon) and eps <= 4.0
        assert fitted.report.level and fitted.report.relation
        # The core returns a frozen, typed report with its ε-by-step curve.
        assert isinstance(fitted.report, PrivacyReport)
        assert fitted.report.ledger == fitted.ledger
        assert fitted.report.epsilon_by_step[-1][1] == pytest.approx(fitted.report.epsilon)
        assert fitted.history[-1]["epsilon_spent"] == pytest.approx(fitted.report.epsilon)
        # Every step's record reached on_step with ε spent so far (the registry's, or a
        # staged method's own per stage), never above the run's, the last at it.
        assert shown and all("epsilon" in r for r in shown)
        assert max(r["epsilon"] for r in shown) <= fitted.report.epsilon * (1 + 1e-9)
        assert shown[-1]["epsilon"] == pytest.approx(fitted.report.epsilon)
        # No raw loss on the private batch leaves a private run by default (history,
        # on_step records): a DP-SGD phase's loss is not recorded at all. Only GAP-EDP's
        # and ProGAP-EDP's modules, trained without noise on the noisy aggregations and on
        # features and labels that edge level leaves public, keep theirs.
        if any(e.kind != "gaussian" for e in fitted.ledger.events):
            assert not any("train_loss" in r for r in fitted.history + shown)
            assert not any(k.endswith("_loss") for r in fitted.history + shown for k in r)
        assert TRAINING_LOSS_NOTE not in fitted.ledger.unaccounted
        assert "unaccounted_release" not in fitted.report.to_dict()
        assert list(fitted.report.unaccounted) == list(fitted.ledger.unaccounted)
        with pytest.raises(AttributeError):
            fitted.report.epsilon = 0.0  # type: ignore[misc]
    else:
        assert fitted.ledger.entries == () and not fitted.report.private
        assert m.ledger_for(spec, n_train)(1.0).entries == ()
        assert all("train_loss" in r for r in fitted.history)  # a non-private run keeps it

    # Options that do not apply are refused, naming the option.
    with pytest.raises(UnknownMethodError, match="does not take bogus_option"):
        m.spec(bogus_option=1)
    for field, value in m.fixed.items():  # the name decides these fields
        with pytest.raises(UnknownMethodError, match=field):
            m.spec(**{field: value})


def test_registry_matches_the_catalogue_and_the_specs() -> None:
    from typing import get_args

    from dpgnn_core.methods.catalog import CATALOG
    from dpgnn_core.specs import parse_spec

    assert set(METHODS) == set(CATALOG)  # every catalogue name is implemented, and back
    for name, m in METHODS.items():
        assert m.entry is CATALOG[name]
        # the spec class's ``method`` field takes exactly the catalogue's names of it
        assert name in get_args(m.spec_type.model_fields["method"].annotation)
        assert {n for n, e in CATALOG.items() if e.spec_type is m.spec_type} == set(
            get_args(m.spec_type.model_fields["method"].annotation))
        spec = parse_spec({"method": name, **({"epsilon": 1.0} if m.private else {}),
                           **({"max_degree": 5} if name in ("gap-ndp", "progap-ndp", "dpdgc-ndp")
                              else {})})
        assert method_for(spec) is m and spec.method == name


def test_registry_names_and_errors() -> None:
    assert {"mlp", "gcn", "sage", "dp-gcn", "dp-sage", "dp-gin", "dp-gat", "drw-gcn",
            "drw-r-sage", "drw-d-gcn", "dp-mlp", "gap-edp", "gap-ndp", "gap-inf",
            "progap-edp", "progap-ndp", "progap-inf", "graph-gcn", "dp-graph-gat"} \
        <= set(METHODS)
    with pytest.raises(UnknownMethodError, match="unknown method 'dp-foo'"):
        get("dp-foo")
    # A spec given to another method's contract is refused.
    with pytest.raises(UnknownMethodError, match="dp-sage"):
        get("dp-gcn").fit(NODES, get("dp-sage").spec(epsilon=1.0))


@pytest.mark.parametrize("name", ["dp-mlp", "dp-gcn"])
def test_train_until_spent_model_loads_again(name: str, tmp_path: Path) -> None:
    """A spec with a fixed noise multiplier (steps resolved by the fit) is stored without
    steps, so the saved model's spec validates again (it did not: 'not both')."""
    m = get(name)
    spec = m.spec(epsilon=2.0, noise_multiplier=1.5, device="cpu")
    assert "steps" not in spec.model_dump(mode="json")
    fitted = m.fit(NODES, spec)
    m.save(str(tmp_path / "model.pt"), fitted, spec, NODES)
    _, loaded = m.load(torch.load(tmp_path / "model.pt", weights_only=True))
    assert loaded == spec and fitted.report.steps >= 1


@pytest.mark.parametrize("name", sorted(n for n, m in METHODS.items() if m.private))
def test_raw_loss_only_behind_the_flag_and_marked(name: str) -> None:
    """``log_raw_loss=True`` puts the raw training loss of every step in the history and
    the on_step records (what MLflow and the progress line read), and marks the run: the
    note in the ledger and report, and ``unaccounted_release`` in the report."""
    m = get(name)
    data = GRAPHS if m.task == "graph" else NODES
    spec = _spec(name).model_copy(update={"log_raw_loss": True})
    shown: list[dict[str, float]] = []
    fitted = m.fit(data, spec, on_step=lambda step, rec: shown.append(dict(rec)))
    assert fitted.history and all("train_loss" in r for r in fitted.history)
    assert all("train_loss" in r for r in shown)
    assert TRAINING_LOSS_NOTE in fitted.ledger.unaccounted
    assert list(fitted.report.unaccounted) == list(fitted.ledger.unaccounted)
    assert fitted.report.to_dict()["unaccounted_release"] == [TRAINING_LOSS_NOTE]
    assert "log_raw_loss" in spec.model_dump() and "log_raw_loss" not in _spec(name).model_dump()


def test_a_private_fit_that_declares_no_plan_is_refused(monkeypatch: pytest.MonkeyPatch
                                                        ) -> None:
    """A method whose private fit neither calibrates with a declared plan nor gives its
    curve cannot return a report without an ε curve: the registry refuses it."""
    m = get("dp-mlp")

    def fit(data: Any, spec: Any, run: PrivateRun) -> Fitted:
        return Fitted(torch.nn.Linear(1, 1), Ledger(), PrivacyReport.from_dict(
            {"method": "x", "private": True, "epsilon": 1.0}), [{"step": 1}])

    bare = dataclasses.replace(m, _fit=fit)
    monkeypatch.setitem(registry._REGISTRY, "dp-mlp", bare)
    with pytest.raises(PrivacyError, match="declared no calibrated plan"):
        bare.fit(NODES, m.spec(epsilon=1.0, steps=1))


def test_the_declared_plan_gives_on_step_its_epsilon() -> None:
    """The engine Method.fit hands a fit: the plan declared gives every later record ε and
    ``total_steps`` (a record with its own ε passes unchanged), progress reaches the
    caller; an engine without the method's ``ledger_for`` computes no curve, one without
    a caller's on_step or a gate gives the training loop nothing to call."""
    spec = get("dp-mlp").spec(epsilon=1.0, steps=4, batch_size=10, accountant="rdp")
    plan = StepPlan(spec, 100, 1.5, 1e-3)
    seen: list[dict[str, float]] = []
    stages: list[tuple[str, int, int]] = []

    def on_step(step: int, rec: dict[str, float]) -> None:
        seen.append(rec)

    run = PrivateRun(on_step, progress=lambda *a: stages.append(a),
                     ledger_for=dp_mlp.ledger_for)
    assert run.on_step is not None and run.watched
    run.step(1, {"step": 1})  # before calibration: no ε yet
    run.declare(plan)
    run.step(2, {"step": 2})
    run.step(3, {"step": 3, "epsilon": 9.0})
    run.progress("hops", 1, 2)
    eps = dict(run.points())  # RDP: every step, from the plan's ledger after t steps
    acc = make_accountant("rdp")
    assert sorted(eps) == [1, 2, 3, 4] and eps[2] == pytest.approx(acc.epsilon(
        dp_mlp.ledger_for(spec.model_copy(update={"steps": 2}), 100)(1.5), 1e-3))
    assert seen == [{"step": 1}, {"step": 2, "epsilon": eps[2], "total_steps": 4},
                    {"step": 3, "epsilon": 9.0}]
    assert stages == [("hops", 1, 2)]
    bare = PrivateRun()
    bare.declare(plan)
    assert bare.on_step is None and bare.points() == [] and bare.stage_progress is None


class _Gate:
    """A release gate that records what the engine tells it."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def before_release(self, ledger: Ledger, info: Any) -> None:
        self.calls.append(f"reserve {len(ledger.entries)} {info['method']}")

    def released(self) -> None:
        self.calls.append("released")


def test_the_engine_reserves_before_the_first_step_and_each_step_releases() -> None:
    """Method.fit hands its gate to the fit's engine: the calibrated plan is reserved
    once, before anything trains, and every trained step tells the gate of a release (a
    step changes the model); without a caller's on_step the steps still reach the gate."""
    m = get("dp-mlp")
    gate = _Gate()
    fitted = m.fit(NODES, m.spec(epsilon=2.0, steps=3, batch_size=16, hidden=8,
                                 device="cpu"), gate=gate)
    assert gate.calls == ["reserve 1 dp-mlp", "released", "released", "released"]
    assert fitted.report.private and len(fitted.history) == 3
    quiet = _Gate()  # a staged stage whose steps release nothing (GAP-EDP's encoder)
    run = PrivateRun(gate=quiet, step_releases=False)
    assert run.on_step is None
    run.step(1, {"step": 1})
    assert quiet.calls == []


@pytest.mark.slow
def test_a_family_module_is_imported_when_first_asked_for() -> None:
    """``get("dp-mlp")`` imports DP-MLP's module only: a fresh process running it never
    imports PyTorch Geometric (the GNN families' layers, seconds of CPU per process).

    A finder first on ``sys.meta_path`` notes every import of ``torch_geometric`` and stops
    it (so the process does not pay for PyG's import): none while ``dp-mlp`` is fetched,
    then ``get("dp-gcn")`` asks for it."""
    import subprocess
    import sys

    code = ("import sys\n"
            "class Stop:\n"
            "    asked = []\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name.split('.')[0] == 'torch_geometric':\n"
            "            self.asked.append(name)\n"
            "            raise ImportError('stopped: ' + name)\n"
            "        return None\n"
            "sys.meta_path.insert(0, Stop())\n"
            "from dpgnn_core.methods.registry import get\n"
            "m = get('dp-mlp')\n"
            "assert m.name == 'dp-mlp', m.name\n"
            "assert 'torch_geometric' not in sys.modules, 'torch_geometric imported'\n"
            "assert not Stop.asked, Stop.asked\n"
            "assert 'dpgnn_core.methods.dp_gnn' not in sys.modules\n"
            "try:\n"
            "    get('dp-gcn')\n"
            "except ImportError as e:\n"
            "    assert 'stopped: torch_geometric' in str(e), e\n"
            "assert Stop.asked[:1] == ['torch_geometric'], Stop.asked\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
