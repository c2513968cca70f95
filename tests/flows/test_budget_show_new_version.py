"""`dpgnn budget show FOLDER` on a folder re-ingested since its last recorded run."""

from __future__ import annotations

import json
from pathlib import Path

from dpgnn_core.data.store import write_dataset
from dpgnn_core.data.synthetic import csbm
from tests.flows.clirunner import CliRunner


def test_show_a_new_version_reads_the_folders_budget(tmp_path: Path) -> None:
    """The folder's newest version, not yet seen by the budget store (no run since the
    re-ingest), shares the folder's budget: `show` prints that budget instead of "no
    dataset ... in the budget store"; an unknown folder is still refused."""
    from flows.cli import app

    home, ds = ["--home", str(tmp_path / "home")], tmp_path / "ds"
    first = write_dataset(csbm(num_nodes=60, seed=1), ds)["content_sha256"]
    r = CliRunner().invoke(app, [*home, "budget", "set", str(ds), "--epsilon", "3",
                                 "--delta", "1e-5"])
    assert r.exit_code == 0, r.output
    second = write_dataset(csbm(num_nodes=60, seed=2), ds, overwrite=True)["content_sha256"]
    assert second != first
    r = CliRunner().invoke(app, [*home, "budget", "show", str(ds), "--json"])
    assert r.exit_code == 0, r.output
    (summary,) = json.loads(r.stdout)["datasets"]
    assert summary["budget_id"] == first and summary["budget"]["epsilon"] == 3
    assert [v["sha256"] for v in summary["versions"]] == [first]  # the store's versions
    write_dataset(csbm(num_nodes=60, seed=3), tmp_path / "other")
    r = CliRunner().invoke(app, [*home, "budget", "show", str(tmp_path / "other")])
    assert r.exit_code == 2 and "no dataset" in r.output
