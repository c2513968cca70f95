"""`dpgnn run auto --level LEVEL --epsilon E` (issue 49 §2): in `dpgnn run --help`, its own
options, bad requests refused in one line before Prefect starts, the chosen spec and the
choice handed to the pipeline flow, the noisy mean degree charged once and re-used, a graph
beyond D refused before anything is charged, and what the summary and the MLflow page
say."""

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


def test_the_summary_and_the_mlflow_page_say_what_was_chosen_and_spent(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The run summary's `auto` line, the MLflow tags, params and description of a choice
    that bought the noisy mean degree: the method, the rule, the inputs read (the noisy
    degree among them), the ε of the choice, the method's ε and the total. (The same
    through the whole pipeline: `test_auto_end_to_end_spends_the_requested_epsilon_once`
    in this file at commit 202f793, a 40-second test left out of the suite.)"""
    from dpgnn_core.methods.auto import AutoRequest, resolve
    from flows.cli.summary import print_summary
    from tasks.run_page import with_auto
    from tasks.run_record import auto_params

    write_dataset(csbm(num_nodes=200, avg_degree=40, seed=3), tmp_path / "ds")
    _, choice = resolve(AutoRequest(level="k_neighbor", epsilon=4.0), tmp_path / "ds",
                        release=lambda plan: (8000.0, False))  # mean degree 80: dense
    spent = choice.epsilon_choice
    auto = {**choice.as_dict(), "epsilon_total": spent + choice.method_epsilon}
    assert choice.method == "dpdgc-kndp" and 0 < spent < 0.4
    tags = with_auto({"mlflow.note.content": "(ε, δ)-DP"}, auto)
    assert tags["dpgnn.auto.method"] == "dpdgc-kndp"
    assert tags["dpgnn.auto.rule"].startswith("k-graph: level k_neighbor, ε >= 4")
    assert float(tags["dpgnn.auto.epsilon_choice"]) == pytest.approx(spent, rel=1e-3)
    assert float(tags["dpgnn.auto.epsilon_total"]) == pytest.approx(4.0)
    assert "noisy_mean_degree 80" in tags["dpgnn.auto.inputs"]
    note = tags["mlflow.note.content"]
    assert note.startswith("(ε, δ)-DP\n\n**Chosen by `dpgnn run auto`:** dpdgc-kndp")
    assert "basic composition" in note and "DPDGC-kNDP" in note  # the accounting, evidence
    params = auto_params(auto)
    assert params["rule"] == "k-graph" and params["epsilon_choice"] == spent
    assert params["statistic"]["bought"] is True and params["statistic"]["sensitivity"] == 1
    summary = {"method": "dpdgc-kndp", "dataset": "ds", "seed": 0, "private": False,
               "test_accuracy": 0.7, "val_accuracy": 0.7, "auto": auto,
               "artifacts_dir": "a", "cache": {}}
    print_summary(summary, as_json=False)
    (line,) = [x for x in capsys.readouterr().out.splitlines() if x.startswith("  auto")]
    assert "chose dpdgc-kndp by rule k-graph" in line and "noisy_mean_degree 80" in line
    assert f"ε spent on the choice {spent:.4g}" in line and line.endswith("total ε 4")
    print_summary(summary, as_json=True)
    assert json.loads(capsys.readouterr().out)["auto"]["epsilon_total"] == pytest.approx(4)

    # its report, auto.json (an MLflow artifact): the choice and both ledgers
    from dpgnn_core.home import using_home
    from dpgnn_core.privacy import Ledger
    from dpgnn_core.privacy import epsilon as eps_of
    from tasks.refs import report_of
    from tasks.run_record import RunOutcome, auto_report

    outcome = RunOutcome(ds={}, spec=None, method="dpdgc-kndp",  # type: ignore[arg-type]
                         report=report_of({"method": "dpdgc-kndp"}), ledger={"events": []},
                         budget={}, model={}, ev={}, states={}, auto=choice.as_dict())
    with using_home(tmp_path / "home"):
        written = json.loads(Path(auto_report(outcome)).read_text())
    assert written["auto"]["method"] == "dpdgc-kndp" and written["ledgers"]["method"] == \
        {"events": []}
    stat = Ledger.from_dict(written["ledgers"]["choice"])
    assert eps_of(stat, choice.delta_choice, accountant="pld") == pytest.approx(spent)
