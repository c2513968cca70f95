"""`dpgnn run auto --level LEVEL --epsilon E` (issue 49 §2): in `dpgnn run --help`, its own
options, bad requests refused in one line before Prefect starts, the chosen spec and the
choice handed to the pipeline flow, and end to end: the ledger's ε is the requested ε,
the budget is charged once, the summary and the MLflow page say what was chosen."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dpgnn_core.data.store import write_dataset
from dpgnn_core.data.synthetic import csbm
from tests.flows.clirunner import CliRunner, one_error_line

runner = CliRunner()


def _cli(tmp_path: Path, *args: str) -> Any:
    from flows.cli import app

    return runner.invoke(app, ["--home", str(tmp_path / "home"), *args],
                         env={"COLUMNS": "400"})


def test_auto_is_a_run_command_with_its_own_options(tmp_path: Path) -> None:
    listing = _cli(tmp_path, "run", "--help")
    assert listing.exit_code == 0, listing.output
    assert any(line.strip("│ ").startswith("auto ") for line in listing.output.splitlines())
    r = _cli(tmp_path, "run", "auto", "--help")
    assert r.exit_code == 0, r.output
    for option in ("--dataset", "--level", "--epsilon", "--delta", "--max-degree", "--k",
                   "--seed", "--device", "--json", "--refresh"):
        assert f"{option} " in r.output, option
    assert "node_feature" in r.output and "k_neighbor" in r.output


@pytest.mark.parametrize(("args", "message"), [
    (["--level", "nodes", "--epsilon", "4"], "--level 'nodes': choose one of node, "),
    (["--level", "node", "--epsilon", "4"], "--level node needs --max-degree D"),
    (["--level", "edge", "--epsilon", "4", "--k", "2"], "--k 2 applies to --level "
                                                        "k_neighbor only"),
    (["--epsilon", "4"], "Missing option '--level'"),
])
def test_a_bad_request_is_one_line_before_the_flow(
        tmp_path: Path, started: list[dict[str, Any]], args: list[str], message: str
        ) -> None:
    write_dataset(csbm(num_nodes=100, seed=3), tmp_path / "ds")
    r = _cli(tmp_path, "run", "auto", "--dataset", str(tmp_path / "ds"), *args)
    assert r.exit_code == 2, r.output
    assert message in one_error_line(r.output)
    assert started == []


def test_the_flow_gets_the_chosen_spec_and_the_choice(tmp_path: Path,
                                                      started: list[dict[str, Any]]) -> None:
    from tests.flows.conftest import FlowStarted

    write_dataset(csbm(num_nodes=100, seed=3), tmp_path / "ds")
    r = _cli(tmp_path, "run", "auto", "--dataset", str(tmp_path / "ds"), "--level", "node",
             "--max-degree", "60", "--epsilon", "16", "--seed", "3")
    assert isinstance(r.exception, FlowStarted), r.output
    (call,) = started
    spec, auto = call["spec"], call["auto"]
    assert spec.method == "dpdgc-ndp" and spec.max_degree == 60 and spec.epsilon == 16
    assert spec.seed == 3
    assert auto["method"] == "dpdgc-ndp" and auto["rule"] == "node-graph"
    assert auto["epsilon_choice"] == 0.0 and "median_degree" not in auto["inputs"]
    assert "auto: dpdgc-ndp by rule node-graph" in r.output


@pytest.mark.slow
def test_auto_end_to_end_spends_the_requested_epsilon_once(tmp_path: Path) -> None:
    """node_feature at ε = 2 on a sparse graph: DP-MLP. The ledger's ε is the requested
    ε (the choice spent none), the dataset's budget holds one charge of that ledger, and
    the summary and the MLflow run say what was chosen and from what."""
    from mlflow.tracking import MlflowClient

    from dpgnn_core.budget import COUNTED, Charge, compose
    from dpgnn_core.methods.auto import AutoRequest
    from dpgnn_core.privacy.events import Ledger
    from flows.pipeline import auto_pipeline
    from tasks.budget import store

    ds = tmp_path / "ds"
    write_dataset(csbm(num_nodes=200, avg_degree=3, seed=8), ds)
    sha = json.loads((ds / "manifest.json").read_text())["content_sha256"]
    store().set_budget(sha, "ds", str(ds), epsilon=8.0, delta=1e-3)
    summary = auto_pipeline(AutoRequest(level="node_feature", epsilon=2.0, device="cpu"),
                            str(ds), explain_graphs=0)
    assert summary["method"] == "dp-mlp"
    assert summary["auto"]["method"] == "dp-mlp" and summary["auto"]["epsilon_choice"] == 0
    assert summary["auto"]["inputs"]["median_degree"] >= 0
    ledger = Ledger.load(Path(summary["artifacts_dir"]) / "ledger.json")
    assert 0.97 * 2.0 <= summary["epsilon"] <= 2.0 + 1e-9
    s = store()
    (rec,) = [r for r in s.summary(s.resolve(sha)).records if r.status in COUNTED]
    assert rec.method == "dp-mlp"
    delta = summary["dataset_epsilon_delta"]
    assert summary["dataset_epsilon_spent"] == pytest.approx(
        compose([Charge(ledger)], delta)["node"].epsilon)
    tags = MlflowClient(summary["mlflow_tracking_uri"]).get_run(
        summary["mlflow_run_id"]).data
    assert tags.tags["dpgnn.auto.method"] == "dp-mlp"
    assert tags.tags["dpgnn.auto.epsilon_choice"] == "0"
    assert "Chosen by `dpgnn run auto`" in tags.tags["mlflow.note.content"]
    assert tags.params["auto.rule"] == "feature-floor"
