"""How one run is presented in MLflow: its run name, the privacy parameters, the resolved
spec, the tags and the run page's description (what is protected, what is not), and the
non-private twin's own run.

Pure functions of the run's report, ledger and spec (no Prefect; :func:`log_twin` calls
:func:`tasks.tracking.log_run`), unit-tested without a server; the pipeline flow calls them.
"""

from __future__ import annotations

from typing import Any

from dpgnn_core.privacy.report import PrivacyReport
from tasks.budget import budget_tags
from tasks.refs import DatasetRef, report_of
from tasks.tracking import log_run


def release_status(report: PrivacyReport, state: str) -> str:
    """Whether this run made a new private release or reused a cached one."""
    release = report.release or {}
    rid = release.get("id", "?")
    if state == "Cached":
        return f"reused cached release {rid} (no new privacy cost)"
    replaced = release.get("replaces")
    return f"new release {rid}" + (f", replacing {replaced} (both count)" if replaced else "")


#: Report entries that are not run parameters: series, the ledger (logged per event),
#: the release (a tag) and sentences (the run's description has them, in words).
_NOT_PARAMS = ("ledger", "epsilon_by_step", "release", "warnings", "unaccounted", "private",
               "method", "protects", "scope", "public", "randomness", "inference", "budget",
               "unaccounted_release")
#: Privacy events that clip per-sample gradients (DP-SGD / DP-Adam phases).
_CLIPPED_KINDS = ("poisson_gaussian", "uniform_gaussian", "dpgnn")


def _one_or_all(values: list[Any]) -> Any:
    distinct = list(dict.fromkeys(values))
    return distinct[0] if len(distinct) == 1 else distinct


def privacy_params(report: PrivacyReport, ledger: dict[str, Any] | None,
                   spec: dict[str, Any]) -> dict[str, Any]:
    """What a run's privacy actually used, for MLflow's params under ``privacy.``.

    Every scalar of the report (δ with its default resolved, the calibrated
    ``noise_multiplier``, ``accountant``, ``steps``, ``batch_size``, ``level``,
    ``relation``, ...), and from the ledger: each privacy event as ``event<i>`` (its
    description, noise multiplier, sampling scheme and rate, steps; GAP composes several
    with one noise scale weighted per stage), ``noise_multipliers`` when events differ,
    ``sampling_rate`` and, when a phase clips gradients, ``clip`` (the clipping norm(s)).
    """
    if not report.private:
        return {"private": False}
    out: dict[str, Any] = {"private": True}
    out.update({k: v for k, v in report.to_dict().items()
                if k not in _NOT_PARAMS and v is not None})
    events = [dict(e["event"]) for e in (ledger or {}).get("entries", [])]
    rates: list[float] = []
    for i, ev in enumerate(events, 1):
        rate = ev.get("sampling_rate")
        if rate is None and ev.get("batch_size") and ev.get("num_train"):
            rate = ev["batch_size"] / ev["num_train"]  # m of N, without replacement
        if rate is not None:
            rates.append(float(rate))
        out[f"event{i}"] = {k: v for k, v in {
            "description": ev.get("description"), "kind": ev.get("kind"),
            "noise_multiplier": ev.get("noise_multiplier"), "sampling": ev.get("sampling"),
            "sampling_rate": rate, "steps": ev.get("steps", ev.get("count")),
            "level": ev.get("level"), "relation": ev.get("relation")}.items()
            if v is not None}
    if len(events) > 1:
        out["noise_multipliers"] = [ev.get("noise_multiplier") for ev in events]
    if rates:
        out["sampling_rate"] = _one_or_all(rates)
    if any(ev.get("kind") in _CLIPPED_KINDS for ev in events):
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


def run_name(method: str, dataset: str, report: PrivacyReport, seed: int) -> str:
    """``dp-gcn-cora-eps4-edge-s0``: the method, the dataset, the target ε and the protected
    unit (private runs), the seed; ``-insecure`` when the noise is reproducible."""
    parts = [method, dataset]
    if report.private:
        eps = report.target_epsilon or report.epsilon
        parts.append(f"eps{float(eps):.3g}")
        if report.level:
            parts.append(_fmt_level(report.level).replace("_", "-"))
        if report.insecure_reproducible_noise:
            parts.append("insecure")
    return "-".join([*parts, f"s{seed}"])


def _noise_summary(report: PrivacyReport, privacy: dict[str, Any]) -> str:
    """One line: each privacy event's noise multiplier, steps (or releases) and sampling
    rate, then the batch size and clipping norm."""
    events = [privacy[k] for k in sorted((k for k in privacy if k.startswith("event")
                                          and k[5:].isdigit()), key=lambda k: int(k[5:]))]

    def one(ev: dict[str, Any]) -> str:
        parts = [f"noise multiplier {float(ev.get('noise_multiplier') or 0):.4g}"]
        if ev.get("steps") is not None:
            unit = "releases" if ev.get("kind") == "gaussian" else "steps"
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


def with_odometer(tags: dict[str, str], budget: dict[str, Any]) -> dict[str, str]:
    """``tags`` whose run description says, after its (ε, δ) line, the dataset's odometer
    after the run."""
    if not budget or "mlflow.note.content" not in tags:
        return tags
    bt = budget_tags(budget)
    line = f"**Dataset's cumulative ε after this run:** {bt['dpgnn.dataset_epsilon_spent']}"
    if len(budget.get("dataset_epsilon_by_unit", {})) > 1:
        line += (f" (post hoc per unit, each counting every release bearing on it: "
                 f"{bt['dpgnn.dataset_epsilon_by_unit']})")
    if "dpgnn.dataset_budget" in bt:
        line += f"; **budget:** {bt['dpgnn.dataset_budget']}"
    head, *rest = tags["mlflow.note.content"].split("\n\n")  # second, visible unexpanded
    return {**tags, "mlflow.note.content": "\n\n".join([head, line, *rest])}


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
