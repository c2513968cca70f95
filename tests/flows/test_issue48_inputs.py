"""Issue 48 §5, what the fault trial (benchmarks/RESULTS-history.md, tenth session) still
found raw: each is one ``error:`` line naming the option, file or value, before any work."""

from __future__ import annotations

import pytest

from flows.cli import app
from tests.flows.clirunner import CliRunner, one_error_line

runner = CliRunner()


@pytest.mark.parametrize(("args", "says"), [
    # numpy RuntimeWarnings, then "ValueError: cannot convert float NaN to integer"
    (["epsilon", "--noise-multiplier", "inf"], "--noise-multiplier inf: must be a finite"),
    (["epsilon", "--noise-multiplier", "1", "--steps", "0"], "--steps 0: must be an integer"),
    (["epsilon", "--noise-multiplier", "1", "--delta", "nan"], "--delta nan: must be in"),
    (["calibrate", "--epsilon", "inf"], "--epsilon inf: must be a finite number > 0"),
    (["calibrate", "--epsilon", "1", "--steps", "-1"], "--steps -1: must be an integer"),
])
def test_privacy_options_are_named(args: list[str], says: str) -> None:
    r = runner.invoke(app, ["privacy", args[0], "--mechanism", "gaussian", *args[1:]])
    line = one_error_line(r.output)
    assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 1, r.output
    assert line.startswith(f"error: {says}"), line
