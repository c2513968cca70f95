"""``dpgnn audit METHOD``: an empirical privacy audit, one command per auditable method.

A method's options are those of ``dpgnn run METHOD`` (the same spec, built the same way);
the audit's own options are the canaries (``--canaries``), the multi-run variant
(``--runs``), the attack, the guess fraction and the bound's confidence and δ. Everything
the spec and the dataset's manifest can refuse is refused before Prefect starts.
"""

from __future__ import annotations

import inspect
import json
import math
from pathlib import Path
from typing import Annotated, Any

import typer

audit_app = typer.Typer(
    help="Empirical privacy audit: insert canaries, train, attack, and lower-bound ε with "
    "the one-run audit of Steinke, Nasr & Jagielski (2023) or a classic multi-run audit; "
    "the bound is compared with the reported ε. `dpgnn audit METHOD --help` lists the "
    "method's options.",
    no_args_is_help=True,
    rich_markup_mode=None,
)

#: Options of the audit itself (beside the run options of ``dpgnn run``).
_AUDIT_OPTIONS = ("canaries", "runs", "attack", "guess_fraction", "beta", "bound_delta",
                  "canary_scale")


def _audit_params() -> list[inspect.Parameter]:
    from dpgnn_core.audit.defaults import DEFAULT_BETA, DEFAULT_GUESS_FRACTION, DEFAULT_SCALE

    kw = inspect.Parameter.KEYWORD_ONLY
    return [
        inspect.Parameter("canaries", kw, default=200, annotation=Annotated[int, typer.Option(
            min=2, help="One-run audit: m canaries, each in the training data with "
            "probability 1/2.")]),
        inspect.Parameter("runs", kw, default=None, annotation=Annotated[int | None,
            typer.Option(min=4, help="A classic multi-run audit instead: one canary over "
                         "this many trainings (small settings only; each run trains).")]),
        inspect.Parameter("attack", kw, default="default", annotation=Annotated[str,
            typer.Option(help="default, or reproduced-noise (GAP-EDP: regenerate PMA's "
                         "noise from the stored seed; the control for "
                         "--insecure-reproducible-noise).")]),
        inspect.Parameter("guess_fraction", kw, default=DEFAULT_GUESS_FRACTION,
                          annotation=Annotated[float, typer.Option(
                              help="One-run: fraction of canaries guessed (half 'in', half "
                              "'out'), fixed before any score is seen.")]),
        inspect.Parameter("beta", kw, default=DEFAULT_BETA, annotation=Annotated[float,
            typer.Option(help="1 - confidence of the lower bound.")]),
        inspect.Parameter("bound_delta", kw, default=None, annotation=Annotated[
            float | None, typer.Option(help="δ the bound is stated at (default: the run's "
                                       "reported δ).")]),
        inspect.Parameter("canary_scale", kw, default=DEFAULT_SCALE, annotation=Annotated[
            float, typer.Option(help="Node and graph canaries: the value of each "
                                "canary's own feature column.")]),
    ]


def _make_command(name: str, spec_type: Any) -> Any:
    from flows.cli.run import _signature

    def command(**kwargs: Any) -> None:
        from flows.cli.run import spec_from_options

        audit_kw = {k: kwargs.pop(k) for k in _AUDIT_OPTIONS}
        spec, run_kw = spec_from_options(name, kwargs)
        execute(name, spec, run_kw["dataset"], tracking_uri=run_kw.get("tracking_uri"),
                experiment=run_kw.get("experiment") or "dpgnn-audits",
                refresh=bool(run_kw.get("refresh")), as_json=bool(run_kw.get("as_json")),
                allow_non_private_release=bool(run_kw.get("allow_non_private_release")),
                **audit_kw)

    base = _signature(name, spec_type)
    params = [p.replace(default="dpgnn-audits") if p.name == "experiment" else p
              for p in base.parameters.values() if p.name != "explain_graphs"]
    sig = inspect.Signature(params + _audit_params())
    command.__signature__ = sig  # type: ignore[attr-defined]
    command.__annotations__ = {p.name: p.annotation for p in sig.parameters.values()}
    command.__name__ = f"audit_{name.replace('-', '_')}"
    command.__doc__ = (f"Audit {name}: canaries, one training (or --runs trainings), an "
                       "attack, and a lower bound on ε compared with the reported ε.")
    return command


