"""ProGAP's tasks: calibrate -> graph (degree check at node level) -> stage 0 -> (aggregate
k -> stage k) for k = 1..K -> finish (the composed ledger, the model, the report). Each is
cached on its inputs and the code version, writes its artifact atomically and returns a
small manifest with the privacy events of what it released; the last one composes them
into the run's ledger. A stage's artifact holds the whole model so far (earlier stages
frozen, later ones untrained), so stage k + 1 starts from stage k's file."""

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
from dpgnn_core.specs import ProgapSpec
from dpgnn_core.training.checkpoint import checkpointing
from tasks._cache import inputs_and_code
from tasks.budget import gate_for
from tasks.cached import StagedTasks
from tasks.evaluate import verify_files
from tasks.gap import calibration_result, finish_artifact, graph_artifact
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

Ref = dict[str, Any]


@task(name="progap_calibrate", cache_key_fn=inputs_and_code("progap_calibrate"),
      persist_result=True, result_serializer="json")
def progap_calibrate(dataset: DatasetRef, spec: ProgapSpec) -> dict[str, Any]:
    """The common noise scale z, the planned ledger and the privacy report (checks the
    input before anything trains)."""
    from dpgnn_core.methods import progap

    return calibration_result(dataset, lambda data: progap.calibrate_progap(data, spec))


@task(name="progap_graph", cache_key_fn=inputs_and_code("progap_graph"),
      persist_result=True, result_serializer="json")
def progap_graph(dataset: DatasetRef, spec: ProgapSpec) -> dict[str, Any]:
    """The edges the aggregations run over: all of them (GAP's; at node level a graph with
    a degree above ``max_degree`` is refused)."""
    return graph_artifact(dataset, spec, "progap_graph")


def _model(data: Any, spec: ProgapSpec, stage: Ref | None) -> Any:
    """The model after ``stage`` (its artifact, checked), or untrained."""
    from dpgnn_core.methods import progap

    model = progap.new_model(data, spec)
    if stage is not None:
        verify_files(stage["path"], stage["files"])
        model.load_state_dict(torch.load(Path(stage["path"]) / "model.pt",
                                         weights_only=True))
    return model


def _aggregations(data: Any, spec: ProgapSpec, refs: list[Ref]) -> torch.Tensor:
    """X(1..k) ``[n, k, hidden]`` from the aggregation artifacts (checked)."""
    cols = []
    for r in refs:
        verify_files(r["path"], r["files"])
        cols.append(torch.load(Path(r["path"]) / "aggregation.pt", weights_only=True))
    if not cols:
        return torch.zeros(data.num_nodes, 0, spec.hidden)
    return torch.stack(cols, 1)


@task(name="progap_stage", cache_key_fn=inputs_and_code("progap_stage"),
      persist_result=True, result_serializer="json")
def progap_stage(dataset: DatasetRef, spec: ProgapSpec, z: float, stage: int,
                 previous: Ref | None, aggregations: list[Ref], owner: str | None = None
                 ) -> dict[str, Any]:
    """Train stage ``stage`` on X(1..stage) (``aggregations``) with the earlier stages of
    ``previous`` frozen (DP-Adam at node level); returns its privacy events."""
    from dpgnn_core.methods import progap

    data = load_keyed_dataset(dataset)
    model = _model(data, spec, previous)
    aggs = _aggregations(data, spec, aggregations)
    key = (dataset["content_sha256"], spec, z, stage, previous and previous["files"],
           [a["files"] for a in aggregations])
    folder = checkpoint_dir("progap_stage", *key)
    shown = progress("step", progap.stage_steps(spec, int(data.mask("train").sum())),
                     f"{spec.method} stage {stage}",
                     spec.epsilon if spec.level != "none" else None)
    with gate_for(dataset, spec.method, spec, owner) as gate, shown, \
            checkpointing(folder, checkpoint_seconds()) as ckpt:
        on_step = gate.on_step(shown.on_step()) if spec.level == "node" else shown.on_step()
        model, hist, events = progap.fit_stage(data, spec, z, stage, model, aggs, on_step)
    out = artifact_dir("progap_stage", *key)
    with atomic_dir(out, overwrite=True) as tmp:
        torch_save({k: v.cpu() for k, v in model.state_dict().items()}, tmp / "model.pt",
                   target=out / "model.pt")
        write_json_atomic(tmp / "history.json", hist)
        m = finish_artifact(tmp, "progap_stage", ["model.pt", "history.json"], spec, dataset,
                            {"stage": stage, "events": events.to_dict(),
                             **resume_note(ckpt)})
    ckpt.clear()
    return {"path": str(out), "files": m["files"], "stage": stage,
            "events": events.to_dict()}


@task(name="progap_aggregate", cache_key_fn=inputs_and_code("progap_aggregate"),
      persist_result=True, result_serializer="json")
