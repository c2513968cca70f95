"""Checks before the work (issue 33 §5, §6): a run whose release bounds nothing about the
unit a dataset's budget protects is refused before Prefect starts, naming the unit; a
staged run's whole plan is admitted before any of its stages trains (GAP-EDP's encoder,
ProGAP-EDP's first stage release nothing private and used to train first); and a sweep
marks a refused point of any kind in its table and goes on."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dpgnn_core.data.store import write_dataset
from dpgnn_core.data.synthetic import csbm
from tests.flows.clirunner import CliRunner


def _dataset(tmp_path: Path, seed: int, nodes: int = 200) -> tuple[str, str]:
    write_dataset(csbm(num_nodes=nodes, feature_dim=8, seed=seed), tmp_path / "ds")
    sha = json.loads((tmp_path / "ds" / "manifest.json").read_text())["content_sha256"]
    return str(tmp_path / "ds"), sha


@pytest.mark.parametrize("args", [
    ["run", "gap-edp", "--epochs", "1"],
    ["run", "dpdgc-kndp", "--k", "1", "--steps", "2"],
    ["run", "dpdgc-edp", "--epochs", "1"],
    ["audit", "progap-edp", "--epochs", "1", "--canaries", "20"],
])
def test_cli_refuses_a_release_that_bounds_nothing_about_the_protected_unit(
        tmp_path: Path, args: list[str]) -> None:
    """Under a budget of nodes, an edge-level (or k-neighbour) run would be charged
    ε = ∞ for a node: one line, exit 2, before Prefect starts and before anything trains
    (it used to train GAP's encoder for 100 s, or start Prefect, then fail with
    "requests ε = inf")."""
    from flows.cli import app

    ds, _ = _dataset(tmp_path, 81)
    home = ["--home", str(tmp_path / "home")]
    r = CliRunner().invoke(app, [*home, "budget", "set", ds, "--epsilon", "8", "--delta",
                                 "1e-5", "--unit", "node"])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(app, [*home, *args, "--dataset", ds, "--epsilon", "1"])
    assert r.exit_code == 2, r.output
    (line,) = r.output.strip().splitlines()
    assert line.startswith("error: ")
    assert "bounds nothing about the protected unit node" in line
    assert args[1] in line and "Nothing was trained" in line and "inf" not in line
    assert not (tmp_path / "home" / "artifacts").exists()
    assert not (tmp_path / "home" / "prefect").exists() or not any(
        (tmp_path / "home" / "prefect").glob("*.db-wal"))


def test_a_unit_the_run_bounds_passes_the_check(tmp_path: Path) -> None:
    """The check refuses only what cannot be bounded: a node-level run under a budget of
    edges (group size 2) and any run before the budget's first release pass."""
    from tasks.budget import admit_units, store

    ds, sha = _dataset(tmp_path, 82)
    summary = {"content_sha256": sha, "name": "ds"}
    store().set_budget(sha, "ds", ds, epsilon=8.0, delta=1e-5)  # no unit named yet
    admit_units(summary, "gap-edp", [("edge", "add_remove")])
    store().set_budget(sha, "ds", ds, epsilon=8.0, delta=1e-5, units=["edge"])
    admit_units(summary, "gap-ndp", [("node", "add_remove")])
    admit_units(summary, "dpdgc-kndp", [("k_neighbor", "add_remove")])


@pytest.mark.parametrize("family", ["gap", "progap"])
def test_a_staged_plan_over_the_budget_is_refused_before_any_stage_trains(
        tmp_path: Path, family: str) -> None:
    """GAP-EDP's encoder (ProGAP-EDP's stage 0) releases nothing private, so the budget
    used to be asked only at the aggregation, after the encoder had trained: now the whole
    plan is checked before its first step, and nothing is reserved or recorded."""
    from dpgnn_core.budget import BudgetExceeded
    from dpgnn_core.data.store import read_dataset
    from dpgnn_core.methods import gap, progap
    from dpgnn_core.methods.private_run import PrivateRun
    from dpgnn_core.specs import GapSpec, ProgapSpec
    from tasks.budget import gate_for, new_owner, store
    from tasks.ingest import dataset_summary

    ds, sha = _dataset(tmp_path, 83)
    store().set_budget(sha, "ds", ds, epsilon=0.5, delta=1e-5, units=["edge"])
    data = read_dataset(ds)
    steps: list[int] = []

    def on_step(step: int, rec: dict[str, float]) -> None:
        steps.append(step)

    if family == "gap":
        spec: Any = GapSpec(method="gap-edp", epsilon=1.0, epochs=1, device="cpu")
        _, z, _ = gap.calibrate_gap(data, spec)
        train = lambda gate: gap.fit_encoder(  # noqa: E731
            data, spec, z, PrivateRun(on_step, gate=gate))
    else:
        spec = ProgapSpec(method="progap-edp", epsilon=1.0, epochs=1, device="cpu")
        _, z, _ = progap.calibrate_progap(data, spec)
        model = progap.new_model(data, spec)
        train = lambda gate: progap.fit_stage(  # noqa: E731
            data, spec, z, 0, model, None, PrivateRun(on_step, gate=gate))
    with pytest.raises(BudgetExceeded, match="exceeded for unit edge"), \
            gate_for(dataset_summary(ds), spec.method, spec, new_owner()) as gate:
        train(gate)
    assert steps == []  # not one step trained
    s = store()
    assert s.summary(s.resolve(sha)).records == []  # nothing reserved or recorded


