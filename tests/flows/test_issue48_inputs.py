"""Issue 48 §5, what the fault trial (benchmarks/RESULTS-history.md, tenth session) still
found raw: each is one ``error:`` line naming the option, file or value, before any work."""

from __future__ import annotations

from pathlib import Path

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


@pytest.mark.parametrize(("options", "names"), [
    (["num_nodes=1000000000000"], "--option num_nodes=1000000000000: generating a graph"),
    (["num_nodes=300", "avg_degree=1e12"], "--option avg_degree=1000000000000.0: "),
    (["kind=\"er_graphs\"", "num_graphs=1000000000000"], "--option num_graphs="),
])
def test_a_synthetic_graph_beyond_memory_is_refused_up_front(
        tmp_path: Path, options: list[str], names: str) -> None:
    """Was a raw MemoryError (num_nodes) or ran without end (avg_degree)."""
    args = [a for o in options for a in ("-o", o)]
    r = runner.invoke(app, ["--home", str(tmp_path / "home"), "ingest", "--format",
                            "synthetic", *args, "--out", str(tmp_path / "x")])
    line = one_error_line(r.output)
    assert r.exit_code == 1 and line.startswith(f"error: {names}"), r.output
    assert "GiB of memory, more than this machine's" in line
    assert not (tmp_path / "x").exists()
