"""Flow runs that a killed process left RUNNING are marked Crashed on the next run.

A ``dpgnn run`` killed with SIGKILL (or by the OOM killer, or a lost machine) cannot report
its end, so Prefect shows its flow run RUNNING forever. Each ``pipeline`` run therefore
records its owner when its body starts, in ``$DPGNN_HOME/runs/<flow_run_id>.json``: pid,
host and the process's start time (:mod:`flows.procs`). At the start of the next run,
:func:`mark_abandoned_runs` asks the API in use (the ``dpgnn server`` or the ephemeral one;
both keep their database under the same project) in one query which recorded runs are still
RUNNING, PENDING or CANCELLING, and sets those whose owner has ended to Crashed.

Why a file under the project rather than flow-run tags: it costs no API call when the run
starts (tags would need a flow-run update), it needs no query at all when nothing was left
behind, it sits beside the Prefect database it describes, and a run cannot be marked from
its own tags while its process is gone anyway. A record is removed when its run is marked
Crashed or is found no longer active, so the folder holds only the runs under way (and those
finished since the last run started).

Only what can be decided is decided: a run whose record names another host is left alone
(its pid means nothing here), and a run without a record (started by an older dpgnn, or
killed between its start and the record) is left as it is. Records are per project, the API
is the one in use: a record of a run on another API (``PREFECT_API_URL`` pointed elsewhere)
is not found active there and is dropped.
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Any
from uuid import UUID

from dpgnn_core.home import project_dir
from flows import procs

FLOW_NAME = "dpgnn-pipeline"
#: States a run can be stuck in when its process dies.
ACTIVE = ("RUNNING", "PENDING", "CANCELLING")

logger = logging.getLogger("dpgnn.recover")


def runs_dir(home: Path | None = None) -> Path:
    return (home or project_dir()) / "runs"


def claim_run(flow_run_id: str | None = None, home: Path | None = None) -> Path | None:
    """Record this process as the owner of ``flow_run_id`` (the current flow run by
    default). Returns the record's path, ``None`` outside a flow run."""
    if flow_run_id is None:
        from prefect.runtime import flow_run

        flow_run_id = flow_run.id
        if not flow_run_id:
            return None
    d = runs_dir(home)
    d.mkdir(parents=True, exist_ok=True)
    path = d / f"{flow_run_id}.json"
    tmp = d / f".{flow_run_id}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps({"flow_run_id": str(flow_run_id), **procs.identity(),
                               "claimed": time.time()}))
    os.replace(tmp, path)
    return path


def _read(path: Path) -> dict[str, Any] | None:
    try:
        rec = json.loads(path.read_text())
        return rec if isinstance(rec, dict) and "pid" in rec else None
    except (OSError, ValueError):
        return None


def _mark(home: Path | None) -> list[str]:
    d = runs_dir(home)
    # Listed before the query: a record is written after its run is RUNNING, so a run whose
    # record is listed here and that the query does not return has left the active states.
    records = {p.stem: p for p in d.glob("*.json")} if d.is_dir() else {}
    ids: dict[str, UUID] = {}
    for key, path in records.items():
        try:
            ids[key] = UUID(key)
        except ValueError:
            path.unlink(missing_ok=True)
    if not ids:
        return []

    from prefect import get_client
    from prefect.client.schemas.filters import (
        FlowFilter,
        FlowFilterName,
        FlowRunFilter,
        FlowRunFilterId,
        FlowRunFilterState,
        FlowRunFilterStateType,
    )
    from prefect.client.schemas.objects import StateType
    from prefect.states import Crashed

    marked: list[str] = []
    with get_client(sync_client=True) as client:
        runs = client.read_flow_runs(
            flow_filter=FlowFilter(name=FlowFilterName(any_=[FLOW_NAME])),
            flow_run_filter=FlowRunFilter(
                id=FlowRunFilterId(any_=list(ids.values())),
                state=FlowRunFilterState(type=FlowRunFilterStateType(
                    any_=[StateType(s) for s in ACTIVE]))),
            limit=len(ids))
        active = {str(r.id): r for r in runs}
        for key, path in records.items():
            if key not in ids:
                continue
            run = active.get(key)
            if run is None:  # the run has ended (or is unknown to this API): record not needed
                path.unlink(missing_ok=True)
                continue
            rec = _read(path)
            alive = procs.same_process(rec) if rec is not None else False
            if alive is not False:  # running, or on another host: not ours to decide
                continue
            where = (f"process {rec['pid']} on {rec['host']}" if rec is not None
                     else "its process")
            msg = (f"Abandoned: {where} ended without reporting the end of this run "
                   f"(killed?); marked Crashed by a later dpgnn run")
            client.set_flow_run_state(run.id, Crashed(message=msg), force=True)
            logger.warning("flow run %s (%s) was left %s by a process that ended; "
                           "marked Crashed", run.name, key,
                           run.state_type.value if run.state_type else "active")
            marked.append(key)
            path.unlink(missing_ok=True)
    return marked


def mark_abandoned_runs(home: Path | None = None) -> list[str]:
    """Set the ``dpgnn-pipeline`` flow runs whose recorded owner has ended but that are still
    RUNNING, PENDING or CANCELLING to Crashed; returns their ids. One API query when any
    record exists, none otherwise; never raises (an error is logged as a warning)."""
    try:
        return _mark(home)
    except Exception as e:
        logger.warning("could not check for abandoned flow runs: %s: %s",
                       type(e).__name__, e)
        return []


def recover_and_claim(home: Path | None = None) -> list[str]:
    """At the start of a ``pipeline`` run: :func:`mark_abandoned_runs`, then
    :func:`claim_run` for the current flow run. Never raises."""
    marked = mark_abandoned_runs(home)
    try:
        claim_run(home=home)
    except Exception as e:
        logger.warning("could not record this flow run's owner: %s: %s",
                       type(e).__name__, e)
    return marked


__all__ = ["ACTIVE", "FLOW_NAME", "claim_run", "mark_abandoned_runs", "recover_and_claim",
           "runs_dir"]
