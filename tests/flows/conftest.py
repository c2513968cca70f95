"""Fixtures shared by the flow tests."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest


class FlowStarted(Exception):
    """Raised by the replaced pipeline flow: the command got past its pre-flight."""


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """The flow, replaced: it records its arguments and stops the run."""
    import flows.pipeline

    calls: list[dict[str, Any]] = []

    def flow(**kw: Any) -> None:
        calls.append(kw)
        raise FlowStarted

    monkeypatch.setattr(flows.pipeline, "pipeline", flow)
    return calls


@pytest.fixture
def dpgnn_here(monkeypatch: pytest.MonkeyPatch, prefect_api_url: str
               ) -> Callable[..., Any]:
    """``dpgnn --home HOME ARGS`` in this process (typer's CliRunner on ``flows.cli.app``)
    as a ``dpgnn`` child on that home would run it: Prefect's task results and cache
    records in ``HOME/cache`` (what the child's environment sets, so that a command run
    here and one run as a child share one cache), Prefect's server this process's own
    (``prefect_api_url``), ``env`` set for the call. Returns the CliRunner result
    (``exit_code``, ``stdout``, ``stderr``). Saves a process start-up (~10-20 s of CPU)
    where a step needs no process of its own: the step before it (a real signal, a kill,
    a full disk) keeps its real one.

    What the command leaves in this process is undone afterwards: ``DPGNN_OWNER`` and
    ``PREFECT_API_URL`` (set by the command), and the watchdog it starts for this process
    (:func:`flows.reaper.start_watchdog`, which would otherwise run until the session
    ends)."""
    del prefect_api_url  # started: the command's flow uses it

    def invoke(home: Path, args: list[str], env: dict[str, str] | None = None) -> Any:
        from prefect.settings import PREFECT_LOCAL_STORAGE_PATH, temporary_settings
        from typer.testing import CliRunner

        from flows import reaper
        from flows.cli import app

        for var in ("DPGNN_OWNER", "PREFECT_API_URL"):
            monkeypatch.delenv(var, raising=False)
        for key, value in (env or {}).items():
            monkeypatch.setenv(key, value)
        before = set(reaper._WATCHDOG)
        try:
            with temporary_settings(
                    updates={PREFECT_LOCAL_STORAGE_PATH: home.resolve() / "cache"}):
                return CliRunner().invoke(app, ["--home", str(home), *args])
        finally:
            for token in set(reaper._WATCHDOG) - before:
                watchdog = reaper._WATCHDOG.pop(token)
                watchdog.kill()
                watchdog.wait()
            for var in ("DPGNN_OWNER", "PREFECT_API_URL"):
                os.environ.pop(var, None)

    return invoke
