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
    r = _cli(tmp_path, "run", "auto", "--dataset", str(tmp_path / "ds"), "--level", "edge",
             "--epsilon", "16", "--seed", "3")
    assert isinstance(r.exception, FlowStarted), r.output
    (call,) = started
    spec, auto = call["spec"], call["auto"]
    assert spec.method == "progap-edp" and spec.epsilon == 16 and spec.seed == 3
    assert auto["method"] == "progap-edp" and auto["rule"] == "edge-graph"
    assert auto["epsilon_choice"] == 0.0 and "median_degree" not in auto["inputs"]
    assert "auto: chose progap-edp by rule edge-graph" in r.output
    # node level, D close to N: the noisy degree would cost more than a tenth of ε
    r = _cli(tmp_path, "run", "auto", "--dataset", str(tmp_path / "ds"), "--level", "node",
             "--max-degree", "60", "--epsilon", "16")
    assert isinstance(r.exception, FlowStarted), r.output
    assert started[-1]["spec"].method == "dp-mlp"
    assert started[-1]["auto"]["statistic"]["bought"] is False


def test_the_noisy_degree_is_charged_once_and_reused(tmp_path: Path,
                                                     started: list[dict[str, Any]]) -> None:
    """k-neighbour level at ε = 4: the rule reads the noisy mean degree. It is reserved and
    spent on the dataset's budget before the flow starts, the method gets the ε left, and
    the same command again re-uses the stored statistic at no cost (one counted record)."""
    from dpgnn_core.budget import COUNTED
    from tasks.auto_choice import METHOD
    from tasks.budget import store
    from tests.flows.conftest import FlowStarted

    ds = tmp_path / "ds"
    write_dataset(csbm(num_nodes=200, avg_degree=3, seed=3), ds)
    # (32: the odometer reads the k-neighbour statistic as an edge release, and DP-MLP's
    # node-level ε as an edge bound at group size 2)
    assert _cli(tmp_path, "budget", "set", str(ds), "--epsilon", "32",
                "--delta", "1e-3").exit_code == 0
    args = ["run", "auto", "--dataset", str(ds), "--level", "k_neighbor", "--epsilon", "4"]
    for _ in range(2):
        r = _cli(tmp_path, *args)
        assert isinstance(r.exception, FlowStarted), r.output
    first, second = started
    assert first["auto"]["statistic"]["noisy_edge_count"] == \
        second["auto"]["statistic"]["noisy_edge_count"]
    auto = first["auto"]
    assert auto["method"] == "dp-mlp" and 0 < auto["epsilon_choice"] < 0.4
    assert first["spec"].epsilon == pytest.approx(4 - auto["epsilon_choice"])
    assert second["auto"]["statistic"]["reused"] is True
    sha = json.loads((ds / "manifest.json").read_text())["content_sha256"]
    s = store()
    records = [r for r in s.summary(s.resolve(sha)).records if r.method == METHOD]
    assert [r.status for r in records] == ["spent", "reuse"]
    assert sum(r.status in COUNTED for r in records) == 1


def test_a_graph_beyond_d_is_refused_before_anything_is_charged(
        tmp_path: Path, started: list[dict[str, Any]]) -> None:
    """Node level at ε = 16 buys the noisy mean degree, whose sensitivity D holds only
    within the bound: a degree above D is one error line, and nothing is reserved,
    charged or started."""
    from tasks.budget import store

    ds = tmp_path / "ds"
    write_dataset(csbm(num_nodes=100, seed=3), ds)
    r = _cli(tmp_path, "run", "auto", "--dataset", str(ds), "--level", "node",
             "--max-degree", "5", "--epsilon", "16")
    assert r.exit_code == 2, r.output
    assert "at most D = 5" in one_error_line(r.output)
    assert started == []
    sha = json.loads((ds / "manifest.json").read_text())["content_sha256"]
    bid = store().budget_id(sha)
    assert bid is None or store().summary(bid).records == []


@pytest.mark.slow
def test_auto_end_to_end_spends_the_requested_epsilon_once(tmp_path: Path) -> None:
    """k_neighbor at ε = 4 on a sparse graph: the noisy mean degree (ε_c) says sparse, so
    DP-MLP at ε - ε_c. The two releases are each charged once, their ε add up to the
    requested ε, and the summary and the MLflow run say what was chosen and from what."""
    from mlflow.tracking import MlflowClient

    from dpgnn_core.budget import COUNTED, Charge, compose
    from dpgnn_core.methods.auto import AutoRequest
    from dpgnn_core.privacy.events import Ledger
    from flows.pipeline import auto_pipeline
    from tasks.auto_choice import METHOD
    from tasks.budget import store

    ds = tmp_path / "ds"
    write_dataset(csbm(num_nodes=200, avg_degree=3, seed=8), ds)
    sha = json.loads((ds / "manifest.json").read_text())["content_sha256"]
    store().set_budget(sha, "ds", str(ds), epsilon=32.0, delta=1e-3)  # group size 2: above
    summary = auto_pipeline(AutoRequest(level="k_neighbor", epsilon=4.0, device="cpu"),
                            str(ds), explain_graphs=0)
    auto = summary["auto"]
    assert summary["method"] == auto["method"] == "dp-mlp"
    assert 0 < auto["epsilon_choice"] < 0.4 and auto["statistic"]["bought"] is True
    assert auto["inputs"]["noisy_mean_degree"] < 10
    assert 0.99 * 4.0 <= auto["epsilon_total"] <= 4.0 + 1e-9
    assert auto["epsilon_total"] == pytest.approx(auto["epsilon_choice"] + summary["epsilon"])
    s = store()
    counted = [r for r in s.summary(s.resolve(sha)).records if r.status in COUNTED]
    assert sorted(r.method for r in counted) == sorted([METHOD, "dp-mlp"])
    ledger = Ledger.load(Path(summary["artifacts_dir"]) / "ledger.json")
    (stat,) = [r.charge for r in counted if r.method == METHOD]
    assert stat.ledger is not None and len(stat.ledger.events) == 1
    # the odometer composes both releases (the statistic's unit: edge; DP-MLP's node
    # release bounds the edge unit at group size 2)
    assert summary["dataset_epsilon_by_unit"]["edge"] == pytest.approx(
        compose([Charge(ledger), stat], summary["dataset_epsilon_delta"])["edge"].epsilon,
        rel=1e-6)
    data = MlflowClient(summary["mlflow_tracking_uri"]).get_run(summary["mlflow_run_id"]).data
    assert data.tags["dpgnn.auto.method"] == "dp-mlp"
    assert float(data.tags["dpgnn.auto.epsilon_choice"]) == pytest.approx(
        auto["epsilon_choice"], rel=1e-3)
    assert float(data.tags["dpgnn.auto.epsilon_total"]) == pytest.approx(4.0, rel=1e-2)
    assert "Chosen by `dpgnn run auto`" in data.tags["mlflow.note.content"]
    assert data.params["auto.rule"] == "k-floor"
