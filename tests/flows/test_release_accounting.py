"""Every release counted once, and nothing that reveals K (issue 26 §5, §6, flow side): a
private selection's MLflow parent run carries no sweep wall time; a lost cached private
release is refused, not silently retrained and charged; a non-private run on a budgeted
dataset is refused unless allowed, and then recorded in the odometer and on MLflow."""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dpgnn_core.data.store import write_dataset
from dpgnn_core.data.synthetic import csbm

pytestmark = pytest.mark.slow


def _sweep_result(ds: Path) -> dict[str, Any]:
    row = {"method": "dp-mlp", "config_id": "dp-mlp[steps=3]", "epsilon": 4.0, "seed": 77,
           "epsilon_spent": 3.9, "delta": 1e-4, "level": "node", "noise_multiplier": 1.1,
           "val_accuracy": 0.5, "test_accuracy": 0.5, "private": True, "cache": "Completed",
           "artifacts_dir": str(ds), "mlflow_run_id": None, "config": {"steps": 3}}
    best = {"method": "dp-mlp", "config_id": "dp-mlp[steps=3]", "epsilon": 4.0,
            "selection": "private", "report": "Papernot & Steinke", "tuning": {},
            "unaccounted": []}
    return {"rows": [row], "best": [best], "budget": {},
            "dataset": {"name": "d", "path": str(ds), "content_sha256": "0" * 64}}


@pytest.mark.parametrize("selection", ["private", "flagged"])
def test_private_selection_parent_run_has_no_sweep_wall_time(
        tmp_path: Path, selection: str, seeded_mlflow: Callable[[Path], bool]) -> None:
    """The sweep started an hour ago: a flagged sweep's parent run spans that hour; a
    private selection's starts and ends at release time (its duration would reveal K)."""
    from mlflow.tracking import MlflowClient

    from tasks.tracking import log_sweep

    seeded_mlflow(tmp_path)  # a migrated, empty store: as a new one, without the migration
    hour_ago = int(time.time() * 1000) - 3_600_000
    before = int(time.time() * 1000)
    logged = log_sweep(result=_sweep_result(tmp_path), paths={},
                       spec={"name": "s", "selection": selection},
                       tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}",
                       start_time_ms=hour_ago)
    client = MlflowClient(logged["mlflow_tracking_uri"])
    info = client.get_run(logged["mlflow_parent_run_id"]).info
    (child,) = [r for r in client.search_runs([logged["mlflow_experiment_id"]])
                if r.data.tags.get("mlflow.parentRunId")]
    if selection == "flagged":
        assert info.start_time == hour_ago
        return
    assert info.start_time >= before and info.end_time == info.start_time
    assert child.info.end_time == child.info.start_time == info.start_time
    # the flow passes its release moment: every time logged is that one (issue 33 §3)
    at = before - 5_000
    logged = log_sweep(result=_sweep_result(tmp_path), paths={},
                       spec={"name": "s2", "selection": selection},
                       tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}",
                       start_time_ms=hour_ago, release_time_ms=at)
    info = client.get_run(logged["mlflow_parent_run_id"]).info
    (child,) = [r for r in client.search_runs([logged["mlflow_experiment_id"]])
                if r.data.tags.get("mlflow.parentRunId") == info.run_id]
    assert info.start_time == info.end_time == child.info.start_time == \
        child.info.end_time == at
    assert {m.timestamp for m in client.get_metric_history(child.info.run_id,
                                                           "val_accuracy")} == {at}


class _State:
    def __init__(self, name: str, result: dict[str, Any]) -> None:
        self.name, self._result = name, result

    def result(self) -> dict[str, Any]:
        return self._result


class _Task:
    """A cached task whose cache hit's artifact is gone (what Prefect's would return)."""

    def __init__(self, cached: dict[str, Any]) -> None:
        self.cached, self.runs = cached, 0

    def with_options(self, **_kw: Any) -> Any:
        return self._fresh

    def _fresh(self, **_kw: Any) -> _State:
        self.runs += 1
        return _State("Completed", {"path": "/rebuilt"})

    def __call__(self, **_kw: Any) -> _State:
        return _State("Cached", self.cached)