@pytest.mark.slow
def test_a_sweep_marks_a_refused_non_private_point_and_goes_on(tmp_path: Path) -> None:
    """On a budgeted dataset, a sweep's non-private point (the README tour's dpdgc-inf
    beside dpdgc-edp) is marked refused in the table, as an over-budget point is; the
    private points run (the whole sweep used to stop with the non-private refusal)."""
    from dpgnn_core.sweeps import SweepSpec, markdown_table
    from flows.cli.sweep import _print_table
    from flows.sweep import sweep
    from tasks.budget import store

    ds, sha = _dataset(tmp_path, 84, nodes=300)
    store().set_budget(sha, "ds", ds, epsilon=16.0, delta=1e-4)
    spec = SweepSpec.model_validate({
        "name": "refused-kinds", "dataset": ds, "epsilons": [1], "seeds": [0],
        "methods": [{"method": "dp-mlp", "grid": {"steps": [3], "hidden": [8],
                                                  "batch_size": [40]}},
                    {"method": "mlp", "grid": {"epochs": [2], "hidden": [8]}}]})
    result = sweep(sweep_spec=spec, write=False)
    rows = {r["method"]: r for r in result["rows"]}
    assert rows["mlp"]["cache"] == "Refused" and rows["mlp"]["private"] is False
    assert "mlp is not private" in rows["mlp"]["refused"]
    assert rows["dp-mlp"]["refused"] is None and rows["dp-mlp"]["val_accuracy"] is not None
    assert "refused (budget)" in markdown_table(result["rows"])
    _print_table(result)  # a refused point without ε prints as ∞
    s = store()
    assert [r.method for r in s.summary(s.resolve(sha)).records] == ["dp-mlp"]


@pytest.mark.slow
def test_a_sweep_point_released_by_a_staged_run_reuses_its_stages_and_release(
        tmp_path: Path) -> None:
    """`dpgnn run gap-edp` released a plan; a sweep whose point has that very plan runs
    through the same staged runner (issue 50 §1): the point re-uses the run's cached stages
    and release (same artifact folder, same release id, nothing trained, recorded as a
    re-use at no cost), and the sweep's other point trains and is charged. The point used
    to train GAP in one task, which had no cache of the run's stages: it was refused as a
    lost release (and before that, charged twice)."""
    from dpgnn_core.methods.registry import get
    from dpgnn_core.sweeps import SweepSpec, points
    from flows.pipeline import pipeline
    from flows.sweep import sweep
    from tasks.budget import plan_key, store
    from tasks.ingest import dataset_summary

    ds, sha = _dataset(tmp_path, 85, nodes=300)
    store().set_budget(sha, "ds", ds, epsilon=16.0, delta=1e-4)
    grid = {"hops": 1, "epochs": 1, "encoder_dim": 8, "hidden": 8, "batch_size": 64}
    spec = SweepSpec.model_validate({
        "name": "after-a-run", "dataset": ds, "epsilons": [1, 2], "seeds": [0],
        "methods": [{"method": "gap-edp", "grid": {k: [v] for k, v in grid.items()}}]})
    run_spec = get("gap-edp").spec(epsilon=1.0, seed=0, **grid)
    summary = dataset_summary(ds)
    assert plan_key(summary, run_spec) in {plan_key(summary, p.spec) for p in points(spec)}
    run = pipeline(spec=run_spec, dataset=ds)
    assert run["release"].startswith("new release")
    model = Path(run["artifacts_dir"])
    release = json.loads((model / "report.json").read_text())["release"]["id"]
    written = {f: f.stat().st_mtime_ns for f in model.parent.parent.glob("*/*/*")}
    result = sweep(sweep_spec=spec, write=False)
    rows = {r["epsilon"]: r for r in result["rows"]}
    assert rows[1.0]["refused"] is None and rows[1.0]["cache"] == "Cached"
    assert rows[1.0]["artifacts_dir"] == str(model)  # the run's classifier, its layout
    assert json.loads((model / "report.json").read_text())["release"]["id"] == release
    assert rows[1.0]["val_accuracy"] == run["val_accuracy"]
    assert rows[2.0]["refused"] is None and rows[2.0]["cache"] == "Completed"
    # the ε = 2 point is laid out as a `dpgnn run` is: its stages' folders beside the run's
    other = Path(rows[2.0]["artifacts_dir"])
    assert other.parent == model.parent and other != model
    assert sorted(f.name for f in other.iterdir()) == sorted(f.name for f in model.iterdir())
    assert {f: t for f, t in written.items() if f.exists()} == written  # nothing rewritten
    s = store()
    records = s.summary(s.resolve(sha)).records
    assert sorted(r.status for r in records) == ["reuse", "spent", "spent"]
    (reuse,) = [r for r in records if r.status == "reuse"]
    assert reuse.release_id == release and reuse.epsilon == 0.0
    assert next(r.release_id for r in records if r.status == "spent") == release
