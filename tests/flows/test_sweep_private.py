"""Private selection through the sweep flow (Papernot & Steinke): only the selected
candidate is released, with the tuning ε of the trained candidates' ledgers."""

from __future__ import annotations

import csv
import json
import secrets
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from dpgnn_core.data.store import write_dataset
from dpgnn_core.data.synthetic import csbm
from dpgnn_core.privacy.events import GaussianEvent, Ledger
from dpgnn_core.privacy.tuning import tuning_epsilon
from dpgnn_core.sweep_tuning import SCORE_EVENT, SCORE_NOTE, draw
from dpgnn_core.sweeps import SweepSpec, TuningSpec

pytestmark = pytest.mark.slow


def _randbits_covering_both(m: int = 2) -> int:
    """A value for secrets.randbits whose draw has K >= 2 and every configuration."""
    dist = TuningSpec().distribution(m)
    stub: Any = SimpleNamespace(distribution=dist, candidates=[
        SimpleNamespace(config_id=str(i)) for i in range(m)])
    for v in range(10_000):
        ds = draw(stub, np.random.default_rng(v))
        if 2 <= len(ds) <= 4 and {d.index for d in ds} == set(range(m)):
            return v
    raise AssertionError("no value found")


def test_private_selection_end_to_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                      seeded_mlflow: Callable[[Path], bool]) -> None:
    from flows.sweep import sweep

    write_dataset(csbm(num_nodes=240, seed=5), tmp_path / "ds")
    value = _randbits_covering_both()
    calls: list[int] = []

    real = secrets.randbits

    def fake(bits: int) -> int:
        calls.append(bits)
        return value if bits == 128 else real(bits)

    monkeypatch.setattr(secrets, "randbits", fake)
    from flows.sweep_tuning import PrivateSelection

    finish = PrivateSelection.finish

    def late_finish(self: PrivateSelection) -> dict[str, Any]:
        from prefect.futures import wait

        wait([f for _plan, cands in self.submitted for c in cands for f in c[2:]])
        time.sleep(1.1)  # the reservation and the candidates' own times: a second earlier
        return finish(self)

    monkeypatch.setattr(PrivateSelection, "finish", late_finish)
    spec = SweepSpec(name="priv", dataset=str(tmp_path / "ds"), epsilons=[4.0],
                     selection="private", methods=[
                         {"method": "dp-mlp", "grid": {"steps": [3, 8]},
                          "fixed": {"batch_size": 16, "hidden": 8, "device": "cpu"}}])
    # called from Python, the flow writes its table, plots and MLflow runs itself (into a
    # migrated, empty store: as a new one, without the migration)
    seeded_mlflow(tmp_path)
    result = sweep(sweep_spec=spec, tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    assert calls.count(128) == 1  # one secret generator for the one selection
    (row,) = result["rows"]  # the selected candidate only
    withheld = result["withheld"]
    assert len(withheld) >= 1 and all(not w["released"] for w in withheld)
    assert row["val_accuracy"] >= max(w["val_accuracy"] for w in withheld)
    (best,) = result["best"]
    tuning = best["tuning"]
    # Each candidate's ledger is its training (as trained, ledger.json) and its noisy
    # validation score, one Gaussian event at the training's unit and relation.
    ledgers = [Ledger.from_dict(r["ledger"]) for r in [best, *withheld]]
    for r, led in zip([row, *withheld], ledgers, strict=True):
        trained = Ledger.load(Path(r["artifacts_dir"]) / "ledger.json")
        assert led.entries[:-1] == trained.entries
        score = led.events[-1]
        assert isinstance(score, GaussianEvent) and score.description == SCORE_EVENT
        assert (score.level, score.relation, score.noise_multiplier) == (
            "node", "add_remove", tuning["score"]["noise_multiplier"])
    # The released validation accuracy is the noisy count over n_val, not the exact one.
    vs = best["val_score"]
    assert row["val_accuracy"] == best["val_accuracy_mean"] == vs["noisy_correct"] / vs["n_val"]
    assert vs["noisy_correct"] != round(vs["noisy_correct"])
    # Independent recomputation from the candidates' ledgers (both configurations were
    # drawn): the reported ε is the tuning ε of their pointwise maximum, training + score.
    assert {r["config_id"] for r in [row, *withheld]} == set(tuning["noise_multipliers"])
    dist = TuningSpec().distribution(2)
    eps = tuning_epsilon(ledgers, dist, tuning["delta"])
    assert row["epsilon_spent"] == pytest.approx(eps, rel=1e-12)
    assert best["epsilon_spent"] == row["epsilon_spent"] <= 4.0
    # each candidate alone is cheaper than the selection
    assert all(tuning_epsilon(x, dist, tuning["delta"]) < eps for x in ledgers)
    assert "Papernot & Steinke 2022" in best["report"]
    assert SCORE_NOTE not in best["unaccounted"]  # dp-mlp's score is a private release
    assert not any("validation accuracy" in u for u in best["unaccounted"])
    assert not any("selected among" in u for u in best["unaccounted"])
    assert row["seed"] != 0  # a secret seed per candidate, not the sweep's
    # what is written and logged: the released row only
    paths = result["paths"]
    assert Path(paths["privacy_utility"]).is_file()
    with open(paths["csv"]) as f:
        table = list(csv.DictReader(f))
    assert [r["artifacts_dir"] for r in table] == [row["artifacts_dir"]]
    assert json.loads(Path(paths["best"]).read_text())[0]["selection"] == "private"
    logged = result["mlflow"]
    assert "mlflow_error" not in logged, logged
    from mlflow.tracking import MlflowClient

    client = MlflowClient(logged["mlflow_tracking_uri"])
    runs = client.search_runs([logged["mlflow_experiment_id"]])
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId")]
    assert len(children) == 1
    tags = children[0].data.tags
    assert tags["dpgnn.selected"] == "true" and "Papernot" in tags["dpgnn.selection"]
    assert children[0].data.metrics["epsilon_spent"] == pytest.approx(eps)
    assert tags["dpgnn.dataset_epsilon_spent"].startswith(f"{eps:.4g} at δ")
    # The dataset's odometer: the tuning mechanism charged once, by its RDP curve
    # (issue 26 §3: no longer a fixed (ε, δ)), covering every candidate; no candidate
    # charged on its own.
    from tasks.budget import store

    s = store()
    records = s.summary(s.resolve(result["dataset"]["content_sha256"])).records
    counted = [r for r in records if r.status in ("reserved", "spent")]
    assert len(counted) == 1 and counted[0].charge.curve is not None
    assert counted[0].charge.curve.epsilon == pytest.approx(eps)
    assert counted[0].charge.curve.delta == pytest.approx(tuning["delta"])
    # ... naming the released candidate (not the first to finish)
    released = json.loads((Path(row["artifacts_dir"]) / "report.json").read_text())
    assert counted[0].release_id == released["release"]["id"]
    from flows.sweep_tuning import CURATOR_NOTE

    assert CURATOR_NOTE in result["notes"]
    _every_published_time_is_the_release_moment(result, counted[0], children[0], client)


def _every_published_time_is_the_release_moment(result: dict[str, Any], record: Any,
                                                child: Any, client: Any) -> None:
    """Issue 33 §3: the tuning record's time (the reservation, before the candidates
    trained), report.json's release.created (when the chosen candidate finished) and the
    MLflow parent run (the release) together spanned the selection, whose duration grows
    with K. Every time the selection publishes is now one moment T, taken after every
    candidate finished (the test delays the release by 1.1 s, so any earlier time shows)."""
    import sqlite3
    from datetime import UTC, datetime

    from tasks.budget import store
    from tasks.evaluate import artifact_intact

    parent = client.get_run(child.data.tags["mlflow.parentRunId"])
    ms = parent.info.start_time  # T as MLflow shows it
    at = datetime.fromtimestamp(ms / 1000, UTC)
    when = at.isoformat(timespec="seconds")
    folder = Path(result["rows"][0]["artifacts_dir"])
    report = json.loads((folder / "report.json").read_text())
    assert report["release"]["created"] == when  # restamped ...
    manifest = json.loads((folder / "manifest.json").read_text())
    assert artifact_intact(folder, manifest["files"])  # ... with its manifest
    for w in result["withheld"]:  # T follows every candidate (the curator's only)
        own = json.loads((Path(w["artifacts_dir"]) / "report.json").read_text())
        assert own["release"]["created"] < when
    # the odometer's record (`budget show`), created and updated alike
    assert record.created == when
    with sqlite3.connect(store().path) as db:
        assert db.execute("SELECT created, updated FROM releases WHERE id=?",
                          (record.id,)).fetchone() == (when, when)
    # the files the user sees: the released artifact and the sweep's results
    files = [folder, *folder.iterdir(), *map(Path, result["paths"].values())]
    assert {p.stat().st_mtime for p in files} == {at.timestamp()}
    # MLflow: the parent and the released candidate's run start and end at T, and the
    # metrics carry it
    assert parent.info.start_time == parent.info.end_time == ms
    assert child.info.start_time == child.info.end_time == ms
    for key in child.data.metrics:
        assert {m.timestamp for m in client.get_metric_history(child.info.run_id, key)} == {ms}
