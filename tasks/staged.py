"""The staged runner: any staged method's stages (:class:`~dpgnn_core.methods._staged.Stage`,
declared by the method: GAP's calibrate -> graph -> encoder -> aggregate -> classifier,
ProGAP's calibrate -> graph -> stage 0 -> (aggregate k -> stage k) -> finish, DPDGC's
calibrate -> encoder -> aggregate -> classifier), each one cached task. A stage's task is
cached on its inputs (the dataset, the spec, its parameters and the references of what it
reads) and the code version, writes its values atomically to its artifact folder with a
manifest, and returns a small reference with the privacy events of what it released; the
last stage composes them into the run's ledger and writes the model, the ledger, the report
and the history.

It is the one runner of a staged method, wherever the run comes from: ``dpgnn run`` and a
retraining (:func:`flows.pipeline.pipeline` calls :func:`run_stages` in the flow), an audit
(:mod:`flows.audit`, on the audited copy of the data, charged to the real dataset) and a sweep
point (:func:`staged_point`, one task on a Dask worker that calls the same stage tasks). The
stages' cache keys and artifact folders do not depend on which of them asked, so a sweep
point with the spec and seed of an earlier ``dpgnn run`` finds that run's stages and
release in the cache (a re-use, at no cost) instead of training again.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Mapping
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import numpy as np
import torch
from prefect import task
from prefect.cache_policies import NO_CACHE

from dpgnn_core.io import TargetBusyError, atomic_dir, write_json_atomic
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
from tasks.config import RunContext, code_version, in_context
from tasks.evaluate import artifact_intact, evaluate, verify_files
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
               states: dict[str, str], *, context: RunContext | None = None,
               budget_dataset: DatasetRef | None = None) -> tuple[Ref, PrivacyReport]:
    """The stages ``method`` (a registered method whose catalogue entry is ``staged``)
    declares, as cached tasks in their order, each recording its cache state in ``states``
    under its name; the stages that may release something share one owner token (one
    budget reservation, :func:`tasks.budget.gate_for`).

    ``context`` (a sweep's, :func:`tasks.config.run_context`): the stage tasks run in that
    project home and code version (:func:`tasks.config.in_context`); not part of their cache
    keys, so a sweep point and a ``dpgnn run`` of one spec share their stages.
    ``budget_dataset``: the dataset whose budget the stages spend from when they train on
    other data (an audit's copy of it with canaries), as for :func:`tasks.train.train`.

    Returns:
        tuple: the last stage's reference (the model) and its report.
    """
    staged: Staged = declared(method.family)
    owner = new_owner()
    refs: dict[str, Any] = {}
    # an audit trains on other data: its plan's key is the real dataset's, never released
    # from this data (its gates do not look for a lost release either)
    released = None if refresh or budget_dataset is not None else released_plan(ds, spec)

    def step(stage: Stage) -> None:
        task_, inputs = stage_call(stage, refs)
        call = {"dataset": ds, "spec": spec, "stage": stage, "inputs": inputs,
                "context": context, "budget_dataset": budget_dataset}
        # Already released, and this stage would run again: each later stage's inputs
        # would differ from the released run's, and the first gated one would refuse to
        # release again, after this one's work (a code upgrade retrained GAP's encoder,
        # ~60 s on Cora, before that refusal). Refused before any of it.
        refuse_uncached_release(task_, released, spec.method, ds["name"],
                                f"{stage.name} stage", **call)
        refs[stage.name], states[stage.name] = run_cached(
            task_, refresh, **call, owner=owner if stage.gated else None,
            family=staged.family)

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


@task(name="staged", cache_policy=NO_CACHE, persist_result=False)
def staged_point(dataset: DatasetRef, spec: Any, context: RunContext | None = None,
                 refresh: bool = False) -> dict[str, Any]:
    """A sweep point of a staged method, as one task a Dask worker runs: its stages
    (:func:`run_stages`, the runner ``dpgnn run`` uses, with the same stage tasks, cache keys
    and artifacts) and its evaluation (the pipeline's ``evaluate`` task), both cached; the
    point's result is not (each stage and the evaluation are).

    Each stage's cache record is written when the stage finishes (Prefect would defer the
    records of tasks called in a task to the end of the outer one: a point failing in its
    classifier would then lose the record of the aggregation it had released, and its rerun
    would release it again).

    Returns:
        dict: ``model`` (the last stage's reference), ``evaluation`` (the ``evaluate``
        task's) and ``states`` (each stage's cache state by name, and ``evaluate``'s).
    """
    from prefect.transactions import CommitMode, transaction

    from dpgnn_core.methods.registry import method_for

    states: dict[str, str] = {}
    with in_context(context), transaction(commit_mode=CommitMode.EAGER):
        model, _ = run_stages(method_for(spec), dataset, spec, refresh, states,
                              context=context)
        ev, states["evaluate"] = run_cached(evaluate, refresh, dataset=dataset, model=model,
                                            context=context)
    return {"model": model, "evaluation": ev, "states": states}


def _key(kind: str) -> Any:
    """A stage's cache key: its kind, the dataset, the spec and its inputs (parameters
    and the references it reads), as if each were a parameter of its own task."""
    key = inputs_and_code(kind)

    def stage_key(ctx: Any, params: dict[str, Any]) -> str:
        # the run context gives the home and code version and is not otherwise keyed; a
        # budget dataset (an audit's) is part of the key, as for the train task
        extra = {"context": params.get("context")}
        if params.get("budget_dataset") is not None:
            extra["budget_dataset"] = params["budget_dataset"]
        return key(ctx, {"dataset": params["dataset"], "spec": params["spec"],
                         **params["inputs"], **extra})
    return stage_key


@task(name="stage", persist_result=True, result_serializer="json")
def stage_task(dataset: DatasetRef, spec: Any, stage: Stage, inputs: dict[str, Any],
               owner: str | None = None, family: str = "",
               context: RunContext | None = None,
               budget_dataset: DatasetRef | None = None) -> Ref:
    """Run one stage (its cache key and name set by :func:`run_stages`): read what it
    reads (each artifact checked against its manifest), compute, write its artifact.
    ``owner``: the run's owner token, shared by its stages' budget gates; ``context`` and
    ``budget_dataset``: see :func:`run_stages`."""
    with in_context(context):
        return _stage(dataset, spec, stage, inputs, owner, family, budget_dataset)


def _stage(dataset: DatasetRef, spec: Any, stage: Stage, inputs: dict[str, Any],
           owner: str | None, family: str, budget_dataset: DatasetRef | None) -> Ref:
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
            gate = stack.enter_context(gate_for(budget_dataset or dataset, spec.method,
                                                spec, owner,
                                                trains_on_it=budget_dataset is None))
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
    something, and a resumed training's note); its reference.

    A stage that computes nothing private and trains nothing (the graph stage) is a
    function of what names its folder (the dataset, its folder's parts, the code version),
    which several specs share: an intact folder is used as it is, and one being written by
    another point of a sweep (a second writer is refused at once) is waited for."""
    events = {"events": result.events.to_dict()} if stage.gated else {}
    shared = not stage.gated and stage.steps is None
    m = _intact_manifest(out) if shared else None
    if m is None:
        try:
            with atomic_dir(out, overwrite=True) as tmp:
                names = [_write(tmp, out, name, value) for name, value in result.values.items()]
                m = finish_artifact(tmp, stage.kind, names, spec, dataset,
                                    {**result.info, **result.manifest, **events,
                                     **resume_note(ckpt)})
        except TargetBusyError:
            m = _intact_manifest(out, wait=SHARED_WAIT_S) if shared else None
            if m is None:
                raise
    return {"path": str(out), "files": m["files"], **result.info, **events}


#: How long a shared stage folder being written by another task is waited for (seconds).
SHARED_WAIT_S = 120.0


def _intact_manifest(out: Path, wait: float = 0.0) -> dict[str, Any] | None:
    """The manifest of the artifact folder ``out`` when every file it lists is intact, else
    None; polled for up to ``wait`` seconds (another task is writing it)."""
    deadline = time.monotonic() + wait
    while True:
        try:
            m: dict[str, Any] = json.loads((out / "manifest.json").read_text())
            if artifact_intact(out, m["files"]):
                return m
        except (OSError, ValueError, KeyError, TypeError):
            pass
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.2)


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
