"""Task ``train``: a dataset manifest and a train spec in, a model artifact out."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import get_run_logger, task

from dpgnn_core.data.store import read_dataset, read_manifest
from dpgnn_core.io import atomic_dir, sha256_file, sha256_json, write_json_atomic
from dpgnn_core.methods import baseline
from dpgnn_core.specs import DpgnnSpec, TrainSpec
from tasks._cache import inputs_and_code
from tasks.config import code_version, project_dir


def artifact_dir(kind: str, *parts: Any) -> Path:
    """``$DPGNN_HOME/artifacts/<kind>/<hash of parts and code version>``."""
    key = sha256_json({"parts": [p.model_dump(mode="json") if hasattr(p, "model_dump") else p
                                 for p in parts], "code": code_version()})
    return project_dir() / "artifacts" / kind / key[:16]


def files_manifest(folder: Path, names: list[str]) -> dict[str, dict[str, Any]]:
    return {n: {"sha256": sha256_file(folder / n), "bytes": (folder / n).stat().st_size}
            for n in names}


@task(name="train", cache_key_fn=inputs_and_code("train"), persist_result=True,
      result_serializer="json")
def train(dataset: dict[str, Any], spec: TrainSpec) -> dict[str, Any]:
    """Fit ``spec`` on the dataset; write ``model.pt``, ``history.json``, ``manifest.json``."""
    logger = get_run_logger()
    # read_dataset checks every file against the manifest; the manifest must be the one
    # this run was keyed on.
    if read_manifest(dataset["path"])["content_sha256"] != dataset["content_sha256"]:
        raise RuntimeError(f"dataset {dataset['path']} changed since it was ingested")
    data = read_dataset(dataset["path"])
    step = max(1, spec.epochs // 10)

    def on_epoch(epoch: int, rec: dict[str, float]) -> None:
        if epoch % step == 0 or epoch == spec.epochs:
            logger.info("epoch %d/%d loss %.4f val_acc %.4f", epoch, spec.epochs,
                        rec["train_loss"], rec["val_accuracy"])

    result = baseline.fit(data, spec, on_epoch=on_epoch)
    out = artifact_dir("train", dataset["content_sha256"], spec)
    with atomic_dir(out, overwrite=True) as tmp:
        baseline.save_model(tmp / "model.pt", result.model, spec, data.num_features,
                            data.num_classes)
        write_json_atomic(tmp / "history.json", result.history)
        files = files_manifest(tmp, ["model.pt", "history.json"])
        manifest = {"kind": "train", "spec": spec.model_dump(mode="json"),
                    "dataset": dataset["content_sha256"], "code_version": code_version(),
                    "private": False, "files": files}
        write_json_atomic(tmp / "manifest.json", manifest)
    return {"path": str(out), "files": files, "spec": spec.model_dump(mode="json"),
            "dataset": dataset["content_sha256"]}



@task(name="train_dpgnn", cache_key_fn=inputs_and_code("train_dpgnn"), persist_result=True,
      result_serializer="json")
def train_dpgnn(dataset: dict[str, Any], spec: DpgnnSpec) -> dict[str, Any]:
    """DP-GNN: writes ``model.pt``, ``ledger.json`` (the privacy events), ``report.json``
    (the privacy report) and ``history.json`` (loss per step, ε spent at 20 points)."""
    from dpgnn_core.methods import dp_gnn

    logger = get_run_logger()
    if read_manifest(dataset["path"])["content_sha256"] != dataset["content_sha256"]:
        raise RuntimeError(f"dataset {dataset['path']} changed since it was ingested")
    data = read_dataset(dataset["path"])
    step = max(1, spec.steps // 10)

    def on_step(t: int, rec: dict[str, float]) -> None:
        if t % step == 0 or t == spec.steps:
            logger.info("step %d/%d loss %.4f", t, spec.steps, rec["train_loss"])

    result = dp_gnn.train_dpgnn(data, spec, on_step=on_step)
    history: list[dict[str, Any]] = [dict(r) for r in result.history]
    if result.report["private"]:
        n_train = int(data.mask("train").sum())
        for t, eps in dp_gnn.epsilon_curve(spec, n_train, result.report["noise_multiplier"],
                                           result.report["delta"]):
            history[t - 1]["epsilon_spent"] = eps
    out = artifact_dir("train_dpgnn", dataset["content_sha256"], spec)
    with atomic_dir(out, overwrite=True) as tmp:
        dp_gnn.save_dpgnn(str(tmp / "model.pt"), result.model, spec, data.num_features,
                          data.num_classes)
        result.ledger.save(tmp / "ledger.json")
        report = {**result.report,
                  "epsilon": None if result.report["epsilon"] == float("inf")
                  else result.report["epsilon"]}
        write_json_atomic(tmp / "report.json", report)
        write_json_atomic(tmp / "history.json", history)
        files = files_manifest(tmp, ["model.pt", "ledger.json", "report.json", "history.json"])
        write_json_atomic(tmp / "manifest.json", {
            "kind": "train_dpgnn", "spec": spec.model_dump(mode="json"),
            "dataset": dataset["content_sha256"], "code_version": code_version(),
            "private": report["private"], "files": files})
    return {"path": str(out), "files": files, "spec": spec.model_dump(mode="json"),
            "dataset": dataset["content_sha256"], "report": report}
