"""Task ``train``: a dataset manifest and a train spec in, a model artifact out."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from prefect import get_run_logger, task

from dpgnn_core.data.graph import GraphData
from dpgnn_core.data.store import read_dataset, read_manifest
from dpgnn_core.io import atomic_dir, sha256_file, sha256_json, write_json_atomic
from dpgnn_core.methods import baseline
from dpgnn_core.specs import DpgnnSpec, DpMlpSpec, DrwSpec, GraphClsSpec, TrainSpec
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


def load_keyed_dataset(dataset: dict[str, Any]) -> GraphData:
    """Read the dataset a task was keyed on. ``read_dataset`` checks every file against the
    manifest; the manifest must be the one whose hash is in the cache key."""
    if read_manifest(dataset["path"])["content_sha256"] != dataset["content_sha256"]:
        raise RuntimeError(f"dataset {dataset['path']} changed since it was ingested")
    return read_dataset(dataset["path"])


def progress(unit: str, total: int) -> Callable[[int, dict[str, float]], None]:
    """A callback logging the loss at every tenth of ``total`` (epochs or steps)."""
    logger = get_run_logger()
    every = max(1, total // 10)

    def log(i: int, rec: dict[str, float]) -> None:
        if i % every == 0 or i == total:
            extra = {k: round(v, 4) for k, v in rec.items() if k not in (unit, "train_loss")}
            logger.info("%s %d/%d loss %.4f %s", unit, i, total, rec["train_loss"], extra)

    return log


@task(name="train", cache_key_fn=inputs_and_code("train"), persist_result=True,
      result_serializer="json")
def train(dataset: dict[str, Any], spec: TrainSpec) -> dict[str, Any]:
    """Fit ``spec`` on the dataset; write ``model.pt``, ``history.json``, ``manifest.json``."""
    data = load_keyed_dataset(dataset)
    result = baseline.fit(data, spec, on_epoch=progress("epoch", spec.epochs))
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



def new_release(out: Path) -> dict[str, Any]:
    """Identify the private release about to be written to ``out``.

    The noise is secret and fresh, so recomputing a cached artifact (``--refresh``, or a
    lost or changed artifact) is a *new* release of the same data, not a copy: it says so,
    naming the release it replaces, and both count against the data's budget. A cache hit
    reuses the stored release at no further cost."""
    release: dict[str, Any] = {"id": uuid.uuid4().hex,
                               "created": datetime.now(UTC).isoformat(
                                   timespec="seconds")}
    old = out / "report.json"
    if out.exists():
        try:
            previous = json.loads(old.read_text()).get("release", {}).get("id")
        except (OSError, ValueError, AttributeError):
            previous = None
        release["replaces"] = previous or "an earlier release at this path"
        release["note"] = ("recomputed: a new release of the same data with fresh noise; "
                           "the release it replaces was also published, and both count "
                           "against the privacy budget")
    return release


def _private_artifacts(kind: str, dataset: dict[str, Any], spec: Any, data: GraphData,
                       result: Any, make_plan: Any, save: Any) -> dict[str, Any]:
    """Write a private method's model, ledger, privacy report and history (with ε spent at
    20 points), atomically; return the small manifest the flow passes on."""
    from dpgnn_core.privacy import make_accountant
    from dpgnn_core.privacy.calibrate import epsilon_curve

    history: list[dict[str, Any]] = [dict(r) for r in result.history]
    if result.report["private"]:
        n_train = int(result.report.get("num_train") or data.mask("train").sum())
        lam = result.report["noise_multiplier"]

        def ledger_after(t: int) -> Any:
            return make_plan(spec.model_copy(update={"steps": t}), n_train)(lam)

        for t, eps in epsilon_curve(ledger_after, result.report["steps"], result.report["delta"],
                                    make_accountant(spec.accountant)):
            history[t - 1]["epsilon_spent"] = eps
    out = artifact_dir(kind, dataset["content_sha256"], spec)
    report = {**result.report, "epsilon": None if result.report["epsilon"] == float("inf")
              else result.report["epsilon"]}
    if report["private"]:
        report["release"] = new_release(out)
    with atomic_dir(out, overwrite=True) as tmp:
        save(str(tmp / "model.pt"), result.model, spec, data.num_features, data.num_classes)
        result.ledger.save(tmp / "ledger.json")
        write_json_atomic(tmp / "report.json", report)
        write_json_atomic(tmp / "history.json", history)
        files = files_manifest(tmp, ["model.pt", "ledger.json", "report.json", "history.json"])
        write_json_atomic(tmp / "manifest.json", {
            "kind": kind, "spec": spec.model_dump(mode="json"),
            "dataset": dataset["content_sha256"], "code_version": code_version(),
            "private": report["private"], "files": files})
    return {"path": str(out), "files": files, "spec": spec.model_dump(mode="json"),
            "dataset": dataset["content_sha256"], "report": report}


def _train_private(kind: str, dataset: dict[str, Any], spec: Any, fit: Any, make_plan: Any,
                   save: Any) -> dict[str, Any]:
    """Load the keyed dataset, run a private method's ``fit`` and write its artifacts."""
    data = load_keyed_dataset(dataset)
    result = fit(data, spec, on_step=progress("step", spec.steps))
    return _private_artifacts(kind, dataset, spec, data, result, make_plan, save)


@task(name="train_dpgnn", cache_key_fn=inputs_and_code("train_dpgnn"), persist_result=True,
      result_serializer="json")
def train_dpgnn(dataset: dict[str, Any], spec: DpgnnSpec) -> dict[str, Any]:
    """DP-GNN: writes ``model.pt``, ``ledger.json`` (the privacy events), ``report.json``
    (the privacy report) and ``history.json`` (loss per step, ε spent at every step with
    the RDP accountant, at 20 points with PLD)."""
    from dpgnn_core.methods import dp_gnn

    return _train_private("train_dpgnn", dataset, spec, dp_gnn.train_dpgnn, dp_gnn.plan,
                          dp_gnn.save_dpgnn)


@task(name="train_dp_mlp", cache_key_fn=inputs_and_code("train_dp_mlp"), persist_result=True,
      result_serializer="json")
def train_dp_mlp(dataset: dict[str, Any], spec: DpMlpSpec) -> dict[str, Any]:
    """DP-MLP: the same artifacts as ``train_dpgnn``."""
    from dpgnn_core.methods import dp_mlp

    return _train_private("train_dp_mlp", dataset, spec, dp_mlp.train_dp_mlp, dp_mlp.plan,
                          dp_mlp.save_dp_mlp)


@task(name="train_drw", cache_key_fn=inputs_and_code("train_drw"), persist_result=True,
      result_serializer="json")
def train_drw(dataset: dict[str, Any], spec: DrwSpec) -> dict[str, Any]:
    """DRW / DRW-R / DRW-D: the same artifacts as ``train_dpgnn``."""
    from dpgnn_core.methods import drw

    return _train_private("train_drw", dataset, spec, drw.train_drw, drw.plan, drw.save_drw)


@task(name="train_graph_cls", cache_key_fn=inputs_and_code("train_graph_cls"),
      persist_result=True, result_serializer="json")
def train_graph_cls(dataset: dict[str, Any], spec: GraphClsSpec) -> dict[str, Any]:
    """Graph classification (one graph per record): the same artifacts as ``train_dpgnn``;
    the history holds val / test metrics once per expected pass over the training graphs."""
    from dpgnn_core.methods import graph_cls

    return _train_private("train_graph_cls", dataset, spec, graph_cls.train_graph_classifier,
                          graph_cls.plan, graph_cls.save_graph_classifier)
