"""Checks shared by every loader (before writing) and the reader (after reading).

Each check raises :class:`~dpgnn_core.errors.DataError` naming the file, the column and the
first offending value; none of them changes the data.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import numpy.typing as npt

from dpgnn_core.data.graph import SPLIT_NAMES, UNUSED, GraphData
from dpgnn_core.errors import DataError


def check_finite(x: npt.NDArray[np.float32], *, path: str | Path, field: str) -> None:
    """Raise if any feature is NaN or infinite, naming the first (row, column)."""
    finite = np.isfinite(x)
    if not finite.all():
        row, col = np.argwhere(~finite)[0]
        raise DataError(
            f"features contain NaN or inf (first at row {row}, column {col}; "
            f"{int((~finite).sum())} entries in all); clean or impute them before ingest",
            path=path,
            field=field,
            value=float(x[row, col]),
        )


def to_float32(values: npt.ArrayLike, *, path: str | Path, field: str,
               where: Callable[[int], str] | None = None) -> npt.NDArray[np.float32]:
    """``values`` as float32 (how features are stored), refusing a finite value beyond
    float32's range (|x| > 3.4e38) instead of letting the cast make it inf (numpy's
    "overflow encountered in cast" warning, then an error that named inf, not the value).

    Raises:
        DataError: naming the file, the column, the first such value and, with ``where``
            (row -> "line N"), its place.
    """
    arr = np.asarray(values)
    if arr.dtype.kind == "f":
        big = np.isfinite(arr) & (np.abs(arr) > np.finfo(np.float32).max)
        if big.any():
            i = int(np.flatnonzero(big)[0])
            at = f" (at {where(i)})" if where is not None else ""
            raise DataError(f"feature value beyond float32's range (|x| <= 3.4e38; features "
                            f"are stored as float32){at}; rescale the column", path=path,
                            field=field, value=float(arr[i]))
    with np.errstate(over="ignore", invalid="ignore"):  # NaN/inf are refused by the caller
        return arr.astype(np.float32)


def check_integral_ids(ids: npt.ArrayLike, *, path: str | Path, field: str) -> None:
    """Refuse node ids that the table reader turned into floating-point numbers beyond
    2^53, where distinct ids become the same number (ids above 2^63 - 1 do not fit a
    64-bit integer, so a CSV reader reads them as doubles: they were then reported as
    "not unique").

    Raises:
        DataError: naming the file, the column and the first such id.
    """
    arr = np.asarray(ids)
    if arr.dtype.kind != "f":
        return
    big = np.abs(arr) >= 2.0**53
    if big.any():
        raise DataError("node ids beyond 2^63 - 1 were read as floating-point numbers, "
                        "which cannot tell such ids apart; renumber them, or make them text "
                        "(a letter in front) and pass --relabel", path=path, field=field,
                        value=float(arr[np.flatnonzero(big)[0]]))


def check_edge_range(
    edge_index: npt.NDArray[np.int64], num_nodes: int, *, path: str | Path, fields: tuple[str, str]
) -> None:
    """Raise if an edge endpoint is outside ``[0, num_nodes)``."""
    for row, name in enumerate(fields):
        col = edge_index[row]
        if col.size == 0:
            continue
        lo, hi = int(col.min()), int(col.max())
        if lo < 0 or hi >= num_nodes:
            bad = lo if lo < 0 else hi
            raise DataError(
                f"edge endpoint out of range: node ids must lie in [0, {num_nodes})",
                path=path,
                field=name,
                value=bad,
            )


def check_labels(
    y: npt.NDArray[np.int64], num_classes: int, *, path: str | Path, field: str
) -> None:
    """Raise if a label is below -1 or not below ``num_classes``."""
    if y.size == 0:
        return
    lo, hi = int(y.min()), int(y.max())
    if lo < -1 or hi >= num_classes:
        raise DataError(
            f"label out of range: labels must lie in [0, {num_classes}) or be -1 (unlabeled)",
            path=path,
            field=field,
            value=lo if lo < -1 else hi,
        )


def check_multi_labels(
    y: npt.NDArray[np.int64], num_classes: int, *, path: str | Path, field: str
) -> None:
    """Multi-label rows: ``num_classes`` entries of 0/1, or all -1 (unlabeled)."""
    if y.shape[1] != num_classes:
        raise DataError(f"multi-label rows have {y.shape[1]} entries, expected {num_classes}",
                        path=path, field=field, value=y.shape[1])
    unlabeled = (y == -1).all(axis=1)
    bad = ~unlabeled & ((y < 0) | (y > 1)).any(axis=1)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise DataError(f"multi-label row {i} must hold only 0/1 (or only -1 if unlabeled)",
                        path=path, field=field, value=y[i].tolist()[:10])


def check_split_labels(
    y: npt.NDArray[np.int64], split: npt.NDArray[np.int8], *, path: str | Path, field: str
) -> None:
    """Raise if a node assigned to train/val/test has no label (-1)."""
    missing = (y < 0).all(axis=1) if y.ndim == 2 else y < 0
    bad = (split != UNUSED) & missing
    if bad.any():
        idx = int(np.flatnonzero(bad)[0])
        raise DataError(
            f"{int(bad.sum())} nodes in a train/val/test split have no label "
            f"(first: node {idx} in split {SPLIT_NAMES[int(split[idx])]!r}); "
            "label them or put them in the 'unused' split",
            path=path,
            field=field,
            value=idx,
        )


def _check_shapes(data: GraphData, path: str | Path) -> None:
    """A non-empty float32 feature matrix, one label and split row per node, edge_index
    ``[2, E]``."""
    n = data.num_nodes
    if n == 0:
        raise DataError("the graph has no nodes", path=path, field="node_id", value=0)
    if data.x.ndim != 2 or data.x.dtype != np.float32:
        raise DataError(
            "features must be a float32 matrix [num_nodes, dim]",
            path=path,
            field="x",
            value=f"{data.x.dtype}{list(data.x.shape)}",
        )
    for name, arr in (("label", data.y), ("split", data.split)):
        if arr.shape[0] != n:
            raise DataError(
                f"{name} has {arr.shape[0]} rows but there are {n} nodes",
                path=path,
                field=name,
                value=arr.shape[0],
            )
    if data.edge_index.ndim != 2 or data.edge_index.shape[0] != 2:
        raise DataError(
            "edge_index must have shape [2, E]",
            path=path,
            field="edge_index",
            value=list(data.edge_index.shape),
        )


def _check_node_task(data: GraphData, path: str | Path) -> None:
    """Node classification: labels in range (single- or multi-label), every train/val/test
    node labelled, at least one training node."""
    if data.y.ndim == 2:
        check_multi_labels(data.y, data.num_classes, path=path, field="label")
    else:
        check_labels(data.y, data.num_classes, path=path, field="label")
    check_split_labels(data.y, data.split, path=path, field="label")
    if not (data.split == 0).any():
        raise DataError(
            "no node is in the 'train' split", path=path, field="split", value="train"
        )


def _check_graph_task(data: GraphData, path: str | Path) -> None:
    """Graph classification: graph ids per node, in range and grouped, a label per graph,
    no edge between two graphs."""
    if data.graph_id is None or data.graph_y is None or data.graph_split is None:
        raise DataError(
            "a graph-classification dataset needs graph_id, graph labels and graph splits",
            path=path,
            field="graph_id",
        )
    n = data.num_nodes
    g = data.num_graphs
    gid = data.graph_id
    if gid.shape[0] != n:
        raise DataError("graph_id length differs from node count", path=path,
                        field="graph_id", value=gid.shape[0])
    if gid.size and (int(gid.min()) < 0 or int(gid.max()) >= g):
        raise DataError(f"graph_id out of range [0, {g})", path=path, field="graph_id",
                        value=int(gid.max()))
    if gid.size > 1 and (np.diff(gid) < 0).any():
        raise DataError("nodes must be grouped by graph (graph_id non-decreasing)",
                        path=path, field="graph_id")
    check_labels(data.graph_y, data.num_classes, path=path, field="graphs.label")
    if (data.graph_y < 0).any():
        raise DataError("every graph needs a label", path=path, field="graphs.label",
                        value=int(np.flatnonzero(data.graph_y < 0)[0]))
    src_g = gid[data.edge_index[0]]
    dst_g = gid[data.edge_index[1]]
    if (src_g != dst_g).any():
        i = int(np.flatnonzero(src_g != dst_g)[0])
        raise DataError("an edge joins two different graphs", path=path, field="src",
                        value=i)


def validate_graph_data(data: GraphData, *, path: str | Path = "<memory>") -> None:
    """Run every structural check on ``data``; raise :class:`DataError` on the first failure."""
    _check_shapes(data, path)
    check_finite(data.x, path=path, field="x")
    check_edge_range(data.edge_index, data.num_nodes, path=path, fields=("src", "dst"))
    if data.split.size and (int(data.split.min()) < 0 or int(data.split.max()) >= len(SPLIT_NAMES)):
        raise DataError("invalid split code", path=path, field="split", value=int(data.split.max()))
    if data.edge_attr is not None:
        if data.edge_attr.shape[0] != data.num_edges:
            raise DataError(
                "edge_attr rows do not match the number of edges",
                path=path,
                field="edge_attr",
                value=data.edge_attr.shape[0],
            )
        check_finite(data.edge_attr, path=path, field="edge_attr")
    if data.task == "node":
        _check_node_task(data, path)
    else:
        _check_graph_task(data, path)
