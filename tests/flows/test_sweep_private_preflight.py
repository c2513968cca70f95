"""``dpgnn sweep`` refuses a private selection that cannot run before Prefect or Dask start
(issue 33 §5: ``expected_candidates = 1e6`` failed 32 s in, once both had started, with
advice about steps and sampling rates that did not name the cause)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from flows.cli import app
from tests.flows.clirunner import CliRunner

runner = CliRunner()


@pytest.mark.parametrize(("epsilon", "expected", "cause"), [
    (30.0, 1e6, r"E[K] = 1e+06"),  # above the cap, whatever the target
    (0.05, 5000.0, "score_share"),  # below the floor the candidates and score cost
])
def test_an_impossible_number_of_candidates_is_refused_before_prefect(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, epsilon: float, expected: float,
        cause: str) -> None:
    import flows.cli.common
    import flows.sweep

    def started(*_: Any, **__: Any) -> Any:
        raise AssertionError("Prefect or Dask started")

    ds = tmp_path / "ds"
    r = runner.invoke(app, ["--home", str(tmp_path / "home"), "ingest", "--format",
                            "synthetic", "--out", str(ds), "-o", "num_nodes=120"])
    assert r.exit_code == 0, r.output
    spec = tmp_path / "s.toml"
    spec.write_text(f'name = "k"\ndataset = "{ds}"\nepsilons = [{epsilon}]\n'
                    f'selection = "private"\ntuning = {{expected_candidates = {expected}}}\n\n'
                    '[[methods]]\nmethod = "dp-mlp"\ngrid = {steps = [3, 5]}\n'
                    'fixed = {device = "cpu"}\n')
    monkeypatch.setattr(flows.cli.common, "use_server_if_running", started)
    monkeypatch.setattr(flows.sweep, "task_runner", started)
    r = runner.invoke(app, ["--home", str(tmp_path / "home"), "sweep", str(spec)])
    assert r.exit_code == 2, r.output
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: dp-mlp: K ~"), r.output
    assert "E[K] = " in lines[0] and "tuning.expected_candidates" in lines[0]
    assert cause in lines[0]
    if "at least" in lines[0]:  # the floor, above the target
        floor = re.search(r"at least ([0-9.e+-]+) at delta", lines[0])
        assert floor is not None and float(floor.group(1)) > epsilon
    assert not (tmp_path / "home" / "artifacts").exists()
