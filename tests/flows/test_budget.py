"""The per-dataset budget through the pipeline flow and the CLI: GAP's stages share one
reservation, a cached GAP release is re-used at no cost, a recompute is charged, a run
past the budget is refused before training; `dpgnn budget set/show/reset`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dpgnn_core.budget import COUNTED, Charge, compose
from dpgnn_core.data.store import write_dataset
from dpgnn_core.data.synthetic import csbm
from dpgnn_core.privacy.events import Ledger
from tests.flows.clirunner import CliRunner


def _counted(sha: str) -> list[object]:
    from tasks.budget import store

    s = store()
    return [r for r in s.summary(s.resolve(sha)).records if r.status in COUNTED]


@pytest.mark.slow
@pytest.mark.parametrize("level", ["edge", "node"])
def test_gap_release_reused_not_charged_twice_and_recompute_charged(
        level: str, tmp_path: Path) -> None:
    from dpgnn_core.budget import BudgetExceeded
    from dpgnn_core.specs import GapSpec
    from flows.pipeline import pipeline
    from tasks.budget import store

    write_dataset(csbm(num_nodes=200, avg_degree=4, seed=61 if level == "edge" else 62),
                  tmp_path / "ds")
    spec = GapSpec(level=level, epsilon=4.0, hops=2, epochs=3, steps=3, batch_size=64,
                   encoder_dim=8, hidden=16, device="cpu",
                   **({"max_degree": 60} if level == "node" else {}))
    first = pipeline(spec=spec, dataset=str(tmp_path / "ds"), explain_graphs=0)
    sha = json.loads((tmp_path / "ds" / "manifest.json").read_text())["content_sha256"]
    (rec,) = _counted(sha)  # the encoder, PMA and classifier stages: one reservation
    rid = first["release"].split()[2]
    assert rec.status == "spent" and rec.release_id == rid
    ledger = Ledger.load(Path(first["artifacts_dir"]) / "ledger.json")
    delta = first["dataset_epsilon_delta"]
    own = compose([Charge(ledger)], delta)[level].epsilon
    assert first["dataset_epsilon_spent"] == pytest.approx(own)
    from mlflow.tracking import MlflowClient

    tags = MlflowClient(first["mlflow_tracking_uri"]).get_run(first["mlflow_run_id"]).data.tags
    assert tags["dpgnn.dataset_epsilon_spent"] == f"{own:.4g} at δ = {delta:.3g}"

    cached = pipeline(spec=spec, dataset=str(tmp_path / "ds"), explain_graphs=0)
    assert cached["release"].startswith("reused cached release")
    assert len(_counted(sha)) == 1  # not charged twice
    s = store()
    assert [r.status for r in s.summary(s.resolve(sha)).records] == ["spent", "reuse"]
    assert cached["dataset_epsilon_spent"] == pytest.approx(own)

    fresh = pipeline(spec=spec, dataset=str(tmp_path / "ds"), refresh=True, explain_graphs=0)
    assert len(_counted(sha)) == 2  # a recompute is a new release
    both = compose([Charge(ledger), Charge(ledger)], delta)[level].epsilon
    assert fresh["dataset_epsilon_spent"] == pytest.approx(both)

    if level == "edge":  # the refusal path is the same gate: checked once, at node level
        return
    # A budget that the next recompute would exceed: refused before any stage trains.
    s.set_budget(sha, "ds", str(tmp_path / "ds"), epsilon=both * 1.01, delta=delta)
    model = Path(fresh["artifacts_dir"]) / "model.pt"
    mtime = model.stat().st_mtime_ns
    with pytest.raises(BudgetExceeded, match=f"unit {level}"):
        pipeline(spec=spec, dataset=str(tmp_path / "ds"), refresh=True, explain_graphs=0)
    assert len(_counted(sha)) == 2
    assert model.stat().st_mtime_ns == mtime  # the stored model is untouched


def test_budget_cli_set_show_plot_reset(tmp_path: Path) -> None:
    from dpgnn_core.privacy import GaussianEvent
    from flows.cli import app
    from tasks.budget import store

    runner = CliRunner()
    write_dataset(csbm(num_nodes=100, seed=63), tmp_path / "ds")
    r = runner.invoke(app, ["budget", "set", str(tmp_path / "ds"), "--epsilon", "3",
                            "--delta", "1e-5"])
    assert r.exit_code == 0, r.output
    assert "ε = 3 at δ = 1e-05" in r.output and "nothing yet" in r.output
    sha = json.loads((tmp_path / "ds" / "manifest.json").read_text())["content_sha256"]
    s = store()
    for z in (4.0, 6.0):
        s.mark_spent(s.reserve(sha, "ds", str(tmp_path / "ds"), Charge(Ledger().add(
            GaussianEvent(noise_multiplier=z, count=2, level="edge"))), method="gap-edp",
            run_id=f"t{z}", delta=1e-5, epsilon=None))
    r = runner.invoke(app, ["budget", "show", sha[:12], "--json", "--plot"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    (d,) = out["datasets"]
    assert d["budget"] == {"epsilon": 3.0, "delta": 1e-5}
    assert d["spent"]["edge"]["remaining"] == pytest.approx(3.0 - d["spent"]["edge"]["epsilon"])
    assert Path(out["plot"]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    r = runner.invoke(app, ["budget", "show", str(tmp_path / "ds")])
    assert "spent on edge (edge)" in r.output and "remaining ε" in r.output
    r = runner.invoke(app, ["budget", "reset", str(tmp_path / "ds")], input="n\n")
    assert r.exit_code == 1 and len(_counted(sha)) == 2  # asked, refused: nothing reset
    r = runner.invoke(app, ["budget", "reset", str(tmp_path / "ds"), "--yes",
                            "--reason", "test"])
    assert r.exit_code == 0 and _counted(sha) == []
    r = runner.invoke(app, ["budget", "show", "no-such-dataset"])
    assert r.exit_code == 2 and "no dataset 'no-such-dataset'" in r.output
    r = runner.invoke(app, ["budget", "set", str(tmp_path / "ds"), "--epsilon", "0",
                            "--delta", "1e-5"])
    assert r.exit_code == 2 and "budget epsilon must be finite and > 0" in r.output


@pytest.mark.slow
@pytest.mark.parametrize("level", ["edge", "node"])
def test_progap_stages_share_one_reservation_and_over_budget_is_refused(
        level: str, tmp_path: Path) -> None:
    from dpgnn_core.budget import BudgetExceeded
    from dpgnn_core.specs import ProgapSpec
    from flows.pipeline import pipeline
    from tasks.budget import store

    write_dataset(csbm(num_nodes=200, avg_degree=4, seed=64 if level == "edge" else 65),
                  tmp_path / "ds")
    spec = ProgapSpec(level=level, epsilon=4.0, stages=2, steps=3, epochs=3, batch_size=64,
                      hidden=8, device="cpu", **({"max_degree": 60} if level == "node" else {}))
    first = pipeline(spec=spec, dataset=str(tmp_path / "ds"), explain_graphs=0)
    sha = json.loads((tmp_path / "ds" / "manifest.json").read_text())["content_sha256"]
    (rec,) = _counted(sha)  # every stage and aggregation task: one reservation
    assert rec.status == "spent" and rec.release_id == first["release"].split()[2]
    ledger = Ledger.load(Path(first["artifacts_dir"]) / "ledger.json")
    delta = first["dataset_epsilon_delta"]
    own = compose([Charge(ledger)], delta)[level].epsilon
    assert first["dataset_epsilon_spent"] == pytest.approx(own)
    if level == "edge":  # the refusal path is the same gate: checked at node level
        return
    # A budget the recompute would exceed: refused before any stage trains.
    s = store()
    s.set_budget(sha, "ds", str(tmp_path / "ds"), epsilon=own * 1.5, delta=delta)
    model = Path(first["artifacts_dir"]) / "model.pt"
    mtime = model.stat().st_mtime_ns
    with pytest.raises(BudgetExceeded, match="unit node"):
        pipeline(spec=spec, dataset=str(tmp_path / "ds"), refresh=True, explain_graphs=0)
    assert len(_counted(sha)) == 1
    assert model.stat().st_mtime_ns == mtime


def _tuning_plan(epsilon: float) -> object:
    from dpgnn_core import sweep_tuning as st
    from dpgnn_core.sweeps import SweepSpec, points

    sw = SweepSpec(name="t", dataset="/none", epsilons=[epsilon], selection="private",
                   methods=[{"method": "dp-mlp", "grid": {"steps": [20, 300]},
                             "fixed": {"batch_size": 16}}])
    (p,) = st.plan_private_selection(sw, points(sw), 200)
    return p


def test_private_selection_is_charged_its_rdp_curve_and_composes(tmp_path: Path) -> None:
    """Issue 26 §3: a private-selection sweep over two ε values charged each tuning as a
    fixed (ε, δ) at the full default δ and summed the δ's: the dataset's odometer then read
    ∞ and, under a budget of 30, refused the next run with "cumulative inf > budget 30 …
    remaining ε = 27". The tuning mechanism's RDP curve is recorded instead: one selection
    alone reads its own tuning ε, two compose to a finite ε below the sum, and a later run
    fits the budget."""
    from dpgnn_core.budget import BudgetStore
    from flows.sweep_tuning import tuning_charge

    plans = [_tuning_plan(2.0), _tuning_plan(4.0)]
    charges = [tuning_charge(p) for p in plans]  # type: ignore[arg-type]
    delta = plans[0].delta  # type: ignore[attr-defined]
    for p, c in zip(plans, charges, strict=True):
        assert c.curve is not None and c.fixed is None
        assert compose([c], delta)["node"].epsilon == pytest.approx(p.epsilon, rel=1e-3)  # type: ignore[attr-defined]
    both = compose(charges, delta)["node"].epsilon
    assert both < plans[0].epsilon + plans[1].epsilon  # type: ignore[attr-defined]
    s = BudgetStore(tmp_path / "budget.sqlite")
    sha = "ab" * 32
    s.set_budget(sha, "ds", None, epsilon=30.0, delta=delta)
    for i, c in enumerate(charges):
        s.mark_spent(s.reserve(sha, "ds", None, c, method="dp-mlp (private selection)",
                               run_id=f"t{i}", delta=delta, epsilon=None))
    from dpgnn_core.privacy import PoissonGaussianEvent

    s.reserve(sha, "ds", None, Charge(Ledger().add(PoissonGaussianEvent(
        noise_multiplier=1.0, sampling_rate=0.05, steps=50, level="node"),
        sampler_scheme="poisson")), method="dp-mlp", run_id="r", delta=delta, epsilon=None)
    spent = s.summary(s.resolve(sha)).spent["node"].epsilon
    assert both < spent < 30.0


def test_run_json_survives_an_infinite_odometer(capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 26 §3: a dataset whose odometer reads ∞ (an insecure run) made every later
    `dpgnn run … --json` fail with "Out of range float values are not JSON compliant"."""
    from dpgnn_core.budget import BudgetStore
    from flows.cli.summary import print_summary
    from tasks import budget as tb

    s = tb.store()
    sha = "cd" * 32
    s.mark_spent(s.reserve(sha, "ds", None, Charge(fixed=(float("inf"), 0.0, "node",
                                                          "add_remove")),
                           method="dp-mlp", run_id="x", delta=1e-5, epsilon=float("inf")))
    assert isinstance(s, BudgetStore)
    reading = tb.odometer(sha, "node")
    assert reading["dataset_epsilon_spent"] == float("inf")
    print_summary({"method": "dp-mlp", **reading}, as_json=True)
    out = json.loads(capsys.readouterr().out)
    assert out["dataset_epsilon_spent"] == "inf" and out["dataset_epsilon_by_unit"]["node"] == "inf"