def execute(name: str, spec: Any, dataset: Path, *, tracking_uri: str | None,
            experiment: str, refresh: bool, as_json: bool, canaries: int, runs: int | None,
            attack: str, guess_fraction: float, beta: float, bound_delta: float | None,
            canary_scale: float, allow_non_private_release: bool = False) -> None:
    """Check everything the spec and the manifest can refuse, then run the audit flow and
    print its summary (one JSON object with ``--json``)."""
    from dpgnn_core.data.manifest import load_manifest
    from dpgnn_core.environment import check_environment
    from dpgnn_core.errors import DpgnnError
    from dpgnn_core.home import project_dir
    from flows import clilog
    from flows.cli.common import error, server_ready, stdout_to_stderr, use_server_if_running

    try:
        manifest_path = dataset / "manifest.json"
        if not manifest_path.is_file():
            raise DpgnnError(f"{dataset} is not a dataset folder (no manifest.json); create "
                             "one with `dpgnn ingest`")
        _preflight(spec, dataset, load_manifest(manifest_path), canaries=canaries,
                   runs=runs, attack=attack, guess_fraction=guess_fraction, beta=beta,
                   bound_delta=bound_delta)
        clilog.check_home(project_dir())
        check_environment()  # DPGNN_CHECKPOINT_SECONDS, say: one line, before Prefect
        if tracking_uri:
            from tasks.tracking import check_tracking_uri

            check_tracking_uri(tracking_uri)
    except (DpgnnError, OSError, ValueError) as e:
        error(" ".join(str(e).split()))
        raise typer.Exit(2) from e
    use_server_if_running()
    from flows.audit import audit
    from tasks.progress import status

    server_ready()

    with clilog.captured(project_dir()) as log:
        try:
            with status(f"auditing {name} on {dataset} (Prefect flow)…"), \
                    stdout_to_stderr():
                summary: dict[str, Any] = audit(
                    spec=spec, dataset=str(dataset.resolve()), canaries=canaries, runs=runs,
                    attack=attack, guess_fraction=guess_fraction, beta=beta,
                    delta=bound_delta, scale=canary_scale, tracking_uri=tracking_uri,
                    experiment=experiment, refresh=refresh,
                    allow_non_private_release=allow_non_private_release)
        except DpgnnError as e:
            error(f"{e}" + (f" (details: {log})" if log.exists() else ""))
            raise typer.Exit(1) from e
    if as_json:
        print(json.dumps(summary, default=str, allow_nan=False))
        return
    _print(summary)


def _preflight(spec: Any, dataset: Path, manifest: dict[str, Any], *, canaries: int,
               runs: int | None, attack: str, guess_fraction: float, beta: float,
               bound_delta: float | None) -> None:
    """What the audit refuses before Prefect starts: the method's own preflight (on the
    manifest of the real dataset), a method without canaries, an attack that does not
    apply, and bad audit options, each naming the option and value."""
    from dpgnn_core.audit.canaries import guesses_per_side, plan_audit
    from dpgnn_core.errors import DpgnnError
    from dpgnn_core.methods import preflight

    preflight.check(spec, {**manifest, "path": str(dataset)})
    from flows.cli.execute import refuse_unbounded

    refuse_unbounded(spec, dataset, manifest)  # the audit is charged to this dataset
    try:
        plan = plan_audit(spec.method, spec, attack)
    except DpgnnError as e:
        raise DpgnnError(f"dpgnn audit {spec.method}: {e}") from None
    task = "graph" if plan.kind == "graph" else "node"
    if manifest.get("task") != task:
        raise DpgnnError(f"{dataset}: task = {manifest.get('task')!r}; {spec.method} is "
                         f"audited with canaries on {task} data")
    if runs is None:
        guesses_per_side(canaries, guess_fraction)
        _check_canary_memory(plan, canaries, manifest)
    if not 0.0 < beta < 1.0:
        raise DpgnnError(f"--beta {beta!r}: must lie in (0, 1)")
    if bound_delta is not None and not 0.0 <= bound_delta < 1.0:
        raise DpgnnError(f"--bound-delta {bound_delta!r}: must lie in [0, 1)")


def memory_bytes() -> int:
    """This machine's physical memory (8 GiB where the system does not say)."""
    import os

    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, OSError, ValueError):  # pragma: no cover - not POSIX
        return 8 << 30


