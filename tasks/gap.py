"""GAP's tasks: calibrate -> graph (degree check at node level) -> encoder -> aggregate ->
classifier -> privacy ledger. Each is cached on its inputs and the code version, writes its
artifact atomically and returns a small manifest with the privacy events of what it
released; the flow composes them into the run's ledger."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch
from prefect import task

from dpgnn_core.io import atomic_dir, write_json_atomic
from dpgnn_core.privacy import Ledger, PrivacyReport
from dpgnn_core.serialize import torch_save
from dpgnn_core.specs import GapSpec, ProgapSpec
from dpgnn_core.training.checkpoint import checkpointing
from tasks._cache import inputs_and_code
from tasks.budget import gate_for
from tasks.cached import StagedTasks
from tasks.config import code_version
from tasks.evaluate import verify_files
from tasks.progress import Progress
from tasks.refs import DatasetRef, report_of
from tasks.train import (
    artifact_dir,
    checkpoint_dir,
    checkpoint_seconds,
    files_manifest,
    load_keyed_dataset,
    new_release,
    progress,
    resume_note,
)


def finish_artifact(out: Path, kind: str, names: list[str], spec: GapSpec | ProgapSpec,
                    dataset: DatasetRef, extra: dict[str, Any]) -> dict[str, Any]:
    """The manifest of a stage's artifact folder (kind, spec, dataset, code version, the
    sha256 of every file), written atomically; returned."""
    files = files_manifest(out, names)
    manifest = {"kind": kind, "spec": spec.model_dump(mode="json"),
                "dataset": dataset["content_sha256"], "code_version": code_version(),
                "files": files, **extra}
    write_json_atomic(out / "manifest.json", manifest)
    return manifest


@task(name="gap_calibrate", cache_key_fn=inputs_and_code("gap_calibrate"),
      persist_result=True, result_serializer="json")
def gap_calibrate(dataset: DatasetRef, spec: GapSpec) -> dict[str, Any]:
    """The common noise scale z, the planned ledger and the privacy report (checks the
    input before anything trains)."""
    from dpgnn_core.methods import gap

    return calibration_result(dataset, lambda data: gap.calibrate_gap(data, spec))


def calibration_result(dataset: DatasetRef, calibrate: Any) -> dict[str, Any]:
    """A staged family's calibration as JSON: z, the planned ledger, the report and the
    number of training nodes (``calibrate(data)``: the core's, on the spec)."""
    data = load_keyed_dataset(dataset)
    planned, z, report = calibrate(data)
    return {"z": z, "planned": planned.to_dict(), "report": report,
            "num_train": int(data.mask("train").sum())}


@task(name="gap_graph", cache_key_fn=inputs_and_code("gap_graph"), persist_result=True,
      result_serializer="json")
def gap_graph(dataset: DatasetRef, spec: GapSpec) -> dict[str, Any]:
    """The edges PMA aggregates over: all of them; at node level the graph is refused when a
    degree exceeds ``max_degree`` (no edge is sampled, so nothing here depends on a seed)."""
    return graph_artifact(dataset, spec, "gap_graph")


def graph_artifact(dataset: DatasetRef, spec: GapSpec | ProgapSpec, kind: str
                   ) -> dict[str, Any]:
    """The edges GAP's PMA or ProGAP's aggregations run over
    (:func:`~dpgnn_core.methods.gap.prepare_graph`), written as ``edge_index.npy``."""
    from dpgnn_core.methods import gap

    data = load_keyed_dataset(dataset)
    ei, info = gap.prepare_graph(data, spec)
    key = {"level": spec.level, "max_degree": spec.max_degree}
    out = artifact_dir(kind, dataset["content_sha256"], key)
    with atomic_dir(out, overwrite=True) as tmp:
        np.save(tmp / "edge_index.npy", ei)
        m = finish_artifact(tmp, kind, ["edge_index.npy"], spec, dataset, {"graph": info})
    return {"path": str(out), "files": m["files"], "graph": info}


@task(name="gap_encoder", cache_key_fn=inputs_and_code("gap_encoder"), persist_result=True,
      result_serializer="json")
def gap_encoder(dataset: DatasetRef, spec: GapSpec, z: float, owner: str | None = None
                ) -> dict[str, Any]:
    """Encoder module (DP-Adam at node level); returns its privacy events. ``owner``: the
    run's owner token, shared by its stages' budget gates (:func:`tasks.budget.gate_for`)."""
    from dpgnn_core.methods import gap

    data = load_keyed_dataset(dataset)
    folder = checkpoint_dir("gap_encoder", dataset["content_sha256"], spec, z)
    with gate_for(dataset, spec.method, spec, owner) as gate, \
            _module_progress(spec, "encoder", data) as shown, \
            checkpointing(folder, checkpoint_seconds()) as ckpt:
        enc, hist, events = gap.fit_encoder(data, spec, z, gate.on_step(shown.on_step()))
    out = artifact_dir("gap_encoder", dataset["content_sha256"], spec, z)
    with atomic_dir(out, overwrite=True) as tmp:
        torch_save({k: v.cpu() for k, v in enc.state_dict().items()}, tmp / "encoder.pt",
                   target=out / "encoder.pt")
        write_json_atomic(tmp / "history.json", hist)
        m = finish_artifact(tmp, "gap_encoder", ["encoder.pt", "history.json"], spec, dataset,
                    {"events": events.to_dict(), **resume_note(ckpt)})
    ckpt.clear()
    return {"path": str(out), "files": m["files"], "events": events.to_dict()}


def _module_progress(spec: GapSpec, module: str, data: Any) -> Progress:
    """The live progress of GAP's encoder or classifier: DP-Adam steps (node level) or
    Adam mini-batch steps, with ε spent over the whole run so far."""
    from dpgnn_core.methods import gap

    return progress("step", gap.module_steps(spec, int(data.mask("train").sum())),
                    f"{spec.method} {module}", spec.epsilon if spec.level != "none" else None)


@task(name="gap_aggregate", cache_key_fn=inputs_and_code("gap_aggregate"),
      persist_result=True, result_serializer="json")
def gap_aggregate(dataset: DatasetRef, graph: dict[str, Any], encoder: dict[str, Any],
                  spec: GapSpec, z: float, owner: str | None = None) -> dict[str, Any]:
    """PMA: all K hops precomputed once and cached. The noise is drawn once per release,
    from a secret generator; reusing this artifact costs no further budget. Writes the
    private release X(1..K) ``[n, K, d]`` (``aggregations.pt``); X(0), every node's
    un-noised encoding, is not stored: it is recomputed from the encoder and a node's own
    features where needed. Returns the release's privacy event."""
    from dpgnn_core.methods import gap

    verify_files(graph["path"], graph["files"])
    verify_files(encoder["path"], encoder["files"])
    data = load_keyed_dataset(dataset)
    enc = gap.new_encoder(spec, data.num_features, data.num_classes)
    enc.load_state_dict(torch.load(Path(encoder["path"]) / "encoder.pt", weights_only=True))
    ei = np.load(Path(graph["path"]) / "edge_index.npy")
    with gate_for(dataset, spec.method, spec, owner), Progress(spec.method) as shown:
        xs, events = gap.aggregate(data, ei, enc, spec, z, progress=shown.stage)
    assert xs.shape[1] == spec.hops  # X(1..K) only: X(0) is never part of the release
    out = artifact_dir("gap_aggregate", dataset["content_sha256"], graph["files"],
                       encoder["files"], spec, z)
    with atomic_dir(out, overwrite=True) as tmp:
        torch_save(xs, tmp / "aggregations.pt", target=out / "aggregations.pt")
        m = finish_artifact(tmp, "gap_aggregate", ["aggregations.pt"], spec, dataset,
                    {"events": events.to_dict(), "shape": list(xs.shape),
                     "release": "X(1..K): the private aggregations; X(0) is not stored"})
    return {"path": str(out), "files": m["files"], "events": events.to_dict()}


@task(name="gap_classifier", cache_key_fn=inputs_and_code("gap_classifier"),
      persist_result=True, result_serializer="json")
def gap_classifier(dataset: DatasetRef, aggregations: dict[str, Any], spec: GapSpec,
                   z: float, calibration: dict[str, Any], encoder: dict[str, Any],
                   owner: str | None = None) -> dict[str, Any]:
    """Classification module on the private aggregations; writes the model, the composed
    ledger (encoder + PMA + classifier events), the privacy report and the history with ε
    spent at every step."""
    from dpgnn_core.methods import gap

    verify_files(aggregations["path"], aggregations["files"])
    verify_files(encoder["path"], encoder["files"])
    data = load_keyed_dataset(dataset)
    xs = torch.load(Path(aggregations["path"]) / "aggregations.pt", weights_only=True)
    enc = gap.new_encoder(spec, data.num_features, data.num_classes)
    enc.load_state_dict(torch.load(Path(encoder["path"]) / "encoder.pt", weights_only=True))
    folder = checkpoint_dir("gap_classifier", dataset["content_sha256"],
                            aggregations["files"], spec, z)
    with gate_for(dataset, spec.method, spec, owner) as gate, \
            _module_progress(spec, "classifier", data) as shown, \
            checkpointing(folder, checkpoint_seconds()) as ckpt:
        clf, hist, events = gap.fit_classifier(data, xs, spec, z,
                                               gate.on_step(shown.on_step()), encoder=enc)
    ledger = (Ledger.from_dict(encoder["events"]) + Ledger.from_dict(aggregations["events"])
              + events)
    enc_hist = json.loads((Path(encoder["path"]) / "history.json").read_text())
    planned = Ledger.from_dict(calibration["planned"])
    report_dict, history = gap.finish_run(spec, calibration["report"], planned, ledger,
                                          calibration["num_train"], z, enc_hist, hist)
    ledger = report_dict["ledger"]  # the composed ledger with the run's unaccounted uses
    report = PrivacyReport.from_dict(report_dict)  # the core's report, typed
    out = artifact_dir("gap_classifier", dataset["content_sha256"], aggregations["files"],
                       spec, z)
    if report.private:
        report = report.with_release({**new_release(out), **resume_note(ckpt)})
    with atomic_dir(out, overwrite=True) as tmp:
        gap.save_gap(str(tmp / "model.pt"), clf, spec, data.num_features, data.num_classes)
        ledger.save(tmp / "ledger.json")
        write_json_atomic(tmp / "report.json", report.to_dict())
        write_json_atomic(tmp / "history.json", history)
        m = finish_artifact(tmp, "gap", ["model.pt", "ledger.json", "report.json",
                                         "history.json"], spec, dataset,
                            {"aggregations": aggregations, "private": report.private})
    gate.finish(report, ledger)  # names the run's release on its reservation
    ckpt.clear()
    return {"path": str(out), "files": m["files"], "spec": spec.model_dump(mode="json"),
            "dataset": dataset["content_sha256"], "report": report.to_dict(),
            "ledger": ledger.to_dict(), "aggregations": aggregations}


# --- the pipeline's staged runner (the catalogue's ``staged = "gap"``) ------------------
class GapTasks(StagedTasks):
    """GAP's stages as cached tasks (:class:`dpgnn_core.methods.gap.GapStages`): the core's
    :func:`~dpgnn_core.methods.gap.orchestrate` wires them, here as in the library."""

    def calibrate(self) -> Any:
        return self._step("calibrate", gap_calibrate)

    def graph(self) -> Any:
        return self._step("graph", gap_graph)

    def encoder(self, z: float) -> Any:
        return self._step("encoder", gap_encoder, z=z, owner=self.owner)

    def aggregate(self, graph: Any, encoder: Any, z: float) -> Any:
        return self._step("aggregate", gap_aggregate, graph=graph, encoder=encoder, z=z,
                          owner=self.owner)

    def classifier(self, aggregations: Any, z: float, calibration: Any, encoder: Any) -> Any:
        return self._step("train", gap_classifier, aggregations=aggregations, z=z,
                          calibration=calibration, encoder=encoder, owner=self.owner)


def run_stages(ds: DatasetRef, spec: GapSpec, refresh: bool, states: dict[str, str]
               ) -> tuple[dict[str, Any], PrivacyReport]:
    """GAP's cached stages, wired by the core's one orchestration; each returns the privacy
    events of its release, composed into the run's ledger by the classifier step."""
    from dpgnn_core.methods.gap import orchestrate

    model = orchestrate(GapTasks(ds, spec, refresh, states))
    return model, report_of(model)
