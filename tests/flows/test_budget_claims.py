"""What `dpgnn budget` may claim (issue 48 §3, issue 52 §4): a budget set after releases
says it covers the releases from then on only, a meaningless δ is refused, a void guarantee
shows no finite figure, and a private selection's reservation dates nothing before its
release moment."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dpgnn_core.budget import BudgetStore, Charge
from dpgnn_core.data.store import write_dataset
from dpgnn_core.data.synthetic import csbm
from dpgnn_core.privacy import GaussianEvent, Ledger
from tests.flows.clirunner import CliRunner

runner = CliRunner()


def _dataset(tmp_path: Path, seed: int) -> tuple[str, str]:
    write_dataset(csbm(num_nodes=100, seed=seed), tmp_path / "ds")
    sha = json.loads((tmp_path / "ds" / "manifest.json").read_text())["content_sha256"]
    return str(tmp_path / "ds"), sha


def _cli(tmp_path: Path, *args: str) -> Any:
    from flows.cli import app

    return runner.invoke(app, ["--home", str(tmp_path / "home"), *args])


def _spend(sha: str, z: float, run: str) -> int:
    from tasks.budget import store

    s = store()
    rid = s.reserve(sha, "ds", None, Charge(Ledger().add(
        GaussianEvent(noise_multiplier=z, count=2, level="edge"))), method="gap-edp",
        run_id=run, delta=1e-5, epsilon=None)
    s.mark_spent(rid)
    return rid


def test_a_budget_set_after_releases_covers_the_releases_from_then_on(tmp_path: Path
                                                                       ) -> None:
    """Issue 48 §3: a budget set after releases on a dataset without one claimed "the
    filter fixed before the epoch's first release" at 407 % used. It now says which
    releases it covers (those after the last one before it), and still counts the
    earlier ones in admission."""
    from dpgnn_core.budget import BudgetExceeded
    from tasks.budget import store

    ds, sha = _dataset(tmp_path, 71)
    assert _cli(tmp_path, "budget", "show").exit_code == 0  # the home exists
    last = _spend(sha, 0.6, "a")  # a large release, no budget yet
    r = _cli(tmp_path, "budget", "set", ds, "--epsilon", "1", "--delta", "1e-5")
    assert r.exit_code == 0, r.output
    r = _cli(tmp_path, "budget", "show", ds)
    assert "fixed before the epoch's first release" not in r.output
    (line,) = [ln for ln in r.output.splitlines() if "guarantee of epoch 0" in ln]
    assert f"for the releases after release {last} only" in line
    assert "after 1 release(s) of this epoch, which no guarantee covers" in line
    out = json.loads(_cli(tmp_path, "budget", "show", ds, "--json").output)
    g = out["datasets"][0]["guarantee"]
    assert g["fixed_before_first_release"] is False and g["covers_releases_after"] == last
    try:  # admission still counts the earlier release: nothing more fits
        _spend(sha, 50.0, "b")
        raise AssertionError("admitted")
    except BudgetExceeded:
        pass
    # A budget set before any release is fixed in advance, and says so.
    ds2, sha2 = _dataset(tmp_path / "other", 72)
    assert _cli(tmp_path, "budget", "set", ds2, "--epsilon", "5",
                "--delta", "1e-5").exit_code == 0
    _spend(sha2, 4.0, "c")
    r = _cli(tmp_path, "budget", "show", ds2)
    assert "(the filter fixed before the epoch's first release)" in r.output
    # a reset starts an epoch whose next budget is fixed before its releases again
    assert _cli(tmp_path, "budget", "reset", ds, "--yes").exit_code == 0
    s = store()
    assert s.summary(s.resolve(sha)).budget.covers_from is None


def test_budget_set_refuses_a_delta_of_at_least_one_over_n_train(tmp_path: Path) -> None:
    """Issue 48 §3 (a bar): `budget set --delta 0.5` was accepted. Refused as `run`
    refuses δ ≥ 1/N_train, in one line naming the value, nothing stored; accepted with
    --allow-large-delta, which the log records."""
    from tasks.budget import store

    ds, sha = _dataset(tmp_path, 73)
    n = json.loads((Path(ds) / "manifest.json").read_text())["split_counts"]["train"]
    for delta in ("0.5", f"{1.0 / n:.17g}"):
        r = _cli(tmp_path, "budget", "set", ds, "--epsilon", "1", "--delta", delta)
        assert r.exit_code == 2, r.output
        (line,) = r.output.strip().splitlines()
        assert line.startswith(f"error: --delta {float(delta):g} >= 1/N_train = 1/{n}")
        assert "--allow-large-delta" in line
    assert store().budget_id(sha) is None  # nothing stored
    r = _cli(tmp_path, "budget", "set", ds, "--epsilon", "1", "--delta", "0.5",
             "--allow-large-delta")
    assert r.exit_code == 0, r.output
    s = store()
    log = s.summary(s.resolve(sha)).log
    assert "allowed by --allow-large-delta" in log[-1]["detail"]


def test_a_void_guarantee_shows_no_finite_filter_figure(tmp_path: Path) -> None:
    """Issue 52 §4: after an allowed non-private release, `budget show` printed the
    filter's finite "24.52 % of its bound used" beside VOID; the JSON and the MLflow tag
    did too."""
    from tasks import budget as tb

    ds, sha = _dataset(tmp_path, 74)
    assert _cli(tmp_path, "budget", "set", ds, "--epsilon", "20",
                "--delta", "1e-5").exit_code == 0
    _spend(sha, 4.0, "a")
    before = _cli(tmp_path, "budget", "show", ds).output
    assert "% of its bound used" in before  # a finite guarantee: its reading
    tb.admit_non_private({"content_sha256": sha, "name": "ds", "path": ds}, "gcn",
                         allowed=True)
    r = _cli(tmp_path, "budget", "show", ds)
    assert "VOID" in r.output and "% of its bound" not in r.output, r.output
    out = json.loads(_cli(tmp_path, "budget", "show", ds, "--json").output)
    units = out["datasets"][0]["filter"]["units"]
    assert units and all(u["used"] == "inf" for u in units.values())
    tag = tb.budget_tags(tb.odometer(sha, "edge"))["dpgnn.dataset_budget"]
    assert "% of its bound" not in tag and "VOID" in tag


def test_a_selection_dates_the_dataset_it_registers_at_its_release(tmp_path: Path) -> None:
    """Issue 52 §4: `versions[].first_seen` was written when a private selection's
    reservation registered the dataset, before any candidate trained: with the release
    time, it revealed the selection's duration (its secret K)."""
    s = BudgetStore(tmp_path / "budget.sqlite")
    sha = "ab" * 32
    rid = s.reserve(sha, "toy", None, Charge(fixed=(1.0, 1e-6, "node", "add_remove")),
                    method="m (private selection)", run_id="run:tuning:tok", delta=1e-6,
                    epsilon=1.0, covers=["K1"])
    s.mark_spent(rid)
    (v,) = s.summary(sha).datasets
    assert v["first_seen"] is None  # not dated before the release moment
    s.attach_selected(rid, "rel", at="2030-01-01T00:00:00+00:00")
    summary = s.summary(sha)
    assert summary.datasets[0]["first_seen"] == "2030-01-01T00:00:00+00:00"
    assert summary.records[0].created == "2030-01-01T00:00:00+00:00"
    # a plain run registers (and dates) its dataset at once
    s.reserve("cd" * 32, "toy2", None, Charge(fixed=(1.0, 1e-6, "node", "add_remove")),
              method="m", run_id="r2", delta=1e-6, epsilon=1.0)
    assert s.summary("cd" * 32).datasets[0]["first_seen"] is not None


