"""The served deployments and prefect.yaml describe the pipeline and retrain flows with valid
parameters."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

import pytest
import yaml

from dpgnn_core.specs import DEMO_INGEST, IngestSpec, parse_spec

ROOT = Path(__file__).resolve().parents[2]
NAMES = {"nightly-gcn", "nightly-mlp", "pipeline-adhoc", "private-retrain"}
RETRAIN_ENV = ("DPGNN_RETRAIN_DATASET", "DPGNN_RETRAIN_INGEST", "DPGNN_RETRAIN_SPEC",
               "DPGNN_RETRAIN_CRON")


def _serve_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("serve", ROOT / "deployments" / "serve.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_serve_deployments(monkeypatch: pytest.MonkeyPatch) -> None:
    for k in RETRAIN_ENV:
        monkeypatch.delenv(k, raising=False)
    deps = {d.name: d for d in _serve_module().deployments()}
    assert set(deps) == NAMES
    assert deps["nightly-gcn"].schedules and not deps["pipeline-adhoc"].schedules
    for d in deps.values():
        parse_spec(d.parameters["spec"])
        if "ingest_spec" in d.parameters:
            assert IngestSpec(**d.parameters["ingest_spec"]) == DEMO_INGEST
    # The retrain deployment: daily at 04:00 UTC, one run at a time, a private spec, and by
    # default the demo graph in a folder of the project.
    rt = deps["private-retrain"]
    assert rt.entrypoint is not None and rt.entrypoint.endswith("retrain.py:retrain")
    (sched,) = rt.schedules
    assert sched.schedule.cron == "0 4 * * *" and sched.schedule.timezone == "UTC"
    assert rt.concurrency_limit == 1
    spec = parse_spec(rt.parameters["spec"])
    assert spec.method == "dp-mlp" and spec.epsilon == 2  # type: ignore[attr-defined]
    assert Path(rt.parameters["dataset"]).name == "retrain-demo"
    assert Path(rt.parameters["dataset"]).is_absolute()


def test_serve_retrain_from_environment(monkeypatch: pytest.MonkeyPatch,
                                        tmp_path: Path) -> None:
    """DPGNN_RETRAIN_* set the retrain deployment's folder, source, spec and schedule."""
    source = {"format": "csv", "source": str(tmp_path / "edges.csv"),
              "options": {"nodes": str(tmp_path / "nodes.csv")}}
    monkeypatch.setenv("DPGNN_RETRAIN_DATASET", str(tmp_path / "ds"))
    monkeypatch.setenv("DPGNN_RETRAIN_INGEST", json.dumps(source))
    monkeypatch.setenv("DPGNN_RETRAIN_SPEC", '{"method": "dp-gcn", "epsilon": 4}')
    monkeypatch.setenv("DPGNN_RETRAIN_CRON", "30 5 * * 1")
    rt = _serve_module().retrain_deployment()
    assert rt.parameters["dataset"] == str((tmp_path / "ds").resolve())
    assert IngestSpec(**rt.parameters["ingest_spec"]) == IngestSpec(**source)
    assert parse_spec(rt.parameters["spec"]).method == "dp-gcn"  # type: ignore[attr-defined]
    assert rt.schedules[0].schedule.cron == "30 5 * * 1"
    monkeypatch.delenv("DPGNN_RETRAIN_INGEST")  # a folder of your own: used as it is
    assert "ingest_spec" not in _serve_module().retrain_deployment().parameters


def test_prefect_yaml_matches_flow() -> None:
    conf = yaml.safe_load((ROOT / "deployments" / "prefect.yaml").read_text())
    names = {d["name"] for d in conf["deployments"]}
    assert names == NAMES
    for d in conf["deployments"]:
        path, func = d["entrypoint"].split(":")
        assert (ROOT / path).is_file() and f"def {func}(" in (ROOT / path).read_text()
        parse_spec(d["parameters"]["spec"])
        if "ingest_spec" in d["parameters"]:  # the one demo spec, also in YAML
            assert IngestSpec(**d["parameters"]["ingest_spec"]) == DEMO_INGEST
    rt = next(d for d in conf["deployments"] if d["name"] == "private-retrain")
    assert rt["schedules"] == [{"cron": "0 4 * * *", "timezone": "UTC"}]
    assert rt["concurrency_limit"] == 1
    assert rt["parameters"]["dataset"] == "{{ $DPGNN_RETRAIN_DATASET }}"
    assert parse_spec(rt["parameters"]["spec"]).epsilon  # type: ignore[attr-defined]
    # Issue 36 §1: no hidden variable. The pull step starts each run in the folder that
    # `prefect deploy` ran in (the repository root), recorded by a build step.
    text = (ROOT / "deployments" / "prefect.yaml").read_text()
    assert "DPGNN_REPO" not in text
    (build,) = conf["build"]
    step = build["prefect.deployments.steps.run_shell_script"]
    assert step["script"] == "pwd"
    assert conf["pull"] == [{"prefect.deployments.steps.set_working_directory": {
        "directory": "{{ " + step["id"] + ".stdout }}"}}]


