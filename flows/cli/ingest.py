"""``dpgnn ingest``: raw data into a dataset folder, its loader options generated from the
loaders' option models.

Each option of any loader's typed option model (:mod:`dpgnn_core.data.options`) is one
flag (``--min-class-size``), with the help of the model's docstring and the formats it
applies to; ``-o KEY=VALUE`` passes any of them too (a flag wins). A flag that the chosen
format's loader does not take is refused in one line naming it and the formats that take
it, before anything is read; values are checked against the loader's model.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import re
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from flows.cli.common import (
    console,
    error,
    field_help,
    parse_kv,
    stdout_to_stderr,
)

#: The command's own parameters (the rest are loader options).
_GENERAL = ("format", "out", "source", "name", "overwrite", "option", "as_json")


@dataclass(frozen=True)
class LoaderOption:
    """One ``dpgnn ingest`` flag: an option of one or more loaders' option models.

    Args:
        name (str): the option (``min_class_size``).
        flag (str): its flag (``--min-class-size``).
        kind (type): the command-line type: ``int``, ``float``, ``bool`` (a flag pair) or
            ``str`` (text; a list or tuple option is given comma-separated).
        help (str): what it does, and the formats it applies to.
        formats (tuple): the keys of :func:`~dpgnn_core.data.catalog.option_models` whose
            model has it (``tu``, ``synthetic kind=er_graphs``, ...).
    """

    name: str
    flag: str
    kind: type
    help: str
    formats: tuple[str, ...]


def _unwrap(annotation: Any) -> Any:
    """``annotation`` without ``Optional`` and ``Annotated`` layers."""
    while True:
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if typing.get_origin(annotation) is Annotated:
            annotation = args[0]
        elif typing.get_origin(annotation) in (typing.Union, type(int | None)) \
                and len(args) == 1:
            annotation = args[0]
        else:
            return annotation


def _kind(annotations: list[Any]) -> type:
    """The command-line type of an option declared with ``annotations`` (one per model)."""
    bases = {_unwrap(a) for a in annotations}
    for kind in (bool, int, float):
        if bases == {kind}:
            return kind
    return float if bases == {int, float} else str


def _help(uses: list[tuple[str, str]], everywhere: bool, listed: bool) -> str:
    """One help text from ``(format, text)`` pairs: the text (per format where they
    differ), how to give a list (``listed``) and the formats."""
    groups: dict[str, list[str]] = {}
    for fmt, text in uses:
        if text:
            groups.setdefault(text, []).append(fmt)
    if len(groups) == 1:
        body = next(iter(groups))
    else:
        body = "; ".join(f"{', '.join(fmts)}: {text}" for text, fmts in groups.items())
    if listed:
        body += " Give the items separated by commas."
    where = "every format" if everywhere else "formats: " + ", ".join(fmt for fmt, _ in uses)
    body = re.sub(r":obj:`([^`]*)`|``([^`]*)``", lambda m: m.group(1) or m.group(2), body)
    return f"{body} ({where})".strip()


def loader_options() -> dict[str, LoaderOption]:
    """Every option of every loader's option model, as its ``dpgnn ingest`` flag."""
    from dpgnn_core.data.catalog import option_models
    from dpgnn_core.data.options import flag_of

    models = option_models()
    found: dict[str, list[tuple[str, Any]]] = {}
    for fmt, model in models.items():
        for name in model.model_fields:
            found.setdefault(name, []).append((fmt, model))
    out: dict[str, LoaderOption] = {}
    for name, uses in found.items():
        flags = {flag_of(model, name) for _, model in uses}
        if len(flags) != 1:
            raise ValueError(f"loader option {name!r} has several flags: {sorted(flags)}")
        out[name] = LoaderOption(
            name=name, flag=flags.pop(),
            kind=_kind([model.model_fields[name].annotation for _, model in uses]),
            help=_help([(fmt, field_help(model).get(name, "")) for fmt, model in uses],
                       everywhere=len(uses) == len(models),
                       listed=any(typing.get_origin(_unwrap(model.model_fields[name].annotation))
                                  in (list, tuple) for _, model in uses)),
            formats=tuple(fmt for fmt, _ in uses))
    return out


