"""Task ``train``: a dataset manifest and a train spec in, a model artifact out."""

from __future__ import annotations

import contextlib
import functools
import json
import math
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from prefect import task

from dpgnn_core.data.graph import GraphData
from dpgnn_core.data.store import read_dataset
from dpgnn_core.io import atomic_dir, sha256_file, sha256_json, write_json_atomic
from dpgnn_core.privacy.report import PrivacyReport
from dpgnn_core.training.checkpoint import Checkpointer, checkpointing
from tasks._cache import inputs_and_code
from tasks.budget import gate_for
from tasks.config import RunContext, code_version, in_context, project_dir
from tasks.progress import Progress
from tasks.refs import DatasetRef, Files, ModelRef, report_of


def artifact_dir(kind: str, *parts: Any) -> Path:
    """``$DPGNN_HOME/artifacts/<kind>/<hash of parts and code version>``."""
    key = sha256_json({"parts": [p.model_dump(mode="json") if hasattr(p, "model_dump") else p
                                 for p in parts], "code": code_version()})
    return project_dir() / "artifacts" / kind / key[:16]


def files_manifest(folder: Path, names: list[str]) -> Files:
    """The sha256 and size of each named file of an artifact folder."""
    return {n: {"sha256": sha256_file(folder / n), "bytes": (folder / n).stat().st_size}
            for n in names}


def load_keyed_dataset(dataset: DatasetRef, *, verify: bool = True) -> GraphData:
    """Read the dataset a task was keyed on: the version whose hash is in the cache key
    (the run's pinned version), read whole even while an ingest replaces the folder; a
    folder that holds another version is refused, naming both (``read_dataset``'s
    ``content_sha256``). ``verify`` checks every file's sha256 too."""
    return read_dataset(dataset["path"], verify=verify,
                        content_sha256=dataset["content_sha256"])


def progress(unit: str, total: int, label: str | None = None,
             target_epsilon: float | None = None) -> Progress:
    """The live progress of a fit over ``total`` units (epochs or steps): a bar on a
    terminal, a log line every 10 % or 10 s otherwise, with the loss, ε spent (a private
    run's records carry it) and an ETA. Use it as a context and pass its ``on_step()``."""
    return Progress(label or unit, total, unit=unit, target_epsilon=target_epsilon)


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


def stamp_release(path: str | Path, at: datetime) -> None:
    """Date the released artifact at ``path`` at ``at``: its report's ``release.created``
    (the manifest's hash of ``report.json`` follows) and the modification time of every
    file and of the folder, rewritten atomically (:func:`~dpgnn_core.io.atomic_dir`).

    A private selection calls it on the candidate it releases, at the moment it releases
    it: the candidate's own time (when it finished training) would date the selection, whose
    duration grows with its secret number of candidates (docs/privacy.md, "One release, one
    charge")."""
    import os
    import shutil

    folder = Path(path)
    when = at.astimezone(UTC).isoformat(timespec="seconds")
    ts = at.timestamp()
    with atomic_dir(folder, overwrite=True) as tmp:
        shutil.copytree(folder, tmp, dirs_exist_ok=True)
        if (tmp / "report.json").is_file():
            report = json.loads((tmp / "report.json").read_text())
            report["release"] = {**(report.get("release") or {}), "created": when,
                                 "created_note": "the private selection's release moment"}
            write_json_atomic(tmp / "report.json", report)
            manifest = json.loads((tmp / "manifest.json").read_text())
            manifest["files"].update(files_manifest(tmp, ["report.json"]))
            write_json_atomic(tmp / "manifest.json", manifest)
        for root, dirs, files in os.walk(tmp):
            for name in [*files, *dirs]:
                os.utime(Path(root) / name, (ts, ts))
    os.utime(folder, (ts, ts))


@task(name="train", cache_key_fn=inputs_and_code("train"), persist_result=True,
      result_serializer="json")
