"""`dpgnn audit`: the flow's cached steps, its charge to the real dataset's budget, the
multi-run variant, the MLflow run, and the CLI's refusals before Prefect starts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dpgnn_core.data.store import write_dataset
from dpgnn_core.data.synthetic import csbm
from tests.flows.clirunner import CliRunner


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("audit") / "ds"
    write_dataset(csbm(num_nodes=200, num_classes=4, feature_dim=8, avg_degree=4, seed=71),
                  folder)
    return folder


@pytest.mark.slow
def test_audit_flow_steps_cache_budget_and_mlflow(dataset: Path) -> None:
    from mlflow.tracking import MlflowClient

    from dpgnn_core.specs import DpMlpSpec
    from flows.audit import audit
    from tasks.budget import store

    spec = DpMlpSpec(epsilon=2.0, steps=10, device="cpu")
    first = audit(spec=spec, dataset=str(dataset), canaries=60)
    assert first["cache"] == {"canaries": "Completed", "train": "Completed",
                              "score": "Completed"}
    assert first["reported_epsilon"] == pytest.approx(2.0, rel=1e-3)
    assert first["epsilon_lower"] < first["reported_epsilon"] and not first["refuted"]
    assert first["m"] == 60 and first["guesses"] == 30 and first["audit"] == "one-run"
    saved = json.loads(Path(first["audit_json"]).read_text())
    assert len(saved["scores"]) == 60 and len(saved["included"]) == 60
    assert sum(g != 0 for g in saved["guesses"]) == 30
    assert Path(first["histogram"]).read_bytes()[:4] == b"\x89PNG"
    # the audit trained on the real data plus canaries: charged to the real dataset
    sha = json.loads((dataset / "manifest.json").read_text())["content_sha256"]
    s = store()
    records = s.summary(s.resolve(sha)).records
    assert [r.status for r in records] == ["spent"] and records[0].method == "dp-mlp"
    run = MlflowClient(first["mlflow_tracking_uri"]).get_run(first["mlflow_run_id"])
    assert float(run.data.tags["dpgnn.audit.epsilon_lower"]) == pytest.approx(
        first["epsilon_lower"], abs=1e-5)
    assert run.data.tags["mlflow.note.content"].startswith("Empirical privacy audit of dp-mlp")
    assert run.data.metrics["audit_epsilon_lower"] == pytest.approx(first["epsilon_lower"])
    arts = {a.path for a in MlflowClient(first["mlflow_tracking_uri"]).list_artifacts(
        first["mlflow_run_id"])}
    assert {"audit.json", "scores.png"} <= arts

    again = audit(spec=spec, dataset=str(dataset), canaries=60)
    assert set(again["cache"].values()) == {"Cached"}
    assert again["epsilon_lower"] == first["epsilon_lower"]
    assert len(s.summary(s.resolve(sha)).records) == 1  # a cached audit spends nothing


@pytest.mark.slow
def test_multi_run_audit_flow(dataset: Path) -> None:
    from dpgnn_core.specs import DpMlpSpec
    from flows.audit import audit

    spec = DpMlpSpec(epsilon=None, steps=10, device="cpu", seed=5)
    res = audit(spec=spec, dataset=str(dataset), runs=8)
    assert res["audit"] == "multi-run" and res["m"] == 1 and res["guesses"] == 4
    assert len(res["models"]) == 8 and len(set(res["models"])) == 8  # eight trainings
    seeds = [json.loads((Path(m) / "manifest.json").read_text())["spec"]["seed"]
             for m in res["models"]]
    assert seeds != list(range(5, 13)) and len(set(seeds)) == 8  # independent draws
    assert sum(res["counts"].values()) == 4
    saved = json.loads(Path(res["audit_json"]).read_text())
    assert saved["guesses"][:4] == [0, 0, 0, 0]  # the first half chose the threshold


@pytest.mark.slow
def test_a_staged_method_is_audited_through_the_staged_runner(tmp_path: Path) -> None:
    """Issue 50 §1: GAP's audit trains through the stages `dpgnn run` runs (one artifact
    layout: the classifier's folder with its aggregations beside), each gated stage
    charged to the real dataset's budget, once; a rerun is cached and costs nothing. It
    used to train GAP in one `train` task, with the aggregations stored in the model's
    folder."""
    from dpgnn_core.methods.registry import get
    from flows.audit import audit
    from tasks.budget import store

    write_dataset(csbm(num_nodes=200, num_classes=4, feature_dim=8, avg_degree=4, seed=72),
                  tmp_path / "ds")
    sha = json.loads((tmp_path / "ds" / "manifest.json").read_text())["content_sha256"]
    s = store()
    s.set_budget(sha, "ds", str(tmp_path / "ds"), epsilon=16.0, delta=1e-4)
    spec = get("gap-edp").spec(epsilon=2.0, hops=1, epochs=1, encoder_dim=8, hidden=8,
                               batch_size=64, device="cpu")
    first = audit(spec=spec, dataset=str(tmp_path / "ds"), canaries=20)
    assert {"calibrate", "graph", "encoder", "aggregate", "train"} <= set(first["cache"])
    assert first["cache"]["train"] == "Completed"
    (model,) = map(Path, first["models"])
    assert model.parent.name == "gap_classifier"
    manifest = json.loads((model / "manifest.json").read_text())
    assert Path(manifest["aggregations"]["path"]).parent.name == "gap_aggregate"
    assert first["reported_epsilon"] == pytest.approx(2.0, rel=1e-3)
    records = s.summary(s.resolve(sha)).records
    assert [(r.status, r.method) for r in records] == [("spent", "gap-edp")]
    again = audit(spec=spec, dataset=str(tmp_path / "ds"), canaries=20)
    assert set(again["cache"].values()) == {"Cached"}
    assert again["epsilon_lower"] == first["epsilon_lower"]
    assert s.summary(s.resolve(sha)).records == records  # a cached audit spends nothing


@pytest.mark.parametrize("args,needle", [
    (["gap-ndp", "--epsilon", "1", "--max-degree", "30", "--attack", "reproduced-noise"],
     "reproduced-noise attack is implemented for GAP-EDP only"),
    (["dp-mlp", "--epsilon", "1", "--canaries", "10", "--guess-fraction", "1.5"],
     "guess_fraction"),
    (["dp-mlp", "--epsilon", "1", "--beta", "1"], "--beta 1.0"),
    (["dp-mlp", "--epsilon", "1", "--runs", "2"], "--runs"),
    (["dp-mlp", "--epsilon", "1", "--set", "hops=2"], "dp-mlp does not take hops"),
])
def test_cli_refuses_before_prefect(dataset: Path, args: list[str], needle: str) -> None:
    from flows.cli import app

    r = CliRunner().invoke(app, ["audit", args[0], "--dataset", str(dataset), *args[1:]])
    assert r.exit_code == 2, r.output
    assert needle in r.output
    assert "Prefect flow" not in r.output


def test_cli_commands_match_the_registry() -> None:
    from dpgnn_core.methods.registry import METHODS
    from flows.cli.audit import auditable

    assert set(auditable()) == {n for n, m in METHODS.items() if m.entry.canary is not None}
