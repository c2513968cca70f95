"""Flow-run heartbeats (tasks.heartbeats): the same events as Prefect's at the same interval,
and a flow run that returns without waiting for its heartbeat thread."""

from __future__ import annotations

import threading
import types
from typing import Any

import pytest

from tasks import heartbeats


class _State:
    def __init__(self) -> None:
        self.final = False

    def is_final(self) -> bool:
        return self.final


class _Engine:
    """What send_heartbeats reads of Prefect's flow-run engine."""

    def __init__(self, seconds: float | None) -> None:
        self.heartbeat_seconds = seconds
        self.flow_run = types.SimpleNamespace(state=_State())
        self.logger = types.SimpleNamespace(debug=lambda *a, **k: None)
        self.beats = 0
        self.first = threading.Event()
        self.templates = 0

    def _build_heartbeat_event_template(self) -> tuple[dict[str, str], list[Any]]:
        self.templates += 1
        return {"prefect.resource.id": "prefect.flow-run.x"}, []

    def _emit_flow_run_heartbeat(self, resource: dict[str, str], related: list[Any]) -> None:
        assert resource == {"prefect.resource.id": "prefect.flow-run.x"} and related == []
        self.beats += 1
        self.first.set()


def _heartbeat_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "dpgnn-flow-heartbeat"]


def test_one_beat_at_once_and_the_end_does_not_wait_out_the_interval() -> None:
    """At Prefect's minimum interval (30 s) the block's end stops the thread at once: a
    thread that slept its interval would still be alive after the engine's 2 s join."""
    engine = _Engine(30)
    with heartbeats.send_heartbeats(engine):
        assert engine.first.wait(10)
        (thread,) = _heartbeat_threads()
    assert not thread.is_alive()
    assert engine.beats == 1 and engine.templates == 1


def test_beats_every_interval_until_the_run_is_final(monkeypatch: pytest.MonkeyPatch) -> None:
    from prefect import flow_engine

    monkeypatch.setattr(flow_engine, "MINIMUM_HEARTBEAT_INTERVAL", 0)
    engine = _Engine(0.02)
    with heartbeats.send_heartbeats(engine):
        for _ in range(500):
            if engine.beats >= 3:
                break
            threading.Event().wait(0.01)
        assert engine.beats >= 3
        engine.flow_run.state.final = True  # no beat once the run is final
        for _ in range(500):
            if not _heartbeat_threads():
                break
            threading.Event().wait(0.01)
        assert not _heartbeat_threads()
        beats = engine.beats
    assert engine.beats == beats


def test_the_interval_is_never_below_prefects_minimum(monkeypatch: pytest.MonkeyPatch) -> None:
    waits: list[float] = []

    class Recording(threading.Event):
        def wait(self, timeout: float | None = None) -> bool:
            if threading.current_thread().name == "dpgnn-flow-heartbeat":
                waits.append(float(timeout or 0))
            return super().wait(timeout)

    monkeypatch.setattr(heartbeats.threading, "Event", Recording)
    engine = _Engine(5)
    with heartbeats.send_heartbeats(engine):
        assert engine.first.wait(10)
        for _ in range(500):
            if waits:
                break
            threading.Event().wait(0.01)
    assert waits == [30.0]


def test_no_thread_when_heartbeats_are_off() -> None:
    engine = _Engine(None)
    with heartbeats.send_heartbeats(engine):
        assert not _heartbeat_threads()
    assert engine.beats == 0 and engine.templates == 0


def test_prefects_own_stays_where_its_function_differs() -> None:
    def other(engine: Any, join_on_exit: bool = True, *, extra: int = 0) -> None: ...

    from prefect import flow_engine

    changed = types.SimpleNamespace(_send_heartbeats=other,
                                    BaseFlowRunEngine=flow_engine.BaseFlowRunEngine,
                                    MINIMUM_HEARTBEAT_INTERVAL=30)
    assert not heartbeats.compatible(changed)
    no_engine = types.SimpleNamespace(_send_heartbeats=flow_engine._send_heartbeats,
                                      MINIMUM_HEARTBEAT_INTERVAL=30)
    assert not heartbeats.compatible(no_engine)
    assert heartbeats.compatible(flow_engine)


def test_a_flow_run_beats_once_and_returns_with_its_thread_ended(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A real flow run (this process's Prefect server), with dpgnn's flows imported: the
    engine uses this module's heartbeats, emits the run's heartbeat event once, and the
    thread has ended when the call returns."""
    from prefect import flow, flow_engine

    import flows.pipeline  # noqa: F401 - installs it, as every dpgnn process running flows

    assert flow_engine._send_heartbeats is heartbeats.send_heartbeats
    emitted: list[str] = []
    original = flow_engine.BaseFlowRunEngine._emit_flow_run_heartbeat

    def spy(self: Any, resource: Any = None, related: Any = None) -> None:
        emitted.append(resource["prefect.resource.id"])
        original(self, resource, related)

    monkeypatch.setattr(flow_engine.BaseFlowRunEngine, "_emit_flow_run_heartbeat", spy)

    @flow
    def one() -> str:
        from prefect.runtime import flow_run

        return str(flow_run.id)

    run_id = one()
    assert emitted == [f"prefect.flow-run.{run_id}"]
    assert not _heartbeat_threads()
