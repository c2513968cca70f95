"""Flow ``pipeline``: ingest (or an ingested folder) -> train -> evaluate -> log_run.

Every step but ``log_run`` is cached on its inputs and the code version, so a second run
with the same parameters reuses every artifact and only records a new MLflow run.
"""

# ruff: noqa: I001 - `tasks` must configure Prefect's environment before prefect is imported.
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import tasks  # noqa: F401
from prefect import flow

from dpgnn_core.errors import DataError
from dpgnn_core.specs import AnySpec, GapSpec, GraphClsSpec, IngestSpec
from tasks.evaluate import artifact_intact, evaluate
from tasks.ingest import dataset_summary, ingest
from tasks.refs import DatasetRef
from tasks.tracking import DEFAULT_EXPERIMENT, log_run


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


def _run(task_fn: Any, refresh: bool, **kwargs: Any) -> tuple[Any, str]:
    """Run a cached task; if its cached artifact was deleted or changed, run it again."""
    t = task_fn.with_options(refresh_cache=True) if refresh else task_fn
    state = t(return_state=True, **kwargs)
    result = state.result()
    if state.name == "Cached" and not _intact(result):
        state = task_fn.with_options(refresh_cache=True)(return_state=True, **kwargs)
        return state.result(), "Rebuilt"
    return result, state.name


@dataclass
class _GapTasks:
    """GAP's stages as cached tasks (:class:`dpgnn_core.methods.gap.GapStages`): the core's
    :func:`~dpgnn_core.methods.gap.orchestrate` wires them, here as in the library."""

    ds: DatasetRef
    spec: GapSpec
    refresh: bool
    states: dict[str, str]

    def _step(self, name: str, task_fn: Any, **kwargs: Any) -> Any:
        out, self.states[name] = _run(task_fn, self.refresh, dataset=self.ds, spec=self.spec,
                                      **kwargs)
        return out

    def calibrate(self) -> Any:
        from tasks.gap import gap_calibrate

        return self._step("calibrate", gap_calibrate)

    def noise_scale(self, calibration: Any) -> float:
        return float(calibration["z"])

    def graph(self) -> Any:
        from tasks.gap import gap_graph

        return self._step("graph", gap_graph)

    def encoder(self, z: float) -> Any:
        from tasks.gap import gap_encoder

        return self._step("encoder", gap_encoder, z=z)

    def aggregate(self, graph: Any, encoder: Any, z: float) -> Any:
        from tasks.gap import gap_aggregate

        return self._step("aggregate", gap_aggregate, graph=graph, encoder=encoder, z=z)

    def classifier(self, aggregations: Any, z: float, calibration: Any, encoder: Any) -> Any:
        from tasks.gap import gap_classifier

        return self._step("train", gap_classifier, aggregations=aggregations, z=z,
                          calibration=calibration, encoder=encoder)


def _gap_chain(ds: DatasetRef, spec: GapSpec, refresh: bool, states: dict[str, str]
               ) -> tuple[dict[str, Any], dict[str, Any]]:
    """GAP's cached stages, wired by the core's one orchestration; each returns the privacy
    events of its release, composed into the run's ledger by the classifier step."""
    from dpgnn_core.methods.gap import orchestrate

    model = orchestrate(_GapTasks(ds, spec, refresh, states))
    return model, model["report"]


def release_status(report: dict[str, Any], state: str) -> str:
    """Whether this run made a new private release or reused a cached one."""
    rid = report.get("release", {}).get("id", "?")
    if state == "Cached":
        return f"reused cached release {rid} (no new privacy cost)"
    replaced = report.get("release", {}).get("replaces")
    return f"new release {rid}" + (f", replacing {replaced} (both count)" if replaced else "")


def privacy_tags(report: dict[str, Any], state: str) -> dict[str, str]:
    """MLflow tags that show what a run's privacy means at a glance."""
    if not report.get("private"):
        return {}
    insecure = bool(report.get("insecure_reproducible_noise"))
    tags = {"dpgnn.level": str(report.get("level")),
            "dpgnn.relation": str(report.get("relation")),
            "dpgnn.epsilon": f"{report['epsilon']:.4g}" if report.get("epsilon") else "",
            "dpgnn.randomness": "NOT PRIVATE: noise reproducible from the stored seed"
            if insecure else "secret (OS entropy, never stored)",
            "dpgnn.release": release_status(report, state)}
    if insecure:
        tags["dpgnn.private"] = "false"
        tags["dpgnn.warning"] = "not private: noise reproducible from the stored seed"
    # The run page's description: the privacy statement in words.
    head = (f"**(ε = {report['epsilon']:.4g}, δ = {report['delta']:.3g})-DP**, "
            f"{report.get('accountant', '?')} accountant" if report.get("epsilon")
            else "private")
    if insecure:
        head = f"**NOT PRIVATE** (reproducible noise); nominal {head}"
    lines = [head, f"**Protects:** {report.get('protects')}",
             f"**Unit:** {report.get('level')}; **relation:** {report.get('relation')}",
             f"**Noise and sampling:** {report.get('randomness')}",
             f"**Release:** {tags['dpgnn.release']}"]
    lines += [f"**Not accounted:** {u}" for u in report.get("unaccounted", [])]
    lines += [f"**Warning:** {w}" for w in report.get("warnings", [])]
    tags["mlflow.note.content"] = "\n\n".join(lines)
    return tags


