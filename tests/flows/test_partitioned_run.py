"""``dpgnn run METHOD --dataset D --workers N --worker-memory SIZE`` / ``--dask-address``
on a partitioned dataset (issue 51 §4): what is refused in one line before Prefect starts,
what reaches the flow, and a GAP-EDP run on two worker processes whose ε, ledger and
summary are the single-process run's."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dpgnn_core.data.partitioned import write_partitioned_csbm
from dpgnn_core.data.store import write_dataset
from dpgnn_core.data.synthetic import csbm
from flows.cli import app
from tests.flows.clirunner import CliRunner, one_error_line

runner = CliRunner()


@pytest.fixture
def parted(tmp_path: Path) -> Path:
    write_partitioned_csbm(tmp_path / "parted", partition_nodes=150, num_nodes=600,
                           feature_dim=8, feature_signal=3.0, seed=4)
    return tmp_path / "parted"


def _run(method: str, dataset: Path, *args: str) -> Any:
    eps = ["--epsilon", "4"] if method != "mlp" else []
    return runner.invoke(app, ["run", method, *eps, "--dataset", str(dataset), *args])


def _refused(r: Any) -> str:
    assert r.exit_code == 2, r.output
    return one_error_line(r.output)


def test_a_partitioned_dataset_needs_a_cluster(parted: Path, started: list[Any]) -> None:
    line = _refused(_run("gap-edp", parted))
    assert "--workers" in line and "--dask-address" in line and "partitioned" in line
    assert not started


def test_a_method_without_a_partitioned_path_is_refused(parted: Path,
                                                        started: list[Any]) -> None:
    line = _refused(_run("mlp", parted))
    assert "mlp does not train from a partitioned dataset" in line and not started


@pytest.mark.parametrize(("args", "words"), [
    (["--workers", "2", "--worker-memory", "lots"], "is not a size"),
    (["--worker-memory", "1GiB", "--dask-address", "tcp://127.0.0.1:1"], "--workers"),
    (["--workers", "2", "--dask-address", "tcp://127.0.0.1:1"], "give one of them"),
])
def test_bad_cluster_options(parted: Path, started: list[Any], args: list[str],
                             words: str) -> None:
    assert words in _refused(_run("dp-mlp", parted, *args)) and not started


def test_cluster_options_on_a_one_file_dataset(tmp_path: Path, started: list[Any]) -> None:
    write_dataset(csbm(num_nodes=200, seed=1), tmp_path / "ds")
    line = _refused(_run("gap-edp", tmp_path / "ds", "--workers", "2"))
    assert "--workers applies to partitioned datasets" in line and not started


def test_a_tampered_partition_is_refused_before_prefect(parted: Path,
                                                        started: list[Any]) -> None:
    """The pre-flight hashes every partition (and reads the label and split columns
    block by block), as it checks a one-file folder's files."""
    victim = parted / "features" / "part-00002.parquet"
    victim.write_bytes(victim.read_bytes()[:-1] + b"\0")
    line = _refused(_run("gap-edp", parted, "--workers", "2"))
    assert "checksum mismatch" in line and "features/part-00002.parquet" in line
    assert not started


def test_cluster_options_reach_the_flow(parted: Path, started: list[Any]) -> None:
    r = _run("gap-edp", parted, "--workers", "2", "--worker-memory", "1GiB")
    assert started, r.output
    assert started[0]["cluster"] == {"workers": 2, "worker_memory": "1GiB",
                                     "dask_address": None}


def test_workers_their_own_interpreter_nearly_fills_are_refused() -> None:
    """A worker whose memory limit its interpreter, torch and dpgnn nearly fill would be
    paused by Dask at its first partition, and the run would wait for ever: refused in one
    line naming --worker-memory and what to give."""
    from distributed import LocalCluster

    from dpgnn_core.errors import DpgnnError
    from flows.partitioned import check_worker_room

    with LocalCluster(n_workers=1, processes=False, memory_limit="64MiB",
                      dashboard_address=None) as cluster:
        with pytest.raises(DpgnnError, match="give --worker-memory of at least") as err:
            check_worker_room(cluster.scheduler_address, "--worker-memory")
    assert "(64 MiB)" in str(err.value) and "\n" not in str(err.value)


@pytest.mark.slow
@pytest.mark.integration
def test_gap_edp_on_two_workers_is_the_single_process_run(parted: Path) -> None:
    """The whole flow on a LocalCluster of two worker processes with 1 GiB each: its
    ε, noise, ledger and summary fields are the single-process calibration's; the metrics
    come from the workers; the second run is a cache hit (no second release)."""
    from dpgnn_core.data.partitioned import read_partitioned
    from dpgnn_core.methods.gap import calibrate_gap
    from dpgnn_core.privacy import Ledger
    from dpgnn_core.specs import GapSpec
    from flows.pipeline import pipeline

    spec = GapSpec(level="edge", epsilon=4.0, hops=2, epochs=2, encoder_dim=8, device="cpu")
    cluster = {"workers": 2, "worker_memory": "1GiB"}
    out = pipeline(spec=spec, dataset=str(parted), cluster=cluster)
    planned, z, report = calibrate_gap(read_partitioned(parted), spec)
    assert out["epsilon"] == report["epsilon"] <= 4.0
    assert out["noise_multiplier"] == z and out["level"] == "edge"
    saved = json.loads(Path(out["privacy_report"]).read_text())
    assert Ledger.from_dict(saved).to_dict() == planned.to_dict()
    assert out["metrics"]["test"]["accuracy"] > 0.5 and out["mlflow_error"] is None
    assert out["release"].startswith("new release")
    again = pipeline(spec=spec, dataset=str(parted), cluster=cluster)
    assert again["cache"]["train"] == "Cached" and again["epsilon"] == out["epsilon"]
    assert not again["release"].startswith("new release")
