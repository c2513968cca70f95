"""One entry point from an :class:`~dpgnn_core.specs.IngestSpec` to :class:`GraphData`."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from dpgnn_core.data.graph import GraphData
from dpgnn_core.data.loaders import (
    load_facebook100,
    load_ogbg,
    load_planetoid,
    load_tabular,
    load_tu,
)
from dpgnn_core.data.splits import make_disjoint
from dpgnn_core.data.synthetic import csbm, er_graphs
from dpgnn_core.errors import DataError
from dpgnn_core.io import sha256_file
from dpgnn_core.specs import IngestSpec


def _tabular_paths(source: Path, options: dict[str, Any]) -> tuple[Path, Path]:
    """``source`` is the edge file (``nodes`` option: the node table) or a folder holding
    ``edges.*`` and ``nodes.*``."""
    if source.is_dir():
        found = {}
        for stem in ("edges", "nodes"):
            hits = [p for p in sorted(source.iterdir()) if p.name.split(".")[0] == stem]
            if not hits:
                raise DataError(f"folder has no {stem}.csv / {stem}.parquet", path=source)
            found[stem] = hits[0]
        return found["edges"], found["nodes"]
    nodes = options.pop("nodes", None)
    if not nodes:
        raise DataError("csv/parquet ingest needs the node table: pass --nodes FILE (or give "
                        "a folder holding edges.* and nodes.*)", path=source, field="nodes")
    return source, Path(nodes)


# Loaders taking (source, name, **options); csv/parquet and synthetic are handled apart.
_LOADERS: dict[str, Callable[..., GraphData]] = {
    "planetoid": load_planetoid, "facebook100": load_facebook100, "tu": load_tu,
    "ogb": load_ogbg,
}


def load_from_spec(spec: IngestSpec) -> GraphData:
    """Run the loader that ``spec.format`` names with ``spec.options``.

    The option ``disjoint=True`` (node classification) additionally removes every
    inter-split edge (the inductive ``-disjoint`` variant).
    """
    opts = dict(spec.options)
    disjoint = bool(opts.pop("disjoint", False))
    src = Path(spec.source) if spec.source else None
    if src is not None and not src.exists():
        raise DataError("source not found", path=src, field="source")
    try:
        if spec.format == "synthetic":
            kind = opts.pop("kind", "csbm")
            if kind not in ("csbm", "er_graphs"):
                raise DataError("synthetic kind must be csbm or er_graphs", field="kind",
                                value=kind)
            data = (csbm if kind == "csbm" else er_graphs)(name=spec.name, **opts)
        elif src is None:
            raise DataError(f"format {spec.format!r} needs a source", field="source")
        elif spec.format in _LOADERS:
            data = _LOADERS[spec.format](src, spec.name, **opts)
        else:
            edges, nodes = _tabular_paths(src, opts)
            data = load_tabular(edges, nodes, name=spec.name, **opts)
    except TypeError as e:
        raise DataError(f"bad option for format {spec.format!r}: {e}", field="options",
                        value=spec.options) from e
    if disjoint:
        data, _ = make_disjoint(data)
    return data


def source_fingerprint(spec: IngestSpec) -> dict[str, str]:
    """sha256 of every raw file the spec reads (for cache keys): a changed file re-ingests."""
    if spec.source is None:
        return {}
    paths = [Path(spec.source)]
    if "nodes" in spec.options:
        paths.append(Path(spec.options["nodes"]))
    out = {}
    for p in paths:
        files = sorted(q for q in p.rglob("*") if q.is_file()) if p.is_dir() else [p]
        for f in files:
            if f.exists():
                out[str(f)] = sha256_file(f)
    return out
