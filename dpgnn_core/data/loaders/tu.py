"""TU Dortmund text format (graph classification).

Files ``NAME_A.txt`` (1-based ``i, j`` pairs), ``NAME_graph_indicator.txt``,
``NAME_graph_labels.txt`` and optionally ``NAME_node_labels.txt``,
``NAME_node_attributes.txt``, ``NAME_edge_labels.txt``, ``NAME_edge_attributes.txt``.
Node features are the node attributes followed by a one-hot of the node labels (as PyG's
``TUDataset`` builds them); a graph with neither gets a constant feature 1.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from dpgnn_core.data.clean import clean_edges
from dpgnn_core.data.graph import GraphData
from dpgnn_core.data.loader import Loader, from_source
from dpgnn_core.data.loaders._common import provenance, require_file
from dpgnn_core.data.options import TuOptions
from dpgnn_core.data.splits import stratified_split
from dpgnn_core.errors import DataError

# Fingerprint (Galton-Henry): merge the 15 raw classes into arch (A, incl. tented arch T),
# left loop (L), right loop (R) and whorl (W). A code of two letters (an ambiguous print)
# takes its first letter. Raw codes from Fingerprint_label_readme.txt.
FINGERPRINT_CODES = ("L", "TR", "A", "TA", "W", "R", "T", "WR", "TL", "LT", "AT", "RT", "WL",
                     "RW", "AR")
FINGERPRINT_4 = {"A": 0, "T": 0, "L": 1, "R": 2, "W": 3}


def _infer_name(source: Path) -> str:
    hits = sorted(source.glob("*_A.txt"))
    if not hits:
        raise DataError("no TU files (NAME_A.txt) in folder", path=source)
    if len(hits) > 1:
        raise DataError("several TU datasets in folder; pass --name", path=source, field="name",
                        value=[h.name for h in hits])
    return hits[0].name[: -len("_A.txt")]


def _read(path: Path, dtype: type, ncols: int | None = None) -> np.ndarray:
    try:
        arr: np.ndarray = np.loadtxt(path, delimiter=",", dtype=dtype, ndmin=2)
    except ValueError as e:
        raise DataError(f"cannot parse: {e}", path=path) from e
    if ncols is not None and arr.shape[1] != ncols:
        raise DataError(f"expected {ncols} comma-separated columns", path=path,
                        value=arr.shape[1])
    return arr


def load_tu(
    source: str | Path,
    name: str | None = None,
    *,
    fingerprint_merge: bool = False,
    fractions: tuple[float, float, float] = (0.8, 0.1, 0.1),
    seed: int = 0,
    remove_self_loops: bool = False,
    dedupe: bool = False,
) -> GraphData:
    """Read a TU dataset.

    Graphs with zero nodes (listed in ``graph_labels`` but absent from
    ``graph_indicator``, as 651 of Fingerprint's are) are dropped and counted in the
    manifest. Graph labels are mapped to 0..C-1 in sorted order (MUTAG's -1/1 become 0/1).

    Args:
        source (str or Path): the folder holding ``NAME_A.txt``.
        name (str, optional): dataset name; inferred when omitted.
        fingerprint_merge (bool, optional): apply the 4-class Galton-Henry merge
            (Fingerprint only). (default: :obj:`False`)
        fractions (tuple, optional): train/val/test fractions of a split stratified by graph
            label. (default: :obj:`(0.8, 0.1, 0.1)`)
        seed (int, optional): split seed. (default: :obj:`0`)
        remove_self_loops (bool, optional): drop self-loops instead of raising.
        dedupe (bool, optional): drop duplicate edges instead of raising.
    """
    source = Path(source)
    if not source.is_dir():
        raise DataError("TU source must be the folder holding NAME_A.txt", path=source)
    name = name or _infer_name(source)
    f = {k: source / f"{name}_{k}.txt" for k in
         ("A", "graph_indicator", "graph_labels", "node_labels", "node_attributes",
          "edge_labels", "edge_attributes")}
    for k in ("A", "graph_indicator", "graph_labels"):
        require_file(f[k], f"TU file {name}_{k}.txt")
    used = [p for p in f.values() if p.is_file()]

    indicator = _read(f["graph_indicator"], np.int64, 1)[:, 0] - 1
    raw_labels = _read(f["graph_labels"], np.int64, 1)[:, 0]
    n_graphs_raw = raw_labels.shape[0]
    n = indicator.shape[0]
    if n and (indicator.min() < 0 or indicator.max() >= n_graphs_raw):
        raise DataError(f"graph id outside 1..{n_graphs_raw}", path=f["graph_indicator"],
                        value=int(indicator.max()) + 1)
    if n > 1 and (np.diff(indicator) < 0).any():
        raise DataError("nodes must be listed graph by graph", path=f["graph_indicator"])
    ei = _read(f["A"], np.int64, 2).T - 1
    if ei.size and (ei.min() < 0 or ei.max() >= n):
        raise DataError(f"node id outside 1..{n}", path=f["A"], value=int(ei.max()) + 1)

    feats = []
    if f["node_attributes"].is_file():
        feats.append(_read(f["node_attributes"], np.float64).astype(np.float32))
    if f["node_labels"].is_file():
        nl = _read(f["node_labels"], np.int64)[:, 0]
        vals = np.unique(nl)
        feats.append((nl[:, None] == vals[None, :]).astype(np.float32))
    x = np.concatenate(feats, axis=1) if feats else np.ones((n, 1), dtype=np.float32)
    if x.shape[0] != n:
        raise DataError(f"node files disagree: {x.shape[0]} rows vs {n} in graph_indicator",
                        path=source)

    eattr = []
    if f["edge_attributes"].is_file():
        eattr.append(_read(f["edge_attributes"], np.float64).astype(np.float32))
    if f["edge_labels"].is_file():
        el = _read(f["edge_labels"], np.int64)[:, 0]
        vals = np.unique(el)
        eattr.append((el[:, None] == vals[None, :]).astype(np.float32))
    edge_attr = np.concatenate(eattr, axis=1) if eattr else None
    if edge_attr is not None and edge_attr.shape[0] != ei.shape[1]:
        raise DataError(f"{edge_attr.shape[0]} edge attribute rows for {ei.shape[1]} edges",
                        path=f["edge_attributes"] if f["edge_attributes"].is_file()
                        else f["edge_labels"])

    if fingerprint_merge:
        if raw_labels.min() < 0 or raw_labels.max() >= len(FINGERPRINT_CODES):
            raise DataError("labels are not Fingerprint's 15 raw classes",
                            path=f["graph_labels"], value=int(raw_labels.max()))
        table = np.array([FINGERPRINT_4[c[0]] for c in FINGERPRINT_CODES], dtype=np.int64)
        raw_labels = table[raw_labels]

    # Drop zero-node graphs and renumber graphs 0..G-1.
    present = np.zeros(n_graphs_raw, dtype=bool)
    present[indicator] = True
    n_empty = int((~present).sum())
    new_gid = np.cumsum(present) - 1
    graph_id = new_gid[indicator]
    labels = raw_labels[present]
    classes = np.unique(labels)
    graph_y = np.searchsorted(classes, labels).astype(np.int64)

    # Edge hygiene (counts recorded); edge attributes follow the kept edges.
    ei, counts, kept = clean_edges(ei, n, remove_self_loops=remove_self_loops, dedupe=dedupe,
                                   path=f["A"], node_name=lambda v: v + 1)  # the file's ids
    if edge_attr is not None:
        edge_attr = edge_attr[kept]

    rng = np.random.default_rng(seed)
    graph_split = stratified_split(graph_y, fractions, rng=rng)
    meta = {
        "source": provenance("tu", source, used, name=name,
                             fingerprint_merge=fingerprint_merge),
        "split": {"scheme": "random-stratified-graphs", "fractions": list(fractions),
                  "seed": seed},
        "cleaning": {"raw_graphs": int(n_graphs_raw), "empty_graphs_dropped": n_empty,
                     "class_values": [int(c) for c in classes], **counts},
    }
    return GraphData(name=name, task="graph", x=x, edge_index=np.ascontiguousarray(ei),
                     y=np.full(n, -1, dtype=np.int64), split=graph_split[graph_id],
                     num_classes=int(classes.shape[0]), directed=False, graph_id=graph_id,
                     graph_y=graph_y, graph_split=graph_split, edge_attr=edge_attr, meta=meta)


#: This module's ingest format (:mod:`dpgnn_core.data.catalog`).
LOADERS = (Loader("tu", TuOptions, from_source(load_tu)),)
