"""How one run is presented in MLflow: its run name, the privacy parameters, the resolved
spec, the tags and the run page's description (what is protected, what is not), and the
non-private twin's own run.

Pure functions of the run's report, ledger and spec (no Prefect; :func:`log_twin` calls
:func:`tasks.tracking.log_run`), unit-tested without a server; the pipeline flow calls them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dpgnn_core.privacy.events import EVENT_TYPES
from dpgnn_core.privacy.report import PrivacyReport
from tasks.budget import budget_tags
from tasks.refs import DatasetRef, ledger_of, report_of
from tasks.tracking import log_run


def release_status(report: PrivacyReport, state: str) -> str:
    """Whether this run made a new private release or reused a cached one."""
    release = report.release or {}
    rid = release.get("id", "?")
    if state == "Cached":
        return f"reused cached release {rid} (no new privacy cost)"
    replaced = release.get("replaces")
    return (f"new release {rid}" + resumed_status(report)
            + (f", replacing {replaced} (both count)" if replaced else ""))


def resumed_status(report: PrivacyReport) -> str:
    """`` (resumed from step N ...)`` when the release's training resumed from the
    checkpoint of a stopped or killed run (``""`` otherwise)."""
    release = report.release or {}
    steps = release.get("resumed_from_step") or []
    if not steps:
        return ""
    return (f" (resumed from step {', '.join(str(s) for s in steps)} of a stopped run: the "
            + ("same release, its plan charged once)" if release.get("charged_once") else
               "reservation its checkpoint carried was not found: charged again)"))


#: Report entries that are not run parameters: series, the ledger (logged per event),
#: the release (a tag) and sentences (the run's description has them, in words).
_NOT_PARAMS = ("ledger", "epsilon_by_step", "release", "warnings", "unaccounted", "private",
               "method", "protects", "scope", "public", "randomness", "inference", "budget",
               "unaccounted_release")


def _one_or_all(values: list[Any]) -> Any:
    distinct = list(dict.fromkeys(values))
    return distinct[0] if len(distinct) == 1 else distinct


def privacy_params(report: PrivacyReport, ledger: dict[str, Any] | None,
                   spec: dict[str, Any]) -> dict[str, Any]:
    """What a run's privacy actually used, for MLflow's params under ``privacy.``.

    Every scalar of the report (δ with its default resolved, the calibrated
    ``noise_multiplier``, ``accountant``, ``steps``, ``batch_size``, ``level``,
    ``relation``, ...), and from the ledger: each privacy event as ``event<i>`` (its
    :meth:`~dpgnn_core.privacy.events.PrivacyEvent.summary`: description, noise multiplier,
    sampling scheme and rate, steps; GAP composes several with one noise scale weighted per
    stage), ``noise_multipliers`` when events differ, ``sampling_rate`` and, when a phase
    clips gradients (the event's ``clips_gradients``), ``clip`` (the clipping norm(s)).
    """
    if not report.private:
        return {"private": False}
    out: dict[str, Any] = {"private": True}
    out.update({k: v for k, v in report.to_dict().items()
                if k not in _NOT_PARAMS and v is not None})
    typed = ledger_of({"ledger": ledger})
    events = typed.events
    for i, ev in enumerate(events, 1):
        out[f"event{i}"] = ev.summary()
    rates = [ev.rate for ev in events if ev.rate is not None]
    if len(events) > 1:
        out["noise_multipliers"] = [getattr(ev, "noise_multiplier", None) for ev in events]
    if rates:
        out["sampling_rate"] = _one_or_all(rates)
    if typed.clips_gradients:
        clips = list(report.clips or [spec.get("clip")])
        out["clip"] = _one_or_all(clips)
    if "batch_size" not in out and spec.get("batch_size") is not None:
        out["batch_size"] = spec["batch_size"]
    return out


#: Spec fields a private run resolves when they are left unset (defaults, calibration).
_RESOLVED = ("delta", "noise_multiplier", "batch_size", "accountant", "steps", "max_degree")


def resolved_spec(spec: dict[str, Any], privacy: dict[str, Any]) -> dict[str, Any]:
    """The spec as MLflow's ``train.*`` params: a field left unset (``delta``,
    ``noise_multiplier``, ``batch_size``, ...) shows the value the run used, and
    ``resolved`` names those fields (so that ``train.delta`` is never a bare None on a
    private run, and it stays clear which values the spec fixed)."""
    out = dict(spec)
    filled = [k for k in _RESOLVED if k in out and out[k] is None
              and privacy.get(k) is not None]
    for k in filled:
        out[k] = privacy[k]
    if filled:
        out["resolved"] = ",".join(filled) + " (unset in the spec: the values the run used)"
    return out


def _fmt_level(level: Any) -> str:
    return "+".join(map(str, level)) if isinstance(level, list) else str(level)


#: Leading hex digits of a release id in a run's name (as ``dpgnn budget show`` lists it).
RELEASE_ID_CHARS = 12


def run_name(method: str, dataset: str, report: PrivacyReport, seed: int) -> str:
    """``dp-gcn-cora-eps4-edge-s0-3f2a9c01b7de``: the method, the dataset, the target ε and
    the protected unit (private runs), the seed; ``-insecure`` when the noise is
    reproducible; last, a private run's short release id, so that successive releases of
    one spec (scheduled retraining) have distinct names and a run that reuses a cached
    release has that release's name."""
    parts = [method, dataset]
    if report.private:
        eps = report.target_epsilon or report.epsilon
        parts.append(f"eps{float(eps):.3g}")
        if report.level:
            parts.append(_fmt_level(report.level).replace("_", "-"))
        if report.insecure_reproducible_noise:
            parts.append("insecure")
    parts.append(f"s{seed}")
    rid = str((report.release or {}).get("id") or "") if report.private else ""
    return "-".join([*parts, rid[:RELEASE_ID_CHARS]] if rid else parts)


