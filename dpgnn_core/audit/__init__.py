"""Empirical privacy auditing: ε lower bounds from membership attacks on canaries.

:mod:`.bounds` holds the statistics only (pure functions of counts): the one-run audit of
Steinke, Nasr & Jagielski (2023) and the classic multi-run audit with Clopper–Pearson
intervals. Nothing here trains a model or touches a graph.

:mod:`.canaries` (imported directly: it needs torch) inserts node or edge canaries, trains
through the method registry, scores the canaries and returns the one-run bound:
``from dpgnn_core.audit.canaries import audit``.
"""

from dpgnn_core.audit.bounds import (
    DEFAULT_BETA,
    AuditBound,
    clopper_pearson,
    multi_run_audit,
    multi_run_epsilon_lower_bound,
    one_run_audit,
    one_run_epsilon_lower_bound,
    one_run_p_value,
)

__all__ = [
    "DEFAULT_BETA", "AuditBound", "clopper_pearson", "multi_run_audit",
    "multi_run_epsilon_lower_bound", "one_run_audit", "one_run_epsilon_lower_bound",
    "one_run_p_value",
]
