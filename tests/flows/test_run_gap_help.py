"""`dpgnn run gap-edp --help` and `progap-edp --help` list the module training options
(issue 28)."""

from __future__ import annotations

from flows.cli import app
from tests.flows.clirunner import CliRunner


def test_run_help_lists_the_training_options() -> None:
    r = CliRunner().invoke(app, ["run", "gap-edp", "--help"], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    for option in ("--dropout", "--norm", "--selection", "--encoder-layers", "--batch-size",
                   "--epochs", "--encoder-epochs", "--lr", "--encoder-dim"):
        assert option in r.output, option
    r = CliRunner().invoke(app, ["run", "progap-edp", "--help"], env={"COLUMNS": "200"})
    for option in ("--dropout", "--norm", "--selection", "--batch-size"):
        assert option in r.output, option
