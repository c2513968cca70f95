"""``dpgnn sweep`` stopped by Ctrl-C: one line saying what was kept, exit 130 (as ``run``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from flows.cli import app
from tests.flows.clirunner import CliRunner

runner = CliRunner()


def test_ctrl_c_is_one_line_and_exit_130(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                         ) -> None:
    import flows.sweep

    ds = tmp_path / "ds"
    r = runner.invoke(app, ["ingest", "--format", "synthetic", "--out", str(ds),
                            "-o", "num_nodes=120"])
    assert r.exit_code == 0, r.output
    spec = tmp_path / "s.toml"
    spec.write_text(f'name = "stop"\ndataset = "{ds}"\nepsilons = [4.0]\nseeds = [0]\n\n'
                    '[[methods]]\nmethod = "dp-mlp"\nfixed = {steps = 3, device = "cpu"}\n')

    class Interrupted:  # the flow, interrupted by Ctrl-C while its points run
        def with_options(self, **_: Any) -> Any:
            def run(**__: Any) -> Any:
                raise KeyboardInterrupt
            return run

    monkeypatch.setattr(flows.sweep, "sweep", Interrupted())
    monkeypatch.setattr(flows.sweep, "task_runner", lambda *a, **k: None)
    r = runner.invoke(app, ["sweep", str(spec)])
    assert r.exit_code == 130, r.output
    lines = [ln for ln in r.output.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and "stopped (Ctrl-C)" in lines[0]
    assert "same command resumes" in lines[0] and "Traceback" not in r.output