def test_serve_exits_at_once_after_serving(monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 36 §3: Ctrl-C stopped Prefect's runner in a second, then Python spent ~7 s
    tearing down its modules. ``main`` runs the exit handlers and leaves with os._exit
    (code 0 after serving ends, after Ctrl-C and after SIGTERM's SystemExit(0)); an
    unknown name is refused."""
    mod = _serve_module()
    served: list[list[str]] = []
    exits: list[int] = []
    ran: list[str] = []

    class Exited(Exception):
        pass

    def fake_exit(code: int) -> None:
        exits.append(code)
        raise Exited

    # Recorded, not run: this process's own exit handlers remove the test session's home.
    monkeypatch.setattr(mod.atexit, "_run_exitfuncs", lambda: ran.append("exit handlers"))
    monkeypatch.setattr(mod.os, "_exit", fake_exit)
    for outcome in (None, KeyboardInterrupt(), SystemExit(0)):
        async def fake_serve(*deps: object, outcome: BaseException | None = outcome) -> None:
            served.append([d.name for d in deps])  # type: ignore[attr-defined]
            if outcome is not None:
                raise outcome

        monkeypatch.setattr(mod, "aserve", fake_serve)
        with pytest.raises(Exited):
            mod.main(["private-retrain"])
    assert served == [["private-retrain"]] * 3 and exits == [0, 0, 0]
    assert ran == ["exit handlers"] * 3
    assert capsys.readouterr().err.splitlines() == ["serve: Ctrl-C: stopped serving"]
    with pytest.raises(SystemExit, match="no deployment named nope"):
        mod.main(["nope"])


def test_ctrl_c_cancels_serving_and_starts_the_watchdog(monkeypatch: pytest.MonkeyPatch
                                                        ) -> None:
    """A real SIGINT while serving: asyncio's own handling cancels the serving task (its
    clean-up runs; ``asyncio.run`` then raises KeyboardInterrupt), and the watchdog that
    ends a hung shutdown is started; the process's SIGINT handler is restored after."""
    import asyncio
    import os
    import signal

    mod = _serve_module()
    watchdogs: list[str] = []
    cleaned: list[str] = []
    monkeypatch.setattr(mod, "_exit_later", lambda: watchdogs.append("started"))

    async def fake_serve(*deps: object) -> None:
        try:
            os.kill(os.getpid(), signal.SIGINT)
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cleaned.append("cancelled")
            raise

    monkeypatch.setattr(mod, "aserve", fake_serve)
    before = signal.signal(signal.SIGINT, signal.default_int_handler)  # a terminal's
    try:
        with pytest.raises(KeyboardInterrupt):
            asyncio.run(mod._serve([]))
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, before)
    assert cleaned == ["cancelled"] and watchdogs == ["started"]


def test_a_clean_up_failing_after_ctrl_c_is_one_line(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        caplog: pytest.LogCaptureFixture) -> None:
    """Prefect's runner reads a finished run's output and closes its process for a moment
    after the process exits; a Ctrl-C then ends that task with an exception while
    ``asyncio.run`` shuts down. That is one line on standard error, not asyncio's
    "unhandled exception during asyncio.run() shutdown" with its traceback; an exception
    before any Ctrl-C still goes to asyncio's own handler."""
    import asyncio
    import os
    import signal

    mod = _serve_module()
    monkeypatch.setattr(mod, "_exit_later", lambda: None)

    async def closing() -> None:  # the runner's bookkeeping of a finished run
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            raise RuntimeError("the run's process is already closed") from None

    async def fake_serve(*deps: object) -> None:
        loop = asyncio.get_running_loop()
        loop.call_exception_handler({"message": "before Ctrl-C",
                                     "exception": ValueError("reported by asyncio")})
        keep = asyncio.ensure_future(closing())  # outside the serving task, as Prefect's
        await asyncio.sleep(0)
        os.kill(os.getpid(), signal.SIGINT)
        await asyncio.sleep(60)
        keep.cancel()

    monkeypatch.setattr(mod, "aserve", fake_serve)
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with caplog.at_level("ERROR", logger="asyncio"), pytest.raises(KeyboardInterrupt):
            asyncio.run(mod._serve([]))
    finally:
        signal.signal(signal.SIGINT, before)
    err = capsys.readouterr().err
    assert err.splitlines() == [
        "serve: while stopping after Ctrl-C: unhandled exception during asyncio.run() "
        "shutdown (RuntimeError: the run's process is already closed)"], err
    assert "before Ctrl-C" in caplog.text and "reported by asyncio" in caplog.text
    assert "already closed" not in caplog.text