def train(dataset: DatasetRef, spec: Any, context: RunContext | None = None,
          budget_dataset: DatasetRef | None = None, owner: str | None = None,
          candidate: str | None = None, dask_address: str | None = None) -> ModelRef:
    """Fit any registered method's ``spec`` on the dataset (the registry decides the
    method) and write ``model.pt``, ``history.json`` and ``manifest.json``; a private run
    also writes ``ledger.json`` (its privacy events) and ``report.json`` (its privacy
    report), and its history holds ε spent (every step with RDP, 20 points with PLD).

    ``context`` (a sweep's, :func:`tasks.config.run_context`): write into that project
    home and refuse a worker running another code version (:func:`tasks.config.in_context`).
    ``budget_dataset`` is the dataset whose privacy budget the run spends from when it is
    not ``dataset`` itself: an audit trains on a copy of the real data with canaries added,
    and that is a use of the real data.

    ``owner`` (a private selection's token, :func:`tasks.budget.new_owner`): the run is a
    candidate the selection's one reservation covers. ``candidate``: a private selection's
    candidate, named by its selection's token and its index in the draw
    (``<token>:<index>``), whose number and scores are secret: it trains without progress
    output, its history keeps no validation or test metric nor selection score (the
    selection releases its validation score only with noise;
    :data:`CANDIDATE_HISTORY_DROPS`), and its name is part of its cache key, artifact folder
    and checkpoints, so two candidates drawn with the same configuration and seed are two
    trainings, never one (docs/privacy.md, "Private selection in sweeps").

    A partitioned dataset (issue 51) trains on the Dask cluster at ``dask_address`` (the
    workers read the partitions; not part of the cache key: where it ran does not change
    what it computes), by the method's partitioned fit
    (:meth:`~dpgnn_core.methods.registry.Method.fit_with`); its metrics, computed
    block by block, are stored with the model (``metrics.json``).
    """
    with in_context(context):
        return _train(dataset, spec, budget_dataset, owner, candidate, dask_address)


@contextlib.contextmanager
def _training_data(dataset: DatasetRef, spec: Any, dask_address: str | None
                   ) -> Iterator[Any]:
    """The data a fit reads: the keyed dataset in memory, or a partitioned one's
    :class:`~dpgnn_core.distributed.fits.Partitions` on the cluster at ``dask_address``
    (every partition hashed by its workers, and the version the run was keyed on)."""
    from dpgnn_core.data.partitioned import is_partitioned, verify_partitioned
    from dpgnn_core.data.store import read_manifest
    from dpgnn_core.errors import DataError

    manifest = read_manifest(dataset["path"])
    if not is_partitioned(manifest):
        yield load_keyed_dataset(dataset)
        return
    if dask_address is None:
        raise DataError("a partitioned dataset trains on a Dask cluster: pass --workers N "
                        "(a local one) or --dask-address tcp://HOST:PORT",
                        path=Path(dataset["path"]) / "manifest.json", field="layout",
                        value="partitioned")
    from distributed import Client

    from dpgnn_core.distributed.fits import Partitions

    with Client(dask_address) as client:  # type: ignore[no-untyped-call]
        checked = verify_partitioned(dataset["path"], client)
        if checked["content_sha256"] != dataset["content_sha256"]:
            raise DataError("the dataset folder holds another version than the run was "
                            f"keyed on ({str(checked['content_sha256'])[:12]}…)",
                            path=dataset["path"], field="content_sha256",
                            value=dataset["content_sha256"])
        yield Partitions(client, Path(dataset["path"]), checked,
                         artifact_dir("partitioned", dataset["content_sha256"], spec))


#: What a private selection's candidate leaves out of its ``history.json``: every metric
#: measured on the validation or test split (only graph classification logs them while it
#: trains) and the noise-free ``selection_score`` of ``select_on_validation`` (a
#: validation accuracy). The selected candidate's folder is the one ``best.json`` names.
CANDIDATE_HISTORY_DROPS = ("val_", "test_", "selection_score")