UNACCOUNTED = [["--log-raw-loss"], ["--clip-percentile", "75"], ["--select-on-validation"]]


def test_unaccounted_uses_on_a_budgeted_dataset_are_refused_before_prefect(
        tmp_path: Path, started: list[dict[str, Any]]) -> None:
    """Issue 48 §3 (a bar for --log-raw-loss): on a budgeted dataset, --log-raw-loss,
    --clip-percentile and --select-on-validation read private data without noise and were
    admitted while `budget show` kept its finite ε. Each is refused in one line before
    Prefect starts, unless --allow-non-private-release; nothing is recorded then. On a
    dataset without a budget they run as before."""
    from tasks.budget import store
    from tests.flows.conftest import FlowStarted

    ds, sha = _dataset(tmp_path, 75)
    run = ["run", "dp-gcn", "--dataset", ds, "--epsilon", "4", "--steps", "2"]
    r = _cli(tmp_path, *run, "--log-raw-loss")  # no budget: admitted
    assert isinstance(r.exception, FlowStarted), r.output
    assert _cli(tmp_path, "budget", "set", ds, "--epsilon", "8",
                "--delta", "1e-5").exit_code == 0
    for extra in UNACCOUNTED:
        r = _cli(tmp_path, *run, *extra)
        assert r.exit_code == 2, r.output
        (line,) = r.output.strip().splitlines()
        assert line.startswith("error: dataset csbm-n100-s75 has a privacy budget")
        assert extra[0] in line
        assert "--allow-non-private-release" in line and "Nothing was trained" in line
    assert len(started) == 1
    s = store()
    assert all(r.status != "non-private" for r in s.summary(s.resolve(sha)).records)
    r = _cli(tmp_path, *run, "--log-raw-loss", "--allow-non-private-release")
    assert isinstance(r.exception, FlowStarted), r.output
    assert started[-1]["allow_non_private_release"] is True


