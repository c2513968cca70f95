"""Flow ``audit``: insert canaries -> train -> score -> bound, each step a cached task, then
one MLflow run with the bound, the threat model and the score histogram.

The empirical audit (docs/privacy.md, "Empirical audit"): a lower bound on ε that would
refute the reported ε if it exceeded it. Training is the pipeline's ``train`` task on the
audited copy of the dataset (the real data plus canaries), charged to the real dataset's
privacy budget: an audit is a use of the data. A staged method (GAP, ProGAP, DPDGC) trains
through the staged runner ``dpgnn run`` uses (:func:`tasks.staged.run_stages`), its stages
charged to the real dataset the same way.
"""

# ruff: noqa: I001 - `tasks` must configure Prefect's environment before prefect is imported.
from __future__ import annotations

import dataclasses
import math
import time
from pathlib import Path
from typing import Any, cast

import tasks  # noqa: F401
from prefect import flow, get_run_logger

from dpgnn_core.audit.defaults import DEFAULT_BETA
from dpgnn_core.audit.canaries import DEFAULT_GUESS_FRACTION, DEFAULT_SCALE, plan_audit
from dpgnn_core.specs import AnySpec
from tasks.cached import run_cached as _run
from tasks.audit import audit_canaries, audit_score, run_bits, run_seeds
from tasks.ingest import dataset_summary
from tasks.refs import ModelRef, report_of
from tasks.tracking import check_tracking_uri, default_tracking_uri, log_run, run_url
from tasks.train import train
from tasks.heartbeats import install as _install_heartbeats

_install_heartbeats()  # a flow run ends without waiting out its heartbeat thread's second

#: The MLflow experiment audits are logged to.
AUDIT_EXPERIMENT = "dpgnn-audits"


@flow(name="dpgnn-audit", persist_result=False, log_prints=False)
def audit(
    spec: AnySpec,
    dataset: str,
    canaries: int = 200,
    runs: int | None = None,
    attack: str = "default",
    guess_fraction: float = DEFAULT_GUESS_FRACTION,
    beta: float = DEFAULT_BETA,
    delta: float | None = None,
    scale: float = DEFAULT_SCALE,
    tracking_uri: str | None = None,
    experiment: str = AUDIT_EXPERIMENT,
    refresh: bool = False,
    allow_non_private_release: bool = False,
) -> dict[str, Any]:
    """Audit ``spec`` on a dataset folder.

    Args:
        spec (AnySpec): the method's spec, as ``dpgnn run`` takes it.
        dataset (str): an ingested dataset folder.
        canaries (int, optional): m, canaries of a one-run audit. (default: :obj:`200`)
        runs (int, optional): a classic multi-run audit of one canary over this many
            trainings instead (small settings; each run is a training). (default: :obj:`None`)
        attack (str, optional): ``default`` or ``reproduced-noise`` (GAP-EDP's control for
            ``insecure_reproducible_noise``). (default: ``default``)
        guess_fraction (float, optional): one-run: the fraction of canaries guessed, half
            "in", half "out". (default: :obj:`0.5`)
        beta (float, optional): 1 − confidence of the bound. (default: :obj:`0.05`)
        delta (float, optional): δ of the bound (the run's reported δ by default).
        scale (float, optional): node canaries' feature value. (default: :obj:`10.0`)
        tracking_uri (str, optional): MLflow URI; SQLite under the project by default.
        experiment (str, optional): MLflow experiment. (default: ``dpgnn-audits``)
        refresh (bool, optional): draw new canaries and retrain. (default: :obj:`False`)
        allow_non_private_release (bool, optional): audit a non-private spec (a control)
            on a dataset with a privacy budget, which refuses it otherwise; recorded
            (:func:`tasks.budget.admit_non_private`). (default: :obj:`False`)

    Returns:
        dict: what ``dpgnn audit --json`` prints.
    """
    started = time.time()
    plan = plan_audit(spec.method, spec, attack)
    ds = dataset_summary(dataset)
    if getattr(spec, "epsilon", None) is None:  # a non-private control trains on the data
        from tasks.budget import admit_non_private

        admit_non_private(ds, spec.method, allowed=allow_non_private_release)
    states: dict[str, str] = {}
    plan_d = dataclasses.asdict(plan)
    cref, states["canaries"] = _run(audit_canaries, refresh, dataset=ds, plan=plan_d,
                                    canaries=canaries, scale=scale, runs=runs)
    models: list[ModelRef] = []
    if runs is None:
        models.append(_trained(cref["datasets"]["data"], spec, ds, refresh, states))
    else:  # run r: its own independently drawn initialisation seed, fresh secret noise
        for r, (b, init) in enumerate(zip(run_bits(cref), run_seeds(cref), strict=True)):
            models.append(_trained(cref["datasets"]["in" if b else "out"],
                                   spec.model_copy(update={"seed": init}), ds, refresh,
                                   states, suffix=f"_{r}"))
    scored, states["score"] = _run(audit_score, refresh, plan=plan_d, canaries=cref,
                                   models=models, guess_fraction=guess_fraction, beta=beta,
                                   delta=delta)
    res = scored["result"]
    report = report_of(models[-1])
    out_dir = Path(scored["path"])
    summary: dict[str, Any] = {
        "method": plan.method, "dataset": ds["name"], "dataset_path": ds["path"],
        "reported_epsilon": res["reported_epsilon"], "epsilon_lower": res["epsilon_lower"],
        "confidence": res["confidence"], "delta": res["delta"],
        "audit": res["bound_method"], "threat_model": plan.threat_model,
        "canaries": plan.kind, "relation": plan.relation, "m": res["m"],
        "runs": runs, "guesses": res["r"], "correct": res["v"], "counts": res["counts"],
        "refuted": (res["reported_epsilon"] is not None
                    and res["epsilon_lower"] > res["reported_epsilon"]),
        "level": report.level, "protects": report.protects if models[-1].get("report") else None,
        "randomness": report.randomness,
        "audit_json": str(out_dir / "audit.json"), "histogram": str(out_dir / "scores.png"),
        "models": [m["path"] for m in models], "cache": states,
    }
    summary.update(_log(summary, spec, ds, tracking_uri, experiment, started))
    summary["seconds"] = round(time.time() - started, 1)
    return summary


