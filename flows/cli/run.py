"""``dpgnn run METHOD``: one command per registered method, built from its spec.

Each method's options are its spec's fields (:mod:`dpgnn_core.specs`), with the defaults
and the help text of the spec's docstring, so ``dpgnn run dp-gcn --help`` lists DP-GNN's
options only, and an option that does not apply to a method does not exist for it. A spec
can also come from a file (``--config run.toml``, YAML or JSON) and ``--set key=value``;
options given on the command line win over ``--set``, which wins over the file.
"""

from __future__ import annotations

import inspect
import re
import typing
from pathlib import Path
from typing import Annotated, Any

import typer
from typer.core import TyperCommand

run_app = typer.Typer(
    help="Run a method on an ingested dataset through the cached pipeline flow (Prefect), "
    "logged to MLflow. `dpgnn run METHOD --help` lists that method's options.",
    no_args_is_help=True,
    rich_markup_mode=None,
)

#: Options of the run itself, not of the method.
_RUN_OPTIONS = ("dataset", "config", "set_", "as_json", "tracking_uri", "experiment",
                "refresh", "non_private", "explain_graphs", "allow_non_private_release",
                "workers", "worker_memory", "dask_address")
#: Spec fields that only a private method uses (a non-private name, graph-gcn say, trains
#: the same path without clipping or noise).
_PRIVACY_FIELDS = ("epsilon", "delta", "accountant", "noise_multiplier", "clip",
                   "insecure_reproducible_noise", "log_raw_loss", "allow_large_delta")