@pytest.mark.parametrize(("result", "refused"), [
    ({"report": {"private": True, "epsilon": 2.0, "release": {"id": "r1"}}}, True),
    ({"events": {"entries": [{"event": {}}], "unaccounted": []}}, True),  # a GAP stage
    ({"report": {"private": False}}, False),
    ({"events": {"entries": [], "unaccounted": []}}, False),  # GAP-inf's module
])
def test_a_lost_cached_private_release_is_refused_not_retrained(
        tmp_path: Path, result: dict[str, Any], refused: bool) -> None:
    from tasks.budget import LostReleaseError
    from tasks.cached import run_cached as _run

    cached = {**result, "path": str(tmp_path / "gone"),
              "files": {"model.pt": {"sha256": "0" * 64, "bytes": 1}}}
    task = _Task(cached)
    if refused:
        with pytest.raises(LostReleaseError, match="--refresh"):
            _run(task, False)
        assert task.runs == 0  # nothing trained
    else:
        assert _run(task, False) == ({"path": "/rebuilt"}, "Rebuilt")
        assert task.runs == 1


def test_budgeted_dataset_refuses_non_private_and_lost_releases(tmp_path: Path) -> None:
    """On a dataset with a budget: gcn is refused before training unless allowed (then
    recorded and tagged); a dp-mlp release whose cached artifact was deleted is refused
    (not retrained and charged again) until --refresh spends it again."""
    from mlflow.tracking import MlflowClient

    from dpgnn_core.specs import DpMlpSpec, TrainSpec
    from flows.pipeline import pipeline
    from tasks.budget import LostReleaseError, NonPrivateRefused, store

    write_dataset(csbm(num_nodes=300, seed=71), tmp_path / "ds")
    ds = str(tmp_path / "ds")
    sha = json.loads((tmp_path / "ds" / "manifest.json").read_text())["content_sha256"]
    s = store()
    s.set_budget(sha, "ds", ds, epsilon=20.0, delta=1e-4)
    home_artifacts = Path(s.path).parent / "artifacts" / "train"
    gcn = TrainSpec(method="gcn", epochs=3)

    def trained() -> set[Path]:
        return set(home_artifacts.glob("*")) if home_artifacts.exists() else set()

    before = trained()
    with pytest.raises(NonPrivateRefused, match="--allow-non-private-release"):
        pipeline(spec=gcn, dataset=ds)
    assert trained() == before  # refused before training
    out = pipeline(spec=gcn, dataset=ds, allow_non_private_release=True)
    (rec,) = s.summary(s.resolve(sha)).records
    assert rec.status == "non-private" and rec.method == "gcn"
    tags = MlflowClient(out["mlflow_tracking_uri"]).get_run(out["mlflow_run_id"]).data.tags
    assert tags["dpgnn.non_private_release"].startswith("allowed by "
                                                         "--allow-non-private-release")

    spec = DpMlpSpec(epsilon=2.0, steps=5, batch_size=40, hidden=8, device="cpu")
    first = pipeline(spec=spec, dataset=ds)
    counted = [r for r in s.summary(s.resolve(sha)).records if r.status == "spent"]
    assert len(counted) == 1
    shutil.rmtree(first["artifacts_dir"])
    with pytest.raises(LostReleaseError, match="Rerun with --refresh"):
        pipeline(spec=spec, dataset=ds)
    assert [r for r in s.summary(s.resolve(sha)).records if r.status == "spent"] == counted
    again = pipeline(spec=spec, dataset=ds, refresh=True)
    assert again["release"].startswith("new release")
    assert len([r for r in s.summary(s.resolve(sha)).records if r.status == "spent"]) == 2