def _trained(data: Any, spec: Any, ds: Any, refresh: bool, states: dict[str, str],
             suffix: str = "") -> ModelRef:
    """The model ``spec`` trains on the audited ``data``, charged to the real dataset
    ``ds``'s budget, as ``dpgnn run`` trains it: a staged method's cached stages
    (:func:`tasks.staged.run_stages`, each stage's cache state in ``states`` under its name
    and ``suffix``; the last one is ``train``), else the ``train`` task (``train`` +
    ``suffix``)."""
    from dpgnn_core.methods.registry import method_for

    if method_for(spec).staged:
        from tasks.staged import run_stages

        stages: dict[str, str] = {}
        staged, _ = run_stages(method_for(spec), data, spec, refresh, stages,
                               budget_dataset=ds)
        states.update({f"{name}{suffix}": st for name, st in stages.items()})
        return cast(ModelRef, staged)
    model, states[f"train{suffix}"] = _run(train, refresh, dataset=data, spec=spec,
                                           budget_dataset=ds)
    return cast(ModelRef, model)



def _log(summary: dict[str, Any], spec: Any, ds: Any, tracking_uri: str | None,
         experiment: str, started: float) -> dict[str, Any]:
    """One MLflow run for the audit; a logging failure is returned, not raised (the audit
    is on disk)."""
    uri = tracking_uri or default_tracking_uri()
    eps = summary["reported_epsilon"]
    reported = "∞ (not private)" if eps is None else f"{eps:.3g}"
    verdict = ("REFUTED: the audited lower bound exceeds the reported ε"
               if summary["refuted"] else "not refuted (a lower bound below the reported ε "
               "proves nothing more: only that this attack found no more)")
    description = (f"Empirical privacy audit of {summary['method']}: reported ε = {reported}, "
                   f"audited ε ≥ {summary['epsilon_lower']:.3g} at "
                   f"{summary['confidence']:.0%} confidence, δ = {summary['delta']:.3g} "
                   f"({summary['audit']}, {summary['m']} canar"
                   f"{'y' if summary['m'] == 1 else 'ies'} of kind {summary['canaries']}, "
                   f"{summary['relation']}). {verdict}.\nThreat model: "
                   f"{summary['threat_model']}.")
    tags = {"dpgnn.method": summary["method"], "dpgnn.audit": summary["audit"],
            "dpgnn.audit.epsilon_lower": f"{summary['epsilon_lower']:.6g}",
            "dpgnn.audit.reported_epsilon": "inf" if eps is None else f"{eps:.6g}",
            "dpgnn.audit.refuted": str(summary["refuted"]).lower(),
            "dpgnn.audit.threat_model": summary["threat_model"][:5000],
            "dpgnn.audit.canaries": summary["canaries"],
            "dpgnn.dataset_sha256": ds["content_sha256"],
            "mlflow.note.content": description}
    metrics = {"audit": {"epsilon_lower": summary["epsilon_lower"],
                         "reported_epsilon": math.inf if eps is None else eps,
                         "confidence": summary["confidence"],
                         "guesses": summary["guesses"], "correct": summary["correct"]}}
    metrics["audit"] = {k: v for k, v in metrics["audit"].items()
                        if v is not None and math.isfinite(v)}
    params = {"audit": {k: summary[k] for k in ("canaries", "relation", "m", "runs", "delta")},
              "spec": spec.model_dump(mode="json")}
    name = (f"audit {summary['method']} ε={'∞' if eps is None else f'{eps:.3g}'} "
            f"on {ds['name']}")
    try:
        check_tracking_uri(uri)
        run = log_run(run_name=name, params=params, history_path=None, metrics=metrics,
                      artifacts=[summary["audit_json"], summary["histogram"]], tags=tags,
                      tracking_uri=uri, experiment=experiment,
                      start_time_ms=int(started * 1000),
                      dataset={"name": ds["name"], "path": ds["path"],
                               "content_sha256": ds["content_sha256"]})
    except Exception as e:  # the audit is on disk: report, do not lose it
        reason = " ".join(str(e).split()) or type(e).__name__
        get_run_logger().warning("MLflow logging failed: %s", reason[:300])
        return {"mlflow_run_id": None, "mlflow_tracking_uri": uri,
                "mlflow_error": f"MLflow logging failed ({type(e).__name__}: {reason[:300]})"}
    out = {"mlflow_run_id": run["run_id"], "mlflow_tracking_uri": run["tracking_uri"],
           "mlflow_error": None}
    if run["tracking_uri"].startswith(("http:", "https:")):
        out["mlflow_url"] = run_url(run["tracking_uri"], run["experiment_id"], run["run_id"])
    return out


__all__ = ["AUDIT_EXPERIMENT", "audit"]
