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

