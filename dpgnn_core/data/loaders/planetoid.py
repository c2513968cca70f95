"""Planetoid raw files (``ind.<name>.{x,tx,allx,y,ty,ally,graph,test.index}``), public split.

Follows the layout of Yang et al. (2016) as PyG's ``Planetoid`` reads it: training nodes are
the first ``len(y)`` rows, validation the next 500, test the rows listed in ``test.index``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from dpgnn_core.data.clean import to_undirected
from dpgnn_core.data.graph import TEST, TRAIN, UNUSED, VAL, GraphData
from dpgnn_core.data.loader import Loader, from_source
from dpgnn_core.data.loaders._common import provenance, require_file
from dpgnn_core.data.loaders._pickle import load_planetoid_pickle
from dpgnn_core.data.options import PlanetoidOptions
from dpgnn_core.data.splits import stratified_split
from dpgnn_core.errors import DataError

_PARTS = ("x", "tx", "allx", "y", "ty", "ally", "graph")


def _infer_name(source: Path) -> str:
    hits = sorted(source.glob("ind.*.graph"))
    if not hits:
        raise DataError("no Planetoid files (ind.<name>.graph) in folder", path=source)
    if len(hits) > 1:
        names = [h.name.split(".")[1] for h in hits]
        raise DataError("several Planetoid datasets in folder; pass --name", path=source,
                        field="name", value=names)
    return hits[0].name.split(".")[1]


def _dense(m: Any) -> np.ndarray:
    import scipy.sparse as sp  # here: not imported with the catalogue

    return np.asarray(m.todense() if sp.issparse(m) else m)


def load_planetoid(source: str | Path, name: str | None = None,
                   fractions: tuple[float, float, float] | None = None,
                   seed: int = 0) -> GraphData:
    """Read a Planetoid dataset with its public split, or a stratified random one.

    Args:
        source (str or Path): the folder holding ``ind.<name>.*``.
        name (str, optional): dataset name (``cora``, ``citeseer``, ``pubmed``); inferred
            from the files when omitted. (default: :obj:`None`)
        fractions (tuple, optional): train/val/test fractions of a random split of every
            labelled node, stratified by label, instead of the public split (whose 140
            training nodes on Cora are too few for node-level DP training: a batch would
            be most of the set). (default: :obj:`None`, the public split)
        seed (int, optional): seed of that split. (default: :obj:`0`)

    The raw files are pickles; they are read by a restricted unpickler that refuses, in
    one line naming the file, any global but the numpy arrays, scipy sparse matrices and
    dict of lists they hold (:mod:`dpgnn_core.data.loaders._pickle`): a crafted file
    cannot run code. The raw adjacency (a dict of neighbour lists) is symmetrised and
    coalesced, as PyG does; the manifest records how many raw entries were merged or were
    self-loops.
    """
    source = Path(source)
    name = (name or _infer_name(source)).lower()
    paths = {p: require_file(source / f"ind.{name}.{p}", f"Planetoid part '{p}'") for p in _PARTS}
    test_path = require_file(source / f"ind.{name}.test.index", "Planetoid test index")
    # Pickles: read with an unpickler that admits only the numpy and scipy types these
    # files hold, so a crafted file cannot run code (loaders/_pickle.py).
    objs: dict[str, Any] = {part: load_planetoid_pickle(p) for part, p in paths.items()}
    test_idx = np.loadtxt(test_path, dtype=np.int64).reshape(-1)
    tx, ty = _dense(objs["tx"]), _dense(objs["ty"])
    allx, ally = _dense(objs["allx"]), _dense(objs["ally"])
    n_train = _dense(objs["y"]).shape[0]
    sorted_test = np.sort(test_idx)
    if np.unique(test_idx).shape[0] != test_idx.shape[0] or tx.shape[0] != test_idx.shape[0] \
            or ty.shape[0] != test_idx.shape[0]:
        raise DataError(f"the test index names {test_idx.shape[0]} nodes "
                        f"({np.unique(test_idx).shape[0]} distinct) but tx/ty hold "
                        f"{tx.shape[0]}/{ty.shape[0]} rows", path=test_path,
                        field="test.index", value=int(test_idx.shape[0]))
    if test_idx.size and sorted_test[0] != allx.shape[0]:
        raise DataError(f"the test index starts at node {int(sorted_test[0])}, but allx holds "
                        f"{allx.shape[0]} rows (the test nodes follow them)", path=test_path,
                        field="test.index", value=int(sorted_test[0]))
    # Gaps in the test index (Citeseer's isolated test nodes are absent from tx/ty): as PyG
    # does, the missing nodes get a zero feature row and no label (-1, split 'unused').
    span = int(sorted_test[-1] - sorted_test[0] + 1) if test_idx.size else 0
    gaps = span - int(test_idx.shape[0])
    if gaps:
        tx_ext = np.zeros((span, tx.shape[1]), dtype=tx.dtype)
        tx_ext[sorted_test - sorted_test[0]] = tx
        ty_ext = np.zeros((span, ty.shape[1]), dtype=ty.dtype)
        ty_ext[sorted_test - sorted_test[0]] = ty
        tx, ty = tx_ext, ty_ext
    x = np.concatenate([allx, tx]).astype(np.float32)
    y_onehot = np.concatenate([ally, ty])
    # Row j of tx/ty belongs to node test_idx[j]; after the concatenation (and the padding,
    # which puts it at its sorted position) it sits at node sorted_test[j]: move it there.
    x[test_idx] = x[sorted_test]
    y_onehot[test_idx] = y_onehot[sorted_test]
    labeled = y_onehot.sum(axis=1) > 0
    y = np.where(labeled, y_onehot.argmax(axis=1), -1).astype(np.int64)
    n = x.shape[0]

    graph = objs["graph"]
    src = np.fromiter((s for s, nb in graph.items() for _ in nb), dtype=np.int64)
    dst = np.fromiter((d for nb in graph.values() for d in nb), dtype=np.int64)
    raw = src.shape[0]
    if raw and (max(src.max(), dst.max()) >= n or min(src.min(), dst.min()) < 0):
        raise DataError("adjacency names a node outside the feature rows",
                        path=paths["graph"], field="graph", value=int(max(src.max(), dst.max())))
    ei = np.stack([src, dst])
    loops = ei[0] == ei[1]
    ei = to_undirected(ei[:, ~loops], n)

    if fractions is None:
        split = np.full(n, UNUSED, dtype=np.int8)
        split[np.arange(n_train)] = TRAIN
        split[np.arange(n_train, n_train + 500)] = VAL
        split[test_idx] = TEST
        split[(split != UNUSED) & (y < 0)] = UNUSED  # rows without a label
        split_meta: dict[str, Any] = {"scheme": "planetoid-public", "seed": None}
    else:
        split = stratified_split(y, fractions, rng=np.random.default_rng(seed))
        split_meta = {"scheme": "random-stratified", "fractions": list(fractions),
                      "seed": seed}
    num_classes = int(y_onehot.shape[1])
    meta = {
        "source": provenance("planetoid", source, [*paths.values(), test_path], name=name),
        "split": split_meta,
        "cleaning": {
            "raw_adjacency_entries": int(raw),
            "self_loops_removed": int(loops.sum()),
            "symmetrised_and_coalesced": True,
            "test_index_gaps_filled": gaps,
            "notes": [f"{gaps} test-index gaps filled with zero-feature unlabelled nodes "
                      "(as PyG does)"] if gaps else [],
        },
    }
    return GraphData(name=name, task="node", x=x, edge_index=ei, y=y, split=split,
                     num_classes=num_classes, directed=False, meta=meta)


#: This module's ingest format (:mod:`dpgnn_core.data.catalog`).
LOADERS = (Loader("planetoid", PlanetoidOptions, from_source(load_planetoid)),)
