"""MLflow records that show the privacy: resolved privacy params, the dataset input, run
times spanning the flow, the experiment kind; a tracking URI that does not answer fails
fast and does not lose the trained model."""

from __future__ import annotations

import http.server
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from dpgnn_core.data.store import write_dataset
from dpgnn_core.data.synthetic import csbm
from dpgnn_core.errors import TrackingError
from dpgnn_core.privacy.report import PrivacyReport


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> str:
    out = tmp_path_factory.mktemp("tracking") / "ds"
    write_dataset(csbm(num_nodes=400, feature_signal=3.0, seed=51), out)
    return str(out)


@pytest.fixture(scope="module")
def spec() -> Any:
    from dpgnn_core.specs import DpMlpSpec

    return DpMlpSpec(epsilon=2.0, steps=8, hidden=8, device="cpu")  # delta, batch unset


# --- the privacy params, from a real ledger (no training) ---------------------------------


def test_privacy_params_name_every_stage_and_fill_unset_spec_fields() -> None:
    from dpgnn_core.methods.gap import ledger_for
    from dpgnn_core.specs import GapSpec
    from tasks.run_record import privacy_params, resolved_spec, run_name

    spec = GapSpec(level="node", epsilon=4.0, max_degree=5, steps=20, batch_size=50,
                   budget_split=(1.0, 0.5, 2.0), device="cpu")
    z = 1.7
    ledger = ledger_for(spec, 400)(z)
    report = PrivacyReport.from_dict({
        "method": "gap-ndp", "private": True, "epsilon": 3.99, "target_epsilon": 4.0,
        "delta": 2.5e-4, "noise_multiplier": z, "accountant": "pld", "steps": 20,
        "level": "node", "relation": "add_remove", "ledger": ledger.to_dict(),
        "epsilon_by_step": [[1, 0.1]], "unaccounted": []})
    dumped = spec.model_dump(mode="json")
    got = privacy_params(report, ledger, dumped)
    # three stages (encoder, PMA, classifier), each with its own weighted multiplier
    assert got["noise_multipliers"] == pytest.approx([z * 1.0, z * 0.5, z * 2.0])
    assert [got[f"event{i}"]["noise_multiplier"] for i in (1, 2, 3)] == got["noise_multipliers"]
    assert got["event2"]["steps"] == spec.hops  # the PMA releases, one per hop
    assert got["sampling_rate"] == pytest.approx(50 / 400)
    assert got["clip"] == spec.clip and got["delta"] == 2.5e-4 and got["steps"] == 20
    assert "ledger" not in got and "epsilon_by_step" not in got
    train = resolved_spec(dumped, got)
    assert train["delta"] == 2.5e-4 and train["noise_multiplier"] == z
    assert "delta" in train["resolved"] and "batch_size" not in train["resolved"]  # set
    assert run_name("gap-ndp", "cora", report, 0) == "gap-ndp-cora-eps4-node-s0"
    # Each release has its own name (issue 36 §4): its short release id last.
    for rid in ("0123456789abcdef0123", "fedcba9876543210fedc"):
        assert run_name("gap-ndp", "cora", report.with_release({"id": rid}), 0) == (
            f"gap-ndp-cora-eps4-node-s0-{rid[:12]}")
    # Edge-level GAP clips no gradients: no clipping norm is claimed.
    edp = GapSpec(level="edge", epsilon=4.0, steps=20, device="cpu")
    edp_ledger = ledger_for(edp, 400)(z)
    assert "clip" not in privacy_params(replace(report, level="edge"), edp_ledger,
                                        edp.model_dump(mode="json"))
    assert privacy_params(PrivacyReport.from_dict({"private": False}), None,
                          dumped) == {"private": False}


# --- the reachability check ---------------------------------------------------------------


