"""How a run's params, metrics and tags are split into MLflow ``log_batch`` calls (issue 52
§7: each call is one transaction of the SQLite store). Pure chunking, no MLflow import: the
calls are :mod:`tasks.tracking`'s, the only module that imports MLflow."""

from __future__ import annotations

from typing import Any

#: MLflow's limits on one ``log_batch``: params and tags each, and entities in all.
BATCH_PARAMS_OR_TAGS = 100
BATCH_ENTITIES = 1000


def log_batches(params: list[Any], metrics: list[Any], tags: list[Any]
                ) -> list[tuple[list[Any], list[Any], list[Any]]]:
    """``(params, metrics, tags)`` of each ``log_batch`` call that logs them all in as few
    calls as MLflow's limits allow (at most 100 params, 100 tags and 1,000 entities a
    call), in their order. Each call is one database transaction of the SQLite store
    (GAP-EDP on Cora: 56 params, 13 tags and 2,018 metric points were 5 calls, now 3).
    """
    out: list[tuple[list[Any], list[Any], list[Any]]] = []
    p = m = t = 0
    while p < len(params) or m < len(metrics) or t < len(tags) or not out:
        ps = params[p:p + BATCH_PARAMS_OR_TAGS]
        ts = tags[t:t + BATCH_PARAMS_OR_TAGS]
        ms = metrics[m:m + BATCH_ENTITIES - len(ps) - len(ts)]
        out.append((ps, ms, ts))
        p, m, t = p + len(ps), m + len(ms), t + len(ts)
    return out


__all__ = ["BATCH_ENTITIES", "BATCH_PARAMS_OR_TAGS", "log_batches"]