@flow(name="dpgnn-pipeline", persist_result=False, log_prints=False)
def pipeline(
    spec: AnySpec,
    dataset: str | None = None,
    ingest_spec: IngestSpec | None = None,
    tracking_uri: str | None = None,
    experiment: str = DEFAULT_EXPERIMENT,
    refresh: bool = False,
    explain_graphs: int = 20,
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
            latter trained through the same cached path); 0 skips. (default: :obj:`20`)

    Returns:
        dict: the run summary printed by ``dpgnn run --json``.
    """
    from pathlib import Path

    from dpgnn_core.methods.registry import method_for
    from flows.recover import recover_and_claim
    from tasks.train import train

    recover_and_claim()  # runs a killed process left RUNNING -> Crashed; record this one's owner
    if (dataset is None) == (ingest_spec is None):
        raise ValueError("pass exactly one of dataset (a folder) or ingest_spec")
    the_method = method_for(spec)  # the one place the method is decided
    states: dict[str, str] = {}
    if dataset is not None:
        ds = dataset_summary(dataset)
    else:
        ds, states["ingest"] = _run(ingest, refresh, spec=ingest_spec)
    if isinstance(spec, GapSpec):  # family "gap": its cached stages (calibrate, graph,
        model, report = _gap_chain(ds, spec, refresh, states)  # encoder, PMA, classifier)
    else:
        model, states["train"] = _run(train, refresh, dataset=ds, spec=spec)
        report = model.get("report") or {"private": False, "epsilon": None}
    method = report.get("method") or the_method.name
    ev, states["evaluate"] = _run(evaluate, refresh, dataset=ds, model=model)
    explained: dict[str, Any] = {}
    if the_method.family == "graph-cls" and report["private"] and explain_graphs > 0:
        from tasks.explain import explain

        twin, states["train_nonprivate"] = _run(
            train, refresh, dataset=ds,
            spec=GraphClsSpec(**{**spec.model_dump(), "epsilon": None, "method": None}))
        explained, states["explain"] = _run(explain, refresh, dataset=ds, private=model,
                                            nonprivate=twin, count=explain_graphs)
    params = {"method": method, "train": spec.model_dump(mode="json"),
              "dataset": {"name": ds["name"], "path": ds["path"],
                          "content_sha256": ds["content_sha256"]}}
    mdir = Path(model["path"])
    artifacts = [str(Path(ds["path"]) / "manifest.json"), str(mdir / "manifest.json"),
                 str(mdir / "history.json"), str(Path(ev["path"]) / "metrics.json")]
    artifacts += [str(mdir / f) for f in ("ledger.json", "report.json") if (mdir / f).is_file()]
    if explained:
        artifacts += [str(Path(explained["path"]) / f) for f in explained["files"]]
    run = log_run(
        run_name=f"{method}-{ds['name']}-s{spec.seed}",
        params=params,
        history_path=str(mdir / "history.json"),
        metrics={**ev["metrics"], **({"explain": {k: v for k, v in explained.items()
                                                  if k.startswith("iou_")}}
                                     if explained else {})},
        artifacts=artifacts,
        tags={"dpgnn.method": method, "dpgnn.private": str(report["private"]).lower(),
              **privacy_tags(report, states.get("train", "")),
              **({"dpgnn.hops": str(spec.hops)} if isinstance(spec, GapSpec) else {}),
              "dpgnn.dataset_sha256": ds["content_sha256"]},
        tracking_uri=tracking_uri,
        experiment=experiment,
    )
    m = ev["metrics"]
    private_fields: dict[str, Any] = {}
    if report["private"]:
        private_fields = {"epsilon": report["epsilon"], "delta": report["delta"],
                          "noise_multiplier": report["noise_multiplier"],
                          "accountant": report.get("accountant"),
                          "steps": report["steps"],
                          "privacy_report": str(mdir / "ledger.json"),
                          "unaccounted": report.get("unaccounted", []),
                          "level": report.get("level"), "relation": report.get("relation"),
                          "protects": report.get("protects"),
                          "randomness": report.get("randomness"),
                          "release": release_status(report, states.get("train", ""))}
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
        **({"test_sensitivity": m["test"].get("sensitivity"),
            "test_specificity": m["test"].get("specificity")} if the_method.family == "graph-cls"
           else {}),
        **({k: v for k, v in explained.items() if k.startswith("iou_")} if explained else {}),
        "metrics": m,
        "mlflow_run_id": run["run_id"],
        "mlflow_tracking_uri": run["tracking_uri"],
        "artifacts_dir": model["path"],
        "evaluation_dir": ev["path"],
        "cache": states,
    }
