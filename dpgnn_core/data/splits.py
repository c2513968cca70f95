"""Split helpers: random stratified splits and the inductive "disjoint" variant."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from dpgnn_core.data.graph import TEST, TRAIN, UNUSED, VAL, GraphData
from dpgnn_core.errors import DataError


def stratified_split(
    labels: npt.NDArray[np.int64],
    fractions: Sequence[float] = (0.75, 0.10, 0.15),
    *,
    rng: np.random.Generator,
) -> npt.NDArray[np.int8]:
    """Random split stratified by label; items with label -1 go to ``unused``.

    Within each class, items are permuted by ``rng`` and the first ``round(f_train * n_c)``
    go to train, the next ``round(f_val * n_c)`` to val, the rest to test (so every labeled
    item is assigned and class proportions are kept to within one item).

    Args:
        labels (np.ndarray): int64 labels, -1 for unlabeled.
        fractions (sequence of float, optional): train, val, test fractions summing to 1.
            (default: :obj:`(0.75, 0.10, 0.15)`)
        rng (np.random.Generator): the source of randomness.
    """
    if labels.ndim != 1:
        raise DataError("stratified splits need single-label data; give multi-label data a "
                        "split column", field="label", value=list(labels.shape))
    if len(fractions) != 3 or any(f < 0 for f in fractions) or abs(sum(fractions) - 1) > 1e-6:
        raise DataError("split fractions must be three non-negative numbers summing to 1",
                        field="fractions", value=tuple(fractions))
    split = np.full(labels.shape[0], UNUSED, dtype=np.int8)
    for c in np.unique(labels[labels >= 0]):
        idx = np.flatnonzero(labels == c)
        idx = idx[rng.permutation(idx.shape[0])]
        n_tr = round(fractions[0] * idx.shape[0])
        n_va = round(fractions[1] * idx.shape[0])
        split[idx[:n_tr]] = TRAIN
        split[idx[n_tr:n_tr + n_va]] = VAL
        split[idx[n_tr + n_va:]] = TEST
    return split


def make_disjoint(data: GraphData) -> tuple[GraphData, int]:
    """Inductive variant: drop every edge whose endpoints lie in different splits.

    This is the construction of the DP-GNN paper's ``-disjoint`` datasets: the training
    graph, the validation graph and the test graph share no edge, so training never reads
    an edge incident to an evaluation node.

    Returns:
        (GraphData, int): the new dataset (named ``<name>-disjoint``) and the number of
        directed edges removed.
    """
    if data.task != "node":
        raise DataError("the disjoint split applies to node classification only",
                        field="task", value=data.task)
    s = data.split[data.edge_index[0]]
    keep = s == data.split[data.edge_index[1]]
    removed = int((~keep).sum())
    meta = dict(data.meta)
    meta["split"] = {**data.meta.get("split", {}), "inductive": True,
                     "inter_split_edges_removed": removed}
    new = GraphData(
        name=f"{data.name}-disjoint", task=data.task, x=data.x,
        edge_index=np.ascontiguousarray(data.edge_index[:, keep]), y=data.y, split=data.split,
        num_classes=data.num_classes, directed=data.directed,
        edge_attr=None if data.edge_attr is None else data.edge_attr[keep], meta=meta,
    )
    return new, removed