def progap_aggregate(dataset: DatasetRef, graph: Ref, spec: ProgapSpec, z: float,
                     stage: int, previous: Ref, aggregations: list[Ref],
                     owner: str | None = None) -> dict[str, Any]:
    """The stage-``stage`` aggregation of stage ``stage - 1``'s embeddings (``previous``),
    computed once and cached: the noise is drawn once, from a secret generator, and reusing
    this artifact costs no further budget. Writes X(k) ``[n, hidden]``; returns its event."""
    from dpgnn_core.methods import progap

    verify_files(graph["path"], graph["files"])
    data = load_keyed_dataset(dataset)
    model = _model(data, spec, previous)
    aggs = _aggregations(data, spec, aggregations)
    ei = np.load(Path(graph["path"]) / "edge_index.npy")
    with gate_for(dataset, spec.method, spec, owner), Progress(spec.method) as shown:
        xk, events = progap.aggregate_stage(data, ei, spec, z, stage, model, aggs,
                                            progress=shown.stage)
    out = artifact_dir("progap_aggregate", dataset["content_sha256"], graph["files"],
                       previous["files"], spec, z, stage)
    with atomic_dir(out, overwrite=True) as tmp:
        torch_save(xk, tmp / "aggregation.pt", target=out / "aggregation.pt")
        m = finish_artifact(tmp, "progap_aggregate", ["aggregation.pt"], spec, dataset,
                            {"stage": stage, "events": events.to_dict(),
                             "shape": list(xk.shape),
                             "release": f"X({stage}): the private aggregation of stage "
                                        f"{stage - 1}'s embeddings"})
    return {"path": str(out), "files": m["files"], "stage": stage,
            "events": events.to_dict()}


@task(name="progap_finish", cache_key_fn=inputs_and_code("progap_finish"),
      persist_result=True, result_serializer="json")
def progap_finish(dataset: DatasetRef, spec: ProgapSpec, z: float,
                  calibration: dict[str, Any], graph: Ref, stages: list[Ref],
                  aggregations: list[Ref], owner: str | None = None) -> dict[str, Any]:
    """Compose the stages' events (aggregation k before stage k) into the run's ledger,
    refuse one that differs from the plan, and write the model (the last stage's file),
    the private aggregations X(1..K) stacked for evaluation, the ledger, the report and
    the history with ε spent at every step."""
    from dpgnn_core.methods import progap

    data = load_keyed_dataset(dataset)
    model = _model(data, spec, stages[-1])
    aggs = _aggregations(data, spec, aggregations)
    ledger = Ledger.from_dict(stages[0]["events"])
    for a, s in zip(aggregations, stages[1:], strict=True):
        ledger = ledger + Ledger.from_dict(a["events"]) + Ledger.from_dict(s["events"])
    histories = [json.loads((Path(s["path"]) / "history.json").read_text()) for s in stages]
    planned = Ledger.from_dict(calibration["planned"])
    report_dict, history = progap.finish_run(spec, {**calibration["report"],
                                                    "graph": graph["graph"]},
                                             planned, ledger, calibration["num_train"], z,
                                             histories)
    ledger = report_dict["ledger"]
    report = PrivacyReport.from_dict(report_dict)  # the core's report, typed
    out = artifact_dir("progap", dataset["content_sha256"], [s["files"] for s in stages],
                       [a["files"] for a in aggregations], spec, z)
    with gate_for(dataset, spec.method, spec, owner) as gate:
        if report.private:
            report = report.with_release(new_release(out))
        with atomic_dir(out, overwrite=True) as tmp:
            progap.save_progap(str(tmp / "model.pt"), model, spec, data.num_features,
                               data.num_classes)
            torch_save(aggs, tmp / "aggregations.pt", target=out / "aggregations.pt")
            ledger.save(tmp / "ledger.json")
            write_json_atomic(tmp / "report.json", report.to_dict())
            write_json_atomic(tmp / "history.json", history)
            agg_files = files_manifest(tmp, ["aggregations.pt"])
            m = finish_artifact(tmp, "progap", ["model.pt", "ledger.json", "report.json",
                                                "history.json"], spec, dataset,
                                {"private": report.private})
        gate.finish(report, ledger)  # names the run's release on its reservation
    return {"path": str(out), "files": m["files"], "spec": spec.model_dump(mode="json"),
            "dataset": dataset["content_sha256"], "report": report.to_dict(),
            "ledger": ledger.to_dict(),
            "aggregations": {"path": str(out), "files": agg_files}}


# --- the pipeline's staged runner (the catalogue's ``staged = "progap"``) ---------------
class ProgapTasks(StagedTasks):
    """ProGAP's stages as cached tasks (:class:`dpgnn_core.methods.progap.ProgapStages`):
    the core's :func:`~dpgnn_core.methods.progap.orchestrate` wires them. A stage's value is
    the list of stage and aggregation references so far."""

    def calibrate(self) -> Any:
        return self._step("calibrate", progap_calibrate)

    def graph(self) -> Any:
        return self._step("graph", progap_graph)

    def train(self, k: int, previous: Any, aggregation: Any, z: float) -> Any:
        stages, aggs = previous or ([], [])
        aggs = [*aggs, aggregation] if aggregation is not None else aggs
        ref = self._step(f"stage{k}", progap_stage, z=z, stage=k,
                         previous=stages[-1] if stages else None, aggregations=aggs,
                         owner=self.owner)
        return [*stages, ref], aggs

    def aggregate(self, k: int, graph: Any, previous: Any, z: float) -> Any:
        stages, aggs = previous
        return self._step(f"aggregate{k}", progap_aggregate, graph=graph, z=z, stage=k,
                          previous=stages[-1], aggregations=aggs, owner=self.owner)

    def finish(self, calibration: Any, z: float, graph: Any, last: Any) -> Any:
        stages, aggs = last
        return self._step("train", progap_finish, z=z, calibration=calibration,
                          graph=graph, stages=stages, aggregations=aggs, owner=self.owner)


def run_stages(ds: DatasetRef, spec: ProgapSpec, refresh: bool, states: dict[str, str]
               ) -> tuple[dict[str, Any], PrivacyReport]:
    """ProGAP's cached stages, wired by the core's one orchestration; the last step
    composes the stages' privacy events into the run's ledger."""
    from dpgnn_core.methods.progap import orchestrate

    model = orchestrate(ProgapTasks(ds, spec, refresh, states))
    return model, report_of(model)
