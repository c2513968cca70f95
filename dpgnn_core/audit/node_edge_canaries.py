r"""Node-with-edges canaries (DP-GNN's ``node`` level on a directed graph): replace-one
node canaries with an out-edge row to leaves of their own, scored black-box at the canary
and at its leaves (see :mod:`.canaries`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from dpgnn_core.audit.canary_record import (
    Canaries,
    CanaryKind,
    CanaryPlan,
)
from dpgnn_core.audit.defaults import DEFAULT_SCALE
from dpgnn_core.audit.node_canaries import insert_node_canaries, score_node_canaries
from dpgnn_core.data.graph import TRAIN, GraphData
from dpgnn_core.errors import DataError


def insert_node_edge_canaries(data: GraphData, m: int, leaves: int = 4, *,
                              scale: float = DEFAULT_SCALE,
                              rng: np.random.Generator | None = None,
                              included: npt.NDArray[np.bool_] | None = None
                              ) -> tuple[GraphData, Canaries]:
    """DP-GNN's ``node`` level on a directed graph (replace-one of a node's features, label
    and out-edge row): m replace-one node canaries (:func:`insert_node_canaries`), each
    with an out-edge row to ``leaves`` fresh training nodes of its own (all-zero features,
    the canary's label). An included canary has its Dirac features and its out-edges, so
    its message reaches its leaves' subgraphs; an excluded slot is the blank record with
    an empty row. The leaves are training nodes whatever the bits (N is fixed, as
    replace-one requires).

    Raises:
        DataError: an undirected graph (DP-GNN refuses ``node`` level there).
    """
    if not data.directed:
        raise DataError("node-with-edges canaries audit DP-GNN's node level, which holds on "
                        "directed graphs only", field="directed", value=False)
    if int(leaves) != leaves or leaves < 1:
        raise DataError("a node-with-edges canary needs at least one leaf", field="leaves",
                        value=leaves)
    base, can = insert_node_canaries(data, m, relation="replace-one", scale=scale, rng=rng,
                                     included=included)
    n1, width = base.num_nodes, base.num_features
    lv = (n1 + np.arange(m * leaves, dtype=np.int64)).reshape(m, leaves)
    src = np.repeat(can.node_ids[can.included], leaves)
    dst = lv[can.included].reshape(-1)
    out = replace(base, x=np.concatenate([base.x, np.zeros((m * leaves, width), np.float32)]),
                  y=np.concatenate([base.y, np.repeat(can.labels, leaves)]),
                  split=np.concatenate([base.split, np.full(m * leaves, TRAIN, np.int8)]),
                  edge_index=np.ascontiguousarray(np.concatenate(
                      [base.edge_index, np.stack([src, dst])], 1), dtype=np.int64),
                  meta={**base.meta, "audit": {"canaries": "node-edges", "m": m,
                                               "leaves": int(leaves)}})
    return out, replace(can, kind="node-edges", leaves=lv)

def score_node_edge_canaries(model: torch.nn.Module, canaries: Canaries
                             ) -> npt.NDArray[np.float64]:
    """Each node-with-edges canary's score: its own cross-entropy as an isolated node
    (:func:`score_node_canaries`) plus the mean cross-entropy of its label at its leaves,
    each leaf fed the canary's message along one edge (lower = more likely a member)."""
    own = score_node_canaries(model, canaries)
    m, width = canaries.features.shape
    x = torch.from_numpy(np.concatenate([canaries.features, np.zeros((m, width), np.float32)]))
    edge = torch.stack([torch.arange(m), m + torch.arange(m)])  # canary i -> its leaf
    with torch.no_grad():
        logits = model.cpu().eval().forward_sparse(x, edge)[m:]  # type: ignore[operator]
    leaf = torch.nn.functional.cross_entropy(logits, torch.from_numpy(canaries.labels),
                                             reduction="none")
    return np.asarray(own + leaf.double().numpy(), dtype=np.float64)


def _insert(plan: CanaryPlan, data: GraphData, m: int, scale: float,
            rng: np.random.Generator | None, included: npt.NDArray[np.bool_] | None
            ) -> tuple[GraphData, Canaries]:
    return insert_node_edge_canaries(data, m, scale=scale, rng=rng, included=included)


def _score(plan: CanaryPlan, model: torch.nn.Module, extra: dict[str, Any], data: GraphData,
           canaries: Canaries, spec: Any) -> npt.NDArray[np.float64]:
    return score_node_edge_canaries(model, canaries)


#: The ``node-edges`` row of the canary table.
NODE_EDGES = CanaryKind(insert=_insert, score=_score)

__all__ = ["NODE_EDGES", "insert_node_edge_canaries", "score_node_edge_canaries"]