def test_an_allowed_unaccounted_use_is_recorded_and_voids_the_guarantee(tmp_path: Path
                                                                         ) -> None:
    """With --allow-non-private-release, the flows record the use as a release without
    privacy (:func:`tasks.budget.admit_unaccounted`): `budget show` and the MLflow tags
    read VOID from then on."""
    from dpgnn_core.specs import DpgnnSpec
    from tasks import budget as tb
    from tasks import unaccounted as tu

    ds, sha = _dataset(tmp_path, 76)
    assert _cli(tmp_path, "budget", "set", ds, "--epsilon", "8",
                "--delta", "1e-5").exit_code == 0
    ref = {"content_sha256": sha, "name": "ds", "path": ds}
    spec = DpgnnSpec(epsilon=4.0, clip_percentile=75.0)
    assert tu.admit_unaccounted(ref, "dp-gcn", DpgnnSpec(epsilon=4.0), allowed=False) == {}
    try:
        tu.admit_unaccounted(ref, "dp-gcn", spec, allowed=False)
        raise AssertionError("admitted")
    except tb.NonPrivateRefused as e:
        assert "--clip-percentile" in str(e)
    tags = tu.admit_unaccounted(ref, "dp-gcn", spec, allowed=True)
    assert "recorded in the odometer" in tags["dpgnn.non_private_release"]
    s = tb.store()
    (rec,) = [r for r in s.summary(s.resolve(sha)).records if r.status == "non-private"]
    assert "--clip-percentile" in rec.note
    r = _cli(tmp_path, "budget", "show", ds)
    assert f"VOID: no guarantee since release {rec.id}" in r.output
    reading = tb.odometer(sha, "node")
    assert reading["dataset_epsilon_spent"] == float("inf")
    assert "no guarantee since release" in tb.budget_tags(reading)[
        "dpgnn.dataset_epsilon_spent"]


@pytest.mark.slow
def test_the_pipeline_refuses_an_unaccounted_use_for_a_python_caller(
        tmp_path: Path, prefect_api_url: str) -> None:
    """The flow checks again (a deployment or a Python caller runs no CLI pre-flight):
    refused before anything trains, nothing recorded but the budget."""
    from dpgnn_core.specs import DpMlpSpec
    from flows.pipeline import pipeline
    from tasks import budget as tb

    ds, sha = _dataset(tmp_path, 77)
    assert _cli(tmp_path, "budget", "set", ds, "--epsilon", "8",
                "--delta", "1e-5").exit_code == 0
    with pytest.raises(tb.NonPrivateRefused, match="--log-raw-loss"):
        pipeline(spec=DpMlpSpec(epsilon=4.0, steps=2, log_raw_loss=True), dataset=ds)
    s = tb.store()
    assert s.summary(s.resolve(sha)).records == []


