"""Fixtures shared by the flow tests."""

from __future__ import annotations

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
