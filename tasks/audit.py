"""Tasks of the ``dpgnn audit`` flow: ``audit_canaries`` (insert canaries, write the
audited dataset and the auditor's record) and ``audit_score`` (score the canaries on the
trained models, guess, bound ε, draw the score histogram). Training between them is what
``dpgnn run`` trains (the ``train`` task, or a staged method's cached stages), charged to the
real dataset's budget.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from prefect import task

from dpgnn_core.audit.canaries import (
    AuditPlan,
    Canaries,
    conclude,
    insert_canaries,
    multi_run_bits,
    multi_run_conclude,
    multi_run_seeds,
    score_canaries,
    secret_generator,
)
from dpgnn_core.data.store import read_dataset, write_dataset
from dpgnn_core.io import atomic_dir, write_json_atomic
from dpgnn_core.plots import audit_scores
from tasks._cache import inputs_and_code
from tasks.evaluate import verify_files
from tasks.ingest import dataset_summary
from tasks.refs import ArtifactRef, DatasetRef, ModelRef, report_of
from tasks.train import artifact_dir, files_manifest, load_keyed_dataset


class CanaryRef(ArtifactRef):
    """The audited datasets and the auditor's record (``canaries.npz``; for a multi-run
    audit also ``bits.npy``, the canary's bit in each run, and ``seeds.npy``, each run's
    initialisation seed).

    ``datasets``: one dataset (one-run) or two, the canary ``in`` and ``out`` (multi-run).
    """

    datasets: dict[str, DatasetRef]
    runs: int


class AuditRef(ArtifactRef):
    """``audit.json`` (the result with every score, bit and guess) and ``scores.png``."""

    result: dict[str, Any]


def _plan(plan: dict[str, Any]) -> AuditPlan:
    return AuditPlan(**plan)


@task(name="audit_canaries", cache_key_fn=inputs_and_code("audit_canaries"),
      persist_result=True, result_serializer="json")
def audit_canaries(dataset: DatasetRef, plan: dict[str, Any], canaries: int, scale: float,
                   runs: int | None = None) -> CanaryRef:
    """Insert the plan's canaries into the dataset and write the audited data.

    One-run (``runs`` None): m = ``canaries``, each in with probability 1/2, one dataset.
    Multi-run: one canary, written once in (``in``) and once out (``out``), a secret
    bit per run and an independent initialisation seed per run
    (:func:`~dpgnn_core.audit.canaries.multi_run_seeds`). The bits, seeds and canaries come
    from a CSPRNG-seeded generator, never from a spec seed; they are the auditor's, stored
    for the score step (the seeds also for the trainings, each reading its own), and no
    training reads the bits. Cached like every step: a rerun audits the same draw
    (``--refresh`` draws anew).
    """
    p = _plan(plan)
    data = load_keyed_dataset(dataset)
    out = artifact_dir("audit-data", dataset["content_sha256"], plan, canaries, scale, runs)
    with atomic_dir(out, overwrite=True) as tmp:
        if runs is None:
            audited, can = insert_canaries(p, data, canaries, scale=scale)
            write_dataset(audited, tmp / "data")
            names = ["canaries.npz"]
        else:
            bits = multi_run_bits(runs)
            seed = int(secret_generator().integers(2**62))
            for name, b in (("in", True), ("out", False)):
                audited, can = insert_canaries(p, data, 1, scale=scale,
                                               rng=np.random.default_rng(seed),
                                               included=np.array([b]))
                write_dataset(audited, tmp / name)
            np.save(tmp / "bits.npy", bits)
            np.save(tmp / "seeds.npy", multi_run_seeds(runs))
            names = ["canaries.npz", "bits.npy", "seeds.npy"]
        can.save(tmp / "canaries.npz")
        files = files_manifest(tmp, names)
    folders = ["data"] if runs is None else ["in", "out"]
    return {"path": str(out), "files": files, "runs": int(runs or 0),
            "datasets": {f: dataset_summary(out / f) for f in folders}}


def run_bits(ref: CanaryRef) -> list[bool]:
    """The canary's bit in each run of a multi-run audit (empty for a one-run audit)."""
    if not ref["runs"]:
        return []
    verify_files(ref["path"], ref["files"])
    return [bool(b) for b in np.load(Path(ref["path"]) / "bits.npy")]


