"""Facebook100 ``.mat`` schools with GAP's featurisation (Sajadmanesh et al., 2023).

``local_info`` columns: status, gender, major, minor (second major), housing (dorm), year,
high school; 0 means missing. GAP predicts ``year`` and one-hot encodes the first five other
columns (high school is dropped, missing values get no indicator).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from dpgnn_core.data.clean import isolated_nodes, subgraph
from dpgnn_core.data.graph import GraphData
from dpgnn_core.data.loader import Loader, from_source
from dpgnn_core.data.loaders._common import provenance, require_file
from dpgnn_core.data.options import Facebook100Options
from dpgnn_core.data.splits import stratified_split
from dpgnn_core.errors import DataError

COLUMNS = ("status", "gender", "major", "minor", "housing", "year", "high_school")


def _numeric(value: Any, source: Path, key: str) -> Any:
    """``value`` if it is a sparse matrix or a 2-D numeric array, else a one-line
    :class:`DataError` naming the variable (a cell array, struct or text holds objects)."""
    import scipy.sparse as sp

    if sp.issparse(value):
        return value
    kind = getattr(value, "dtype", None)
    if not isinstance(value, np.ndarray) or kind is None or value.ndim != 2 \
            or not (np.issubdtype(kind, np.number) or np.issubdtype(kind, np.bool_)):
        what = (f"a {value.ndim}-D array of {kind}" if isinstance(value, np.ndarray)
                else type(value).__name__)
        raise DataError(f"expected a numeric matrix, found {what} (a cell array, struct or "
                        "text is not read)", path=source, field=key, value=str(kind))
    return value


def _read_mat(source: Path) -> tuple[Any, np.ndarray]:
    """The adjacency ``A`` (as COO) and ``local_info`` (int64) of a ``.mat`` file.

    ``scipy.io.loadmat`` parses MATLAB's format without running code (no pickle); it
    returns cell arrays and structs as object arrays, refused here by :func:`_numeric`.
    """
    try:
        import scipy.io as sio  # here: not imported with the catalogue
        import scipy.sparse as sp

        mat = sio.loadmat(source)
    except Exception as e:
        raise DataError(f"cannot read MATLAB file: {type(e).__name__}: "
                        f"{str(e).splitlines()[0] if str(e) else ''}", path=source) from e
    for key in ("A", "local_info"):
        if key not in mat:
            raise DataError("missing variable in .mat file", path=source, field=key)
    adj = sp.coo_matrix(_numeric(mat["A"], source, "A"))
    info = np.asarray(_numeric(mat["local_info"], source, "local_info"))
    if info.size and np.issubdtype(info.dtype, np.floating) \
            and not (np.isfinite(info).all() and (info == np.round(info)).all()):
        raise DataError("local_info must hold integer codes", path=source,
                        field="local_info", value=str(info.dtype))
    return adj, info.astype(np.int64)


def load_facebook100(
    source: str | Path,
    name: str | None = None,
    *,
    target: str = "year",
    min_class_size: int = 100,
    keep_isolated: bool = False,
    fractions: tuple[float, float, float] = (0.75, 0.10, 0.15),
    seed: int = 0,
) -> GraphData:
    """Read one Facebook100 school.

    Steps, in order: drop nodes whose ``target`` is missing (0); drop classes with fewer
    than ``min_class_size`` nodes; drop self-loops; drop nodes left isolated (GAP does,
    unless ``keep_isolated``); one-hot encode the other attribute columns (except high
    school); random stratified split. Every count dropped is recorded in the manifest.

    Args:
        source (str or Path): the ``.mat`` file.
        name (str, optional): dataset name; the file stem by default.
        target (str, optional): the column to predict. (default: :obj:`"year"`)
        min_class_size (int, optional): smallest class kept. GAP uses 1000 on UIllinois20
            (30,795 nodes); the default suits the smaller schools. (default: :obj:`100`)
        keep_isolated (bool, optional): keep nodes without edges. (default: :obj:`False`)
        fractions (tuple, optional): train/val/test fractions.
            (default: :obj:`(0.75, 0.10, 0.15)`)
        seed (int, optional): split seed. (default: :obj:`0`)
    """
    source = Path(source)
    require_file(source, "Facebook100 .mat file")
    if target not in COLUMNS[:6]:
        raise DataError(f"unknown target; choose one of {list(COLUMNS[:6])}", field="target",
                        value=target)
    if min_class_size < 1:
        raise DataError("must be at least 1", field="min_class_size", value=min_class_size)
    adj, info = _read_mat(source)
    n0 = info.shape[0]
    if adj.shape != (n0, n0) or info.shape[1] != len(COLUMNS):
        raise DataError(f"A is {adj.shape}, local_info is {info.shape}; expected n x n and "
                        f"n x {len(COLUMNS)}", path=source, field="local_info")
    ei = np.stack([adj.row.astype(np.int64), adj.col.astype(np.int64)])
    t = COLUMNS.index(target)
    raw_y = info[:, t]

    keep = raw_y != 0
    dropped_unlabeled = int((~keep).sum())
    years, counts = np.unique(raw_y[keep], return_counts=True)
    small = years[counts < min_class_size]
    small_mask = keep & np.isin(raw_y, small)
    keep &= ~small_mask
    if not keep.any():
        raise DataError(f"no class has at least min_class_size={min_class_size} nodes "
                        f"(largest: {int(counts.max()) if counts.size else 0})", path=source,
                        field="min_class_size", value=min_class_size)
    ei, _, _ = subgraph(keep, ei)
    info = info[keep]
    loops = ei[0] == ei[1]
    ei = ei[:, ~loops]
    iso = isolated_nodes(ei, info.shape[0])
    n_iso = int(iso.sum())
    if n_iso and not keep_isolated:
        ei, _, _ = subgraph(~iso, ei)
        info = info[~iso]
    order = np.lexsort((ei[1], ei[0]))
    ei = np.ascontiguousarray(ei[:, order])

    classes = np.unique(info[:, t])
    y = np.searchsorted(classes, info[:, t]).astype(np.int64)
    feats = []
    for c in range(6):
        if c == t:
            continue
        vals = np.unique(info[:, c][info[:, c] != 0])
        onehot = (info[:, c][:, None] == vals[None, :]).astype(np.float32)
        feats.append(onehot)
    x = np.concatenate(feats, axis=1)
    rng = np.random.default_rng(seed)
    split = stratified_split(y, fractions, rng=rng)
    meta = {
        "source": provenance("facebook100", source, [source], target=target,
                             min_class_size=min_class_size, keep_isolated=keep_isolated),
        "split": {"scheme": "random-stratified", "fractions": list(fractions), "seed": seed},
        "cleaning": {
            "raw_nodes": int(n0),
            "dropped_missing_label": dropped_unlabeled,
            "dropped_small_class_nodes": int(small_mask.sum()),
            "dropped_small_classes": [int(v) for v in small],
            "self_loops_removed": int(loops.sum()),
            "isolated_nodes": n_iso,
            "isolated_nodes_removed": 0 if keep_isolated else n_iso,
            "class_values": [int(v) for v in classes],
        },
    }
    return GraphData(name=name or source.stem, task="node", x=x, edge_index=ei, y=y,
                     split=split, num_classes=int(classes.shape[0]), directed=False, meta=meta)


#: This module's ingest format (:mod:`dpgnn_core.data.catalog`).
LOADERS = (Loader("facebook100", Facebook100Options, from_source(load_facebook100)),)