@pytest.fixture()
def silent_server() -> Iterator[str]:
    """A port that accepts connections and never answers."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(8)
    yield f"http://127.0.0.1:{s.getsockname()[1]}"
    s.close()


@pytest.fixture()
def health_server() -> Iterator[str]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200 if self.path == "/health" else 404)
            self.end_headers()
            self.wfile.write(b"OK")

        def log_message(self, *args: Any) -> None:
            pass

    srv = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{srv.server_port}"
    srv.shutdown()
    srv.server_close()


def test_check_tracking_uri_fails_fast_with_one_line(silent_server: str, health_server: str,
                                                     tmp_path: Path) -> None:
    from tasks.tracking import check_tracking_uri

    closed = f"http://127.0.0.1:{_closed_port()}"
    for uri in (closed, silent_server):
        t0 = time.monotonic()
        with pytest.raises(TrackingError, match="does not answer") as info:
            check_tracking_uri(uri, timeout=1.0)
        assert time.monotonic() - t0 < 5.0
        assert "\n" not in str(info.value) and uri in str(info.value)
    check_tracking_uri(health_server)  # answers: no error
    check_tracking_uri(f"sqlite:///{tmp_path / 'mlflow.db'}")
    with pytest.raises(TrackingError, match="does not exist"):
        check_tracking_uri(f"sqlite:///{tmp_path / 'missing' / 'mlflow.db'}")


# --- a logged private run -----------------------------------------------------------------


@pytest.mark.slow
def test_private_run_logs_what_was_used(dataset: str, spec: Any, tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch,
                                        seeded_mlflow: Callable[[Path], bool]) -> None:
    from mlflow.tracking import MlflowClient

    import tasks.train
    from flows.pipeline import pipeline
    from tasks.ingest import dataset_summary
    from tasks.tracking import EXPERIMENT_KIND, EXPERIMENT_KIND_TAG, _experiment

    seeded_mlflow(tmp_path)  # a migrated, empty store: as a new one, without the migration
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    client.create_experiment("pre-existing")  # created elsewhere, without a kind
    started: list[float] = []
    load = tasks.train.load_keyed_dataset

    def timed_load(*args: Any, **kwargs: Any) -> Any:
        started.append(time.time())  # the first thing training does
        return load(*args, **kwargs)

    monkeypatch.setattr(tasks.train, "load_keyed_dataset", timed_load)
    out = pipeline(spec=spec, dataset=dataset, tracking_uri=uri, experiment="pre-existing")
    assert out["mlflow_error"] is None and started
    run = client.get_run(out["mlflow_run_id"])
    p = run.data.params
    # resolved values, not the spec's None
    assert float(p["privacy.delta"]) == pytest.approx(out["delta"])
    assert float(p["privacy.noise_multiplier"]) == pytest.approx(out["noise_multiplier"])
    assert out["noise_multiplier"] > 0
    assert p["privacy.steps"] == str(out["steps"]) == "8"
    assert p["privacy.level"] == out["level"] and p["privacy.accountant"] == out["accountant"]
    assert float(p["train.delta"]) == pytest.approx(out["delta"])
    assert p["train.noise_multiplier"] != "None" and p["train.batch_size"] != "None"
    assert 0 < float(p["privacy.sampling_rate"]) <= 1
    n_train = 1 / (10 * out["delta"])  # the default delta is 1/(10 N_train)
    assert float(p["privacy.sampling_rate"]) == pytest.approx(
        int(p["privacy.batch_size"]) / n_train)
    # name and tags
    rid = out["release"].split()[-1]  # "new release <id>"
    assert run.info.run_name == f"dp-mlp-{out['dataset']}-eps2-node-s0-{rid[:12]}"
    assert run.data.tags["dpgnn.epsilon"] and run.data.tags["dpgnn.level"] == "node"
    note = run.data.tags["mlflow.note.content"]
    assert "noise multiplier" in note and "δ = " in note and "**Assumed public:**" in note
    # the dataset input
    sha = dataset_summary(dataset)["content_sha256"]
    assert run.inputs is not None
    (inp,) = run.inputs.dataset_inputs
    assert sha.startswith(inp.dataset.digest) and len(inp.dataset.digest) >= 16
    assert {t.key: t.value for t in inp.tags}["dpgnn.content_sha256"] == sha
    assert Path(dataset).resolve().as_posix() in inp.dataset.source
    # times: the run spans the flow, from before training to the end of logging
    assert run.info.start_time <= started[0] * 1000
    assert run.info.end_time >= run.info.start_time
    exp = client.get_experiment(run.info.experiment_id)
    assert exp.tags[EXPERIMENT_KIND_TAG] == EXPERIMENT_KIND
    created = client.get_experiment(_experiment(client, "new-one", uri))  # as log_run does
    assert created.tags[EXPERIMENT_KIND_TAG] == EXPERIMENT_KIND


@pytest.mark.slow
def test_failed_logging_keeps_the_result(dataset: str, spec: Any,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    import tasks.run_record
    from flows.pipeline import pipeline

    t0 = time.monotonic()
    out = pipeline(spec=spec, dataset=dataset,
                   tracking_uri=f"http://127.0.0.1:{_closed_port()}")
    assert out["mlflow_run_id"] is None and out["test_accuracy"] >= 0
    assert "does not answer" in out["mlflow_error"] and "rerun" in out["mlflow_error"]
    assert Path(out["artifacts_dir"], "model.pt").is_file()
    assert time.monotonic() - t0 < 60  # not MLflow's minutes of retries

    def broken(**kwargs: Any) -> Any:
        raise RuntimeError("disk full")

    monkeypatch.setattr(tasks.run_record, "log_run", broken)  # the pipeline's MLflow record
    out = pipeline(spec=spec, dataset=dataset)
    assert out["mlflow_run_id"] is None and "disk full" in out["mlflow_error"]
    assert out["cache"]["train"] == "Cached"  # re-running reuses the model


def test_every_printed_mlflow_link_opens_the_runs_table(capsys: pytest.CaptureFixture[str]
                                                         ) -> None:
    """Issue 52 §3: the demo's and a sweep's "open it with" line gave only `mlflow ui`,
    whose experiment page MLflow 3.17 opens on its GenAI view in a fresh browser. Every
    link printed carries ``?workflowType=machine_learning`` (docs/mlflow.md)."""
    from flows.cli.sweep import _print_summary
    from tasks.tracking import open_lines

    mode = "?workflowType=machine_learning"
    ui, then = open_lines("sqlite:////p/mlflow.db", "7")
    assert ui.endswith("mlflow ui --backend-store-uri sqlite:////p/mlflow.db")
    assert then == f"then open http://127.0.0.1:5000/#/experiments/7{mode}"
    assert open_lines("http://h:5123/", "7", "r1") == [
        f"http://h:5123/#/experiments/7/runs/r1{mode}"]
    assert open_lines("https://h", "7") == [f"https://h/#/experiments/7{mode}"]
    paths = {"table": "t.parquet", "summary": "s.md", "privacy_utility": "p.png"}
    _print_summary({"best": [], "rows": []}, paths, {
        "mlflow_parent_run_id": "p1", "mlflow_tracking_uri": "sqlite:////p/mlflow.db",
        "mlflow_experiment_id": "3"}, "dpgnn-demo")
    out = capsys.readouterr().out
    assert "open its runs table with:" in out
    assert f"then open http://127.0.0.1:5000/#/experiments/3{mode}" in out
    links = [w for w in out.split() if w.startswith("http")]
    assert links and all(w.endswith(mode) for w in links)