#: Each event kind's word for one repetition (GAP's aggregations are "releases").
_REPETITION = {kind: cls.repetition for kind, cls in EVENT_TYPES.items()}


def _noise_summary(report: PrivacyReport, privacy: dict[str, Any]) -> str:
    """One line: each privacy event's noise multiplier, steps (or releases) and sampling
    rate, then the batch size and clipping norm."""
    events = [privacy[k] for k in sorted((k for k in privacy if k.startswith("event")
                                          and k[5:].isdigit()), key=lambda k: int(k[5:]))]

    def one(ev: dict[str, Any]) -> str:
        parts = [f"noise multiplier {float(ev.get('noise_multiplier') or 0):.4g}"]
        if ev.get("steps") is not None:
            unit = _REPETITION.get(str(ev.get("kind")), "steps")
            parts.append(f"{ev['steps']} {unit}")
        if ev.get("sampling_rate") is not None:
            parts.append(f"sampling rate {float(ev['sampling_rate']):.4g}")
        return ", ".join(parts)

    if not events:
        text = f"noise multiplier {report.noise_multiplier:.4g}"
    elif len(events) == 1:
        text = one(events[0])
    else:
        text = "; ".join(f"{ev.get('description', ev.get('kind'))}: {one(ev)}"
                         for ev in events)
    if privacy.get("batch_size") is not None and privacy.get("sampling_rate") is not None:
        text += f"; batch {privacy['batch_size']}"
    if privacy.get("clip") is not None:
        text += f"; clipping norm {privacy['clip']}"
    return text


def with_odometer(tags: dict[str, str], budget: dict[str, Any],
                  after: str = "this run") -> dict[str, str]:
    """``tags`` whose run description says, after its (ε, δ) line, the dataset's odometer
    after the run (``after``: ``"the sweep"`` for a sweep's point)."""
    if not budget or "mlflow.note.content" not in tags:
        return tags
    bt = budget_tags(budget)
    line = f"**Dataset's cumulative ε after {after}:** {bt['dpgnn.dataset_epsilon_spent']}"
    if len(budget.get("dataset_epsilon_by_unit", {})) > 1:
        line += (f" (post hoc per unit, each counting every release bearing on it: "
                 f"{bt['dpgnn.dataset_epsilon_by_unit']})")
    if "dpgnn.dataset_budget" in bt:
        line += f"; **budget:** {bt['dpgnn.dataset_budget']}"
    head, *rest = tags["mlflow.note.content"].split("\n\n")  # second, visible unexpanded
    return {**tags, "mlflow.note.content": "\n\n".join([head, line, *rest])}


