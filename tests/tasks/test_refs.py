"""A task's model reference carries the report as JSON; ``report_of`` types it again."""

from __future__ import annotations

import math

from tasks.refs import report_of

BASE = {"method": "dp-mlp", "private": True, "epsilon": 2.0, "delta": 1e-5, "steps": 40}


def test_report_of_a_reference() -> None:
    typed = report_of({"path": "x", "report": {**BASE, "release": {"id": "r9"}}})
    assert typed.private and typed.epsilon == 2.0 and typed.release == {"id": "r9"}
    none = report_of({"path": "x", "method": "mlp"})  # a non-private path writes no report
    assert not none.private and math.isinf(none.epsilon) and none.method == "mlp"