def _spend(sha: str, z: float, run: str) -> None:
    """One counted release of two Gaussian releases at noise ``z`` (edge unit)."""
    from dpgnn_core.privacy import GaussianEvent
    from tasks.budget import store

    s = store()
    s.mark_spent(s.reserve(sha, "ds", None, Charge(Ledger().add(
        GaussianEvent(noise_multiplier=z, count=2, level="edge"))), method="gap-edp",
        run_id=run, delta=1e-5, epsilon=None))


def test_budget_set_again_cannot_raise_or_replace_a_spent_budget(tmp_path: Path) -> None:
    """Issue 33 §1: `budget set` on a spent budget replaced it without a word (5 -> 0.1 ->
    100, and a run refused before was admitted). Now, once the epoch has released: a lower
    bound the releases still fit is accepted (the guarantee stays the one fixed in
    advance), a lower one they exceed and any raise are refused, and `--replace --yes`
    ends the epoch's guarantee (recorded, shown) and starts a new epoch."""
    from dpgnn_core.budget import BudgetExceeded
    from flows.cli import app
    from tasks.budget import store

    runner = CliRunner()
    home = ["--home", str(tmp_path / "home")]
    write_dataset(csbm(num_nodes=100, seed=64), tmp_path / "ds")
    ds = str(tmp_path / "ds")
    sha = json.loads((tmp_path / "ds" / "manifest.json").read_text())["content_sha256"]

    def budget(*args: str, answer: str | None = None) -> Any:
        return runner.invoke(app, [*home, "budget", *args], input=answer)

    assert budget("set", ds, "--epsilon", "5", "--delta", "1e-5").exit_code == 0
    assert budget("set", ds, "--epsilon", "6", "--delta", "1e-5").exit_code == 0  # unused
    _spend(sha, 4.0, "a")
    spent = store().summary(store().resolve(sha)).spent["edge"].epsilon
    assert 0.1 < spent < 4.0
    for eps, delta in (("0.1", "1e-5"), ("100", "1e-5"), ("6", "1e-4"), ("5", "1e-3")):
        r = budget("set", ds, "--epsilon", eps, "--delta", delta)
        assert r.exit_code == 2, r.output
        assert r.output.startswith("error: refused to ") and "--replace --yes" in r.output
    b = store().summary(store().resolve(sha)).budget
    assert (b.epsilon, b.delta, b.epoch) == (6.0, 1e-5, 0)  # nothing changed
    with pytest.raises(BudgetExceeded):  # the run 100 would have admitted stays refused
        _spend(sha, 0.5, "big")

    r = budget("set", ds, "--epsilon", "5", "--delta", "1e-5")  # lower, still fits
    assert r.exit_code == 0, r.output
    assert "guarantee of epoch 0: ε = 6 at δ = 1e-05" in r.output
    assert "admission lowered within the epoch to ε = 5" in r.output
    b = store().summary(store().resolve(sha)).budget
    assert b.lowered and b.stated is not None and b.stated.epsilon == 6.0

    r = budget("set", ds, "--epsilon", "100", "--delta", "1e-5", "--replace", "--yes",
               "--reason", "new consent")
    assert r.exit_code == 0, r.output
    s = store().summary(store().resolve(sha))
    assert (s.budget.epsilon, s.budget.epoch, s.spent) == (100.0, 1, {})
    assert not s.budget.lowered
    r = budget("show", ds)
    assert "guarantee of epoch 1: ε = 100" in r.output
    (line,) = [ln for ln in r.output.splitlines() if "replaced (epoch ended)" in ln]
    assert "the guarantee of epoch 0 ended here" in line and "new consent" in line
    _spend(sha, 0.5, "big")  # admitted in the new epoch, under the new budget
    r = budget("set", ds, "--epsilon", "200", "--delta", "1e-5", "--replace", answer="n\n")
    assert r.exit_code == 1 and "not replaced" in r.output  # asked, refused
    assert store().summary(store().resolve(sha)).budget.epoch == 1


