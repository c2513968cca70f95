"""Issue 48 §5: a run whose calibrated plan exceeds what the dataset's budget has left was
refused only inside the flow, 6-16 s after Prefect started (exit 1). The command line now
computes the plan the fit calibrates (:func:`dpgnn_core.methods.early_plan.planned_ledger`)
and asks the budget's own filter before Prefect starts: one ``error:`` line, exit 2."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dpgnn_core.data.synthetic import csbm
from dpgnn_core.methods.early_plan import planned_ledger
from dpgnn_core.privacy import GaussianEvent, Ledger
from flows.cli import app
from tests.flows.budgeted import budgeted_with_a_release
from tests.flows.clirunner import CliRunner


class Started(Exception):
    """The CLI went on to start (or look for) a Prefect server."""


@pytest.fixture
def no_prefect(monkeypatch: pytest.MonkeyPatch) -> None:
    """A CLI call that gets as far as Prefect raises :class:`Started` instead."""
    import flows.cli.common

    def started(*a: object, **kw: object) -> None:
        raise Started

    monkeypatch.setattr(flows.cli.common, "use_server_if_running", started)

runner = CliRunner()


class _Stop(Exception):
    pass


class _Capture:
    """A release gate that keeps the plan the fit hands it and stops the fit there."""

    def __init__(self) -> None:
        self.ledger: Ledger | None = None

    def before_release(self, ledger: Ledger, info: Any) -> None:
        self.ledger = ledger
        raise _Stop

    admit = before_release

    def released(self) -> None:  # pragma: no cover - never reached
        pass


@pytest.mark.filterwarnings("ignore:encoder_dim")
@pytest.mark.parametrize("options", [
    {"method": "dp-mlp", "epsilon": 2.0, "steps": 30},
    {"method": "dp-mlp", "epsilon": 2.0, "noise_multiplier": 3.0},
    {"method": "gap-edp", "epsilon": 1.0, "hops": 2, "epochs": 2},
    {"method": "gap-ndp", "epsilon": 4.0, "hops": 1, "steps": 10, "max_degree": 400},
    {"method": "dp-graph-gcn", "epsilon": 2.0, "steps": 10, "accountant": "rdp"},
    {"method": "dp-gcn", "epsilon": 2.0, "steps": 20},  # K and the batch from the degrees
    {"method": "dp-sage", "epsilon": 3.0, "max_degree": 3, "batch_size": 50, "layers": 2},
    {"method": "dp-gin", "epsilon": 2.0, "noise_multiplier": 2.0, "max_degree": 2},
    {"method": "drw-gcn", "epsilon": 2.0, "steps": 20},
    {"method": "drw-d-sage", "epsilon": 1.0, "steps": 12, "resample_every": 4},
    {"method": "drw-r-gcn", "epsilon": 2.0, "noise_multiplier": 3.0},
    {"method": "progap-edp", "epsilon": 2.0, "stages": 2, "epochs": 1},
    {"method": "progap-ndp", "epsilon": 4.0, "stages": 1, "steps": 5, "max_degree": 400},
    {"method": "dpdgc-edp", "epsilon": 2.0, "steps": 10},
    {"method": "dpdgc-kndp", "epsilon": 3.0, "steps": 10, "k": 2},
    {"method": "dpdgc-fdp", "epsilon": 3.0, "steps": 10, "accountant": "rdp"},
])
def test_the_early_plan_is_the_one_the_fit_hands_the_gate(options: dict[str, Any]) -> None:
    from dpgnn_core.data.synthetic import er_graphs
    from dpgnn_core.methods import registry

    graphs = options["method"].startswith("dp-graph")
    data = (er_graphs(num_graphs=60, split=(36, 12, 12), seed=2) if graphs
            else csbm(num_nodes=200, seed=2))
    method = registry.get(options["method"])
    spec = method.spec(**{k: v for k, v in options.items() if k != "method"})
    n = 36 if graphs else int(data.mask("train").sum())
    capture = _Capture()
    with pytest.raises(_Stop):
        method.fit(data, spec, gate=capture)
    early = planned_ledger(spec, n, lambda: (data.edge_index, data.num_nodes))
    assert capture.ledger is not None and early is not None
    assert early.events == capture.ledger.events


def test_a_plan_beyond_the_budget_left_is_refused_before_prefect(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_prefect: None) -> None:
    ds, home = budgeted_with_a_release(tmp_path, monkeypatch, noise_multiplier=8.0,
                                       epsilon=0.5)
    run = [*home, "run", "dp-mlp", "--delta", "1e-4", "--steps", "20", "--dataset", str(ds)]
    r = runner.invoke(app, [*run, "--epsilon", "0.9"])
    lines = [line for line in r.output.splitlines() if line.strip()]
    assert r.exit_code == 2 and len(lines) == 1, r.output
    assert lines[0].startswith("error: ") and "Nothing was trained" in lines[0], r.output
    # a plan that fits passes the early check: the run goes on to Prefect
    r = runner.invoke(app, [*run, "--epsilon", "0.05"])
    assert isinstance(r.exception, Started), r.output
    # an open reservation (a run that may resume) leaves the decision to the flow
    from dpgnn_core.privacy.odometer import Charge
    from tasks.budget import store

    sha = json.loads((ds / "manifest.json").read_text())["content_sha256"]
    half = Charge(Ledger().add(GaussianEvent(noise_multiplier=8.0, level="node")))
    store().reserve(sha, "ds", str(ds), half, method="dp-mlp", run_id="open", delta=1e-4,
                    epsilon=0.5, plan_key="k")
    r = runner.invoke(app, [*run, "--epsilon", "0.9"])
    assert isinstance(r.exception, Started), r.output


@pytest.mark.parametrize("method", ["dp-gcn", "drw-sage", "progap-edp", "dpdgc-edp"])
def test_the_graph_methods_plans_beyond_the_budget_are_refused_before_prefect(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, method: str, no_prefect: None) -> None:
    """DP-GNN (its K from the degrees), DRW, ProGAP and DPDGC were refused only inside the
    flow (the fault trial's ``budget-refusal-fast``: 7 progress lines, then the error)."""
    from dpgnn_core.data.store import write_dataset

    ds = tmp_path / "ds"
    write_dataset(csbm(num_nodes=200, seed=4), ds)
    home = ["--home", str(tmp_path / "home")]
    monkeypatch.setenv("DPGNN_HOME", str(tmp_path / "home"))
    r = runner.invoke(app, [*home, "budget", "set", str(ds), "--epsilon", "1",
                            "--delta", "1e-4"])
    assert r.exit_code == 0, r.output
    run = [*home, "run", method, "--delta", "1e-4", "--dataset", str(ds)]
    r = runner.invoke(app, [*run, "--epsilon", "3"])
    lines = [line for line in r.output.splitlines() if line.strip()]
    assert r.exit_code == 2 and len(lines) == 1, r.output
    assert lines[0].startswith("error: privacy budget") and "Nothing was trained" in lines[0]
    r = runner.invoke(app, [*run, "--epsilon", "0.5"])  # a plan that fits goes on
    assert isinstance(r.exception, Started), r.output


def test_a_released_plan_is_left_to_the_flow_unless_refreshed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_prefect: None) -> None:
    """A plan already released on the dataset is re-used by the flow at no cost (or
    refused there as a lost release): the early check must not refuse it as a new charge;
    with --refresh it is one."""
    from dpgnn_core.methods.registry import get
    from dpgnn_core.privacy.odometer import Charge
    from tasks.budget import plan_key, store

    ds, home = budgeted_with_a_release(tmp_path, monkeypatch, noise_multiplier=50.0,
                                       epsilon=0.01)
    spec = get("dp-mlp").spec(epsilon=0.6, delta=1e-4, steps=20)
    sha = json.loads((ds / "manifest.json").read_text())["content_sha256"]
    ledger = planned_ledger(spec, 100)
    assert ledger is not None
    rid = store().reserve(sha, "ds", str(ds), Charge(ledger), method="dp-mlp", run_id="r",
                          delta=1e-4, epsilon=0.6,
                          plan_key=plan_key({"content_sha256": sha}, spec))
    store().mark_spent(rid, release_id="released-before")
    run = [*home, "run", "dp-mlp", "--epsilon", "0.6", "--delta", "1e-4", "--steps", "20",
           "--dataset", str(ds)]
    r = runner.invoke(app, run)
    assert isinstance(r.exception, Started), r.output
    r = runner.invoke(app, [*run, "--refresh"])
    assert r.exit_code == 2 and "Nothing was trained" in r.output, r.output