def _check_canary_memory(plan: Any, canaries: int, manifest: dict[str, Any]) -> None:
    """Refuse ``--canaries`` whose feature matrices
    (:func:`~dpgnn_core.audit.canaries.canary_bytes`) would take more than half this
    machine's memory: found here in a second, not as a MemoryError inside the flow."""
    from dpgnn_core.audit.canaries import canary_bytes, max_canaries
    from dpgnn_core.errors import DpgnnError

    n, d = int(manifest.get("num_nodes", 0)), int(manifest.get("feature_dim", 0))
    need, limit = canary_bytes(plan.kind, canaries, n, d, plan.degree), memory_bytes() // 2
    if need > limit:
        most = max_canaries(plan.kind, limit, n, d, plan.degree)
        raise DpgnnError(
            f"--canaries {canaries}: the audited data with {canaries} {plan.kind} canaries "
            f"needs about {need / 2**30:,.1f} GiB of memory ({n} nodes, {d} features), more "
            f"than half of this machine's {memory_bytes() / 2**30:.0f} GiB; use at most "
            f"{most} canaries")


def _bound_note(summary: dict[str, Any]) -> str:
    """What the printed lower bound means against the largest this audit could show."""
    from dpgnn_core.audit.bounds import largest_lower_bound

    counts = summary.get("counts") or {"m": summary["m"], "r": summary["guesses"],
                                       "v": summary["correct"]}
    top = largest_lower_bound("multi-run" if "tp" in counts else "one-run", counts,
                              summary["delta"], 1.0 - summary["confidence"])
    guesses = f"{summary['guesses']} guesses"
    if summary["epsilon_lower"] <= 0.0:
        return (f"(0: the guesses did no better than chance can at this confidence, so "
                f"nothing is refuted; {guesses} can show at most ε ≥ {top:.4g})")
    if summary["epsilon_lower"] >= top * (1 - 1e-6):
        return (f"(every guess right: {top:.4g} is the largest bound {guesses} can show; "
                "more canaries (--canaries) can show more)")
    return f"(the largest bound {guesses} can show is {top:.4g})"


def _print(summary: dict[str, Any]) -> None:
    eps = summary["reported_epsilon"]
    reported = "∞ (not private)" if eps is None else f"{eps:.4g}"
    lines = [
        f"audit     {summary['method']} on {summary['dataset']} ({summary['audit']}, "
        f"{summary['m']} canar{'y' if summary['m'] == 1 else 'ies'} of kind "
        f"{summary['canaries']}, {summary['relation']})",
        f"reported  ε = {reported}, δ = {summary['delta']:.3g}",
        f"audited   ε ≥ {summary['epsilon_lower']:.4g} at {summary['confidence']:.0%} "
        f"confidence ({summary['correct']} of {summary['guesses']} guesses correct)",
        ("verdict   REFUTED: the lower bound exceeds the reported ε" if summary["refuted"]
         else "verdict   not refuted (a bound below the reported ε proves nothing more)"),
        f"threat    {summary['threat_model']}",
        f"histogram {summary['histogram']}",
        f"details   {summary['audit_json']}  ({summary['seconds']:.0f} s)",
    ]
    lines.insert(3, f"          {_bound_note(summary)}")
    for line in lines:
        typer.echo(line)
    if summary.get("mlflow_run_id"):
        typer.echo(f"MLflow    run {summary['mlflow_run_id']} "
                   f"({summary['mlflow_tracking_uri']})"
                   + (f": {summary['mlflow_url']}" if summary.get("mlflow_url") else ""))
    if summary.get("mlflow_error"):
        typer.secho(f"warning: {summary['mlflow_error']}", fg=typer.colors.YELLOW, err=True)
    if eps is not None and not math.isfinite(eps):
        typer.echo("note      the run reports no finite ε")


def auditable() -> dict[str, Any]:
    """The methods ``dpgnn audit`` has a command for (those whose catalogue entry names a
    canary), by spec type; light: the catalogue does not import torch."""
    from dpgnn_core.methods.catalog import CATALOG

    return {name: e.spec_type for name, e in CATALOG.items() if e.canary is not None}


def _register_commands() -> None:
    from flows.cli.run import MethodCommand

    for name, spec_type in auditable().items():
        audit_app.command(name=name, short_help=f"audit {name}", cls=MethodCommand)(
            _make_command(name, spec_type))


_register_commands()
