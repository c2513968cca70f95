"""Edge-list hygiene: self-loops, duplicates, symmetrisation, isolated nodes.

Nothing is removed silently: each function counts what it finds, raises
:class:`~dpgnn_core.errors.DataError` unless the caller asked for removal, and returns the
counts so the manifest records them.
"""

from __future__ import annotations

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

    Returns:
        (np.ndarray, dict, np.ndarray): edges sorted by ``(src, dst)``, counts
        ``{"self_loops": ..., "duplicate_edges": ...}`` of what was found, and the index of
        each output edge in the input (so edge attributes can follow).
    """
    loops = edge_index[0] == edge_index[1]
    n_loops = int(loops.sum())
    if n_loops and not remove_self_loops:
        v = int(edge_index[0][loops][0])
        raise DataError(
            f"{n_loops} self-loops found (first at node {v}); pass --remove-self-loops "
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
        k = int(keys[dup][0])
        raise DataError(
            f"{n_dup} duplicate edges found (first: {k // num_nodes} -> {k % num_nodes}); "
            "pass --dedupe-edges to keep one copy of each",
            path=path, field="src,dst", value=(k // num_nodes, k % num_nodes),
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
