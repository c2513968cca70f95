"""Running cached tasks from a flow: a cached step whose artifact went missing is rebuilt
(or, for a private release, refused).

The flows (``pipeline``, ``audit``, ``sweep``) and the staged runner
(:func:`tasks.staged.run_stages`, for a method whose catalogue entry is ``staged``) call
these; they hold no Prefect flow of their own.
"""

from __future__ import annotations

from typing import Any

from dpgnn_core.errors import DataError
from tasks.budget import LostReleaseError, lost_plan
from tasks.evaluate import artifact_intact
from tasks.ingest import dataset_summary
from tasks.refs import report_of


def intact(result: dict[str, Any]) -> bool:
    """Whether a (cached) step's artifact is still on disk unchanged."""
    if "path" not in result:  # nothing on disk (e.g. a calibration)
        return True
    if "files" in result:
        return artifact_intact(result["path"], result["files"])
    try:
        return bool(dataset_summary(result["path"])["content_sha256"]
                    == result["content_sha256"])
    except DataError:
        return False


def private_release(result: Any) -> bool:
    """Whether a step's result is a private release: a private report (a trained model),
    or privacy events (a staged method's stage: GAP's encoder, an aggregation)."""
    if not isinstance(result, dict):
        return False
    if report_of(result).private:
        return True
    events = result.get("events")
    return isinstance(events, dict) and bool(events.get("entries"))


def lost_release(result: dict[str, Any]) -> LostReleaseError:
    """The refusal to remake a lost or changed cached private release silently."""
    report = report_of(result)
    release = (report.release or {}).get("id")
    eps = report.epsilon if report.private else None
    return LostReleaseError(
        f"the cached private release {release or ''} in {result.get('path')} is missing or "
        "changed: training it again would be a new release with fresh noise, charged again "
        "to the dataset's budget" + (f" (ε = {eps:.4g})" if eps is not None else "")
        + ". Nothing was trained. Rerun with --refresh to spend it again")


def refuse_uncached_release(task_fn: Any, released: tuple[int, str] | None, method: str,
                            dataset_name: str, what: str, **kwargs: Any) -> None:
    """Refuse (:func:`tasks.budget.lost_plan`) to run ``task_fn`` on ``kwargs`` when its plan
    was already ``released`` on the dataset (odometer record and release id; None: not
    released, or ``--refresh``) and Prefect's result store (the flow's) holds no record under
    the key the task would be cached on: it would run, and at its gate refuse to release
    again, after its work (a code upgrade, or the cache moved away). ``what`` names the
    step in the message. The key is computed as Prefect computes it: the task's
    ``cache_key_fn`` on its call parameters, defaults included."""
    if released is None:
        return
    from prefect.results import ResultStore, get_result_store
    from prefect.utilities.callables import get_call_parameters

    key = task_fn.cache_key_fn(None, get_call_parameters(task_fn.fn, (), kwargs))
    # its sync form even inside an async context (typed as possibly a coroutine)
    results = get_result_store().update_for_task(task_fn, _sync=True)  # type: ignore[call-arg]
    assert isinstance(results, ResultStore)
    if not results.exists(key):
        raise lost_plan(method, dataset_name, released,
                        f"this code version has no cached {what}: the cache moved or was "
                        "deleted, or another code version made the release")


def run_cached(task_fn: Any, refresh: bool, **kwargs: Any) -> tuple[Any, str]:
    """Run a cached task; if its cached artifact was deleted or changed, run it again,
    unless it is a private release (:class:`~tasks.budget.LostReleaseError`: remaking it
    spends the budget again, which only ``refresh`` asks for)."""
    t = task_fn.with_options(refresh_cache=True) if refresh else task_fn
    state = t(return_state=True, **kwargs)
    result = state.result()
    if state.name == "Cached" and not intact(result):
        if private_release(result):
            raise lost_release(result)
        state = task_fn.with_options(refresh_cache=True)(return_state=True, **kwargs)
        return state.result(), "Rebuilt"
    return result, state.name
