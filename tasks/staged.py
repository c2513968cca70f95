"""The staged runner: any staged method's stages (:class:`~dpgnn_core.methods._staged.Stage`,
declared by the method: GAP's calibrate -> graph -> encoder -> aggregate -> classifier,
ProGAP's calibrate -> graph -> stage 0 -> (aggregate k -> stage k) -> finish, DPDGC's
calibrate -> encoder -> aggregate -> classifier), each one cached task. A stage's task is
cached on its inputs (the dataset, the spec, its parameters and the references of what it
reads) and the code version, writes its values atomically to its artifact folder with a
manifest, and returns a small reference with the privacy events of what it released; the
last stage composes them into the run's ledger and writes the model, the ledger, the report
and the history.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import numpy as np
import torch
from prefect import task

from dpgnn_core.io import atomic_dir, write_json_atomic
from dpgnn_core.methods._staged import (
    Stage,
    StageContext,
    Staged,
    StageOutput,
    pick,
)
from dpgnn_core.methods.contract import write_model
from dpgnn_core.methods.private_run import PrivateRun, typed_report
from dpgnn_core.methods.registry import declared
from dpgnn_core.privacy import Ledger, PrivacyReport
from dpgnn_core.serialize import torch_save
from dpgnn_core.training.checkpoint import Checkpointer, checkpointing
from tasks._cache import inputs_and_code
from tasks.budget import TaskGate, gate_for, new_owner, released_plan
from tasks.cached import refuse_uncached_release, run_cached
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

Ref = dict[str, Any]


def run_stages(method: Any, ds: DatasetRef, spec: Any, refresh: bool,
               states: dict[str, str]) -> tuple[Ref, PrivacyReport]:
    """The stages ``method`` (a registered method whose catalogue entry is ``staged``)
    declares, as cached tasks in their order, each recording its cache state in ``states``
    under its name; the stages that may release something share one owner token (one
    budget reservation, :func:`tasks.budget.gate_for`).

    Returns:
        tuple: the last stage's reference (the model) and its report.
    """
    staged: Staged = declared(method.family)
    owner = new_owner()
    refs: dict[str, Any] = {}
    released = None if refresh else released_plan(ds, spec)

    def step(stage: Stage) -> None:
        task_, inputs = stage_call(stage, refs)
        # Already released, and this stage would run again: each later stage's inputs
        # would differ from the released run's, and the first gated one would refuse to
        # release again, after this one's work (a code upgrade retrained GAP's encoder,
        # ~60 s on Cora, before that refusal). Refused before any of it.
        refuse_uncached_release(task_, released, spec.method, ds["name"],
                                f"{stage.name} stage", dataset=ds, spec=spec, stage=stage,
                                inputs=inputs)
        refs[stage.name], states[stage.name] = run_cached(
            task_, refresh, dataset=ds, spec=spec, stage=stage, inputs=inputs,
            owner=owner if stage.gated else None, family=staged.family)

    step(staged.calibration())
    stages = staged.stages(spec, float(refs["calibrate"]["z"]))
    for stage in stages:
        step(stage)
    model = refs[stages[-1].name]
    return model, report_of(model)


def stage_call(stage: Stage, refs: Mapping[str, Any]) -> tuple[Any, dict[str, Any]]:
    """The cached task that runs ``stage`` (its name and cache key set) and its
    ``inputs``: its parameters and what it reads of the earlier stages' ``refs``."""
    inputs = {**stage.params, **{arg: pick(refs, src) for arg, src in stage.reads.items()}}
    return stage_task.with_options(name=stage.kind, cache_key_fn=_key(stage.kind)), inputs


def refuse_lost_stages(method: Any, ds: DatasetRef, spec: Any,
                       released: tuple[int, str] | None) -> None:
    """What :func:`run_stages` checks first, without running anything: a plan already
    ``released`` (:func:`tasks.budget.released_plan`) whose first stage (the calibration,
    which reads no earlier stage) has no cached record is refused
    (:func:`tasks.cached.refuse_uncached_release`). The command line calls it before the
    flow starts; the flow checks every stage again."""
    stage = declared(method.family).calibration()
    task_, inputs = stage_call(stage, {})
    refuse_uncached_release(task_, released, spec.method, ds["name"], f"{stage.name} stage",
                            dataset=ds, spec=spec, stage=stage, inputs=inputs)


