"""OGB graph-property layout (e.g. ogbg-molbace), read directly from its csv.gz files.

Avoids the ``ogb`` package (its loader prompts interactively and unpickles with
``weights_only=False``). Bonds are stored once per pair in ``edge.csv.gz``; as OGB's own
PyG conversion does for molecules, each is added in both directions.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np

from dpgnn_core.data.graph import TEST, TRAIN, UNUSED, VAL, GraphData
from dpgnn_core.data.loader import Loader, from_source
from dpgnn_core.data.loaders._common import provenance, require_file
from dpgnn_core.data.options import OgbOptions
from dpgnn_core.errors import DataError

# Category counts of OGB's molecule featuriser (ogb.utils.features.get_atom_feature_dims /
# get_bond_feature_dims): atomic number, chirality, degree, formal charge, #H, radical
# electrons, hybridisation, aromatic, in ring; bond type, stereo, conjugated.
ATOM_DIMS = (119, 5, 12, 12, 10, 6, 6, 2, 2)
BOND_DIMS = (5, 6, 2)


def _csv(path: Path, dtype: type) -> np.ndarray:
    require_file(path, "OGB file")
    try:
        with gzip.open(path, "rt") as fh:
            arr = np.loadtxt(fh, delimiter=",", dtype=np.float64, ndmin=2)
    except EOFError as e:  # gzip's "ended before the end-of-stream marker": the command
        # line's framework read a bare EOFError as Ctrl-D and said only "aborted"
        raise DataError(f"truncated file (a partial download or copy?): {e}; fetch it "
                        "again", path=path) from e
    except (ValueError, OSError) as e:
        raise DataError(f"cannot parse: {e}", path=path) from e
    if dtype is np.int64:
        if not np.isfinite(arr).all():
            raise DataError("missing values (NaN) in an integer file", path=path,
                            value=int((~np.isfinite(arr)).sum()))
        return arr.astype(np.int64)
    return arr


def _onehot(codes: np.ndarray, dims: tuple[int, ...], path: Path) -> np.ndarray:
    if codes.shape[1] != len(dims):
        raise DataError(f"expected {len(dims)} categorical columns", path=path,
                        value=codes.shape[1])
    out = np.zeros((codes.shape[0], sum(dims)), dtype=np.float32)
    off = 0
    for j, d in enumerate(dims):
        col = codes[:, j]
        if col.size and (col.min() < 0 or col.max() >= d):
            raise DataError(f"category out of range [0, {d})", path=path, field=f"column {j}",
                            value=int(col.max()))
        out[np.arange(codes.shape[0]), off + col] = 1.0
        off += d
    return out


def load_ogbg(
    source: str | Path, name: str | None = None, *, split: str = "scaffold",
    one_hot: bool = True,
) -> GraphData:
    """Read an OGB graph-property dataset folder (``raw/``, ``split/<scheme>/``).

    Args:
        source (str or Path): the dataset folder (holding ``raw`` and ``split``).
        name (str, optional): dataset name; the folder name by default.
        split (str, optional): split scheme folder. (default: :obj:`"scaffold"`)
        one_hot (bool, optional): one-hot the categorical atom and bond features with OGB's
            category counts (174 node and 13 edge dimensions); else keep the raw codes.
            (default: :obj:`True`)
    """
    source = Path(source)
    raw = source / "raw"
    if not raw.is_dir():
        raise DataError("OGB source must be the dataset folder holding raw/", path=source)
    n_nodes = _csv(raw / "num-node-list.csv.gz", np.int64)[:, 0]
    n_edges = _csv(raw / "num-edge-list.csv.gz", np.int64)[:, 0]
    edges = _csv(raw / "edge.csv.gz", np.int64)
    node_feat = _csv(raw / "node-feat.csv.gz", np.int64)
    edge_feat_path = raw / "edge-feat.csv.gz"
    edge_feat = _csv(edge_feat_path, np.int64) if edge_feat_path.is_file() else None
    labels = _csv(raw / "graph-label.csv.gz", np.float64)
    files = [p for p in raw.iterdir() if p.name.endswith(".csv.gz")]
    g = n_nodes.shape[0]
    if n_edges.shape[0] != g or labels.shape[0] != g:
        raise DataError(f"{g} graphs in num-node-list but {n_edges.shape[0]} in num-edge-list "
                        f"and {labels.shape[0]} labels", path=raw)
    if labels.shape[1] != 1:
        raise DataError("only single-task datasets are supported", path=raw / "graph-label.csv.gz",
                        value=labels.shape[1])
    if not np.isfinite(labels).all():
        raise DataError("graph labels contain NaN", path=raw / "graph-label.csv.gz",
                        value=int(np.flatnonzero(~np.isfinite(labels[:, 0]))[0]))
    n, e = int(n_nodes.sum()), int(n_edges.sum())
    if node_feat.shape[0] != n or edges.shape[0] != e:
        raise DataError(f"expected {n} node rows and {e} edge rows, found "
                        f"{node_feat.shape[0]} and {edges.shape[0]}", path=raw)
    graph_id = np.repeat(np.arange(g, dtype=np.int64), n_nodes)
    node_off = np.concatenate([[0], np.cumsum(n_nodes)[:-1]])
    edge_gid = np.repeat(np.arange(g, dtype=np.int64), n_edges)
    local = edges.T
    if local.size and ((local < 0).any() or (local >= n_nodes[edge_gid]).any()):
        raise DataError("edge names a node outside its graph", path=raw / "edge.csv.gz")
    glob = local + node_off[edge_gid]
    ei = np.concatenate([glob, glob[::-1]], axis=1)
    order = np.lexsort((ei[1], ei[0]))
    ei = np.ascontiguousarray(ei[:, order])
    if one_hot:
        x = _onehot(node_feat, ATOM_DIMS, raw / "node-feat.csv.gz")
        ea = None if edge_feat is None else _onehot(edge_feat, BOND_DIMS, edge_feat_path)
    else:
        x = node_feat.astype(np.float32)
        ea = None if edge_feat is None else edge_feat.astype(np.float32)
    if ea is not None:
        ea = np.concatenate([ea, ea])[order]

    gsplit = np.full(g, UNUSED, dtype=np.int8)
    split_dir = source / "split" / split
    split_files = []
    for fname, code in (("train", TRAIN), ("valid", VAL), ("test", TEST)):
        p = split_dir / f"{fname}.csv.gz"
        idx = _csv(p, np.int64)[:, 0]
        split_files.append(p)
        if idx.size and (idx.min() < 0 or idx.max() >= g):
            raise DataError(f"graph index outside [0, {g})", path=p, value=int(idx.max()))
        if (gsplit[idx] != UNUSED).any():
            raise DataError("a graph is listed in two splits", path=p,
                            value=int(idx[gsplit[idx] != UNUSED][0]))
        gsplit[idx] = code
    y_raw = labels[:, 0]
    classes = np.unique(y_raw)
    graph_y = np.searchsorted(classes, y_raw).astype(np.int64)
    name = name or source.name.replace("_", "-")
    meta = {
        "source": provenance("ogb", source, files + split_files, name=name, split=split,
                             one_hot=one_hot),
        "split": {"scheme": f"ogb-{split}", "seed": None},
        "cleaning": {"raw_graphs": g, "reverse_edges_added": e,
                     "class_values": [float(c) for c in classes]},
    }
    return GraphData(name=name, task="graph", x=x, edge_index=ei,
                     y=np.full(n, -1, dtype=np.int64), split=gsplit[graph_id],
                     num_classes=int(classes.shape[0]), directed=False, graph_id=graph_id,
                     graph_y=graph_y, graph_split=gsplit, edge_attr=ea, meta=meta)


#: This module's ingest format (:mod:`dpgnn_core.data.catalog`).
LOADERS = (Loader("ogb", OgbOptions, from_source(load_ogbg)),)