def point_privacy(row: dict[str, Any], sha256: str, readings: dict[Any, Any] | None = None
                  ) -> tuple[dict[str, Any], dict[str, str]]:
    """A private sweep point's MLflow params and tags, as a single run's page has them
    (issue 36 §4): ``privacy.*`` (:func:`privacy_params`, from the point's ``report.json``
    and ``ledger.json``), the privacy tags and description (:func:`privacy_tags`) and the
    dataset's odometer after the sweep for the point's own unit.

    Args:
        row (dict): the sweep's result row (``artifacts_dir``, ``config``, ``cache``).
        sha256 (str): the dataset's content sha256.
        readings (dict, optional): odometer readings already taken, by unit (level and
            relation), filled here: one reading per unit for a whole sweep.
    """
    import json
    from pathlib import Path

    from tasks.budget import odometer

    mdir = Path(row["artifacts_dir"])
    if not (mdir / "report.json").is_file():  # the model folder is gone: what the row says
        return ({"privacy": {"delta": row["delta"], "level": row["level"],
                             "noise_multiplier": row.get("noise_multiplier")}},
                {"dpgnn.epsilon": f"{row['epsilon_spent']:.4g}", "dpgnn.level": str(row["level"])})
    report = PrivacyReport.from_dict(json.loads((mdir / "report.json").read_text()))
    ledger = (json.loads((mdir / "ledger.json").read_text())
              if (mdir / "ledger.json").is_file() else None)
    privacy = privacy_params(report, ledger, dict(row.get("config") or {}))
    key = (repr(report.level), repr(report.relation))
    readings = {} if readings is None else readings
    if key not in readings:
        readings[key] = odometer(sha256, report.level, report.relation)
    budget = readings[key]
    tags = with_odometer(privacy_tags(report, str(row.get("cache", "")), privacy=privacy),
                         budget, after="the sweep")
    odo = {k: v + " (after the sweep)" if k == "dpgnn.dataset_epsilon_spent" else v
           for k, v in budget_tags(budget).items()}
    return {"privacy": privacy}, {**tags, **odo}


#: What each protected unit leaves unprotected (the report's ``protects`` says it too).
_NOT_PROTECTED = {
    "edge": "node features and labels (only the edges are protected)",
    "node_feature": "the graph structure: edges are treated as public",
}


def privacy_tags(report: PrivacyReport, state: str, *,
                 privacy: dict[str, Any] | None = None,
                 explained: bool = False) -> dict[str, str]:
    """MLflow tags that show what a run's privacy means at a glance, and the run page's
    description (``mlflow.note.content``): the (ε, δ) statement, noise, what is and is not
    protected, what is assumed public."""
    if not report.private:
        return {}
    privacy = privacy or {}
    insecure = bool(report.insecure_reproducible_noise)
    tags = {"dpgnn.level": _fmt_level(report.level),
            "dpgnn.relation": str(report.relation),
            "dpgnn.epsilon": f"{report.epsilon:.4g}" if report.epsilon else "",
            "dpgnn.delta": f"{report.delta:.3g}" if report.delta else "",
            "dpgnn.randomness": "NOT PRIVATE: noise reproducible from the stored seed"
            if insecure else "secret (OS entropy, never stored)",
            "dpgnn.release": release_status(report, state)}
    if state != "Cached" and resumed_status(report):
        tags["dpgnn.resumed_from_step"] = ", ".join(
            str(x) for x in (report.release or {})["resumed_from_step"])
    if insecure:
        tags["dpgnn.private"] = "false"
        tags["dpgnn.warning"] = "not private: noise reproducible from the stored seed"
    if report.unaccounted_release:  # e.g. --log-raw-loss: released outside ε
        tags["dpgnn.unaccounted_release"] = "; ".join(report.unaccounted_release)[:5000]
    # The run page's description: the privacy statement in words.
    head = (f"**(ε = {report.epsilon:.4g}, δ = {report.delta or 0:.3g})-DP**, "
            f"{report.accountant or '?'} accountant" if report.epsilon else "private")
    if insecure:
        head = f"**NOT PRIVATE** (reproducible noise); nominal {head}"
    noise = _noise_summary(report, privacy)
    lines = [head, f"**Noise:** {noise}",
             f"**Protects:** {report.protects}",
             f"**Unit:** {_fmt_level(report.level)}; "
             f"**relation:** {report.relation}"]
    not_protected = [_NOT_PROTECTED[str(report.level)]] \
        if str(report.level) in _NOT_PROTECTED else []
    if explained:
        not_protected.append("the GNNExplainer explanations and their IoUs (they read the "
                             "test graphs without noise)")
    lines += [f"**Not protected:** {u}" for u in not_protected]
    if report.inference:  # whether predictions are covered, in the method's words
        lines.append(f"**Predictions:** {report.inference}")
    lines += [f"**Assumed public:** {u}" for u in report.public or ()]
    if report.scope:
        lines.append(f"**Scope:** {report.scope}")
    lines += [f"**Noise and sampling:** {report.randomness}",
              f"**Release:** {tags['dpgnn.release']}"]
    lines += [f"**Not accounted:** {u}" for u in report.unaccounted]
    lines += [f"**Released outside ε:** {u}" for u in report.unaccounted_release or ()]
    lines += [f"**Warning:** {w}" for w in report.warnings or ()]
    tags["mlflow.note.content"] = "\n\n".join(lines)
    return tags


