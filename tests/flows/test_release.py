"""Private releases through the cached flow: a cache hit reuses the release, a recompute is
a new release that says so, and the insecure flag is visible on the MLflow run."""

from __future__ import annotations

from pathlib import Path

import pytest

from dpgnn_core.data.store import write_dataset
from dpgnn_core.data.synthetic import csbm

pytestmark = pytest.mark.slow


def test_cached_release_is_reused_and_a_recompute_is_a_new_release(tmp_path: Path) -> None:
    from mlflow.tracking import MlflowClient

    from dpgnn_core.specs import DpMlpSpec
    from flows.pipeline import pipeline

    write_dataset(csbm(num_nodes=500, feature_signal=3.0, seed=41), tmp_path / "ds")
    spec = DpMlpSpec(epsilon=2.0, steps=10, batch_size=40, hidden=8, device="cpu")
    first = pipeline(spec=spec, dataset=str(tmp_path / "ds"))
    assert first["release"].startswith("new release") and "replacing" not in first["release"]
    assert first["randomness"].startswith("secret")
    assert first["level"] == "node" and first["relation"] == "add_remove"
    tags = MlflowClient(first["mlflow_tracking_uri"]).get_run(first["mlflow_run_id"]).data.tags
    assert tags["dpgnn.private"] == "true" and tags["dpgnn.randomness"].startswith("secret")
    assert tags["dpgnn.level"] == "node"
    note = tags["mlflow.note.content"]  # the run page's description
    assert note.startswith("**(ε = ") and "**Protects:** model parameters" in note
    rid = first["release"].split()[2]

    cached = pipeline(spec=spec, dataset=str(tmp_path / "ds"))
    assert cached["cache"]["train"] == "Cached"
    assert cached["release"].startswith(f"reused cached release {rid}")

    fresh = pipeline(spec=spec, dataset=str(tmp_path / "ds"), refresh=True)
    assert fresh["release"].startswith("new release") and f"replacing {rid}" in fresh["release"]

    insecure = pipeline(spec=spec.model_copy(update={"insecure_reproducible_noise": True}),
                        dataset=str(tmp_path / "ds"))
    tags = MlflowClient(insecure["mlflow_tracking_uri"]).get_run(
        insecure["mlflow_run_id"]).data.tags
    assert tags["dpgnn.private"] == "false"
    assert tags["dpgnn.warning"] == "not private: noise reproducible from the stored seed"
    assert "NOT PRIVATE" in insecure["randomness"]
    assert tags["mlflow.note.content"].startswith("**NOT PRIVATE**")
