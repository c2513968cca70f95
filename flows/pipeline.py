"""Flow ``pipeline``: ingest (or an ingested folder) -> train -> evaluate -> log_run.

Every step but ``log_run`` is cached on its inputs and the code version, so a second run
with the same parameters reuses every artifact and only records a new MLflow run.
"""

# ruff: noqa: I001 - `tasks` must configure Prefect's environment before prefect is imported.
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import tasks  # noqa: F401
from prefect import flow, get_run_logger

from dpgnn_core.errors import DataError
from dpgnn_core.specs import AnySpec, GapSpec, IngestSpec, ProgapSpec
from tasks.budget import (
    LostReleaseError,
    account_after,
    admit_non_private,
    budget_tags,
    new_owner,
)
from tasks.evaluate import artifact_intact, evaluate
from tasks.ingest import dataset_summary, ingest
from tasks.refs import DatasetRef
from tasks.tracking import (
    DEFAULT_EXPERIMENT,
    check_tracking_uri,
    default_tracking_uri,
    log_run,
    run_url,
    tag_run,
)


def _intact(result: dict[str, Any]) -> bool:
    """Whether a (cached) step's artifact is still on disk unchanged."""
    if "path" not in result:  # nothing on disk (e.g. a calibration)
        return True
    if "files" in result:
        return artifact_intact(result["path"], result["files"])
    try:
        return bool(dataset_summary(result["path"])["content_sha256"]
                    == result["content_sha256"])
    except DataError:
        return False


def private_release(result: Any) -> bool:
    """Whether a step's result is a private release: a private report (a trained model),
    or privacy events (GAP's and ProGAP's encoder, aggregation and stage modules)."""
    if not isinstance(result, dict):
        return False
    if (result.get("report") or {}).get("private"):
        return True
    events = result.get("events")
    return isinstance(events, dict) and bool(events.get("entries"))


def lost_release(result: dict[str, Any]) -> LostReleaseError:
    """The refusal to remake a lost or changed cached private release silently."""
    release = ((result.get("report") or {}).get("release") or {}).get("id")
    eps = (result.get("report") or {}).get("epsilon")
    return LostReleaseError(
        f"the cached private release {release or ''} in {result.get('path')} is missing or "
        "changed: training it again would be a new release with fresh noise, charged again "
        "to the dataset's budget" + (f" (ε = {eps:.4g})" if eps is not None else "")
        + ". Nothing was trained. Rerun with --refresh to spend it again")


def _run(task_fn: Any, refresh: bool, **kwargs: Any) -> tuple[Any, str]:
    """Run a cached task; if its cached artifact was deleted or changed, run it again,
    unless it is a private release (:class:`~tasks.budget.LostReleaseError`: remaking it
    spends the budget again, which only ``refresh`` asks for)."""
    t = task_fn.with_options(refresh_cache=True) if refresh else task_fn
    state = t(return_state=True, **kwargs)
    result = state.result()
    if state.name == "Cached" and not _intact(result):
        if private_release(result):
            raise lost_release(result)
        state = task_fn.with_options(refresh_cache=True)(return_state=True, **kwargs)
        return state.result(), "Rebuilt"
    return result, state.name


@dataclass
class _StagedTasks:
    """A staged family's cached tasks of one run: each step records its cache state. The
    stages that release something get the run's ``owner`` token: they share one budget
    reservation, and no other task can adopt it (:func:`tasks.budget.gate_for`)."""

    ds: DatasetRef
    spec: Any
    refresh: bool
    states: dict[str, str]
    owner: str = field(default_factory=new_owner)

    def _step(self, name: str, task_fn: Any, **kwargs: Any) -> Any:
        out, self.states[name] = _run(task_fn, self.refresh, dataset=self.ds, spec=self.spec,
                                      **kwargs)
        return out

    def noise_scale(self, calibration: Any) -> float:
        return float(calibration["z"])


class _GapTasks(_StagedTasks):
    """GAP's stages as cached tasks (:class:`dpgnn_core.methods.gap.GapStages`): the core's
    :func:`~dpgnn_core.methods.gap.orchestrate` wires them, here as in the library."""

    def calibrate(self) -> Any:
        from tasks.gap import gap_calibrate

        return self._step("calibrate", gap_calibrate)

    def graph(self) -> Any:
        from tasks.gap import gap_graph

        return self._step("graph", gap_graph)

    def encoder(self, z: float) -> Any:
        from tasks.gap import gap_encoder

        return self._step("encoder", gap_encoder, z=z, owner=self.owner)

    def aggregate(self, graph: Any, encoder: Any, z: float) -> Any:
        from tasks.gap import gap_aggregate

        return self._step("aggregate", gap_aggregate, graph=graph, encoder=encoder, z=z,
                          owner=self.owner)

    def classifier(self, aggregations: Any, z: float, calibration: Any, encoder: Any) -> Any:
        from tasks.gap import gap_classifier

        return self._step("train", gap_classifier, aggregations=aggregations, z=z,
                          calibration=calibration, encoder=encoder, owner=self.owner)


