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
from dpgnn_core.data.options import validate_options
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

    The options are checked against the loader's typed spec
    (:mod:`dpgnn_core.data.options`) before anything is read. The option ``disjoint=True``
    (node classification) additionally removes every inter-split edge (the inductive
    ``-disjoint`` variant). A graph without edges is refused unless ``allow_no_edges=True``;
    then it is loaded and a warning is recorded in ``meta["cleaning"]["warnings"]`` (the
    manifest's ``cleaning`` record).
    """
    opts = validate_options(spec.format, dict(spec.options))
    disjoint = bool(opts.pop("disjoint", False))
    allow_no_edges = bool(opts.pop("allow_no_edges", False))
    src = Path(spec.source) if spec.source else None
    if src is not None and not src.exists():
        raise DataError("source not found", path=src, field="source")
    edge_file: Path | None = src
    try:
        if spec.format == "synthetic":
            kind = opts.pop("kind", "csbm")
            data = (csbm if kind == "csbm" else er_graphs)(name=spec.name, **opts)
        elif src is None:
            raise DataError(f"format {spec.format!r} needs a source", field="source")
        elif spec.format in _LOADERS:
            data = _LOADERS[spec.format](src, spec.name, **opts)
        else:
            edge_file, nodes = _tabular_paths(src, opts)
            data = load_tabular(edge_file, nodes, name=spec.name, **opts)
    except TypeError as e:
        raise DataError(f"bad option for format {spec.format!r}: {e}", field="options",
                        value=spec.options) from e
    if disjoint:
        data, _ = make_disjoint(data)
    if data.num_edges == 0:
        what = ("the edge list has no edges" if spec.format in ("csv", "parquet")
                else f"the {spec.format} graph has no edges")
        if disjoint:
            what += " (after --disjoint removed the edges between splits)"
        if not allow_no_edges:
            raise DataError(f"{what}; pass --allow-no-edges to ingest it anyway",
                            path=edge_file, field="edges", value=0)
        cleaning = data.meta.setdefault("cleaning", {})
        cleaning.setdefault("warnings", []).append(
            f"{what} (ingested with --allow-no-edges)"
            + (f": {edge_file}" if edge_file is not None else ""))
        cleaning["allow_no_edges"] = True
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
