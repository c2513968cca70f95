"""A budgeted dataset with an earlier release already on its odometer: the setup of the
tests that a budget refuses a run before Prefect starts (issue 48 §5)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dpgnn_core.data.store import write_dataset
from dpgnn_core.data.synthetic import csbm
from dpgnn_core.privacy import GaussianEvent, Ledger
from flows.cli import app
from tests.flows.clirunner import CliRunner


def budgeted_with_a_release(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *,
                            noise_multiplier: float, epsilon: float) -> tuple[Path, list[str]]:
    """``tmp_path/ds`` (200 nodes) with a node-level budget of ε = 1 at δ = 1e-4 and one
    spent release of ``noise_multiplier`` (recorded ε ``epsilon``) in the home
    ``tmp_path/home`` (also ``DPGNN_HOME``): the dataset and the ``--home`` arguments."""
    from dpgnn_core.privacy.odometer import Charge
    from tasks.budget import store

    ds = tmp_path / "ds"
    write_dataset(csbm(num_nodes=200, seed=4), ds)
    sha = json.loads((ds / "manifest.json").read_text())["content_sha256"]
    home = ["--home", str(tmp_path / "home")]
    r = CliRunner().invoke(app, [*home, "budget", "set", str(ds), "--epsilon", "1",
                                 "--delta", "1e-4", "--unit", "node"])
    assert r.exit_code == 0, r.output
    monkeypatch.setenv("DPGNN_HOME", str(tmp_path / "home"))
    spent = Charge(Ledger().add(GaussianEvent(noise_multiplier=noise_multiplier,
                                              level="node")))
    store().record(sha, "ds", str(ds), spent, status="spent", method="dp-mlp",
                   run_id="earlier", release_id="r1", delta=1e-4, epsilon=epsilon)
    return ds, home


__all__ = ["budgeted_with_a_release"]
