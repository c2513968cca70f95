"""The pipeline flow: caching across runs, MLflow records, rebuild of lost artifacts."""

from __future__ import annotations

import itertools
import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from dpgnn_core.data.store import write_dataset
from dpgnn_core.data.synthetic import csbm
from dpgnn_core.specs import IngestSpec, TrainSpec

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def pipeline():
    from flows.pipeline import pipeline as flow

    return flow


def _runs(home: Path) -> list[tuple[str, str]]:
    with sqlite3.connect(home / "mlflow.db") as con:
        return con.execute("select run_uuid, status from runs").fetchall()


def test_second_run_reuses_every_artifact(pipeline, home: Path) -> None:
    ingest = IngestSpec(format="synthetic", name="pipe-test",
                        options={"num_nodes": 400, "seed": 11})
    spec = TrainSpec(method="gcn", epochs=15, seed=3)
    first = pipeline(spec=spec, ingest_spec=ingest)
    assert first["cache"] == {"ingest": "Completed", "train": "Completed",
                              "evaluate": "Completed"}
    model = Path(first["artifacts_dir"]) / "model.pt"
    mtime = model.stat().st_mtime_ns
    second = pipeline(spec=spec, ingest_spec=ingest)
    assert second["cache"] == {"ingest": "Cached", "train": "Cached", "evaluate": "Cached"}
    assert model.stat().st_mtime_ns == mtime
    assert second["test_accuracy"] == first["test_accuracy"]
    assert second["mlflow_run_id"] != first["mlflow_run_id"]  # one MLflow run per pipeline run
    # A changed parameter misses the cache for training only.
    third = pipeline(spec=spec.model_copy(update={"seed": 4}), ingest_spec=ingest)
    assert third["cache"]["ingest"] == "Cached" and third["cache"]["train"] == "Completed"

    from mlflow.tracking import MlflowClient

    client = MlflowClient(first["mlflow_tracking_uri"])
    run = client.get_run(first["mlflow_run_id"])
    assert run.info.status == "FINISHED"
    assert run.data.metrics["test_accuracy"] == pytest.approx(first["test_accuracy"])
    assert run.data.params["method"] == "gcn"
    hist = client.get_metric_history(first["mlflow_run_id"], "train_loss")
    assert [m.step for m in hist] == list(range(1, 16))
    names = {a.path for a in client.list_artifacts(first["mlflow_run_id"])}
    assert {"manifest.json", "metrics.json", "history.json"} <= names
    assert all(status == "FINISHED" for _, status in _runs(home))


def test_lost_artifact_is_rebuilt(pipeline, tmp_path: Path) -> None:
    write_dataset(csbm(num_nodes=300, seed=21), tmp_path / "ds")
    spec = TrainSpec(method="mlp", epochs=5, seed=1)
    first = pipeline(spec=spec, dataset=str(tmp_path / "ds"))
    shutil.rmtree(first["artifacts_dir"])
    again = pipeline(spec=spec, dataset=str(tmp_path / "ds"))
    assert again["cache"]["train"] == "Rebuilt"
    assert (Path(again["artifacts_dir"]) / "model.pt").is_file()
    # Training is deterministic: the rebuilt model has the same bytes, so evaluation hits.
    assert again["cache"]["evaluate"] == "Cached"


def test_changed_dataset_is_refused(pipeline, tmp_path: Path) -> None:
    from dpgnn_core.errors import DataError

    write_dataset(csbm(num_nodes=300, seed=22), tmp_path / "ds")
    p = tmp_path / "ds" / "edges.parquet"
    p.write_bytes(p.read_bytes()[:-10] + b"0123456789")
    with pytest.raises(DataError, match="checksum mismatch"):
        pipeline(spec=TrainSpec(method="mlp", epochs=2), dataset=str(tmp_path / "ds"))


def test_dpgnn_run_is_accounted_logged_and_cached(pipeline, tmp_path: Path) -> None:
    from mlflow.tracking import MlflowClient

    from dpgnn_core.privacy import Ledger, RdpAccountant
    from dpgnn_core.specs import DpgnnSpec

    write_dataset(csbm(num_nodes=800, homophily=0.9, feature_signal=1.5, seed=31),
                  tmp_path / "ds")
    spec = DpgnnSpec(epsilon=3.0, steps=20, batch_size=50, hidden=16, max_degree=4,
                     device="cpu", accountant="rdp")  # RDP: the curve at every step
    out = pipeline(spec=spec, dataset=str(tmp_path / "ds"))
    assert out["private"] and out["method"] == "dp-gcn" and out["steps"] == 20
    chosen = out["structure_defaults"]  # the spec's K and batch win over the rule
    assert (chosen["max_degree"], chosen["batch_size"], chosen["steps"]) == (4, 50, 20)
    assert chosen["given"] == ["max_degree", "batch_size"]
    ledger = Ledger.load(out["privacy_report"])
    assert RdpAccountant().epsilon(ledger, out["delta"]) == pytest.approx(out["epsilon"])
    assert out["epsilon"] <= 3.0
    client = MlflowClient(out["mlflow_tracking_uri"])
    curve = client.get_metric_history(out["mlflow_run_id"], "epsilon_spent")
    assert [c.step for c in curve] == list(range(1, 21))  # every step (RDP)
    assert curve[-1].value == pytest.approx(out["epsilon"])
    assert all(a.value <= b.value for a, b in itertools.pairwise(curve))
    names = {a.path for a in client.list_artifacts(out["mlflow_run_id"])}
    assert {"ledger.json", "report.json"} <= names
    again = pipeline(spec=spec, dataset=str(tmp_path / "ds"))
    assert again["cache"]["train"] == "Cached" and again["epsilon"] == out["epsilon"]
    nonpriv = pipeline(spec=spec.model_copy(update={"epsilon": None}),
                       dataset=str(tmp_path / "ds"))
    assert nonpriv["private"] is False and "epsilon" not in nonpriv


