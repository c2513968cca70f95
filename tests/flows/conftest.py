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
    """``dpgnn --home HOME ARGS`` in this process (:func:`tests.flows.clirunner.dpgnn_here`)
    as a ``dpgnn`` child on that home would run it: Prefect's task results and cache
    records in ``HOME/cache`` (what the child's environment sets, so that a command run
    here and one run as a child share one cache), Prefect's server this process's own
    (``prefect_api_url``), ``env`` set for the rest of the test. Returns the result
    (``exit_code``, ``stdout``, ``stderr``, ``output``, ``exception`` as typer's CliRunner
    has them; ``returncode`` as a child's). Saves a process start-up (~10-20 s of CPU)
    where a step needs no process of its own: the step before it (a real signal, a kill,
    a full disk) keeps its real one.

    What the command leaves in this process is undone afterwards (``DPGNN_OWNER`` and
    ``PREFECT_API_URL`` are unset, as before the call; the watchdog it starts for this
    process is ended: :func:`tests.flows.clirunner.dpgnn_here`)."""
    del prefect_api_url  # started: the command's flow uses it

    def invoke(home: Path, args: list[str], env: dict[str, str] | None = None) -> Any:
        from tests.flows.clirunner import dpgnn_here as here

        for var in ("DPGNN_OWNER", "PREFECT_API_URL"):
            monkeypatch.delenv(var, raising=False)
        for key, value in (env or {}).items():
            monkeypatch.setenv(key, value)
        try:
            return here(args, home=home)
        finally:
            for var in ("DPGNN_OWNER", "PREFECT_API_URL"):
                os.environ.pop(var, None)

    return invoke
