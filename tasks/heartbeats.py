"""Prefect's flow-run heartbeats, without the second a flow run waited for them at its end.

Prefect 3.8 emits a ``prefect.flow-run.heartbeat`` event every
``PREFECT_FLOWS_HEARTBEAT_FREQUENCY`` seconds (180 by default since Prefect's PR #21058) from a
daemon thread that sleeps in steps of one second and checks a stop flag between them; when
the flow run ends, the engine sets the flag and joins the thread (up to 2 s). So every flow
run (and subflow) waited for the rest of the thread's current second before it returned:
~0.5 s on average, up to 1 s, for nothing but that wait. In the suite that was 51 s of wall
time over 82 flow runs of one process (cProfile, ``threading.Thread.join`` under
``flow_engine._send_heartbeats``); a ``dpgnn run`` paid it once per flow run.

:func:`install` puts :func:`send_heartbeats` in place of ``prefect.flow_engine.
_send_heartbeats`` (the engine looks the name up when a flow run starts): the same events
at the same interval from the same kind of daemon thread, with the flow run's context
copied into it as Prefect does, the same check that the run is not yet final before each
event, the same join on exit; only the wait between events is ``Event.wait`` on the stop
flag, which returns the moment the run ends. Written here because Prefect has no setting
for it: the only switch, heartbeats off (``PREFECT_FLOWS_HEARTBEAT_FREQUENCY`` unset to
None), would also turn off the zombie-run detection that users' automations may rely on.

Installed only where Prefect's function has the signature and the engine the methods this
module relies on (checked at install, :func:`compatible`); elsewhere Prefect's own stays.
Called by the modules that define dpgnn's flows, at import (Prefect is imported by then).
"""

from __future__ import annotations

import contextlib
import contextvars
import inspect
import threading
from collections.abc import Iterator
from typing import Any

#: What this module reads of the engine (Prefect 3.8's BaseFlowRunEngine).
ENGINE_API = ("heartbeat_seconds", "_build_heartbeat_event_template",
              "_emit_flow_run_heartbeat", "flow_run", "logger")
#: Seconds the engine waits for the thread at the flow run's end (Prefect's own bound).
JOIN_TIMEOUT = 2.0


@contextlib.contextmanager
def send_heartbeats(engine: Any, join_on_exit: bool = True) -> Iterator[None]:
    """Emit the flow run's heartbeat events while the block runs: one at once, then one
    every ``engine.heartbeat_seconds`` (None: none at all) until the block ends or the run
    is final. Same arguments as ``prefect.flow_engine._send_heartbeats``."""
    seconds = engine.heartbeat_seconds
    if seconds is None:
        yield
        return
    from prefect.flow_engine import MINIMUM_HEARTBEAT_INTERVAL

    seconds = max(float(seconds), MINIMUM_HEARTBEAT_INTERVAL)
    resource, related = engine._build_heartbeat_event_template()
    stop = threading.Event()

    def beat() -> None:
        while not stop.is_set():
            run = engine.flow_run
            if run is not None and run.state is not None and run.state.is_final():
                engine.logger.debug("Flow run in terminal state, stopping heartbeat")
                return
            try:
                engine._emit_flow_run_heartbeat(resource, related)
            except Exception:  # a lost event must not end the run (Prefect's rule too)
                engine.logger.debug("Failed to emit heartbeat", exc_info=True)
            if stop.wait(seconds):
                return

    # The run's context (its settings, so its API URL) goes with the thread, as in
    # Prefect: a thread starts with an empty context otherwise.
    context = contextvars.copy_context()
    thread = threading.Thread(target=context.run, args=(beat,), daemon=True,
                              name="dpgnn-flow-heartbeat")
    thread.start()
    engine.logger.debug("Started flow run heartbeat context")
    try:
        yield
    finally:
        stop.set()
        if join_on_exit:
            thread.join(timeout=JOIN_TIMEOUT)
        engine.logger.debug("Stopped flow run heartbeat context")


def compatible(module: Any) -> bool:
    """Whether ``module`` (``prefect.flow_engine``) has the function this one replaces,
    with its arguments, and an engine with everything :func:`send_heartbeats` reads."""
    own = getattr(module, "_send_heartbeats", None)
    engine = getattr(module, "BaseFlowRunEngine", None)
    if own is None or engine is None or not hasattr(module, "MINIMUM_HEARTBEAT_INTERVAL"):
        return False
    try:
        params = list(inspect.signature(own).parameters)
    except (TypeError, ValueError):
        return False
    annotations = getattr(engine, "__annotations__", {})
    return params == ["engine", "join_on_exit"] and all(
        hasattr(engine, name) or name in annotations for name in ENGINE_API)


def install() -> bool:
    """Put :func:`send_heartbeats` in place of Prefect's (idempotent); False, leaving
    Prefect's, where :func:`compatible` says no."""
    from prefect import flow_engine

    if flow_engine._send_heartbeats is send_heartbeats:
        return True
    if not compatible(flow_engine):
        return False
    flow_engine._send_heartbeats = send_heartbeats
    return True