def _key(kind: str) -> Any:
    """A stage's cache key: its kind, the dataset, the spec and its inputs (parameters
    and the references it reads), as if each were a parameter of its own task."""
    key = inputs_and_code(kind)

    def stage_key(ctx: Any, params: dict[str, Any]) -> str:
        return key(ctx, {"dataset": params["dataset"], "spec": params["spec"],
                         **params["inputs"]})
    return stage_key


@task(name="stage", persist_result=True, result_serializer="json")
def stage_task(dataset: DatasetRef, spec: Any, stage: Stage, inputs: dict[str, Any],
               owner: str | None = None, family: str = "") -> Ref:
    """Run one stage (its cache key and name set by :func:`run_stages`): read what it
    reads (each artifact checked against its manifest), compute, write its artifact.
    ``owner``: the run's owner token, shared by its stages' budget gates."""
    data = load_keyed_dataset(dataset)
    refs = {arg: inputs[arg] for arg in stage.reads}
    reads = {arg: _read(r) for arg, r in refs.items()}
    parts = (*_read_files(refs.values()),
             *(stage.folder if stage.folder is not None else (spec, *stage.params.values())))
    out = artifact_dir(stage.kind, dataset["content_sha256"], *parts)
    gate: TaskGate | None = None
    ckpt: Checkpointer | None = None
    with ExitStack() as stack:
        if stage.gated:
            gate = stack.enter_context(gate_for(dataset, spec.method, spec, owner))
        run = PrivateRun(gate=gate)  # the stage's engine: its gate, its steps or hops
        if stage.steps is not None:
            assert gate is not None
            shown = stack.enter_context(progress(
                "step", stage.steps(int(data.mask("train").sum())),
                f"{spec.method} {stage.label or stage.name}",
                spec.epsilon if spec.level != "none" else None))
            run = PrivateRun(shown.on_step(), gate=gate, step_releases=stage.step_releases)
            ckpt = stack.enter_context(checkpointing(
                checkpoint_dir(stage.kind, dataset["content_sha256"], *parts),
                checkpoint_seconds()))
        elif stage.aggregates:
            run = PrivateRun(progress=stack.enter_context(Progress(spec.method)).stage,
                             gate=gate)
        result = stage.run(StageContext(data, spec, run), reads)
    if result.report is not None:
        ref = _store_run(out, stage, result, dataset, spec, family, data, refs, ckpt, gate)
    elif not result.values:  # nothing to store (the calibration): its info is its result
        return dict(result.info)
    else:
        ref = _store(out, stage, result, dataset, spec, ckpt)
    if ckpt is not None:
        ckpt.clear()
    return ref


def _store(out: Path, stage: Stage, result: StageOutput, dataset: DatasetRef, spec: Any,
           ckpt: Checkpointer | None) -> Ref:
    """A stage's artifact: its values, its manifest (with its events if it may release
    something, and a resumed training's note); its reference."""
    events = {"events": result.events.to_dict()} if stage.gated else {}
    with atomic_dir(out, overwrite=True) as tmp:
        names = [_write(tmp, out, name, value) for name, value in result.values.items()]
        m = finish_artifact(tmp, stage.kind, names, spec, dataset,
                            {**result.info, **result.manifest, **events, **resume_note(ckpt)})
    return {"path": str(out), "files": m["files"], **result.info, **events}