def _gap_chain(ds: DatasetRef, spec: GapSpec, refresh: bool, states: dict[str, str]
               ) -> tuple[dict[str, Any], dict[str, Any]]:
    """GAP's cached stages, wired by the core's one orchestration; each returns the privacy
    events of its release, composed into the run's ledger by the classifier step."""
    from dpgnn_core.methods.gap import orchestrate

    model = orchestrate(_GapTasks(ds, spec, refresh, states))
    return model, model["report"]


class _ProgapTasks(_StagedTasks):
    """ProGAP's stages as cached tasks (:class:`dpgnn_core.methods.progap.ProgapStages`):
    the core's :func:`~dpgnn_core.methods.progap.orchestrate` wires them. A stage's value is
    the list of stage and aggregation references so far."""

    def calibrate(self) -> Any:
        from tasks.progap import progap_calibrate

        return self._step("calibrate", progap_calibrate)

    def graph(self) -> Any:
        from tasks.progap import progap_graph

        return self._step("graph", progap_graph)

    def train(self, k: int, previous: Any, aggregation: Any, z: float) -> Any:
        from tasks.progap import progap_stage

        stages, aggs = previous or ([], [])
        aggs = [*aggs, aggregation] if aggregation is not None else aggs
        ref = self._step(f"stage{k}", progap_stage, z=z, stage=k,
                         previous=stages[-1] if stages else None, aggregations=aggs,
                         owner=self.owner)
        return [*stages, ref], aggs

    def aggregate(self, k: int, graph: Any, previous: Any, z: float) -> Any:
        from tasks.progap import progap_aggregate

        stages, aggs = previous
        return self._step(f"aggregate{k}", progap_aggregate, graph=graph, z=z, stage=k,
                          previous=stages[-1], aggregations=aggs, owner=self.owner)

    def finish(self, calibration: Any, z: float, graph: Any, last: Any) -> Any:
        from tasks.progap import progap_finish

        stages, aggs = last
        return self._step("train", progap_finish, z=z, calibration=calibration,
                          graph=graph, stages=stages, aggregations=aggs, owner=self.owner)


def _progap_chain(ds: DatasetRef, spec: ProgapSpec, refresh: bool, states: dict[str, str]
                  ) -> tuple[dict[str, Any], dict[str, Any]]:
    """ProGAP's cached stages, wired by the core's one orchestration; the last step
    composes the stages' privacy events into the run's ledger."""
    from dpgnn_core.methods.progap import orchestrate

    model = orchestrate(_ProgapTasks(ds, spec, refresh, states))
    return model, model["report"]


#: The staged runners by the catalogue's ``staged`` key (the others: one ``train`` task).
_STAGED: dict[str, Any] = {"gap": _gap_chain, "progap": _progap_chain}


def release_status(report: dict[str, Any], state: str) -> str:
    """Whether this run made a new private release or reused a cached one."""
    rid = report.get("release", {}).get("id", "?")
    if state == "Cached":
        return f"reused cached release {rid} (no new privacy cost)"
    replaced = report.get("release", {}).get("replaces")
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


def privacy_params(report: dict[str, Any], ledger: dict[str, Any] | None,
                   spec: dict[str, Any]) -> dict[str, Any]:
    """What a run's privacy actually used, for MLflow's params under ``privacy.``.

    Every scalar of the report (δ with its default resolved, the calibrated
    ``noise_multiplier``, ``accountant``, ``steps``, ``batch_size``, ``level``,
    ``relation``, ...), and from the ledger: each privacy event as ``event<i>`` (its
    description, noise multiplier, sampling scheme and rate, steps; GAP composes several
    with one noise scale weighted per stage), ``noise_multipliers`` when events differ,
    ``sampling_rate`` and, when a phase clips gradients, ``clip`` (the clipping norm(s)).
    """
    if not report.get("private"):
        return {"private": False}
    out: dict[str, Any] = {"private": True}
    out.update({k: v for k, v in report.items() if k not in _NOT_PARAMS and v is not None})
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
        clips = report.get("clips") or [spec.get("clip")]
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


