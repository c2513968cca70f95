"""The README's tour (issue 33 §6): its sweep (step 4) fits what steps 2 and 3 leave of the
tour's budget, holds no point the budget refuses (a non-private one), and repeats no plan
of step 3 (its four points are four new releases, as the tour's budget figures count them;
a repeated plan would re-use step 3's release, issue 50 §1). The
commands are read from README.md itself, steps 1-2 run through the command line, and every
release of steps 3-4 is calibrated and reserved against the dataset's budget as the runs
would (no training: calibration only)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from tests.flows.clirunner import CliRunner

REPO = Path(__file__).resolve().parents[2]


def _tour() -> list[list[str]]:
    """The tour's `dpgnn` commands, as argument lists (continuation lines joined)."""
    text = (REPO / "README.md").read_text()
    block = text.split("## A two-minute tour", 1)[1].split("```bash", 1)[1].split("```")[0]
    lines = re.sub(r"\\\n\s*", " ", block).splitlines()
    return [shlex.split(ln.split("#", 1)[0])[1:] for ln in lines
            if ln.strip().startswith("dpgnn ")]


@pytest.mark.slow  # Cora's ingest and six PLD calibrations
def test_the_tours_sweep_fits_the_tours_budget(shared: Path, tmp_path: Path) -> None:
    from dpgnn_core.budget import Charge
    from dpgnn_core.data.store import read_manifest
    from dpgnn_core.methods.registry import get
    from dpgnn_core.privacy import calibrate_noise, make_accountant
    from dpgnn_core.sweeps import load_sweep_spec, points
    from flows.cli import app
    from tasks.budget import store
    from tasks.ingest import dataset_summary

    commands = _tour()
    ingest, budget = commands[0], commands[1]
    assert ingest[0] == "ingest" and budget[:2] == ["budget", "set"]
    home = ["--home", str(tmp_path / "home")]
    source = str(shared / "planetoid" / "Cora" / "raw")
    ingest = [source if a.endswith("planetoid/Cora/raw") else a for a in ingest]
    out = str(tmp_path / ingest[ingest.index("--out") + 1])
    ingest[ingest.index("--out") + 1] = out
    budget[2] = out
    for args in (ingest, budget):
        r = CliRunner().invoke(app, [*home, *args])
        assert r.exit_code == 0, r.output
    ds = dataset_summary(out)
    runs = [c for c in commands if c[0] == "run"]
    (sweep,) = [c for c in commands if c[0] == "sweep"]
    releases = [get(c[1]).spec(epsilon=float(c[c.index("--epsilon") + 1])) for c in runs]
    pts = points(load_sweep_spec(REPO / sweep[1]))
    assert all(p.epsilon is not None for p in pts), "a non-private point is refused"
    releases += [p.spec for p in pts]
    from tasks.budget import plan_key

    keys = [plan_key(ds, spec) for spec in releases]
    assert len(set(keys)) == len(keys), "a sweep point repeats a plan step 3 released"
    n_train = int(read_manifest(out)["split_counts"]["train"])  # 2,033 of Cora's 2,708
    s = store()
    for spec in releases:
        method = get(spec.method)
        plan = method.ledger_for(spec, n_train)
        delta = 1.0 / (10 * n_train)
        z = calibrate_noise(plan, spec.epsilon, delta,
                            make_accountant(spec.accountant)).noise_multiplier
        s.reserve(ds["content_sha256"], ds["name"], ds["path"], Charge(plan(z)),
                  method=spec.method, run_id="tour", delta=delta, epsilon=spec.epsilon)
    summary = s.summary(s.resolve(ds["content_sha256"]))
    assert len([r for r in summary.records if r.status == "reserved"]) == len(releases)
