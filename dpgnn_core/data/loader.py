"""What a loader module declares (:class:`Loader`, its ``LOADERS`` at its bottom) and the
adapter of a one-source loading function (:func:`from_source`): below the loader catalogue
(:mod:`dpgnn_core.data.catalog`), which imports every loader module by name, so that no
loader module imports the catalogue (no import cycle)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

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


__all__ = ["LoadFn", "Loaded", "Loader", "from_source"]