def test_graph_classifier_twin_on_a_budgeted_dataset_is_refused_before_training(
        tmp_path: Path) -> None:
    """The GNNExplainer comparison's non-private twin is a release too: under a budget the
    private run is refused before anything trains, naming the way out."""
    from dpgnn_core.data.synthetic import er_graphs
    from dpgnn_core.specs import GraphClsSpec
    from flows.pipeline import pipeline
    from tasks.budget import NonPrivateRefused, store

    write_dataset(er_graphs(num_graphs=60, split=(30, 10, 20), seed=8), tmp_path / "g")
    sha = json.loads((tmp_path / "g" / "manifest.json").read_text())["content_sha256"]
    s = store()
    s.set_budget(sha, "g", str(tmp_path / "g"), epsilon=20.0, delta=1e-4)
    spec = GraphClsSpec(conv="gcn", epsilon=5.0, steps=4, batch_size=10, device="cpu")
    with pytest.raises(NonPrivateRefused, match=r"twin.*--explain-graphs 0"):
        pipeline(spec=spec, dataset=str(tmp_path / "g"), explain_graphs=3)
    assert s.summary(s.resolve(sha)).records == []  # nothing reserved, nothing trained


def test_audit_of_a_non_private_control_on_a_budgeted_dataset_is_refused(
        tmp_path: Path) -> None:
    """An audit's non-private control trains on the data and publishes its scores: under a
    budget it is refused before the canaries are drawn, unless allowed."""
    from dpgnn_core.specs import DpMlpSpec
    from flows.audit import audit
    from tasks.budget import NonPrivateRefused, store

    write_dataset(csbm(num_nodes=200, seed=72), tmp_path / "ds")
    sha = json.loads((tmp_path / "ds" / "manifest.json").read_text())["content_sha256"]
    s = store()
    s.set_budget(sha, "ds", str(tmp_path / "ds"), epsilon=20.0, delta=1e-4)
    spec = DpMlpSpec(epsilon=None, steps=3, batch_size=40, hidden=8, device="cpu")
    with pytest.raises(NonPrivateRefused, match="dp-mlp is not private"):
        audit(spec=spec, dataset=str(tmp_path / "ds"), canaries=20)
    assert s.summary(s.resolve(sha)).records == []


@pytest.mark.parametrize(("args", "needle"), [
    (["run", "mlp", "--epochs", "2"], "mlp is not private"),
    (["run", "dp-mlp", "--non-private", "--steps", "2"], "dp-mlp is not private"),
])
def test_cli_refuses_a_non_private_run_on_a_budgeted_dataset_before_prefect(
        tmp_path: Path, args: list[str], needle: str) -> None:
    from flows.cli import app
    from tests.flows.clirunner import CliRunner

    write_dataset(csbm(num_nodes=200, seed=73), tmp_path / "ds")
    home = ["--home", str(tmp_path / "home")]
    r = CliRunner().invoke(app, [*home, "budget", "set", str(tmp_path / "ds"), "--epsilon",
                                 "8", "--delta", "1e-5"])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(app, [*home, *args, "--dataset", str(tmp_path / "ds")])
    assert r.exit_code == 2, r.output
    (line,) = r.output.strip().splitlines()
    assert line.startswith("error: ") and needle in line
    assert "--allow-non-private-release" in line
    assert not (tmp_path / "home" / "artifacts").exists()  # nothing trained