def test_a_symmetric_edge_list_ingested_as_directed_is_warned_about(tmp_path: Path
                                                                     ) -> None:
    """Issue 48 §3: a symmetric edge list ingested as CSV without --undirected was
    recorded as directed without a word (and DP-GNN's --level node, sound only on directed
    graphs, then admitted). The ingest warns, naming the flag; not with --undirected, nor
    for an edge list that is not symmetric."""
    nodes = tmp_path / "nodes.csv"
    nodes.write_text("node_id,label,f0\n" + "".join(f"{i},{i % 2},{i * 0.1}\n"
                                                    for i in range(40)))
    pairs = [(i, (i + 1) % 40) for i in range(40)] + [(i, (i + 7) % 40) for i in range(40)]
    sym = tmp_path / "sym.csv"
    sym.write_text("src,dst\n" + "".join(f"{u},{v}\n{v},{u}\n" for u, v in pairs))
    one_way = tmp_path / "one_way.csv"
    one_way.write_text("src,dst\n" + "".join(f"{u},{v}\n" for u, v in pairs))

    def ingest(edges: Path, out: str, *extra: str) -> Any:
        r = _cli(tmp_path, "ingest", "--format", "csv", "--source", str(edges),
                 "--nodes", str(nodes), "--out", str(tmp_path / out), *extra)
        assert r.exit_code == 0, r.output
        return [ln for ln in r.output.splitlines() if ln.startswith("warning:")]

    (line,) = ingest(sym, "a")
    assert f"the edge list {sym} is symmetric" in line and "--undirected" in line
    manifest = json.loads((tmp_path / "a" / "manifest.json").read_text())
    assert manifest["directed"] is True  # recorded as asked, and said
    assert ingest(sym, "b", "--undirected") == []
    assert ingest(one_way, "c") == []


def test_budgets_of_the_same_graph_are_listed(tmp_path: Path) -> None:
    """Issue 48 §3: re-ingesting the same graph with another split seed into a new folder
    starts a fresh budget without a word. `budget show` and `dpgnn datasets` now list the
    other budgets (and folders) whose graph has the same edges and features."""
    nodes = tmp_path / "nodes.csv"
    nodes.write_text("node_id,label,f0\n" + "".join(f"{i},{i % 2},{i * 0.1}\n"
                                                    for i in range(40)))
    edges = tmp_path / "edges.csv"
    edges.write_text("src,dst\n" + "".join(f"{i},{(i + 3) % 40}\n" for i in range(40)))
    root = tmp_path / "data"
    shas = []
    for folder, seed in (("a", "0"), ("b", "1")):
        r = _cli(tmp_path, "ingest", "--format", "csv", "--source", str(edges), "--nodes",
                 str(nodes), "--out", str(root / folder), "--seed", seed)
        assert r.exit_code == 0, r.output
        shas.append(json.loads((root / folder / "manifest.json").read_text())
                    ["content_sha256"])
    assert shas[0] != shas[1]  # another split: another content, another budget
    r = _cli(tmp_path, "datasets", str(root))
    notes = [ln for ln in r.output.splitlines() if ln.startswith("note:")]
    assert len(notes) == 2 and all("same graph (edges and features)" in n for n in notes)
    assert str(root / "b") in notes[0] and str(root / "a") in notes[1]
    from tasks.budget import store

    s = store()
    for sha, folder in zip(shas, ("a", "b"), strict=True):
        s.mark_spent(s.reserve(sha, folder, str((root / folder).resolve()), Charge(
            Ledger().add(GaussianEvent(noise_multiplier=4.0, level="edge"))),
            method="gap-edp", run_id=folder, delta=1e-5, epsilon=None))
    r = _cli(tmp_path, "budget", "show", str(root / "a"))
    (line,) = [ln for ln in r.output.splitlines() if "same graph:" in ln]
    assert str((root / "b").resolve()) in line and s.resolve(shas[1])[:12] in line
    out = json.loads(_cli(tmp_path, "budget", "show", str(root / "b"), "--json").output)
    (other,) = out["datasets"][0]["same_graph"]
    assert other["budget_id"] == s.resolve(shas[0])
    # another graph: not listed
    edges.write_text("src,dst\n" + "".join(f"{i},{(i + 5) % 40}\n" for i in range(40)))
    assert _cli(tmp_path, "ingest", "--format", "csv", "--source", str(edges), "--nodes",
                str(nodes), "--out", str(root / "c")).exit_code == 0
    r = _cli(tmp_path, "datasets", str(root))
    assert not any(str(root / "c") in ln for ln in r.output.splitlines()
                   if ln.startswith("note:"))
