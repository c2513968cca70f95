"""The run summary ``dpgnn run`` prints: one line of accuracy and privacy, the defaults the
structure rule chose, the privacy report's lines, the MLflow run and the cache states; or,
with ``--json``, the pipeline's summary as one JSON object (±∞ as strings)."""

from __future__ import annotations

import json
import math
from typing import Any

import typer


def json_inf(obj: Any) -> Any:
    """``obj`` with every ±∞ float as the string "inf"/"-inf" (JSON has no ∞; a dataset's
    odometer reads ∞ after an insecure release or one that bounds nothing about a unit)."""
    if isinstance(obj, float) and math.isinf(obj):
        return "inf" if obj > 0 else "-inf"
    if isinstance(obj, dict):
        return {k: json_inf(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [json_inf(v) for v in obj]
    return obj


def structure_defaults_line(chosen: dict[str, Any]) -> str:
    """The values DP-GNN used for the fields its structure rule fills (K, batch, steps,
    lr), each marked ``(given)`` when the spec fixed it, and what the rule read; or, for a
    report that lists its ``fields`` (DPDGC), those options, each level default marked."""
    if chosen.get("fields"):  # a levelled recipe's options (DPDGC): level defaults marked
        chose = set(chosen.get("level_default") or ())
        vals = ", ".join(f"{k} {chosen.get(k)}" + (" (level default)" if k in chose else "")
                         for k in chosen["fields"])
        return f"{vals} [{chosen.get('rule')}]"
    given = set(chosen.get("given") or ())
    vals = ", ".join(f"{k} {chosen.get(k)}" + (" (given)" if k in given else "")
                     for k in ("max_degree", "batch_size", "steps", "lr"))
    stats = chosen.get("stats")
    read = (f"; median degree {stats['median_degree']:g}, mean degree "
            f"{stats['mean_degree']:.3g}, N_train {stats['num_train']}" if stats else "")
    return f"{vals} [{chosen.get('rule')}{read}]"


def auto_line(auto: dict[str, Any]) -> str:
    """What ``dpgnn run auto`` chose, by which rule, from which public inputs, and the ε
    the choice spent."""
    inputs = ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}"
                       for k, v in auto.get("inputs", {}).items())
    spent = float(auto.get("epsilon_choice", 0.0))
    cost = (f"ε spent on the choice {spent:.4g} (δ {float(auto.get('delta_choice', 0)):.3g}),"
            f" the method calibrated to ε {float(auto.get('method_epsilon', 0)):.4g}"
            if spent > 0 else "no ε spent on the choice; the method calibrated to ε "
            f"{float(auto.get('method_epsilon', 0)):.4g}")
    total = auto.get("epsilon_total")
    return (f"chose {auto.get('method')} by rule {auto.get('rule')} "
            f"({auto.get('rule_words')}) from {inputs}; {cost}"
            + (f"; total ε {float(total):.4g}" if total is not None else ""))


def epsilon_text(summary: dict[str, Any]) -> str:
    """ε spent, and of the target where the summary has it, read alike as the progress
    line reads them (:func:`tasks.progress.format_epsilon_pair`): ``0.00e+00 of
    1.00e-09``, ``0.998 of 1.00`` (a target of 1e-9 is met at ε = 0 on the accountant's
    grid; ``epsilon 0`` alone read as a run that spent nothing of nothing)."""
    from tasks.progress import format_epsilon, format_epsilon_pair

    spent, target = summary.get("epsilon"), summary.get("target_epsilon")
    if not isinstance(spent, int | float):
        return str(spent)
    if not isinstance(target, int | float):
        return format_epsilon(float(spent))
    return format_epsilon_pair(float(spent), float(target)).replace("/", " of ")


def print_summary(summary: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print(json.dumps(json_inf(summary), allow_nan=False, default=str))
        return
    def fmt(v: Any) -> str:
        return "n/a" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.4f}"
    privacy = (f"epsilon {epsilon_text(summary)}, delta {summary['delta']:.3g}"
               if summary.get("private") else "non-private")
    if summary.get("private") and str(summary.get("randomness", "")).startswith("NOT"):
        privacy = f"NOT PRIVATE: reproducible noise; nominal {privacy}"
    typer.echo(f"{summary['method']} on {summary['dataset']} (seed {summary['seed']}): "
               f"test accuracy {fmt(summary['test_accuracy'])}, "
               f"val accuracy {fmt(summary['val_accuracy'])}  [{privacy}]")
    if summary.get("auto"):
        typer.echo(f"  auto       {auto_line(summary['auto'])}")
    if summary.get("structure_defaults"):
        typer.echo(f"  defaults   {structure_defaults_line(summary['structure_defaults'])}")
    if summary.get("privacy_report"):
        typer.echo(f"  protects   {summary.get('protects')} [level {summary.get('level')}, "
                   f"relation {summary.get('relation')}]")
        typer.echo(f"  noise      {summary.get('randomness')}")
        typer.echo(f"  release    {summary.get('release')}")
        typer.echo(f"  ledger     {summary['privacy_report']}")
        for note in summary.get("unaccounted") or []:
            typer.echo(f"  NOT accounted: {note}")
    if summary.get("mlflow_run_id"):
        typer.echo(f"  MLflow run {summary['mlflow_run_id']} in "
                   f"{summary['mlflow_tracking_uri']}"
                   + (f": {summary['mlflow_url']}" if summary.get("mlflow_url") else ""))
    if summary.get("mlflow_error"):
        typer.secho(f"  warning: {summary['mlflow_error']}", fg=typer.colors.YELLOW,
                    err=True)
    typer.echo(f"  artifacts  {summary['artifacts_dir']}")
    typer.echo(f"  cache      {summary['cache']}")
