"""How one run is presented in MLflow: its run name, the privacy parameters, the resolved
spec, the tags and the run page's description (what is protected, what is not), and the
non-private twin's own run.

The page's privacy (run name, params, tags, description) is written by
:mod:`tasks.run_page` and re-exported here; :func:`log_twin` and :func:`record_run` log
through :func:`tasks.tracking.log_run`; the pipeline flow calls them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dpgnn_core.privacy.events import Ledger
from dpgnn_core.privacy.report import PrivacyReport
from tasks.refs import DatasetRef, report_of
from tasks.run_page import (  # the run page's privacy, also read by tracking's sweeps
    RELEASE_ID_CHARS,
    TWIN_NOTE,
    point_privacy,
    privacy_params,
    privacy_tags,
    release_status,
    resolved_spec,
    resumed_status,
    run_name,
    with_auto,
    with_odometer,
    with_twin,
)
from tasks.tracking import error_reason, log_run


def log_twin(ds: DatasetRef, twin_spec: Any, twin: dict[str, Any],
             explained: dict[str, Any], tags: dict[str, str], tracking_uri: str | None,
             experiment: str) -> dict[str, Any]:
    """The non-private twin as its own MLflow run (never on the private run's page): its
    spec, history, the explanations and their IoUs; ``tags`` (the recorded override)."""
    from pathlib import Path

    tdir = Path(twin["path"])
    artifacts = [str(tdir / "manifest.json"), str(tdir / "history.json")]
    artifacts += [str(Path(explained["path"]) / f) for f in explained["files"]]
    out: dict[str, Any] = log_run(
        run_name=run_name(twin_spec.method, ds["name"], report_of({"method": twin_spec.method}),
                          twin_spec.seed)
        + "-twin",
        params={"method": twin_spec.method, "privacy": {"private": False},
                "train": twin_spec.model_dump(mode="json"),
                "dataset": {"name": ds["name"], "path": ds["path"],
                            "content_sha256": ds["content_sha256"]}},
        history_path=str(tdir / "history.json"),
        metrics={"explain": {k: v for k, v in explained.items() if k.startswith("iou_")}},
        artifacts=artifacts,
        tags={"dpgnn.method": twin_spec.method, "dpgnn.private": "false",
              "dpgnn.twin": "non-private twin for the GNNExplainer comparison",
              "dpgnn.dataset_sha256": ds["content_sha256"],
              "mlflow.note.content": TWIN_NOTE, **tags},
        tracking_uri=tracking_uri, experiment=experiment,
        dataset={"name": ds["name"], "path": ds["path"],
                 "content_sha256": ds["content_sha256"]})
    return out


# --- one pipeline run: its MLflow record and its summary ----------------------------------
@dataclass(frozen=True)
class RunOutcome:
    """What one pipeline run produced, for :func:`record_run` and :func:`run_summary`.

    Attributes:
        ds (DatasetRef): the dataset.
        spec: the method's spec.
        method (str): the method's name as the report gives it.
        report (PrivacyReport): the run's typed privacy report.
        ledger (Ledger, optional): the run's ledger (private runs), from the task's
            reference (:func:`tasks.refs.ledger_of`).
        budget (dict): the dataset's odometer reading after the run (private runs).
        model (dict): the trained model's reference.
        ev (dict): the evaluation's reference (``metrics`` per split).
        states (dict): each step's cache state (``Completed``, ``Cached``, ...).
        run_tags (dict): the method's own MLflow tags (the catalogue's ``run_tags``).
        extra_metrics (tuple of str): the method's test metrics beyond the common ones.
        non_private_tags (dict): the recorded override of a non-private release.
        twin_spec, twin, twin_tags, explained: a private graph classifier's non-private
            twin (spec, model reference, override tags) and the GNNExplainer comparison;
            empty when there is none.
        auto (dict, optional): what ``dpgnn run auto`` chose (its ``Choice`` as a dict).
    """

    ds: DatasetRef
    spec: Any
    method: str
    report: PrivacyReport
    ledger: Ledger | None
    budget: dict[str, Any]
    model: dict[str, Any]
    ev: dict[str, Any]
    states: dict[str, str]
    run_tags: dict[str, str] = field(default_factory=dict)
    extra_metrics: tuple[str, ...] = ()
    non_private_tags: dict[str, str] = field(default_factory=dict)
    twin_spec: Any = None
    twin: dict[str, Any] = field(default_factory=dict)
    twin_tags: dict[str, str] = field(default_factory=dict)
    explained: dict[str, Any] = field(default_factory=dict)
    auto: dict[str, Any] | None = None


def record_run(o: RunOutcome, tracking_uri: str | None, experiment: str, started_ms: int
               ) -> tuple[dict[str, Any], dict[str, Any], str | None]:
    """Log the run to MLflow (and the non-private twin as its own run, linked). A failure
    loses nothing: the model is trained and cached, and the returned error says so.

    Returns:
        tuple: the run (``run_id`` None when logging failed, ``tracking_uri``,
        ``experiment_id``), the twin's run (empty without one) and the error line or None.
    """
    from pathlib import Path

    from tasks.budget import budget_tags
    from tasks.tracking import check_tracking_uri, default_tracking_uri, tag_run

    ds, report, mdir = o.ds, o.report, Path(o.model["path"])
    spec_params = o.spec.model_dump(mode="json")
    privacy = privacy_params(report, o.ledger, spec_params)
    params = {"method": o.method, "privacy": privacy,
              **({"auto": auto_params(o.auto)} if o.auto else {}),
              "train": resolved_spec(spec_params, privacy),
              "dataset": {"name": ds["name"], "path": ds["path"],
                          "content_sha256": ds["content_sha256"]}}
    artifacts = [str(Path(ds["path"]) / "manifest.json"), str(mdir / "manifest.json"),
                 str(mdir / "history.json"), str(Path(o.ev["path"]) / "metrics.json")]
    artifacts += [str(mdir / f) for f in ("ledger.json", "report.json") if (mdir / f).is_file()]
    artifacts += [auto_report(o)] if o.auto else []
    run: dict[str, Any] = {"run_id": None,
                           "tracking_uri": tracking_uri or default_tracking_uri()}
    twin_run: dict[str, Any] = {}
    try:
        check_tracking_uri(run["tracking_uri"])  # seconds, not MLflow's minutes of retries
        if o.explained:  # the non-private twin: its own run, never the private run's page
            twin_run = log_twin(ds, o.twin_spec, o.twin, o.explained, o.twin_tags,
                                tracking_uri, experiment)
        page = privacy_tags(report, o.states.get("train", ""), privacy=privacy)
        described = with_odometer(with_auto(with_twin(page, twin_run), _auto_total(o)),
                                  o.budget, level=report.level, relation=report.relation)
        run = log_run(
            run_name=run_name(o.method, ds["name"], report, o.spec.seed),
            params=params,
            history_path=str(mdir / "history.json"),
            metrics=o.ev["metrics"],
            artifacts=artifacts,
            tags={"dpgnn.method": o.method, "dpgnn.private": str(report.private).lower(),
                  **described,
                  **({"dpgnn.nonprivate_twin": twin_run["run_id"]} if twin_run else {}),
                  **o.non_private_tags,
                  **o.run_tags,
                  "dpgnn.dataset_sha256": ds["content_sha256"],
                  **budget_tags(o.budget)},
            tracking_uri=tracking_uri,
            experiment=experiment,
            start_time_ms=started_ms,
            dataset={"name": ds["name"], "path": ds["path"],
                     "content_sha256": ds["content_sha256"],
                     "profile": {"task": ds["task"], "num_nodes": ds["num_nodes"],
                                 "num_edges": ds["num_edges"],
                                 "num_classes": ds["num_classes"],
                                 "feature_dim": ds["feature_dim"]}},
        )
        if twin_run:
            tag_run(twin_run["tracking_uri"], twin_run["run_id"],
                    {"dpgnn.twin_of": run["run_id"]})
    except Exception as e:  # the model is trained and cached: report, do not lose it
        reason = error_reason(e)
        return run, twin_run, (
            f"MLflow logging failed ({type(e).__name__}: {reason[:300]}); the model is "
            f"trained and cached in {o.model['path']}: rerun the same command once the "
            "tracking URI works to log it (the cached model is reused"
            + (", no new privacy cost)" if report.private else ")"))
    return run, twin_run, None


def _auto_total(o: RunOutcome) -> dict[str, Any] | None:
    """``dpgnn run auto``'s choice with ``epsilon_total``: the ε the choice spent plus the
    chosen method's, from its ledger (basic composition: the user's ε)."""
    if not o.auto:
        return None
    return {**o.auto, "epsilon_total": float(o.auto["epsilon_choice"])
            + float(o.report.epsilon or 0.0)}


def auto_report(o: RunOutcome) -> str:
    """Write ``auto.json``, ``dpgnn run auto``'s report of the run (an MLflow artifact):
    the choice (method, rule, inputs, evidence, the ε and δ it spent, ``epsilon_total``)
    and both ledgers, the noisy statistic's (when bought) and the method's; returns its
    path (``$DPGNN_HOME/artifacts/auto-report/<key>/auto.json``, one per release)."""
    from dpgnn_core.io import sha256_json, write_json_atomic
    from dpgnn_core.privacy import GaussianEvent, Ledger
    from tasks.config import project_dir

    auto = _auto_total(o) or {}
    stat = auto.get("statistic") or {}
    choice_ledger = Ledger().add(GaussianEvent(
        noise_multiplier=float(stat["noise_multiplier"]), level=stat["level"],
        relation="add_remove")).to_dict() if stat.get("bought") else None
    body = {"auto": auto, "method_release": (o.report.release or {}).get("id"),
            "ledgers": {"choice": choice_ledger, "method": o.ledger},
            "epsilon": {"choice": auto.get("epsilon_choice"), "method": o.report.epsilon,
                        "total": auto.get("epsilon_total"),
                        "composition": "basic: the choice's (ε, δ) plus the method's"}}
    folder = project_dir() / "artifacts" / "auto-report" / sha256_json(body)[:16]
    folder.mkdir(parents=True, exist_ok=True)
    write_json_atomic(folder / "auto.json", body)
    return str(folder / "auto.json")


def auto_params(auto: dict[str, Any]) -> dict[str, Any]:
    """The MLflow params of ``dpgnn run auto``'s choice: the method, the rule, the ε the
    choice spent and each public input read."""
    return {"method": auto["method"], "rule": auto["rule"],
            "epsilon_choice": auto["epsilon_choice"], "delta_choice": auto["delta_choice"],
            "method_epsilon": auto["method_epsilon"], "inputs": dict(auto["inputs"]),
            **({"statistic": dict(auto["statistic"])} if auto.get("statistic") else {})}


def run_summary(o: RunOutcome, run: dict[str, Any], twin_run: dict[str, Any],
                mlflow_error: str | None) -> dict[str, Any]:
    """The run summary ``dpgnn run --json`` prints (its keys are a contract: see
    tests/flows/test_cli.py's JSON contract test)."""
    from pathlib import Path

    from tasks.tracking import run_url

    report, m = o.report, o.ev["metrics"]
    private_fields: dict[str, Any] = {}
    if report.private:
        private_fields = {"epsilon": report.epsilon,
                          "target_epsilon": report.target_epsilon, "delta": report.delta,
                          "noise_multiplier": report.noise_multiplier,
                          "accountant": report.accountant,
                          "steps": report.steps,
                          "privacy_report": str(Path(o.model["path"]) / "ledger.json"),
                          "unaccounted": list(report.unaccounted),
                          "unaccounted_release": list(report.unaccounted_release or ()),
                          "level": report.level, "relation": report.relation,
                          "protects": report.protects,
                          "randomness": report.randomness,
                          "release": release_status(report, o.states.get("train", "")),
                          **o.budget}
    explained = o.explained
    return {
        "method": o.method,
        "dataset": o.ds["name"],
        "dataset_path": o.ds["path"],
        "seed": o.spec.seed,
        "private": report.private,
        **private_fields,
        "test_accuracy": m["test"]["accuracy"],
        "val_accuracy": m["val"]["accuracy"],
        "test_f1_micro": m["test"]["f1_micro"],
        "test_roc_auc": m["test"]["roc_auc"],
        **{f"test_{k}": m["test"].get(k) for k in o.extra_metrics},
        **({k: v for k, v in explained.items() if k.startswith("iou_")} if explained else {}),
        **({"nonprivate_twin": {
            "method": o.twin_spec.method if o.twin_spec is not None else None,
            "artifacts_dir": o.twin.get("path"), "mlflow_run_id": twin_run.get("run_id"),
            "note": "not private: trained on the same training graphs for the GNNExplainer "
                    "comparison, logged as its own MLflow run"}} if explained else {}),
        "metrics": m,
        "mlflow_run_id": run["run_id"],
        "mlflow_tracking_uri": run["tracking_uri"],
        **({"non_private_release": o.non_private_tags["dpgnn.non_private_release"]}
           if o.non_private_tags else {}),
        "mlflow_error": mlflow_error,  # None when the run was logged
        **({"mlflow_url": run_url(run["tracking_uri"], run["experiment_id"], run["run_id"])}
           if run["run_id"] and run["tracking_uri"].startswith(("http:", "https:")) else {}),
        **({"auto": _auto_total(o)} if o.auto else {}),
        **({"structure_defaults": dict(report.structure_defaults)}
           if report.structure_defaults else {}),
        "artifacts_dir": o.model["path"],
        "evaluation_dir": o.ev["path"],
        "cache": o.states,
    }

__all__ = ["RELEASE_ID_CHARS", "TWIN_NOTE", "RunOutcome", "auto_params", "auto_report",
           "log_twin", "point_privacy", "privacy_params", "privacy_tags", "record_run",
           "release_status", "resolved_spec", "resumed_status", "run_name", "run_summary",
           "with_auto", "with_odometer", "with_twin"]