def test_cli_refuses_a_lost_release_in_one_line_before_the_flow(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, started: list[dict[str, Any]]
        ) -> None:
    """A spec already released on a budgeted dataset, whose cached result is gone (the
    fault trial's lost-cache-rerun: the cache and artifacts moved away) is refused by
    `dpgnn run` in one line, exit 2, before the flow starts (it was refused inside the
    flow: a progress line, "failed after 4s", then the error), and charged nothing;
    --refresh still spends it again."""
    from dpgnn_core.budget import BudgetStore, Charge
    from dpgnn_core.privacy import GaussianEvent, Ledger
    from flows.cli import app, execute
    from tasks.budget import plan_key
    from tests.flows.clirunner import CliRunner

    write_dataset(csbm(num_nodes=200, seed=75), tmp_path / "ds")
    sha = json.loads((tmp_path / "ds" / "manifest.json").read_text())["content_sha256"]
    home = ["--home", str(tmp_path / "home")]
    r = CliRunner().invoke(app, [*home, "budget", "set", str(tmp_path / "ds"), "--epsilon",
                                 "8", "--delta", "1e-5"])
    assert r.exit_code == 0, r.output
    run = [*home, "run", "dp-mlp", "--dataset", str(tmp_path / "ds"), "--epsilon", "2",
           "--steps", "2", "--batch-size", "40", "--accountant", "rdp"]
    specs: list[Any] = []

    def spec_only(spec: Any, *a: Any) -> None:  # the spec these options make, nothing run
        specs.append(spec)
        raise KeyboardInterrupt

    with monkeypatch.context() as m:
        m.setattr(execute, "refuse_non_private", spec_only)
        assert CliRunner().invoke(app, run).exit_code != 0 and len(specs) == 1
    # that spec released, as a finished run records it; its cached result is not there
    s = BudgetStore(tmp_path / "home" / "budget.sqlite")
    rid = s.reserve(sha, "ds", str(tmp_path / "ds"),
                    Charge(Ledger().add(GaussianEvent(noise_multiplier=5.0, level="node"))),
                    method="dp-mlp", run_id="earlier", delta=1e-5, epsilon=2.0,
                    plan_key=plan_key({"content_sha256": sha}, specs[0]))
    s.attach_release(rid, "ab" * 16)
    s.mark_spent(rid)
    records = s.summary(s.resolve(sha)).records
    r = CliRunner().invoke(app, run)
    assert r.exit_code == 2 and started == [], r.output  # the flow never started
    (line,) = r.output.strip().splitlines()
    assert line.startswith("error: dp-mlp: this spec was already released"), line
    assert "no cached training" in line and "--refresh" in line
    assert s.summary(s.resolve(sha)).records == records  # nothing reserved or charged
    CliRunner().invoke(app, [*run, "--refresh"])  # --refresh spends it again: the flow
    assert len(started) == 1 and started[0]["refresh"] is True