def with_twin(tags: dict[str, str], twin_run: dict[str, Any]) -> dict[str, str]:
    """``tags`` whose run description names the non-private twin's own MLflow run."""
    if not twin_run or "mlflow.note.content" not in tags:
        return tags
    line = (f"**Non-private twin:** MLflow run {twin_run['run_id']} (GNNExplainer "
            "comparison): a separate release without privacy, not covered by this run's "
            "guarantee; its explanations and IoUs are logged there")
    return {**tags, "mlflow.note.content": tags["mlflow.note.content"] + "\n\n" + line}


#: The run page's description of a private graph classifier's non-private twin.
TWIN_NOTE = ("**NOT PRIVATE**: the non-private twin of a private graph classifier (run "
             "`dpgnn.twin_of`), trained without noise on the same training graphs for the "
             "GNNExplainer comparison. A release of its own, outside the private run's "
             "(ε, δ) guarantee; its explanations and their IoUs read the test graphs without "
             "noise.")


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
        ledger (dict, optional): the ledger's JSON (private runs), from the task's reference.
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
    """

    ds: DatasetRef
    spec: Any
    method: str
    report: PrivacyReport
    ledger: dict[str, Any] | None
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
              "train": resolved_spec(spec_params, privacy),
              "dataset": {"name": ds["name"], "path": ds["path"],
                          "content_sha256": ds["content_sha256"]}}
    artifacts = [str(Path(ds["path"]) / "manifest.json"), str(mdir / "manifest.json"),
                 str(mdir / "history.json"), str(Path(o.ev["path"]) / "metrics.json")]
    artifacts += [str(mdir / f) for f in ("ledger.json", "report.json") if (mdir / f).is_file()]
    run: dict[str, Any] = {"run_id": None,
                           "tracking_uri": tracking_uri or default_tracking_uri()}
    twin_run: dict[str, Any] = {}
    try:
        check_tracking_uri(run["tracking_uri"])  # seconds, not MLflow's minutes of retries
        if o.explained:  # the non-private twin: its own run, never the private run's page
            twin_run = log_twin(ds, o.twin_spec, o.twin, o.explained, o.twin_tags,
                                tracking_uri, experiment)
        described = with_odometer(with_twin(privacy_tags(report, o.states.get("train", ""),
                                                         privacy=privacy), twin_run),
                                  o.budget)
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
        reason = " ".join(str(e).split()) or type(e).__name__
        return run, twin_run, (
            f"MLflow logging failed ({type(e).__name__}: {reason[:300]}); the model is "
            f"trained and cached in {o.model['path']}: rerun the same command once the "
            "tracking URI works to log it (the cached model is reused"
            + (", no new privacy cost)" if report.private else ")"))
    return run, twin_run, None


def run_summary(o: RunOutcome, run: dict[str, Any], twin_run: dict[str, Any],
                mlflow_error: str | None) -> dict[str, Any]:
    """The run summary ``dpgnn run --json`` prints (its keys are a contract: see
    tests/flows/test_cli.py's JSON contract test)."""
    from pathlib import Path

    from tasks.tracking import run_url

    report, m = o.report, o.ev["metrics"]
    private_fields: dict[str, Any] = {}
    if report.private:
        private_fields = {"epsilon": report.epsilon, "delta": report.delta,
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
        **({"structure_defaults": dict(report.structure_defaults)}
           if report.structure_defaults else {}),
        "artifacts_dir": o.model["path"],
        "evaluation_dir": o.ev["path"],
        "cache": o.states,
    }
