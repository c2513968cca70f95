"""Issue 48 §6: where the docs and the behaviour differed. ε spent and its target read
alike; piped ``--help`` keeps whole option names; ``to_dgl`` does not warn; the docs state
graph classification's δ and ``--budget-split``'s methods as the code has them."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from flows.cli.summary import epsilon_text, print_summary
from tasks.progress import format_epsilon_pair

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("spent", "target", "shown"), [
    (0.0, 1.0, "0.00/1.00"),            # was 0.00/1
    (0.0, 1e-9, "0.00e+00/1.00e-09"),   # was 0.00/1.00e-09
    (2.1, 4.0, "2.10/4.00"),            # was 2.10/4
    (9.995e-5, 1e-4, "1.00e-04/1.00e-04"),
    (5e-4, 1.0, "5.00e-04/1.00e+00"),
    (0.4999, 0.5, "0.500/0.500"),
])
def test_spent_and_target_read_alike(spent: float, target: float, shown: str) -> None:
    assert format_epsilon_pair(spent, target) == shown


def test_the_summary_of_a_tiny_target_says_the_target(capsys: pytest.CaptureFixture[str]
                                                      ) -> None:
    """ε = 1e-9 is met at ε = 0 on the accountant's grid; the summary said ``[epsilon 0``."""
    summary = {"method": "dp-mlp", "dataset": "d", "seed": 0, "private": True,
               "epsilon": 0.0, "target_epsilon": 1e-9, "delta": 1e-5, "randomness": "secret",
               "test_accuracy": 0.5, "val_accuracy": 0.5, "artifacts_dir": "a", "cache": {}}
    print_summary(summary, as_json=False)
    first = capsys.readouterr().out.splitlines()[0]
    assert "[epsilon 0.00e+00 of 1.00e-09, delta 1e-05]" in first, first
    assert epsilon_text({"epsilon": 0.998, "target_epsilon": 1}) == "0.998 of 1.00"


def test_the_run_summary_carries_the_target() -> None:
    """The summary the flow returns has ``target_epsilon`` (what the line above reads)."""
    import inspect

    from tasks import run_record

    assert '"target_epsilon": report.target_epsilon' in inspect.getsource(
        run_record.run_summary)


def test_piped_help_keeps_whole_option_names(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "TERMINAL_WIDTH")}
    env["PYTHONPATH"] = str(ROOT)
    code = ("import sys; sys.argv = ['dpgnn', 'run', 'dp-mlp', '--help']\n"
            "from flows.cli import main; main()")
    r = subprocess.run([sys.executable, "-c", code],
                       capture_output=True, text=True, env=env, cwd=tmp_path, check=True,
                       timeout=120)
    assert "--insecure-reproducible-noise" in r.stdout and "…" not in r.stdout, r.stdout


def test_to_dgl_does_not_warn_about_read_only_arrays() -> None:
    pytest.importorskip("dgl")
    from dpgnn_core.data.synthetic import csbm
    from dpgnn_core.interop.dgl import to_dgl

    data = csbm(num_nodes=40, seed=1)
    for arr in (data.x, data.y, data.edge_index, data.split):
        arr.setflags(write=False)  # as a dataset read from its folder holds them
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        g = to_dgl(data)
    assert g.num_nodes() == 40
    assert np.array_equal(g.ndata["feat"].numpy(), data.x.astype(np.float32))


def test_docs_state_what_the_code_does() -> None:
    guide = (ROOT / "docs" / "user-guide.md").read_text()
    readme = (ROOT / "README.md").read_text()
    for text in (guide, readme):  # graph classification's δ: the spec's 1/(10 N)
        assert "δ = 1/N by default" not in text
        assert "δ = 1/(10 N) by default (Mueller et al. used 1/N)" in text
    # --budget-split is an option of gap-ndp only (gap-edp refuses it, naming gap-ndp)
    assert "`gap-ndp --budget-split" in guide and "option of `gap-ndp` only" in guide


def test_the_piped_width_is_restored_after_the_command(monkeypatch: pytest.MonkeyPatch
                                                       ) -> None:
    """A command run in-process (a test, a library user) leaves the framework's width as
    it found it: ``COLUMNS`` set later still counts."""
    import typer.rich_utils

    from flows.cli import PIPED_HELP_WIDTH, wide_help_when_piped

    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.delenv("TERMINAL_WIDTH", raising=False)
    before = typer.rich_utils.MAX_WIDTH
    with wide_help_when_piped():
        assert typer.rich_utils.MAX_WIDTH == PIPED_HELP_WIDTH  # pytest's stdout: no TTY
    assert typer.rich_utils.MAX_WIDTH == before