def run_name(method: str, dataset: str, report: dict[str, Any], seed: int) -> str:
    """``dp-gcn-cora-eps4-edge-s0``: the method, the dataset, the target ε and the protected
    unit (private runs), the seed; ``-insecure`` when the noise is reproducible."""
    parts = [method, dataset]
    if report.get("private"):
        eps = report.get("target_epsilon") or report.get("epsilon")
        if eps is not None:
            parts.append(f"eps{float(eps):.3g}")
        if report.get("level"):
            parts.append(_fmt_level(report["level"]).replace("_", "-"))
        if report.get("insecure_reproducible_noise"):
            parts.append("insecure")
    return "-".join([*parts, f"s{seed}"])


def _noise_summary(report: dict[str, Any], privacy: dict[str, Any]) -> str:
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
        text = f"noise multiplier {float(report.get('noise_multiplier') or 0):.4g}"
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


def privacy_tags(report: dict[str, Any], state: str, *,
                 privacy: dict[str, Any] | None = None,
                 explained: bool = False) -> dict[str, str]:
    """MLflow tags that show what a run's privacy means at a glance, and the run page's
    description (``mlflow.note.content``): the (ε, δ) statement, noise, what is and is not
    protected, what is assumed public."""
    if not report.get("private"):
        return {}
    privacy = privacy or {}
    insecure = bool(report.get("insecure_reproducible_noise"))
    tags = {"dpgnn.level": _fmt_level(report.get("level")),
            "dpgnn.relation": str(report.get("relation")),
            "dpgnn.epsilon": f"{report['epsilon']:.4g}" if report.get("epsilon") else "",
            "dpgnn.delta": f"{report['delta']:.3g}" if report.get("delta") else "",
            "dpgnn.randomness": "NOT PRIVATE: noise reproducible from the stored seed"
            if insecure else "secret (OS entropy, never stored)",
            "dpgnn.release": release_status(report, state)}
    if insecure:
        tags["dpgnn.private"] = "false"
        tags["dpgnn.warning"] = "not private: noise reproducible from the stored seed"
    if report.get("unaccounted_release"):  # e.g. --log-raw-loss: released outside ε
        tags["dpgnn.unaccounted_release"] = "; ".join(report["unaccounted_release"])[:5000]
    # The run page's description: the privacy statement in words.
    head = (f"**(ε = {report['epsilon']:.4g}, δ = {report['delta']:.3g})-DP**, "
            f"{report.get('accountant', '?')} accountant" if report.get("epsilon")
            else "private")
    if insecure:
        head = f"**NOT PRIVATE** (reproducible noise); nominal {head}"
    noise = _noise_summary(report, privacy)
    lines = [head, f"**Noise:** {noise}",
             f"**Protects:** {report.get('protects')}",
             f"**Unit:** {_fmt_level(report.get('level'))}; "
             f"**relation:** {report.get('relation')}"]
    not_protected = [_NOT_PROTECTED[str(report.get("level"))]] \
        if str(report.get("level")) in _NOT_PROTECTED else []
    if explained:
        not_protected.append("the GNNExplainer explanations and their IoUs (they read the "
                             "test graphs without noise)")
    lines += [f"**Not protected:** {u}" for u in not_protected]
    if report.get("inference"):  # whether predictions are covered, in the method's words
        lines.append(f"**Predictions:** {report['inference']}")
    lines += [f"**Assumed public:** {u}" for u in report.get("public", [])]
    if report.get("scope"):
        lines.append(f"**Scope:** {report['scope']}")
    lines += [f"**Noise and sampling:** {report.get('randomness')}",
              f"**Release:** {tags['dpgnn.release']}"]
    lines += [f"**Not accounted:** {u}" for u in report.get("unaccounted", [])]
    lines += [f"**Released outside ε:** {u}" for u in report.get("unaccounted_release", [])]
    lines += [f"**Warning:** {w}" for w in report.get("warnings", [])]
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
        run_name=run_name(twin_spec.method, ds["name"], {"private": False}, twin_spec.seed)
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