def test_dp_mlp_run(pipeline, tmp_path: Path) -> None:
    from dpgnn_core.privacy import Ledger, make_accountant
    from dpgnn_core.specs import DpMlpSpec

    write_dataset(csbm(num_nodes=600, feature_signal=3.0, seed=32), tmp_path / "ds")
    out = pipeline(spec=DpMlpSpec(epsilon=2.0, steps=10, batch_size=40, hidden=16,
                                         device="cpu"), dataset=str(tmp_path / "ds"))
    assert out["method"] == "dp-mlp" and out["private"] and out["epsilon"] <= 2.0
    assert out["accountant"] == "pld"  # the default: the tightest sound accountant
    ledger = Ledger.load(out["privacy_report"])
    acc = make_accountant(out["accountant"])
    assert acc.epsilon(ledger, out["delta"]) == pytest.approx(out["epsilon"])
    assert ledger.entries[0].sampler_scheme == "poisson"
    assert 0.0 <= out["test_accuracy"] <= 1.0


def test_gap_chain_is_cached_accounted_and_logged(pipeline, tmp_path: Path) -> None:
    from mlflow.tracking import MlflowClient

    from dpgnn_core.graph.gap_degree import max_degree_for_pma
    from dpgnn_core.privacy import Ledger, make_accountant
    from dpgnn_core.specs import GapSpec

    graph = csbm(num_nodes=400, homophily=0.9, feature_signal=0.8, seed=33)
    write_dataset(graph, tmp_path / "ds")
    # GAP-NDP refuses a graph with a degree above D (no edge sampling): D = its max degree
    d = max_degree_for_pma(graph.edge_index, graph.num_nodes, directed=graph.directed)
    spec = GapSpec(level="node", epsilon=6.0, hops=2, max_degree=d, row_clip=1.0, steps=10,
                   batch_size=60, device="cpu")
    out = pipeline(spec=spec, dataset=str(tmp_path / "ds"))
    assert out["method"] == "gap-ndp" and out["private"] and out["epsilon"] <= 6.0
    ledger = Ledger.load(out["privacy_report"])
    assert [e.kind for e in ledger.events] == ["poisson_gaussian", "gaussian",
                                               "poisson_gaussian"]
    assert make_accountant(spec.accountant).epsilon(ledger, out["delta"]) == pytest.approx(
        out["epsilon"])
    client = MlflowClient(out["mlflow_tracking_uri"])
    run = client.get_run(out["mlflow_run_id"])
    assert run.data.tags["dpgnn.hops"] == "2"
    curve = client.get_metric_history(out["mlflow_run_id"], "epsilon_spent")
    assert len(curve) == 20 and curve[-1].value == pytest.approx(out["epsilon"])
    assert all(a.value <= b.value for a, b in itertools.pairwise(curve))
    again = pipeline(spec=spec, dataset=str(tmp_path / "ds"))
    assert set(again["cache"].values()) == {"Cached"}
    assert again["test_accuracy"] == out["test_accuracy"]
    _export_release_as_dgl(out["artifacts_dir"], graph.num_nodes, spec.hops, tmp_path)


def _export_release_as_dgl(artifacts: str, num_nodes: int, hops: int, tmp_path: Path) -> None:
    """`dpgnn export-dgl` writes GAP's release X(1..K) as node data of a graph without
    edges (the dgl extra; make test installs it)."""
    dgl = pytest.importorskip("dgl")
    import torch

    from flows.cli import app
    from tests.flows.clirunner import CliRunner

    r = CliRunner().invoke(app, ["export-dgl", artifacts, "--out", str(tmp_path / "r.bin")])
    assert r.exit_code == 0, r.output
    (g,), _ = dgl.load_graphs(str(tmp_path / "r.bin"))
    assert g.num_nodes() == num_nodes and g.num_edges() == 0
    agg = json.loads((Path(artifacts) / "manifest.json").read_text())["aggregations"]
    xs = torch.load(Path(agg["path"]) / "aggregations.pt", weights_only=True)
    assert g.ndata["agg"].shape[1] == hops
    torch.testing.assert_close(g.ndata["agg"], xs.float())


