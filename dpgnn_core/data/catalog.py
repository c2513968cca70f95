"""The loader catalogue: every ingest format, its typed options and its loader, in one place.

Each loader module declares what it reads at its bottom, as a tuple ``LOADERS`` of
:class:`~dpgnn_core.data.loader.Loader` (``Loader(name, options, load)``, from
:mod:`dpgnn_core.data.loader`, so that no loader module imports this one); this module
imports them by name and collects them, in the order
of :data:`MODULES`. The format names of :class:`~dpgnn_core.specs.IngestSpec` (its
``format`` literal) and of ``dpgnn ingest --format`` are generated from it, and so are the
command's option flags (:func:`option_models`). Reading the catalogue imports no pyarrow
and no torch: a loader module keeps such imports inside its loading functions.

Adding a format is one loader module with its ``LOADERS`` (and its option model in
:mod:`dpgnn_core.data.options`), plus its name in :data:`MODULES`.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from functools import cache
from types import MappingProxyType
from typing import Any

from pydantic import BaseModel, ValidationError

from dpgnn_core.data.loader import Loaded, Loader, LoadFn, from_source
from dpgnn_core.errors import DataError

#: The modules whose ``LOADERS`` make the catalogue, in the order the formats are listed.
MODULES = ("dpgnn_core.data.loaders.planetoid", "dpgnn_core.data.loaders.facebook100",
           "dpgnn_core.data.loaders.tu", "dpgnn_core.data.loaders.ogb",
           "dpgnn_core.data.loaders.dgl_bin", "dpgnn_core.data.loaders.tabular",
           "dpgnn_core.data.synthetic")


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


__all__ = ["MODULES", "LoadFn", "Loaded", "Loader", "format_names", "from_source", "loader_of",
           "loaders", "option_model", "option_models", "validate_options"]