def _option_type(annotation: Any) -> Any:
    """The command-line type of a spec field: numbers and flags as themselves, everything
    else (choices, tuples) as text that the spec validates."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    base = args[0] if typing.get_origin(annotation) in (typing.Union, type(int | None)) \
        and len(args) == 1 else annotation
    if base in (int, float, bool):
        return base
    return str


def _tuple_field(annotation: Any) -> bool:
    return "tuple" in str(annotation)


def _applies(spec_type: Any, field: str, implied: Any) -> bool:
    """Whether spec field ``field`` is used by the name whose implied fields are ``implied``
    (the catalogue entry's ``fixed``): every condition of the spec's ``applies_when``
    holds (GAP's ``max_degree`` only at level ``node``)."""
    return all(implied.get(key) in values
               for key, values in spec_type.applies_when.get(field, {}).items())


def _options(name: str, spec_type: Any) -> list[str]:
    """The spec fields that are options of method ``name``: not implied by the name, not a
    privacy field of a non-private name, and used by the name (:func:`_applies`)."""
    from dpgnn_core.methods.catalog import entry

    method = entry(name)
    skip = {"method", *spec_type.implied}
    if not method.private:
        skip |= set(_PRIVACY_FIELDS)
    return [f for f in spec_type.model_fields
            if f not in skip and _applies(spec_type, f, method.fixed)]


class MethodCommand(TyperCommand):
    """A method's command: an option that is a field of the method's spec but not one of
    its options (``--max-degree`` of ``gap-inf``) is refused naming the method and the
    names that take it, instead of a bare "No such option"."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        from flows.cli.common import USAGE_ERROR

        try:
            return super().parse_args(ctx, args)
        except USAGE_ERROR as e:
            option = str(getattr(e, "option_name", "") or "")
            others = _names_taking(ctx.info_name, option.removeprefix("--").replace("-", "_"))
            if not option.startswith("--") or not others:
                raise
            raise USAGE_ERROR(f"{option} does not apply to {ctx.info_name} (an option of "
                              f"{', '.join(others)})", ctx=ctx) from None


def _names_taking(name: str | None, field: str) -> list[str]:
    """The other names of ``name``'s spec class that have ``field`` as an option."""
    from dpgnn_core.methods.catalog import spec_types

    types = spec_types()
    if name not in types:
        return []
    return [n for n, t in types.items()
            if n != name and t is types[name] and field in _options(n, t)]


def _without_default(text: str) -> str:
    """``text`` without its last ``(default: ...)`` clause (nested parentheses kept
    together), for a default stated from the spec's own defaults instead."""
    start = text.rfind("(default:")
    if start < 0:
        return text
    depth = 0
    for i in range(start, len(text)):
        depth += {"(": 1, ")": -1}.get(text[i], 0)
        if depth == 0:
            return (text[:start].rstrip() + " " + text[i + 1:].lstrip()).strip()
    return text[:start].rstrip()


def _signature(name: str, spec_type: Any) -> inspect.Signature:
    from dpgnn_core.methods.catalog import is_private
    from flows.cli.common import field_help

    helps = field_help(spec_type)
    params = [
        inspect.Parameter("dataset", inspect.Parameter.KEYWORD_ONLY, annotation=Annotated[
            Path, typer.Option(help="An ingested dataset folder (dpgnn ingest).")]),
    ]
    for field in _options(name, spec_type):
        info = spec_type.model_fields[field]
        default = info.get_default(call_default_factory=True)
        text = helps.get(field, "")
        note = spec_type.default_note(name, field)  # a default the name's level decides
        if note is not None:
            text = f"{_without_default(text)} (default: {note})".strip()
        elif "(default:" not in text:
            text = f"{text} (default: {default})".strip()
        if _tuple_field(info.annotation):
            text += " Give the numbers separated by commas."
        text = re.sub(r":obj:`([^`]*)`|``([^`]*)``", lambda m: m.group(1) or m.group(2), text)
        kind = _option_type(info.annotation)
        if kind is bool:  # a flag; absent means the spec's default (False for every flag)
            params.append(inspect.Parameter(
                field, inspect.Parameter.KEYWORD_ONLY, default=False,
                annotation=Annotated[bool, typer.Option(f"--{field.replace('_', '-')}",
                                                        help=text, show_default=False)]))
            continue
        params.append(inspect.Parameter(
            field, inspect.Parameter.KEYWORD_ONLY, default=None,
            annotation=Annotated[kind | None, typer.Option(help=text, show_default=False)]))
    private = is_private(name)
    run_params: list[tuple[str, Any, Any]] = [
        ("config", None, Annotated[Path | None, typer.Option(
            help="A spec file (TOML, YAML or JSON) with this method's options.")]),
        ("set_", None, Annotated[list[str] | None, typer.Option(
            "--set", help="KEY=VALUE, repeatable: one option (JSON values parsed).")]),
        ("tracking_uri", None, Annotated[str | None, typer.Option(
            help="MLflow tracking URI (default: SQLite under the project).")]),
        ("experiment", "dpgnn", Annotated[str, typer.Option(help="MLflow experiment.")]),
        ("refresh", False, Annotated[bool, typer.Option(
            "--refresh", help="Recompute cached steps (a private step is then a new release).")]),
        ("as_json", False, Annotated[bool, typer.Option(
            "--json", help="Print one JSON object on stdout.")]),
    ]
    if private and spec_type.has_non_private_mode:
        run_params.append(("non_private", False, Annotated[bool, typer.Option(
            "--non-private",
            help="The same training path without noise or clipping (NOT private).")]))
    if spec_type.explains:
        run_params.append(("explain_graphs", 20, Annotated[int, typer.Option(
            min=0, help="Private runs: explain this many test graphs with GNNExplainer "
            "against a non-private twin (its own MLflow run; 0 skips).")]))
    if not private or spec_type.has_non_private_mode or spec_type.explains:
        run_params.append(("allow_non_private_release", False, Annotated[bool, typer.Option(
            "--allow-non-private-release",
            help="Release without privacy (this run, or a graph classifier's non-private "
            "twin) on a dataset with a privacy budget, which refuses it otherwise; recorded "
            "in the odometer and on the MLflow run.")]))
    run_params += _cluster_params(name)
    params += [inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY, default=d, annotation=a)
               for n, d, a in run_params]
    return inspect.Signature(params)


def _cluster_params(name: str) -> list[tuple[str, Any, Any]]:
    """The cluster options of a method that trains from partitioned datasets (issue 51),
    as ``dpgnn sweep`` has them (:mod:`flows.partitioned`)."""
    from dpgnn_core.distributed import PARTITIONED_FAMILIES
    from dpgnn_core.methods.catalog import entry

    if entry(name).family not in PARTITIONED_FAMILIES:
        return []
    return [
        ("workers", None, Annotated[int | None, typer.Option(
            min=1, help="A partitioned dataset: train on a local Dask cluster of this many "
            "single-threaded worker processes, started for the run.")]),
        ("worker_memory", None, Annotated[str | None, typer.Option(
            help="With --workers: each worker's memory limit (e.g. 1GiB; default: the "
            "machine's memory shared among them).")]),
        ("dask_address", None, Annotated[str | None, typer.Option(
            help="A partitioned dataset: train on this running Dask cluster "
            "(tcp://host:8786); its workers must see the dataset and the project home at "
            "the same paths.")]),
    ]


def _load_config(path: Path) -> dict[str, Any]:
    """A spec file's mapping (TOML, YAML or JSON by suffix).

    Raises:
        DataError: the file cannot be read or parsed, or holds no mapping: one line naming
            the file and the parser's line and column.
    """
    from dpgnn_core.errors import DataError
    from dpgnn_core.io import parse_mapping

    try:
        text = path.read_text()
    except OSError as e:
        raise DataError(f"--config: cannot read the spec file: {e.strerror or e}",
                        path=path) from e
    try:
        data = parse_mapping(text, path.suffix)
    except Exception as e:  # the parsers' own errors name line and column
        reason = " ".join(str(e).split())  # PyYAML's message spans lines (a caret)
        raise DataError(f"--config: cannot parse the spec file: {reason}", path=path) from e
    if not isinstance(data, dict):
        raise DataError("--config: a spec file holds a mapping of options", path=path)
    return data


def build_spec(name: str, options: dict[str, Any], config: Path | None = None,
               sets: list[str] | None = None, non_private: bool = False) -> Any:
    """The validated spec of method ``name`` from a file, ``--set`` pairs and options."""
    from dpgnn_core.methods.catalog import is_private, spec_types
    from dpgnn_core.specs import parse_spec
    from flows.cli.common import parse_kv

    spec_type = spec_types()[name]
    merged: dict[str, Any] = {}
    if config is not None:
        merged.update(_load_config(config))
        if merged.get("method", name) != name:
            raise ValueError(f"{config}: method = {merged['method']!r}, but the command "
                             f"runs {name}")
    merged.update(parse_kv(sets or []))
    merged.update({k: v for k, v in options.items() if v is not None and v is not False})
    for field, value in list(merged.items()):
        if isinstance(value, str) and field in spec_type.model_fields and _tuple_field(
                spec_type.model_fields[field].annotation):
            try:
                merged[field] = tuple(float(v) for v in value.split(","))
            except ValueError:
                raise ValueError(f"--{field.replace('_', '-')} {value!r}: give numbers "
                                 "separated by commas") from None
    allowed = set(_options(name, spec_type)) | {"method", *spec_type.implied}
    wrong = sorted(set(merged) - allowed)
    if wrong:
        raise ValueError(f"{name} does not take {', '.join(wrong)}; see "
                         f"`dpgnn run {name} --help`")
    private = is_private(name)
    if private and merged.get("epsilon") is None and not non_private:
        raise ValueError(f"{name} needs --epsilon (or --non-private for the same path "
                         "without privacy)" if spec_type.has_non_private_mode
                         else f"{name} needs --epsilon")
    if non_private:
        merged["epsilon"] = None
    return parse_spec({**merged, "method": name})


def spec_from_options(name: str, kwargs: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """A command's keyword arguments split into the run's own options (returned) and the
    method's, built into its validated spec; a bad spec is one ``error:`` line, exit 2."""
    from flows.cli.common import error

    run_kwargs = {k: kwargs.pop(k) for k in _RUN_OPTIONS if k in kwargs}
    try:
        spec = build_spec(name, kwargs, run_kwargs.get("config"), run_kwargs.get("set_"),
                          bool(run_kwargs.get("non_private")))
    except (ValueError, OSError) as e:
        error(e)
        raise typer.Exit(2) from e
    return spec, run_kwargs


def _make_command(name: str, spec_type: Any) -> Any:
    def command(**kwargs: Any) -> None:
        from flows.cli.execute import execute

        spec, run_kwargs = spec_from_options(name, kwargs)
        dataset: Path = run_kwargs["dataset"]
        execute(name, spec, dataset, tracking_uri=run_kwargs.get("tracking_uri"),
                 experiment=run_kwargs.get("experiment", "dpgnn"),
                 refresh=bool(run_kwargs.get("refresh")),
                 as_json=bool(run_kwargs.get("as_json")),
                 explain_graphs=run_kwargs.get("explain_graphs", 20),
                 allow_non_private_release=bool(run_kwargs.get("allow_non_private_release")),
                 cluster={k: run_kwargs.get(k) for k in ("workers", "worker_memory",
                                                         "dask_address")})

    sig = _signature(name, spec_type)
    command.__signature__ = sig  # type: ignore[attr-defined]
    command.__annotations__ = {p.name: p.annotation for p in sig.parameters.values()}
    command.__name__ = name.replace("-", "_")
    doc = (inspect.getdoc(spec_type) or "").split("\n\n")[0]
    command.__doc__ = f"{name}: {' '.join(doc.split())}"
    return command


def _register_commands() -> None:
    from dpgnn_core.methods.catalog import spec_types

    for name, spec_type in spec_types().items():
        first = " ".join((inspect.getdoc(spec_type) or "").split("\n\n")[0].split())
        short = re.split(r"(?<=[a-z)]):|\.\s", first)[0].rstrip(".")
        run_app.command(name=name, short_help=short, cls=MethodCommand)(
            _make_command(name, spec_type))


@run_app.command(name="auto", short_help="choose the method and recipe for a protection "
                 "level from what the level makes public, and train it")
def auto(
    dataset: Annotated[Path, typer.Option(help="An ingested dataset folder (dpgnn ingest).")],
    level: Annotated[str, typer.Option(
        help="What one neighbouring change may alter: node (a node with its features, label "
        "and edges; needs --max-degree), k_neighbor (a node's features and label and up to "
        "--k of its edges), node_feature (a node's features and label, structure public) or "
        "edge (one edge).")],
    epsilon: Annotated[float, typer.Option(
        help="Target ε of the whole run: the choice and the chosen method together (a "
        "noisy mean degree bought at node or k_neighbor level is taken from it).")],
    delta: Annotated[float | None, typer.Option(
        help="δ of the whole run (default: 1/(10 N_train), as every method's).",
        show_default=False)] = None,
    max_degree: Annotated[int | None, typer.Option(
        help="Degree bound D, required at --level node (every degree must be <= D).",
        show_default=False)] = None,
    k: Annotated[int | None, typer.Option(
        help="Edges protected with a node at --level k_neighbor (default: 1).",
        show_default=False)] = None,
    seed: Annotated[int, typer.Option(
        help="Seeds initialisation only (noise and sampling are secret).")] = 0,
    device: Annotated[str, typer.Option(help="auto, cpu or cuda.")] = "auto",
    tracking_uri: Annotated[str | None, typer.Option(
        help="MLflow tracking URI (default: SQLite under the project).")] = None,
    experiment: Annotated[str, typer.Option(help="MLflow experiment.")] = "dpgnn",
    refresh: Annotated[bool, typer.Option(
        "--refresh", help="Recompute cached steps (a private step is then a new release).")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json",
                                          help="Print one JSON object on stdout.")] = False,
) -> None:
    """auto: choose the method and recipe for a protection level from what that level makes
    public about the dataset, or, at node and k_neighbor level, from a noisy mean degree
    bought with accounted ε (the rule table and its evidence: dpgnn_core/methods/auto.py,
    docs/user-guide.md), then run it as `dpgnn run METHOD` would: cached, charged to the
    budget, logged to MLflow, the choice and every ε it spent in the summary."""
    from flows.cli.common import error
    from flows.cli.execute import execute

    try:
        from dpgnn_core.errors import DpgnnError
        from dpgnn_core.methods.auto import AutoRequest

        request = AutoRequest(level=level, epsilon=epsilon, delta=delta,
                              max_degree=max_degree, k=k, seed=seed, device=device)
        if not (dataset / "manifest.json").is_file():
            raise ValueError(f"{dataset} is not a dataset folder (no manifest.json); create "
                             "one with `dpgnn ingest`")
        from tasks.auto_choice import decide  # the noisy statistic charged, cached

        spec, choice = decide(request, dataset)
    except (DpgnnError, OSError, ValueError) as e:
        error(" ".join(str(e).split()))
        raise typer.Exit(2) from e
    if not as_json:
        from flows.cli.summary import auto_line

        typer.echo(f"auto: {auto_line(choice.as_dict())}", err=True)
    execute(choice.method, spec, dataset, tracking_uri=tracking_uri, experiment=experiment,
            refresh=refresh, as_json=as_json, auto=choice.as_dict())


_register_commands()