def test_graph_classification_run(pipeline, tmp_path: Path) -> None:
    from mlflow.tracking import MlflowClient

    from dpgnn_core.data.synthetic import er_graphs
    from dpgnn_core.privacy import Ledger
    from dpgnn_core.specs import GraphClsSpec

    write_dataset(er_graphs(num_graphs=200, split=(120, 30, 50), seed=4), tmp_path / "ds")
    spec = GraphClsSpec(conv="sage", epsilon=5.0, steps=10, batch_size=30, device="cpu")
    out = pipeline(spec=spec, dataset=str(tmp_path / "ds"), explain_graphs=3)
    assert out["method"] == "dp-graph-sage" and out["epsilon"] <= 5.0
    assert out["cache"]["train_nonprivate"] == "Completed"
    assert 0.0 <= out["iou_private_nonprivate"] <= 1.0
    # The non-private twin is its own MLflow run, linked both ways; its explanations and
    # IoUs are there, never on the private run's "(ε, δ)-DP" page.
    client = MlflowClient(out["mlflow_tracking_uri"])
    private_run = client.get_run(out["mlflow_run_id"])
    twin_id = out["nonprivate_twin"]["mlflow_run_id"]
    twin = client.get_run(twin_id)
    assert private_run.data.tags["dpgnn.nonprivate_twin"] == twin_id
    assert twin.data.tags["dpgnn.twin_of"] == out["mlflow_run_id"]
    assert twin.data.tags["dpgnn.private"] == "false"
    assert twin.data.tags["mlflow.note.content"].startswith("**NOT PRIVATE**")
    assert twin.data.metrics["explain_iou_private_nonprivate"] == pytest.approx(
        out["iou_private_nonprivate"])
    names = {a.path for a in client.list_artifacts(out["mlflow_run_id"])}
    assert not {"explanations.png", "explanations.json"} & names
    assert not any(k.startswith("explain") for k in private_run.data.metrics)
    assert {"explanations.png", "explanations.json"} <= {
        a.path for a in client.list_artifacts(twin_id)}
    assert f"**Non-private twin:** MLflow run {twin_id}" in \
        private_run.data.tags["mlflow.note.content"]
    assert out["delta"] == pytest.approx(1 / (10 * 120))  # 1/(10 N), like node methods
    assert Ledger.load(out["privacy_report"]).events[0].level == "graph"
    assert {"test_sensitivity", "test_specificity", "test_roc_auc"} <= set(out)
    client = MlflowClient(out["mlflow_tracking_uri"])
    per_epoch = client.get_metric_history(out["mlflow_run_id"], "val_roc_auc")
    # every expected pass (120/30 = 4 steps), the last step, and the final metrics (step 0)
    assert sorted(m.step for m in per_epoch) == [0, 4, 8, 10]


def test_progap_chain_stages_cached_and_composed(pipeline, tmp_path: Path) -> None:
    from dpgnn_core.graph.gap_degree import max_degree_for_pma
    from dpgnn_core.privacy import Ledger, make_accountant
    from dpgnn_core.specs import ProgapSpec

    graph = csbm(num_nodes=300, avg_degree=4, seed=34)
    write_dataset(graph, tmp_path / "ds")
    d = max_degree_for_pma(graph.edge_index, graph.num_nodes, directed=graph.directed)
    spec = ProgapSpec(level="node", epsilon=6.0, stages=2, max_degree=d, row_clip=1.0,
                      steps=4, batch_size=40, hidden=8, device="cpu")
    out = pipeline(spec=spec, dataset=str(tmp_path / "ds"), explain_graphs=0)
    assert out["method"] == "progap-ndp" and out["epsilon"] <= 6.0
    # every stage and every aggregation is its own cached task ...
    assert {k: v for k, v in out["cache"].items() if k.startswith(("stage", "aggregate"))} \
        == {"stage0": "Completed", "aggregate1": "Completed", "stage1": "Completed",
            "aggregate2": "Completed", "stage2": "Completed"}
    # ... and its own event, composed in order into the run's ledger
    ledger = Ledger.load(out["privacy_report"])
    assert [e.kind for e in ledger.events] == ["poisson_gaussian", "gaussian",
                                               "poisson_gaussian", "gaussian",
                                               "poisson_gaussian"]
    assert make_accountant(spec.accountant).epsilon(ledger, out["delta"]) == pytest.approx(
        out["epsilon"])
    again = pipeline(spec=spec, dataset=str(tmp_path / "ds"), explain_graphs=0)
    assert set(again["cache"].values()) == {"Cached"}
    assert again["test_accuracy"] == out["test_accuracy"]
