"""How one run's privacy reads on its MLflow page: the run name, the privacy parameters,
the resolved spec, the tags and the page's description (what is protected, what is not),
and the same for a sweep's point (:func:`point_privacy`).

Pure functions of a run's report, ledger and spec: no Prefect, no MLflow. Both
:mod:`tasks.run_record` (a single run) and :mod:`tasks.tracking` (a sweep's nested runs)
read them, so neither imports the other for them.
"""

from __future__ import annotations

from typing import Any

from dpgnn_core.privacy.events import EVENT_TYPES, Ledger
from dpgnn_core.privacy.report import PrivacyReport
from tasks.budget import budget_tags


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
               "unaccounted_release", "tuning")


def _one_or_all(values: list[Any]) -> Any:
    distinct = list(dict.fromkeys(values))
    return distinct[0] if len(distinct) == 1 else distinct


def privacy_params(report: PrivacyReport, ledger: Ledger | None,
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
    events = ledger.events if ledger is not None else ()
    for i, ev in enumerate(events, 1):
        out[f"event{i}"] = ev.summary()
    rates = [ev.rate for ev in events if ev.rate is not None]
    if len(events) > 1:
        out["noise_multipliers"] = [getattr(ev, "noise_multiplier", None) for ev in events]
    if rates:
        out["sampling_rate"] = _one_or_all(rates)
    if ledger is not None and ledger.clips_gradients:
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


def cumulative_words(budget: dict[str, Any], level: Any = None, relation: Any = None
                     ) -> str:
    """The dataset's cumulative ε after a run, each figure naming its unit: every unit the
    budget protects, and the run's own unit (``level`` under ``relation``) when it is not
    one of them, e.g. ``12.96 at δ = 1e-05 for node_feature (protected), inf for node
    (this run's unit)``. The run's unit alone can read ∞ (a release at another unit bounds
    nothing about it) while the protected unit, which admits runs, stands finite: both
    are shown. A void guarantee is ∞ for every unit. ``""`` without an odometer."""
    from dpgnn_core.privacy.units import source_unit

    if not budget:
        return ""
    d = budget.get("dataset_epsilon_delta")
    at = f" at δ = {d:.3g}" if d else ""
    if budget.get("dataset_guarantee_void"):
        return f"inf{at} for every unit (VOID: {budget['dataset_guarantee_void']})"
    by_unit = budget.get("dataset_epsilon_by_unit", {})
    run_unit = (source_unit(level, relation if isinstance(relation, str) else "add_remove")[0]
                if isinstance(level, str) else None)
    protected = list((budget.get("dataset_budget") or {}).get("protected", []))
    units = [*protected, *([run_unit] if run_unit and run_unit not in protected else [])]
    if not units:  # a run over several units: the largest, as the odometer reads it
        return f"{budget['dataset_epsilon_spent']:.4g}{at} (the largest of its units)"
    figures: list[str] = []
    for u in units:
        eps = budget["dataset_epsilon_spent"] if u == run_unit else by_unit.get(u, 0.0)
        labels = [w for w, on in (("protected", u in protected),
                                  ("this run's unit", u == run_unit)) if on]
        figures.append(f"{eps:.4g}{at if not figures else ''} for {u} ({', '.join(labels)})")
    return ", ".join(figures)


def with_odometer(tags: dict[str, str], budget: dict[str, Any],
                  after: str = "this run", level: Any = None, relation: Any = None
                  ) -> dict[str, str]:
    """``tags`` whose run description says, after its (ε, δ) line, the dataset's odometer
    after the run (``after``: ``"the sweep"`` for a sweep's point), each figure naming
    its unit (:func:`cumulative_words`; the run's unit is ``level`` under ``relation``)."""
    if not budget or "mlflow.note.content" not in tags:
        return tags
    bt = budget_tags(budget)
    line = (f"**Dataset's cumulative ε after {after}:** "
            f"{cumulative_words(budget, level, relation)}")
    if len(budget.get("dataset_epsilon_by_unit", {})) > 1:
        line += (f" (post hoc per unit, each counting every release bearing on it: "
                 f"{bt['dpgnn.dataset_epsilon_by_unit']})")
    if "dpgnn.dataset_budget" in bt:
        line += f"; **budget:** {bt['dpgnn.dataset_budget']}"
    head, *rest = tags["mlflow.note.content"].split("\n\n")  # second, visible unexpanded
    return {**tags, "mlflow.note.content": "\n\n".join([head, line, *rest])}


def point_report(row: dict[str, Any], best: dict[str, Any] | None = None
                 ) -> PrivacyReport | None:
    """A private sweep point's report, its ledger in it (its ``report.json``; None when its
    model folder is gone). A private selection's released candidate
    (``best`` with ``selection = "private"``) has the released model's instead
    (:func:`selection_release`): its own training's ε is one candidate's, not the
    guarantee of the model released."""
    import json
    from pathlib import Path

    mdir = Path(row["artifacts_dir"]) if row.get("artifacts_dir") else None
    if mdir is None or not (mdir / "report.json").is_file():
        return None
    report = PrivacyReport.from_dict(json.loads((mdir / "report.json").read_text()))
    if best is not None and best.get("selection") == "private":
        report = selection_release(report, best)
    return report


def selection_release(report: PrivacyReport, best: dict[str, Any]) -> PrivacyReport:
    """The report of the model a private selection released, from the selected
    candidate's own report and the selection's entry ``best``
    (:func:`flows.sweep_tuning._released`): ε and δ the tuning mechanism's
    (``epsilon_spent``, ``delta``: Papernot & Steinke over every configuration's ledger,
    the noisy validation score included), RDP, the sweep's target ε, the candidate's
    ledger with the score's event, the selection's unaccounted uses, and the selection
    (``private_selection``: its report line; ``tuning``: its public plan). No per-step curve: a
    candidate's ε after step t is its training's, not a figure of the released model."""
    from dataclasses import replace
    from types import MappingProxyType

    from dpgnn_core.privacy.events import Ledger

    return replace(report, epsilon=float(best["epsilon_spent"]),
                   delta=float(best["delta"]), accountant="rdp",
                   target_epsilon=float(best["epsilon"]), epsilon_by_step=(),
                   ledger=Ledger.from_dict(best["ledger"]),
                   unaccounted=tuple(best.get("unaccounted") or ()),
                   details=MappingProxyType({**report.details,
                                             "private_selection": best["report"],
                                             "tuning": best.get("tuning", {})}))


#: What a private selection's released ``ledger.json`` (logged to MLflow) adds to the
#: candidate's ledger.
SELECTION_LEDGER_NOTE = ("the selected candidate's ledger: its training and its noisy "
                         "validation score. The released model's ε is the tuning ε "
                         "(epsilon, at delta) of the private selection over every "
                         "configuration's ledger (Papernot & Steinke 2022, in tuning), not "
                         "this ledger's own composition")


def released_files(report: PrivacyReport, folder: Any) -> list[str]:
    """Write a private selection's released ``report.json`` and ``ledger.json``
    (:func:`selection_release`; the ledger with the tuning ε and plan beside its entries,
    :data:`SELECTION_LEDGER_NOTE`) into ``folder``; returns their paths."""
    import json
    from pathlib import Path

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    data = report.to_dict()
    ledger = {**(data.get("ledger") or {}), "epsilon": report.epsilon, "delta": report.delta,
              "tuning": data.get("tuning", {}), "note": SELECTION_LEDGER_NOTE}
    (folder / "report.json").write_text(json.dumps(data, indent=2, default=str))
    (folder / "ledger.json").write_text(json.dumps(ledger, indent=2, default=str))
    return [str(folder / "report.json"), str(folder / "ledger.json")]


def point_privacy(row: dict[str, Any], sha256: str, readings: dict[Any, Any] | None = None,
                  best: dict[str, Any] | None = None
                  ) -> tuple[dict[str, Any], dict[str, str]]:
    """A private sweep point's MLflow params and tags, as a single run's page has them
    (issue 36 §4): ``privacy.*`` (:func:`privacy_params`, from the point's report and
    ledger, :func:`point_report`: a private selection's released model's), the privacy
    tags and description (:func:`privacy_tags`) and the dataset's odometer after the
    sweep for the point's own unit.

    Args:
        row (dict): the sweep's result row (``artifacts_dir``, ``config``, ``cache``).
        sha256 (str): the dataset's content sha256.
        readings (dict, optional): odometer readings already taken, by unit (level and
            relation), filled here: one reading per unit for a whole sweep.
        best (dict, optional): the sweep's ``best`` entry of the point when it is the
            selected one.
    """
    from tasks.budget import odometer

    report = point_report(row, best)
    if report is None:  # the model folder is gone: what the row says
        return ({"privacy": {"delta": row["delta"], "level": row["level"],
                             "noise_multiplier": row.get("noise_multiplier")}},
                {"dpgnn.epsilon": f"{row['epsilon_spent']:.4g}", "dpgnn.level": str(row["level"])})
    privacy = privacy_params(report, report.ledger, dict(row.get("config") or {}))
    key = (repr(report.level), repr(report.relation))
    readings = {} if readings is None else readings
    if key not in readings:
        readings[key] = odometer(sha256, report.level, report.relation)
    budget = readings[key]
    tags = with_odometer(privacy_tags(report, str(row.get("cache", "")), privacy=privacy),
                         budget, after="the sweep", level=report.level,
                         relation=report.relation)
    odo = {k: v + " (after the sweep)" if k == "dpgnn.dataset_epsilon_spent" else v
           for k, v in budget_tags(budget).items()}
    return {"privacy": privacy}, {**tags, **odo}


def point_name(row: dict[str, Any], dataset: str, report: PrivacyReport | None) -> str:
    """A sweep point's run name, as a single run's (:func:`run_name`:
    ``dpdgc-edp-cora-eps4-edge-s0-3f2a9c01b7de``); a point refused by the budget, or whose
    model folder is gone, ``METHOD-DATASET-epsEPS-sSEED`` and ``-refused``."""
    if report is not None:
        return run_name(row["method"], dataset, report, int(row["seed"]))
    eps = row.get("epsilon")
    parts = [row["method"], dataset, *([f"eps{float(eps):.3g}"] if eps is not None else []),
             f"s{row['seed']}"]
    return "-".join([*parts, "refused"] if row.get("refused") else parts)


def point_key(row: dict[str, Any]) -> str:
    """What identifies a sweep point among a sweep's rows (its method, configuration, ε
    and seed): the key of ``result["point_times"]``."""
    return f"{row['method']}|{row['config_id']}|{row['epsilon']}|{row['seed']}"


def _selected_tags(best: dict[str, Any]) -> dict[str, str]:
    """Tags of the point chosen on validation for its (method, ε): ``dpgnn.selected``,
    its unaccounted uses and, for a private selection, what the selection was (the
    released candidates only: K and the others are never logged)."""
    import json

    tags = {"dpgnn.selected": "true"}
    if best.get("unaccounted"):
        tags["dpgnn.unaccounted"] = "; ".join(best["unaccounted"])[:5000]
    if best.get("selection") == "private":
        tags["dpgnn.selection"] = str(best["report"])[:5000]
        tags["dpgnn.tuning"] = json.dumps(best["tuning"], default=str)[:5000]
    return tags


def point_page(row: dict[str, Any], ds: dict[str, Any], best: dict[str, Any] | None,
               readings: dict[Any, Any], folder: Any) -> dict[str, Any]:
    """A sweep point's child run, as a single run's (issue 52 §3): ``name``
    (:func:`point_name`), ``tags`` and ``params`` (the privacy of :func:`point_privacy`,
    the point's options, the dataset), ``artifacts`` (the dataset's and model's
    manifests, history, evaluation metrics, ledger and report), ``history_path`` and the
    final ``metrics`` (by MLflow name).

    A private selection's released candidate is the released model: its report and ledger
    are written to ``folder`` as released (:func:`released_files`: the tuning ε), and its
    own training's files (manifest, history, evaluation) are not logged: they state one
    candidate's ε and its exact validation accuracy, of which only the noisy count is
    released. Its metrics are the row's (the noisy validation score, the tuning ε)."""
    import json
    from pathlib import Path

    refused = bool(row.get("refused"))
    report = point_report(row, best) if row["private"] and not refused else None
    tags = {"dpgnn.method": row["method"], "dpgnn.config": row["config_id"],
            "dpgnn.private": str(row["private"]).lower(), "dpgnn.cache": str(row["cache"]),
            "dpgnn.dataset_sha256": ds["content_sha256"]}
    privacy: dict[str, Any] = {}
    if refused:  # the budget refused it: nothing was trained
        tags["dpgnn.refused"] = str(row["refused"])[:5000]
    elif row["private"]:
        privacy, more = point_privacy(row, ds["content_sha256"], readings, best)
        tags |= more
    if best is not None:
        tags |= _selected_tags(best)
    params = {"method": row["method"], "seed": row["seed"], "epsilon_target": row["epsilon"],
              **{f"option.{k}": v for k, v in row["config"].items()}, **privacy,
              "dataset": {k: ds[k] for k in ("name", "path", "content_sha256")}}
    artifacts = [str(Path(ds["path"]) / "manifest.json")]
    artifacts = [a for a in artifacts if Path(a).is_file()]
    mdir = Path(row["artifacts_dir"]) if row.get("artifacts_dir") else None
    history: str | None = None
    metrics: dict[str, Any] = {}
    if best is not None and best.get("selection") == "private":
        artifacts += released_files(report, folder) if report is not None else []
    elif mdir is not None and mdir.is_dir():
        artifacts += [str(mdir / f) for f in ("manifest.json", "history.json", "ledger.json",
                                              "report.json") if (mdir / f).is_file()]
        history = str(mdir / "history.json") if (mdir / "history.json").is_file() else None
        evaluated = Path(row.get("evaluation_dir") or "-") / "metrics.json"
        if evaluated.is_file():
            artifacts.append(str(evaluated))
            metrics = {f"{split}_{k}": v for split, m in
                       json.loads(evaluated.read_text()).items() for k, v in m.items()}
    if not metrics:
        metrics = {k: row.get(k) for k in ("val_accuracy", "test_accuracy")}
    if history is None or not row["private"]:
        metrics["epsilon_spent"] = row.get("epsilon_spent")
    return {"name": point_name(row, ds["name"], report), "tags": tags, "params": params,
            "artifacts": artifacts, "history_path": history, "metrics": metrics}


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
    selection = report.details.get("private_selection")
    lines = [head, *([f"**Private selection:** {selection}"] if selection else []),
             f"**Noise:** {noise}",
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


def with_auto(tags: dict[str, str], auto: dict[str, Any] | None) -> dict[str, str]:
    """``tags`` with what ``dpgnn run auto`` chose (``auto``: its
    :class:`~dpgnn_core.methods.auto.Choice` as a dict): the method, the rule and the
    public inputs it read, and the ε the choice spent, as ``dpgnn.auto.*`` tags and a line
    of the run's description."""
    if not auto:
        return tags
    inputs = ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}"
                       for k, v in auto["inputs"].items())
    out = {**tags, "dpgnn.auto": "true", "dpgnn.auto.method": str(auto["method"]),
           "dpgnn.auto.rule": f"{auto['rule']}: {auto['rule_words']}",
           "dpgnn.auto.inputs": inputs[:5000],
           "dpgnn.auto.epsilon_choice": f"{float(auto['epsilon_choice']):.4g}",
           "dpgnn.auto.method_epsilon": f"{float(auto['method_epsilon']):.4g}",
           **({"dpgnn.auto.epsilon_total": f"{float(auto['epsilon_total']):.4g}"}
              if auto.get("epsilon_total") is not None else {})}
    line = (f"**Chosen by `dpgnn run auto`:** {auto['method']} by rule {auto['rule']} "
            f"({auto['rule_words']}), from the inputs {inputs}; ε spent on the "
            f"choice: {float(auto['epsilon_choice']):.4g} ({auto['note']}). Evidence: "
            f"{auto['evidence']}")
    note = tags.get("mlflow.note.content")
    out["mlflow.note.content"] = f"{note}\n\n{line}" if note else line
    return out


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