def test_a_sweep_point_page_says_what_a_single_run_page_says(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        seeded_mlflow: Callable[[Path], bool]) -> None:
    """Issue 36 §4: a private sweep point's child run had six params and no description.
    It now has a single run's ``privacy.*`` params (accountant, spent ε, each event), its
    privacy tags and description, and the odometer of its own unit after the sweep."""
    from mlflow.tracking import MlflowClient

    from dpgnn_core.methods.registry import get
    from tasks.budget import gate_for, odometer, store
    from tasks.run_record import privacy_params, privacy_tags
    from tasks.tracking import _flat, log_sweep

    monkeypatch.setenv("DPGNN_HOME", str(tmp_path / "home"))
    data = csbm(num_nodes=120, seed=3)
    ref = {"path": str(tmp_path), "name": "d", "content_sha256": "0" * 64}
    method = get("dp-mlp")
    spec = method.spec(epsilon=2.0, steps=4, batch_size=32, hidden=8, device="cpu")
    store().set_budget(ref["content_sha256"], "d", None, epsilon=9.0, delta=1e-3)
    with gate_for(ref, method.name, spec) as gate:  # type: ignore[arg-type]
        fitted = method.fit(data, spec, gate=gate)
        report = fitted.report.with_release({"id": "abc123"})
        gate.finish(report, fitted.ledger)
    ledger = fitted.ledger
    (tmp_path / "report.json").write_text(json.dumps(report.to_dict()))
    (tmp_path / "ledger.json").write_text(json.dumps(ledger.to_dict()))
    result = _sweep_result(tmp_path)
    result["rows"][0] |= {"epsilon": 2.0, "epsilon_spent": report.epsilon,
                          "config": {"steps": 4}}
    result["best"] = []
    seeded_mlflow(tmp_path)  # a migrated, empty store: as a new one, without the migration
    logged = log_sweep(result=result, paths={}, spec={"name": "s", "selection": "flagged"},
                       tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    client = MlflowClient(logged["mlflow_tracking_uri"])
    (child,) = [r for r in client.search_runs([logged["mlflow_experiment_id"]])
                if r.data.tags.get("mlflow.parentRunId")]
    single = _flat("privacy.", privacy_params(report, ledger, {"steps": 4}))
    params = child.data.params
    assert {k: params.get(k) for k in single} == {
        k: (json.dumps(v) if isinstance(v, list) else str(v)) for k, v in single.items()}
    assert {"privacy.accountant", "privacy.epsilon", "privacy.event1.description"} <= set(
        params)
    tags = child.data.tags
    for k, v in privacy_tags(report, "Completed", privacy=privacy_params(
            report, ledger, {"steps": 4})).items():
        if k != "mlflow.note.content":
            assert tags[k] == v, k
    # The odometer of the point's unit (node), at the budget's δ: finite, not the ∞ of a
    # unit a release bounds nothing about.
    spent = f"{odometer('0' * 64, 'node', 'add_remove')['dataset_epsilon_spent']:.4g}"
    assert tags["dpgnn.dataset_epsilon_spent"] == f"{spent} at δ = 0.001 (after the sweep)"
    note = tags["mlflow.note.content"]
    assert note.startswith("**(ε = ")
    assert f"**Dataset's cumulative ε after the sweep:** {spent} at δ = 0.001" in note


@pytest.mark.parametrize("method", ["gap-edp", "dp-gcn"])
def test_a_release_of_another_code_version_is_refused_before_any_task_runs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, method: str) -> None:
    """After a code upgrade (another code version: every task's cache key changes) a spec
    already released on a budgeted dataset is refused at once, naming the missing cached
    step, and nothing runs: the old code retrained GAP's encoder (non-private at edge
    level, ~60 s on Cora) before its aggregation's gate refused to release again, and
    built DP-GCN's subgraphs before its training's gate did."""
    from dpgnn_core.methods.registry import get
    from flows.pipeline import pipeline
    from tasks.budget import LostReleaseError, store

    write_dataset(csbm(num_nodes=200, avg_degree=4, seed=163 if method == "gap-edp" else 164),
                  tmp_path / "ds")  # graphs of their own: a budget protects its first unit
    ds = str(tmp_path / "ds")
    sha = json.loads((tmp_path / "ds" / "manifest.json").read_text())["content_sha256"]
    s = store()
    s.set_budget(sha, "ds", ds, epsilon=20.0, delta=1e-4)
    spec = (get(method).spec(epsilon=4.0, hops=2, epochs=3, batch_size=64, encoder_dim=8,
                             hidden=16, device="cpu") if method == "gap-edp" else
            get(method).spec(epsilon=4.0, steps=3, batch_size=32, hidden=8, device="cpu"))
    missing = "calibrate stage" if method == "gap-edp" else "training"
    pipeline(spec=spec, dataset=ds, explain_graphs=0)
    records = s.summary(s.resolve(sha)).records
    artifacts = Path(s.path).parent / "artifacts"

    def made() -> set[Path]:
        return {p for p in artifacts.glob("*/*") if p.is_dir()}

    before = made()
    monkeypatch.setattr("tasks._cache.code_version", lambda: "another code version")
    with pytest.raises(LostReleaseError, match=rf"no cached {missing}.*--refresh"):
        pipeline(spec=spec, dataset=ds, explain_graphs=0)
    assert made() == before  # nothing ran: no encoder trained again, no subgraphs built
    assert s.summary(s.resolve(sha)).records == records  # nothing reserved or charged


def test_the_same_dataset_in_another_folder_reuses_the_cached_release(
        tmp_path: Path) -> None:
    """A spec released on a dataset folder, then run on a copy of it in another folder (a
    sweep ingests the raw files into the project's own folder: the README tour's step 4
    after step 3): the cached release is reused at no cost, not refused as lost."""
    from dpgnn_core.specs import DpMlpSpec
    from flows.pipeline import pipeline
    from tasks.budget import store

    write_dataset(csbm(num_nodes=300, seed=171), tmp_path / "a")
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    sha = json.loads((tmp_path / "a" / "manifest.json").read_text())["content_sha256"]
    s = store()
    s.set_budget(sha, "a", str(tmp_path / "a"), epsilon=20.0, delta=1e-4)
    spec = DpMlpSpec(epsilon=2.0, steps=5, batch_size=40, hidden=8, device="cpu")
    first = pipeline(spec=spec, dataset=str(tmp_path / "a"))
    again = pipeline(spec=spec, dataset=str(tmp_path / "b"))
    assert first["release"].startswith("new release")
    assert again["release"].startswith("reused cached release"), again["release"]
    assert [r.status for r in s.summary(s.resolve(sha)).records] == ["spent", "reuse"]
