"""Edge-list hygiene: self-loops, duplicates, symmetrisation, isolated nodes.

Nothing is removed silently: each function counts what it finds, raises
:class:`~dpgnn_core.errors.DataError` unless the caller asked for removal, and returns the
counts so the manifest records them.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import numpy.typing as npt

from dpgnn_core.errors import DataError


def _keys(edge_index: npt.NDArray[np.int64], num_nodes: int) -> npt.NDArray[np.int64]:
    keys: npt.NDArray[np.int64] = edge_index[0] * np.int64(num_nodes) + edge_index[1]
    return keys


def clean_edges(
    edge_index: npt.NDArray[np.int64],
    num_nodes: int,
    *,
    remove_self_loops: bool = False,
    dedupe: bool = False,
    path: str | Path = "<memory>",
    node_name: Callable[[int], object] | None = None,
    locate: Callable[[int], str] | None = None,
) -> tuple[npt.NDArray[np.int64], dict[str, int], npt.NDArray[np.int64]]:
    """Count self-loops and duplicate edges; remove them only when asked.

    Args:
        edge_index (np.ndarray): int64 ``[2, E]``.
        num_nodes (int): number of nodes.
        remove_self_loops (bool, optional): drop edges ``(v, v)`` instead of raising.
            (default: :obj:`False`)
        dedupe (bool, optional): keep one copy of repeated ``(src, dst)`` pairs instead of
            raising. (default: :obj:`False`)
        path (str, optional): the source file, for error messages.
        node_name (callable, optional): the user's id of node ``v`` (when ids were relabelled
            to 0..n-1), for error messages; the integer id by default.
        locate (callable, optional): where input edge ``i`` is in the file (``"line 7"``),
            for error messages; nothing by default.

    Returns:
        (np.ndarray, dict, np.ndarray): edges sorted by ``(src, dst)``, counts
        ``{"self_loops": ..., "duplicate_edges": ...}`` of what was found, and the index of
        each output edge in the input (so edge attributes can follow).
    """
    def name(v: int) -> object:
        return node_name(v) if node_name is not None else v

    def at(i: int) -> str:
        return f" at {locate(i)}" if locate is not None else ""

    loops = edge_index[0] == edge_index[1]
    n_loops = int(loops.sum())
    if n_loops and not remove_self_loops:
        i = int(np.flatnonzero(loops)[0])
        v = name(int(edge_index[0, i]))
        raise DataError(
            f"{n_loops} self-loops found (first: node {v!r}{at(i)}); pass --remove-self-loops "
            "to drop them",
            path=path, field="src", value=v,
        )
    idx = np.flatnonzero(~loops) if n_loops else np.arange(edge_index.shape[1])
    keys = _keys(edge_index[:, idx], num_nodes)
    order = np.argsort(keys, kind="stable")
    keys, idx = keys[order], idx[order]
    dup = np.zeros(keys.shape[0], dtype=bool)
    if keys.size > 1:
        dup[1:] = keys[1:] == keys[:-1]
    n_dup = int(dup.sum())
    if n_dup and not dedupe:
        # The repeat that comes first in the input, and the copy it repeats (the sort is
        # stable, so the first of its run of equal keys).
        pos = np.flatnonzero(dup)
        p = int(pos[np.argmin(idx[pos])])
        k = int(keys[p])
        q = int(np.searchsorted(keys, k, side="left"))
        u, v = name(k // num_nodes), name(k % num_nodes)
        where = (f" at {locate(int(idx[p]))}, a repeat of {locate(int(idx[q]))}"
                 if locate is not None else "")
        raise DataError(
            f"{n_dup} duplicate edges found (first: {u} -> {v}{where}); "
            "pass --dedupe-edges to keep one copy of each",
            path=path, field="src,dst", value=(u, v),
        )
    keys, idx = keys[~dup], idx[~dup]
    out = np.stack([keys // num_nodes, keys % num_nodes]).astype(np.int64)
    return out, {"self_loops": n_loops, "duplicate_edges": n_dup}, idx.astype(np.int64)


def to_undirected(
    edge_index: npt.NDArray[np.int64], num_nodes: int
) -> npt.NDArray[np.int64]:
    """Add the reverse of every edge and return the sorted set of distinct edges."""
    keys = np.concatenate([_keys(edge_index, num_nodes), _keys(edge_index[::-1], num_nodes)])
    keys = np.unique(keys)
    return np.stack([keys // num_nodes, keys % num_nodes]).astype(np.int64)


def is_symmetric(edge_index: npt.NDArray[np.int64], num_nodes: int) -> bool:
    """Whether every edge ``(u, v)`` has its reverse ``(v, u)`` (duplicates ignored)."""
    fwd = np.unique(_keys(edge_index, num_nodes))
    rev = np.unique(_keys(edge_index[::-1], num_nodes))
    return bool(fwd.shape == rev.shape and np.array_equal(fwd, rev))


def symmetric_but_directed(edge_index: npt.NDArray[np.int64], num_nodes: int,
                           undirected: bool, path: object) -> str | None:
    """The ingest warning for an edge list in which every edge has its reverse, ingested
    without ``--undirected``: it is recorded as directed, and a directed dataset admits
    runs (DP-GNN's ``--level node``) whose guarantee only holds on directed graphs (issue
    48 §3). None when ``undirected`` was given, or the list has no edge or is not
    symmetric."""
    if undirected or edge_index.shape[1] == 0 or not is_symmetric(edge_index, num_nodes):
        return None
    return (f"the edge list {path} is symmetric (every edge u->v also appears as v->u), "
            "but --undirected was not given: the dataset is recorded as directed, which "
            "admits levels sound only on directed graphs (DP-GNN's --level node). If the "
            "graph is undirected, ingest it again with --undirected")


def subgraph(
    keep: npt.NDArray[np.bool_], edge_index: npt.NDArray[np.int64]
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.bool_]]:
    """Keep the nodes where ``keep`` is true and relabel them 0..k-1.

    Returns:
        (new_edge_index, old_to_new, edge_mask): edges among kept nodes (relabelled),
        the id map (-1 for dropped nodes), and which input edges survived.
    """
    old_to_new = np.full(keep.shape[0], -1, dtype=np.int64)
    old_to_new[keep] = np.arange(int(keep.sum()), dtype=np.int64)
    emask = keep[edge_index[0]] & keep[edge_index[1]]
    return old_to_new[edge_index[:, emask]], old_to_new, emask


def isolated_nodes(edge_index: npt.NDArray[np.int64], num_nodes: int) -> npt.NDArray[np.bool_]:
    """Boolean mask of nodes with no incident edge."""
    deg = np.bincount(edge_index.reshape(-1), minlength=num_nodes)
    return np.asarray(deg == 0)