def _value(model: Any, name: str, value: Any) -> Any:
    """A flag's value as ``model`` takes it: a list or tuple option's comma-separated text
    as a list (of numbers where the items are not text)."""
    annotation = _unwrap(model.model_fields[name].annotation)
    if not isinstance(value, str) or typing.get_origin(annotation) not in (list, tuple):
        return value
    items = [c.strip() for c in value.split(",") if c.strip()]
    if all(_unwrap(a) is str for a in typing.get_args(annotation) if a is not Ellipsis):
        return items
    out: list[Any] = []
    for item in items:
        try:
            out.append(json.loads(item))
        except json.JSONDecodeError:
            out.append(item)
    return out


def loader_kwargs(fmt: str, given: dict[str, Any], opts: dict[str, Any]) -> dict[str, Any]:
    """The loader options of an ingest: ``opts`` (from ``-o``) updated with the flags
    ``given`` (None: not given; a boolean flag at its default is left out unless ``-o``
    set it, as before the flags were generated).

    Raises:
        typer.Exit: (code 2) a flag that the format's loader does not take, after one
            ``error:`` line naming it and the formats that take it.
    """
    from dpgnn_core.data.catalog import loader_of, option_model

    options = loader_options()
    kind = given.get("kind") or opts.get("kind")
    model = option_model(fmt, kind if isinstance(kind, str) else None)
    where = f"--format {fmt}" + (f" kind={kind}" if loader_of(fmt).kinds and kind else "")
    out = dict(opts)
    for name, value in given.items():
        if value is None:
            continue
        if model is None:  # an unknown synthetic kind: the loader's check names it
            out[name] = value
            continue
        field = model.model_fields.get(name)
        if isinstance(value, bool) and field is not None and value == field.default \
                and name not in opts:
            continue  # e.g. --no-disjoint: what the loader does anyway, left unrecorded
        if field is None:
            if value is False:
                continue
            option = options[name]
            error(f"{option.flag} does not apply to {where} (it applies to "
                  f"{', '.join(option.formats)})")
            raise typer.Exit(2)
        out[name] = _value(model, name, value)
    return out


def _parameters() -> list[inspect.Parameter]:
    # The --format choices: the spec's literal of the loader catalogue's formats.
    from dpgnn_core.specs.ingest import IngestFormat

    kw = inspect.Parameter.KEYWORD_ONLY
    params = [
        inspect.Parameter("format", kw, annotation=Annotated[IngestFormat, typer.Option(
            "--format", "-f", help="Raw format.")]),
        inspect.Parameter("out", kw, annotation=Annotated[Path, typer.Option(
            help="Dataset folder to create (manifest and Parquet files directly inside).")]),
        inspect.Parameter("source", kw, default=None, annotation=Annotated[
            Path | None, typer.Option(
                help="Raw data: Planetoid folder with ind.<name>.*; Facebook100 .mat file; "
                "TU folder with NAME_A.txt; OGB dataset folder; dgl: a file written by "
                "dgl.save_graphs (needs the dgl extra); csv/parquet edge file (or a folder "
                "with edges.* and nodes.*). Not used by synthetic.")]),
        inspect.Parameter("name", kw, default=None, annotation=Annotated[
            str | None, typer.Option(help="Dataset name (default: for csv/parquet the "
                                     "--out folder's name, else the source's).")]),
        inspect.Parameter("overwrite", kw, default=False, annotation=Annotated[
            bool, typer.Option(help="Replace an existing --out dataset folder (one written "
                               "by dpgnn ingest); a file or any other folder is refused "
                               "and left as it is.")]),
    ]
    for option in loader_options().values():
        kind: Any = option.kind
        if kind is bool:
            decl = f"{option.flag}/--no-{option.flag.removeprefix('--')}"
            annotation: Any = Annotated[bool | None, typer.Option(
                decl, help=option.help, show_default=False)]
        else:
            annotation = Annotated[kind | None, typer.Option(
                option.flag, help=option.help, show_default=False)]
        params.append(inspect.Parameter(option.name, kw, default=None, annotation=annotation))
    params += [
        inspect.Parameter("option", kw, default=None, annotation=Annotated[
            list[str] | None, typer.Option(
                "--option", "-o", help="Any loader option as KEY=VALUE (JSON value), e.g. "
                "-o num_nodes=10000 -o homophily=0.7 for synthetic; a flag wins over it.")]),
        inspect.Parameter("as_json", kw, default=False, annotation=Annotated[
            bool, typer.Option("--json", help="Print the manifest as JSON.")]),
    ]
    return params


