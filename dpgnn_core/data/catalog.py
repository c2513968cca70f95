"""The loader catalogue: every ingest format, its typed options and its loader, in one place.

Each loader module declares what it reads at its bottom, as a tuple ``LOADERS`` of
:class:`Loader` (``Loader(name, options, load)``); this module collects them, in the order
of :data:`MODULES`. The format names of :class:`~dpgnn_core.specs.IngestSpec` (its
``format`` literal) and of ``dpgnn ingest --format`` are generated from it, and so are the
command's option flags (:func:`option_models`). Reading the catalogue imports no pyarrow
and no torch: a loader module keeps such imports inside its loading functions.

Adding a format is one loader module with its ``LOADERS`` (and its option model in
:mod:`dpgnn_core.data.options`), plus its name in :data:`MODULES`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ValidationError

from dpgnn_core.errors import DataError

if TYPE_CHECKING:
    from dpgnn_core.data.graph import GraphData

#: What a loader returns: the graph, and the file its edges were read from (named by the
#: error about a graph without edges; None for a generator).
Loaded = tuple["GraphData", Path | None]
#: A loader: ``load(source, name, options)`` (``source`` None only where the loader needs
#: none; ``options`` checked against its option model, ``disjoint`` and ``allow_no_edges``
#: taken out).
LoadFn = Callable[[Path | None, str | None, dict[str, Any]], Loaded]

#: The modules whose ``LOADERS`` make the catalogue, in the order the formats are listed.
MODULES = ("dpgnn_core.data.loaders.planetoid", "dpgnn_core.data.loaders.facebook100",
           "dpgnn_core.data.loaders.tu", "dpgnn_core.data.loaders.ogb",
           "dpgnn_core.data.loaders.dgl_bin", "dpgnn_core.data.loaders.tabular",
           "dpgnn_core.data.synthetic")


@dataclass(frozen=True)
class Loader:
    """One ingest format.

    Args:
        name (str): the format, e.g. ``planetoid`` (``IngestSpec.format``,
            ``dpgnn ingest --format``).
        options (type): the typed option model (:mod:`dpgnn_core.data.options`); of the
            default generator where ``kinds`` has several.
        load (callable): ``load(source, name, options) -> (GraphData, edge file)``.
        kinds (Mapping, optional): generators chosen by the option ``kind``, by name, with
            their option models; the first is the default (its model is ``options``).
            (default: ``{}``)
        needs_source (bool, optional): the format reads raw files (a spec without
            ``source`` is refused). (default: :obj:`True`)
        edge_table (bool, optional): the source is an edge table (csv, parquet): the
            dataset is named after its folder, not the table, and an empty one is "the edge
            list". (default: :obj:`False`)
    """

    name: str
    options: type[BaseModel]
    load: LoadFn
    kinds: Mapping[str, type[BaseModel]] = field(default_factory=dict)
    needs_source: bool = True
    edge_table: bool = False


def from_source(fn: Callable[..., GraphData]) -> LoadFn:
    """The :class:`Loader` ``load`` of a function ``fn(source, name, **options)`` reading
    one source (its edge file: the source)."""

    def load(source: Path | None, name: str | None, options: dict[str, Any]) -> Loaded:
        if source is None:  # refused before (Loader.needs_source); kept for the type
            raise DataError("this format needs a source", field="source")
        return fn(source, name, **options), source

    load.__doc__ = fn.__doc__
    return load


@cache
def loaders() -> Mapping[str, Loader]:
    """Every :class:`Loader` by format name, in the order of :data:`MODULES`."""
    out: dict[str, Loader] = {}
    for module in MODULES:
        for loader in importlib.import_module(module).LOADERS:
            if loader.name in out:
                raise ValueError(f"ingest format {loader.name!r} registered twice")
            out[loader.name] = loader
    return MappingProxyType(out)


def format_names() -> tuple[str, ...]:
    """The ingest formats, in catalogue order."""
    return tuple(loaders())


def loader_of(fmt: str) -> Loader:
    """The :class:`Loader` of format ``fmt``.

    Raises:
        DataError: an unknown format.
    """
    found = loaders().get(fmt)
    if found is None:
        raise _option_error(f"unknown format {fmt!r}", field="format", value=fmt)
    return found


def _selector(loader: Loader, kind: str) -> str:
    """How a generator is selected, in words: ``synthetic``, ``synthetic kind=er_graphs``."""
    return loader.name if kind == next(iter(loader.kinds)) else f"{loader.name} kind={kind}"


def option_models() -> dict[str, type[BaseModel]]:
    """Every loader's option model by what selects it: the format (``tu``, ``csv``, ...),
    or for a format with several generators the format for the default one and
    ``FORMAT kind=KIND`` for the others (``synthetic kind=er_graphs``)."""
    out: dict[str, type[BaseModel]] = {}
    for loader in loaders().values():
        if not loader.kinds:
            out[loader.name] = loader.options
        for kind, model in loader.kinds.items():
            out[_selector(loader, kind)] = model
    return out


def option_model(fmt: str, kind: str | None = None) -> type[BaseModel] | None:
    """The option model of format ``fmt`` (and generator ``kind``, the default when None);
    None for an unknown format or kind."""
    loader = loaders().get(fmt)
    if loader is None or not loader.kinds:
        return None if loader is None else loader.options
    return loader.kinds.get(kind or next(iter(loader.kinds)))


def _option_error(text: str, *, field: str, value: Any) -> DataError:
    err = DataError(text)  # the text already names the option and its value
    err.field, err.value = field, value
    return err


def _model_of(fmt: str, options: dict[str, Any]) -> tuple[type[BaseModel], str]:
    """The option model that ``options`` of format ``fmt`` are checked against, and the
    loader's name in messages (``synthetic``, ``synthetic er_graphs``)."""
    loader = loader_of(fmt)
    if not loader.kinds:
        return loader.options, fmt
    default = next(iter(loader.kinds))
    kind = options.get("kind", default)
    if kind not in loader.kinds:
        raise _option_error(
            f"--option kind={kind!r}: must be one of {sorted(loader.kinds)} "
            f"({fmt} loader)", field="kind", value=kind)
    return loader.kinds[kind], (fmt if kind == default else f"{fmt} {kind}")


def validate_options(fmt: str, options: dict[str, Any]) -> dict[str, Any]:
    """Check ``options`` against the typed spec of ``fmt``'s loader.

    Returns:
        dict: the options given (only those), with values in their declared types (a JSON
        list for a tuple option becomes a tuple, an integer for a float option a float).

    Raises:
        DataError: one line naming the option, its value, what is wrong and the loader.
    """
    model, loader = _model_of(fmt, options)
    valid = sorted(model.model_fields)
    for key in options:
        if key not in model.model_fields:
            raise _option_error(
                f"unknown option {key!r} ({loader} loader); valid options: {', '.join(valid)}",
                field=key, value=options[key])
    try:
        checked = model.model_validate(options)
    except ValidationError as e:
        first = e.errors()[0]
        loc = first.get("loc") or ()
        key = str(loc[0]) if loc else ""
        msg = str(first.get("msg", e)).removeprefix("Value error, ")
        if key in options:
            raise _option_error(f"--option {key}={options[key]!r}: {msg} ({loader} loader)",
                                field=key, value=options[key]) from None
        raise _option_error(f"{msg} ({loader} loader)", field="options",
                            value=options) from None
    out: dict[str, Any] = {k: getattr(checked, k) for k in options}
    return out
