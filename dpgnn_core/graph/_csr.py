"""Compressed adjacency helpers (vectorised; no per-edge Python loop)."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]


def csr(src: IntArray, dst: IntArray, num_nodes: int) -> tuple[IntArray, IntArray]:
    """``(indptr, indices)`` of the out-lists ``src -> dst``, targets sorted per source."""
    order = np.lexsort((dst, src))
    counts = np.bincount(src, minlength=num_nodes)
    indptr = np.zeros(num_nodes + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    return indptr, dst[order].astype(np.int64)


def expand(indptr: IntArray, indices: IntArray, owners: IntArray, nodes: IntArray
           ) -> tuple[IntArray, IntArray]:
    """For pairs ``(owner, node)``, all pairs ``(owner, nbr)`` with ``nbr`` in out(node)."""
    starts, ends = indptr[nodes], indptr[nodes + 1]
    lens = ends - starts
    total = int(lens.sum())
    if total == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    rep_owner = np.repeat(owners, lens)
    # Position of each output inside its source's slice: global arange minus slice offsets.
    offs = np.repeat(np.cumsum(lens) - lens, lens)
    pos = np.arange(total, dtype=np.int64) - offs + np.repeat(starts, lens)
    return rep_owner, indices[pos]