def ingest(**kwargs: Any) -> None:
    """Ingest raw data into a dataset folder (Parquet + manifest), atomically."""
    from dpgnn_core.data.catalog import loader_of

    general = {k: kwargs.pop(k) for k in _GENERAL}
    fmt: str = general["format"]
    loader = loader_of(fmt)
    out: Path = general["out"]
    source: Path | None = general["source"]
    opts = loader_kwargs(fmt, kwargs, parse_kv(general["option"] or []))
    if loader.needs_source and source is None:
        error(f"--source is required for --format {fmt}")
        raise typer.Exit(2)
    # Without --name, a table's dataset is named after its folder, --out (core ingest).
    write(fmt, source, general["name"], opts, out, overwrite=general["overwrite"],
          as_json=general["as_json"])


def write(fmt: str, source: Path | None, name: str | None, opts: dict[str, Any], out: Path,
          *, overwrite: bool, as_json: bool) -> None:
    """Load ``source`` with the loader options ``opts`` and write the dataset folder
    ``out``; one ``error:`` line (exit 1) for bad data or another ingest writing ``out``,
    2 for an existing folder or, with ``--overwrite``, one that is not a dataset's (left
    as it is: core ``check_replaceable``)."""
    from dpgnn_core.data.ingest import ingest as ingest_dataset
    from dpgnn_core.data.target import NotADatasetError
    from dpgnn_core.errors import DpgnnError
    from dpgnn_core.io import TargetExistsError
    from dpgnn_core.specs import IngestSpec

    if (out.exists() or out.is_symlink()) and not overwrite:
        error(f"{out} already exists; pass --overwrite to replace it (the old folder stays "
              "until the new one is complete)")
        raise typer.Exit(2)
    stage = "write"  # before loading: the target's lock and parent folders

    def mark(step: str, _text: str) -> contextlib.nullcontext[None]:
        nonlocal stage
        stage = "read" if step == "load" else "write"  # what an OSError is said to fail
        return contextlib.nullcontext()

    try:
        spec = IngestSpec(format=fmt, source=str(source) if source else None, name=name,
                          options=opts)
        with console().status(f"ingesting {fmt} data…"), stdout_to_stderr():
            manifest = ingest_dataset(spec, out, overwrite=overwrite, span=mark)
    except NotADatasetError as e:
        error(str(e))
        raise typer.Exit(2) from e
    except (DpgnnError, TargetExistsError, ValueError) as e:
        error(e)  # a spec's ValidationError (--name): its message, naming the option
        raise typer.Exit(1) from e
    except OSError as e:  # permissions, read-only or full disk, a file where a folder goes
        target = out if stage == "write" else (source or out)
        reason = e.strerror or str(e) or type(e).__name__
        hidden = f".{out.name}."  # our temp siblings: an internal name, not worth showing
        if e.filename is not None and Path(str(e.filename)) != target \
                and not Path(str(e.filename)).name.startswith(hidden):
            reason += f" ({e.filename})"
        error(f"cannot {stage} {target}: {reason}")
        raise typer.Exit(1) from e
    for warning in manifest.get("cleaning", {}).get("warnings", []):
        typer.secho(f"warning: {warning}", fg=typer.colors.YELLOW, err=True)
    if as_json:
        print(json.dumps(manifest))
    else:
        typer.echo(f"wrote {out}: {manifest['name']} ({manifest['task']}), "
                   f"{manifest['num_nodes']} nodes, {manifest['num_edges']} edges, "
                   f"{manifest['num_graphs']} graphs, {manifest['feature_dim']} features, "
                   f"{manifest['num_classes']} classes, splits {manifest['split_counts']}"
                   + "".join(f"; {n}" for n in manifest.get("cleaning", {}).get("notes", [])))


def ingest_command() -> Any:
    """:func:`ingest` with its generated signature, for ``app.command("ingest")``."""
    sig = inspect.Signature(_parameters())

    def command(**kwargs: Any) -> None:
        ingest(**kwargs)

    command.__signature__ = sig  # type: ignore[attr-defined]
    command.__annotations__ = {p.name: p.annotation for p in sig.parameters.values()}
    command.__name__ = "ingest"
    command.__doc__ = ingest.__doc__
    return command