def candidate_history(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``history`` without the metrics :data:`CANDIDATE_HISTORY_DROPS` names."""
    return [{k: v for k, v in rec.items() if not k.startswith(CANDIDATE_HISTORY_DROPS)}
            for rec in history]


def _train(dataset: DatasetRef, spec: Any, budget_dataset: DatasetRef | None = None,
           owner: str | None = None, candidate: str | None = None,
           dask_address: str | None = None) -> ModelRef:
    with _training_data(dataset, spec, dask_address) as data:
        return _fit_and_store(data, dataset, spec, budget_dataset, owner, candidate)


def _fit_and_store(data: Any, dataset: DatasetRef, spec: Any,
                   budget_dataset: DatasetRef | None, owner: str | None,
                   candidate: str | None) -> ModelRef:
    from dpgnn_core.methods.registry import method_for

    method = method_for(spec)
    fit = method.fit
    if method.staged and isinstance(data, GraphData):
        raise ValueError(f"{method.name} is a staged method: it runs as the cached stages "
                         "of tasks.staged.run_stages (dpgnn run, a sweep point, an audit), "
                         "not as one train task")
    if not isinstance(data, GraphData):  # a partitioned dataset: the family's own fit
        from dpgnn_core.distributed.fits import fit_for

        fit = functools.partial(method.fit_with, fit_for(method.family, method.name, data))
    unit = method.progress_unit
    total = getattr(spec, f"{unit}s")
    parts = (dataset["content_sha256"], spec, *_candidate_part(candidate))
    folder = checkpoint_dir("train", *parts)
    # The budget gate, handed to the fit's engine: it reserves the calibrated plan against
    # the dataset's budget before any private computation (or refuses); the first step
    # makes it spent.
    shown = Progress(method.name, total, unit=unit, mode="off") if candidate else \
        progress(unit, total, method.name, getattr(spec, "epsilon", None))
    with gate_for(budget_dataset or dataset, method.name, spec, owner,
                  trains_on_it=budget_dataset is None) as gate, shown, \
            checkpointing(folder, checkpoint_seconds()) as ckpt:
        fitted = fit(data, spec, shown.on_step(), progress=shown.stage, gate=gate)
        if candidate:
            fitted.history = candidate_history(fitted.history)
        ref = _artifacts(method, dataset, spec, data, fitted, ckpt=ckpt, candidate=candidate)
        gate.finish(report_of(ref), fitted.ledger)
    ckpt.clear()  # the result is stored: the next run of this spec starts afresh
    return ref


def _candidate_part(candidate: str | None) -> tuple[dict[str, str], ...]:
    """What a private selection's candidate adds to its artifact's and checkpoints' key."""
    return ({"candidate": candidate},) if candidate else ()


def checkpoint_dir(kind: str, *parts: Any) -> Path:
    """``$DPGNN_HOME/checkpoints/<kind>/<key>``: the checkpoints of the training whose
    artifact goes to :func:`artifact_dir` of the same parts (so a rerun of a killed run
    finds them)."""
    return project_dir() / "checkpoints" / kind / artifact_dir(kind, *parts).name


def checkpoint_seconds() -> float:
    """The least time between two checkpoints of a training (``DPGNN_CHECKPOINT_SECONDS``,
    default 60 s): a killed run loses at most about this much work; a value that is not
    a number of seconds is refused (the command line checks it before Prefect starts)."""
    from dpgnn_core.environment import checkpoint_seconds as seconds

    return seconds()


def resume_note(ckpt: Checkpointer | None) -> dict[str, Any]:
    """What a release says when its training resumed from a checkpoint (``ckpt``), and
    whether its reservation did (``charged_once``: the run adopted the reservation its
    checkpoint carried; else it was charged its plan again)."""
    if ckpt is None or not ckpt.resumed_from:
        return {}
    return {"resumed_from_step": list(ckpt.resumed_from),
            "charged_once": ckpt.carried_over,
            "resume_note": "training resumed from a checkpoint of a killed run (model, "
                           "optimizer and step count); the remaining steps drew fresh "
                           "secret noise and batches, and the ledger counts every step of "
                           "the plan once"}


def _artifacts(method: Any, dataset: DatasetRef, spec: Any, data: Any,
               fitted: Any, ckpt: Checkpointer | None = None,
               candidate: str | None = None) -> ModelRef:
    """Write the model, its history and, for a private run, its ledger and privacy report,
    atomically; return the small manifest the flow passes on."""
    out = artifact_dir("train", dataset["content_sha256"], spec, *_candidate_part(candidate))
    report: PrivacyReport = fitted.report  # the core's typed report
    private = report.private
    if private:
        report = report.with_release({**new_release(out), **resume_note(ckpt)})
    history = fitted.history  # with ε spent, from the core
    reported = method.private_path  # every run of a private method's path
    names = ["model.pt", "history.json"] + (["ledger.json", "report.json"] if reported
                                            else [])
    metrics = fitted.extra.get("metrics")  # a partitioned fit's, computed block by block
    if metrics is not None:
        names.append("metrics.json")
        metrics = {s: {k: (None if isinstance(v, float) and math.isnan(v) else v)
                       for k, v in m.items()} for s, m in metrics.items()}
    with atomic_dir(out, overwrite=True) as tmp:
        method.save(str(tmp / "model.pt"), fitted, spec, data)
        write_json_atomic(tmp / "history.json", history)
        if metrics is not None:
            write_json_atomic(tmp / "metrics.json", metrics)
        if reported:
            fitted.ledger.save(tmp / "ledger.json")
            write_json_atomic(tmp / "report.json", report.to_dict())
        files = files_manifest(tmp, names)
        write_json_atomic(tmp / "manifest.json", {
            "kind": "train", "method": method.name, "spec": spec.model_dump(mode="json"),
            "dataset": dataset["content_sha256"], "code_version": code_version(),
            "private": private, "files": files})
    ref: ModelRef = {"path": str(out), "files": files, "method": method.name,
                     "spec": spec.model_dump(mode="json"), "dataset": dataset["content_sha256"]}
    if reported:
        ref["report"] = report.to_dict()  # JSON on the wire (its ledger inside); report_of()
    if metrics is not None:
        ref["metrics"] = metrics
        ref["release"] = fitted.extra.get("release")
    return ref