def _store_run(out: Path, stage: Stage, result: StageOutput, dataset: DatasetRef, spec: Any,
               family: str, data: Any, refs: Mapping[str, Any],
               ckpt: Checkpointer | None, gate: TaskGate | None) -> Ref:
    """The last stage's artifact: the model (``family``'s), the composed ledger, the
    report with its release and the history (and the stacked aggregations, where the
    stage made them); the release named on the run's reservation."""
    assert result.report is not None
    values = dict(result.values)
    # the core's report, assembled by the method's last stage, typed by the helper every
    # method's report passes (its ledger: the composed one with the run's unaccounted uses)
    report, ledger, _ = typed_report(result.report, result.report["ledger"],
                                     values.get("history.json", ()), spec,
                                     who=spec.method)
    if report.private:
        report = report.with_release({**new_release(out), **resume_note(ckpt)})
    model = values.pop("model.pt")
    with atomic_dir(out, overwrite=True) as tmp:
        write_model(str(tmp / "model.pt"), model, spec, data.num_features, data.num_classes)
        ledger.save(tmp / "ledger.json")
        write_json_atomic(tmp / "report.json", report.to_dict())
        names = [_write(tmp, out, name, value) for name, value in values.items()]
        aggregations = refs.get("aggregations")
        if "aggregations.pt" in values:  # the stage stacked them here
            names.remove("aggregations.pt")
            aggregations = {"path": str(out), "files": files_manifest(tmp, ["aggregations.pt"])}
        m = finish_artifact(tmp, family, ["model.pt", "ledger.json", "report.json", *names],
                            spec, dataset,
                            {"aggregations": aggregations, "private": report.private})
    if gate is not None:
        gate.finish(report, ledger)  # names the run's release on its reservation
    return {"path": str(out), "files": m["files"], "spec": spec.model_dump(mode="json"),
            "dataset": dataset["content_sha256"], "report": report.to_dict(),
            "aggregations": aggregations}


def finish_artifact(out: Path, kind: str, names: list[str], spec: Any, dataset: DatasetRef,
                    extra: Mapping[str, Any]) -> dict[str, Any]:
    """The manifest of a stage's artifact folder (kind, spec, dataset, code version, the
    sha256 of every file), written atomically; returned."""
    files = files_manifest(out, names)
    manifest = {"kind": kind, "spec": spec.model_dump(mode="json"),
                "dataset": dataset["content_sha256"], "code_version": code_version(),
                "files": files, **extra}
    write_json_atomic(out / "manifest.json", manifest)
    return manifest


def _write(tmp: Path, out: Path, name: str, value: Any) -> str:
    """Write one value by its file's suffix (a module as its weights); its name."""
    if name.endswith(".pt"):
        if isinstance(value, torch.nn.Module):
            value = {k: v.cpu() for k, v in value.state_dict().items()}
        torch_save(value, tmp / name, target=out / name)
    elif name.endswith(".npy"):
        np.save(tmp / name, value)
    else:
        write_json_atomic(tmp / name, value)
    return name


def _read_files(refs: Any) -> Iterator[Any]:
    """The files of each reference a stage reads (what names its folder besides)."""
    for r in refs:
        if isinstance(r, list):
            yield [x["files"] for x in r]
        elif isinstance(r, dict) and "files" in r:
            yield r["files"]
        elif r is None:
            yield None


def _read(ref: Any) -> Any:
    """What a stage reads from a reference: its artifact checked, its values loaded when
    asked for, its events and its info (a list for a list, None for None)."""
    if ref is None:
        return None
    if isinstance(ref, list):
        return [_read(r) for r in ref]
    if "files" in ref:
        verify_files(ref["path"], ref["files"])
    info = {k: v for k, v in ref.items() if k not in ("path", "files", "events")}
    return StageOutput(_Files(ref), Ledger.from_dict(ref["events"]) if "events" in ref
                       else Ledger(), info)


class _Files(Mapping[str, Any]):
    """A stage's stored values, each loaded from its file when first asked for."""

    def __init__(self, ref: Ref) -> None:
        self.folder = Path(ref["path"]) if "path" in ref else None
        self.names = list(ref.get("files", {}))
        self.loaded: dict[str, Any] = {}

    def __getitem__(self, name: str) -> Any:
        if name not in self.names or self.folder is None:
            raise KeyError(name)
        if name not in self.loaded:
            path = self.folder / name
            if name.endswith(".pt"):
                self.loaded[name] = torch.load(path, weights_only=True)
            elif name.endswith(".npy"):
                self.loaded[name] = np.load(path)
            else:
                self.loaded[name] = json.loads(path.read_text())
        return self.loaded[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.names)

    def __len__(self) -> int:
        return len(self.names)