def run_seeds(ref: CanaryRef) -> list[int]:
    """Each run's initialisation seed in a multi-run audit (empty for a one-run audit)."""
    if not ref["runs"]:
        return []
    verify_files(ref["path"], ref["files"])
    return [int(s) for s in np.load(Path(ref["path"]) / "seeds.npy")]


def _load_model(model: ModelRef) -> tuple[Any, Any, dict[str, Any]]:
    from dpgnn_core.methods.registry import load_blob

    verify_files(model["path"], model["files"])
    blob = torch.load(Path(model["path"]) / "model.pt", map_location="cpu", weights_only=True)
    _, net, spec = load_blob(blob)
    extra: dict[str, Any] = {}
    if "aggregations" in model:  # GAP: the private release the attack reads
        agg = model["aggregations"]
        verify_files(agg["path"], agg["files"])
        extra["aggregations"] = torch.load(Path(agg["path"]) / "aggregations.pt",
                                           weights_only=True)
    return net, spec, extra


@task(name="audit_score", cache_key_fn=inputs_and_code("audit_score"), persist_result=True,
      result_serializer="json")
def audit_score(plan: dict[str, Any], canaries: CanaryRef, models: list[ModelRef],
                guess_fraction: float, beta: float, delta: float | None = None
                ) -> AuditRef:
    """Score the canaries on the trained model(s), guess before reading the bits, then
    bound ε: one run (:func:`~dpgnn_core.audit.canaries.conclude`) or one canary over
    ``len(models)`` runs (:func:`~dpgnn_core.audit.canaries.multi_run_conclude`). Writes
    ``audit.json`` and the score histogram ``scores.png``."""
    p = _plan(plan)
    verify_files(canaries["path"], canaries["files"])
    can = Canaries.load(Path(canaries["path"]) / "canaries.npz")
    report = report_of(models[-1])  # typed; non-private when the model has none
    if not canaries["runs"]:
        data = read_dataset(canaries["datasets"]["data"]["path"])
        net, spec, extra = _load_model(models[0])
        scores = score_canaries(p, net, extra, data, can, spec)
        result = conclude(p, scores, can, report, guess_fraction=guess_fraction,
                          delta=delta, beta=beta)
    else:
        bits = run_bits(canaries)
        datasets = {b: read_dataset(canaries["datasets"]["in" if b else "out"]["path"])
                    for b in (True, False)}
        scores = np.zeros(len(models))
        for r, (model, b) in enumerate(zip(models, bits, strict=True)):
            net, spec, extra = _load_model(model)
            scores[r] = score_canaries(p, net, extra, datasets[b], can, spec)[0]
        result = multi_run_conclude(p, scores, np.asarray(bits), report, delta=delta,
                                    beta=beta)
    out = artifact_dir("audit", canaries["files"], [m["files"] for m in models], plan,
                       guess_fraction, beta, delta)
    summary = result.to_dict()
    summary["bound_method"] = result.bound.method
    summary["counts"] = {k: int(v) for k, v in result.bound.counts.items()}
    full = {**summary, "scores": result.scores.tolist(),
            "included": result.included.astype(bool).tolist(),
            "guesses": result.guesses.astype(int).tolist()}
    reported = ("∞" if not np.isfinite(result.reported_epsilon)
                else f"{result.reported_epsilon:.3g}")
    title = (f"{p.method}: reported ε = {reported}, audited ε ≥ "
             f"{result.epsilon_lower:.3g} ({result.bound.confidence:.0%} conf., "
             f"{result.bound.method})")
    with atomic_dir(out, overwrite=True) as tmp:
        write_json_atomic(tmp / "audit.json", _finite(full))
        audit_scores(result.scores, result.included, result.guesses, tmp / "scores.png",
                     title=title)
        files = files_manifest(tmp, ["audit.json", "scores.png"])
    return {"path": str(out), "files": files, "result": _finite(summary)}


def _finite(obj: Any) -> Any:
    """JSON-safe: a non-finite float (the reported ε of a non-private run) as None."""
    if isinstance(obj, float) and not np.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    return obj


__all__ = ["AuditRef", "CanaryRef", "audit_canaries", "audit_score", "run_bits"]