def test_a_release_without_privacy_voids_the_guarantee_shown(tmp_path: Path) -> None:
    """Issue 33 §1: after `--allow-non-private-release`, `budget show` and the MLflow tag
    still read a finite ε for the units that release bears on: both read ∞, "no guarantee
    since release N"."""
    from flows.cli import app
    from tasks import budget as tb

    runner = CliRunner()
    write_dataset(csbm(num_nodes=100, seed=65), tmp_path / "ds")
    ds = str(tmp_path / "ds")
    sha = json.loads((tmp_path / "ds" / "manifest.json").read_text())["content_sha256"]
    r = runner.invoke(app, ["--home", str(tmp_path / "home"), "budget", "set", ds,
                            "--epsilon", "20", "--delta", "1e-5"])
    assert r.exit_code == 0, r.output
    _spend(sha, 4.0, "a")
    assert tb.odometer(sha, "edge")["dataset_epsilon_spent"] < 20
    tb.admit_non_private({"content_sha256": sha, "name": "ds", "path": ds}, "gcn",
                         allowed=True)
    (rec,) = [r for r in tb.store().summary(tb.store().resolve(sha)).records
              if r.status == "non-private"]
    r = runner.invoke(app, ["budget", "show", ds])
    (line,) = [ln for ln in r.output.splitlines() if "spent on edge" in ln]
    assert "post hoc ε = inf" in line and f"no guarantee since release {rec.id}" in line
    assert f"VOID: no guarantee since release {rec.id}" in r.output
    reading = tb.odometer(sha, "edge")
    assert reading["dataset_epsilon_spent"] == float("inf")
    tag = tb.budget_tags(reading)["dpgnn.dataset_epsilon_spent"]
    assert tag.startswith("inf at δ") and f"no guarantee since release {rec.id}" in tag