@flow(name="dpgnn-pipeline", persist_result=False, log_prints=False)
def pipeline(
    spec: AnySpec,
    dataset: str | None = None,
    ingest_spec: IngestSpec | None = None,
    tracking_uri: str | None = None,
    experiment: str = DEFAULT_EXPERIMENT,
    refresh: bool = False,
    explain_graphs: int = 20,
    allow_non_private_release: bool = False,
) -> dict[str, Any]:
    """One run: a dataset folder (``dataset``) or an ingest spec, then the method ``spec``
    names (``spec.method``; the registry decides everything else).

    Args:
        spec (AnySpec): any method's spec (:data:`dpgnn_core.specs.AnySpec`), e.g.
            ``DpgnnSpec(method="dp-gcn", epsilon=4)`` or, from a deployment,
            ``{"method": "gcn"}``.
        dataset (str, optional): an ingested dataset folder.
        ingest_spec (IngestSpec, optional): what to ingest when ``dataset`` is not given.
        tracking_uri (str, optional): MLflow URI; SQLite under the project by default.
        experiment (str, optional): MLflow experiment. (default: ``dpgnn``)
        refresh (bool, optional): recompute cached steps. (default: :obj:`False`)
        explain_graphs (int, optional): with a private graph classifier, explain this many
            test graphs with GNNExplainer under the private and the non-private model (the
            latter trained through the same cached path, a non-private release logged as
            its own MLflow run, linked); 0 skips. (default: :obj:`20`)
        allow_non_private_release (bool, optional): let a non-private run (or the private
            graph classifier's non-private twin) release on a dataset with a budget, which
            refuses it otherwise; recorded in the odometer and on the MLflow run
            (:func:`tasks.budget.admit_non_private`). (default: :obj:`False`)

    Returns:
        dict: the run summary printed by ``dpgnn run --json``.
    """
    import json
    import time
    from pathlib import Path

    from dpgnn_core.data.store import read_manifest
    from dpgnn_core.methods.registry import method_for
    from flows.recover import recover_and_claim
    from tasks.train import train

    recover_and_claim()  # runs a killed process left RUNNING -> Crashed; record this one's owner
    started_ms = int(time.time() * 1000)  # the MLflow run spans the whole flow
    if (dataset is None) == (ingest_spec is None):
        raise ValueError("pass exactly one of dataset (a folder) or ingest_spec")
    the_method = method_for(spec)  # the one place the method is decided
    states: dict[str, str] = {}
    if dataset is not None:
        ds = dataset_summary(dataset)
    else:
        ds, states["ingest"] = _run(ingest, refresh, spec=ingest_spec)
    # the method's pre-flight (the CLI ran it too; a deployment or a Python caller did not)
    the_method.preflight(spec, {**read_manifest(Path(ds["path"])), "path": ds["path"]})
    # A release without privacy on a budgeted dataset is refused (charged ∞) unless allowed,
    # before anything trains; the graph classifier's non-private twin is one too.
    np_tags: dict[str, str] = {}
    twin_tags: dict[str, str] = {}
    if getattr(spec, "epsilon", None) is None:
        np_tags = admit_non_private(ds, the_method.name, allowed=allow_non_private_release)
    twin_spec: Any = None
    if the_method.explains and getattr(spec, "epsilon", None) is not None \
            and explain_graphs > 0:
        twin_spec = the_method.spec_type(**{**spec.model_dump(), "epsilon": None, "method": None})
        twin_tags = admit_non_private(
            ds, twin_spec.method, allowed=allow_non_private_release,
            what=f"the GNNExplainer comparison trains {twin_spec.method}, a non-private twin "
                 "of this model, on the same training graphs (--explain-graphs 0 skips it)")
    chain = _STAGED[the_method.staged] if the_method.staged else None
    if chain is not None:  # GAP, ProGAP: their cached stages (calibrate, graph, modules,
        model, report = chain(ds, spec, refresh, states)  # aggregations, composition)
    else:
        model, states["train"] = _run(train, refresh, dataset=ds, spec=spec)
        report = model.get("report") or {"private": False, "epsilon": None}
    method = report.get("method") or the_method.name
    ev, states["evaluate"] = _run(evaluate, refresh, dataset=ds, model=model)
    explained: dict[str, Any] = {}
    twin: dict[str, Any] = {}
    if twin_spec is not None and report["private"]:
        from tasks.explain import explain

        twin, states["train_nonprivate"] = _run(train, refresh, dataset=ds, spec=twin_spec)
        explained, states["explain"] = _run(explain, refresh, dataset=ds, private=model,
                                            nonprivate=twin, count=explain_graphs)
    mdir = Path(model["path"])
    ledger = (json.loads((mdir / "ledger.json").read_text())
              if report["private"] and (mdir / "ledger.json").is_file() else None)
    # The dataset's odometer: a cached release re-used here is recorded at no cost; the
    # reading after this run goes to the summary and MLflow.
    budget = account_after(ds, report, method, ledger) if report["private"] else {}
    spec_params = spec.model_dump(mode="json")
    privacy = privacy_params(report, ledger, spec_params)
    params = {"method": method, "privacy": privacy,
              "train": resolved_spec(spec_params, privacy),
              "dataset": {"name": ds["name"], "path": ds["path"],
                          "content_sha256": ds["content_sha256"]}}
    artifacts = [str(Path(ds["path"]) / "manifest.json"), str(mdir / "manifest.json"),
                 str(mdir / "history.json"), str(Path(ev["path"]) / "metrics.json")]
    artifacts += [str(mdir / f) for f in ("ledger.json", "report.json") if (mdir / f).is_file()]
    run: dict[str, Any] = {"run_id": None,
                           "tracking_uri": tracking_uri or default_tracking_uri()}
    twin_run: dict[str, Any] = {}
    mlflow_error: str | None = None
    try:
        check_tracking_uri(run["tracking_uri"])  # seconds, not MLflow's minutes of retries
        if explained:  # the non-private twin: its own run, never the private run's page
            assert twin_spec is not None
            twin_run = log_twin(ds, twin_spec, twin, explained, twin_tags, tracking_uri,
                                experiment)
        run = log_run(
            run_name=run_name(method, ds["name"], report, spec.seed),
            params=params,
            history_path=str(mdir / "history.json"),
            metrics=ev["metrics"],
            artifacts=artifacts,
            tags={"dpgnn.method": method, "dpgnn.private": str(report["private"]).lower(),
                  **with_odometer(with_twin(privacy_tags(report, states.get("train", ""),
                                                         privacy=privacy), twin_run),
                                  budget),
                  **({"dpgnn.nonprivate_twin": twin_run["run_id"]} if twin_run else {}),
                  **np_tags,
                  **the_method.run_tags(spec),
                  "dpgnn.dataset_sha256": ds["content_sha256"],
                  **budget_tags(budget)},
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
        mlflow_error = (f"MLflow logging failed ({type(e).__name__}: {reason[:300]}); the "
                        f"model is trained and cached in {model['path']}: rerun the same "
                        "command once the tracking URI works to log it (the cached model "
                        "is reused" + (", no new privacy cost)" if report["private"] else ")"))
        get_run_logger().warning(mlflow_error)
    m = ev["metrics"]
    private_fields: dict[str, Any] = {}
    if report["private"]:
        private_fields = {"epsilon": report["epsilon"], "delta": report["delta"],
                          "noise_multiplier": report["noise_multiplier"],
                          "accountant": report.get("accountant"),
                          "steps": report["steps"],
                          "privacy_report": str(mdir / "ledger.json"),
                          "unaccounted": report.get("unaccounted", []),
                          "unaccounted_release": report.get("unaccounted_release", []),
                          "level": report.get("level"), "relation": report.get("relation"),
                          "protects": report.get("protects"),
                          "randomness": report.get("randomness"),
                          "release": release_status(report, states.get("train", "")),
                          **budget}
    return {
        "method": method,
        "dataset": ds["name"],
        "dataset_path": ds["path"],
        "seed": spec.seed,
        "private": bool(report["private"]),
        **private_fields,
        "test_accuracy": m["test"]["accuracy"],
        "val_accuracy": m["val"]["accuracy"],
        "test_f1_micro": m["test"]["f1_micro"],
        "test_roc_auc": m["test"]["roc_auc"],
        **{f"test_{k}": m["test"].get(k) for k in the_method.extra_metrics},
        **({k: v for k, v in explained.items() if k.startswith("iou_")} if explained else {}),
        **({"nonprivate_twin": {
            "method": twin_spec.method if twin_spec is not None else None,
            "artifacts_dir": twin.get("path"), "mlflow_run_id": twin_run.get("run_id"),
            "note": "not private: trained on the same training graphs for the GNNExplainer "
                    "comparison, logged as its own MLflow run"}} if explained else {}),
        "metrics": m,
        "mlflow_run_id": run["run_id"],
        "mlflow_tracking_uri": run["tracking_uri"],
        **({"non_private_release": np_tags["dpgnn.non_private_release"]} if np_tags else {}),
        "mlflow_error": mlflow_error,  # None when the run was logged
        **({"mlflow_url": run_url(run["tracking_uri"], run["experiment_id"], run["run_id"])}
           if run["run_id"] and run["tracking_uri"].startswith(("http:", "https:")) else {}),
        **({"structure_defaults": report["structure_defaults"]}
           if report.get("structure_defaults") else {}),
        "artifacts_dir": model["path"],
        "evaluation_dir": ev["path"],
        "cache": states,
    }
