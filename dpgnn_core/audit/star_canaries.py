r"""Star canaries (GAP-NDP, ProGAP-NDP: a node with its edges): a hub joined to ``degree``
aligned leaves, scored from the released aggregations and encoder (see :mod:`.canaries`).
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
    check_node_data,
    draw_bits,
    secret_generator,
)
from dpgnn_core.audit.edge_canaries import released_encodings
from dpgnn_core.data.graph import SPLIT_NAMES, GraphData
from dpgnn_core.errors import DataError


def insert_star_canaries(data: GraphData, m: int, degree: int, *,
                         rng: np.random.Generator | None = None,
                         included: npt.NDArray[np.bool_] | None = None
                         ) -> tuple[GraphData, Canaries]:
    """Add m *node-with-edges* canaries (GAP-NDP's unit: a node with its edges): canary i
    is a hub node h_i joined by undirected edges to ``degree`` leaves, included with
    probability 1/2. Every leaf of a hub copies the features and label of one random real
    node, so their encodings are aligned: the hub's first aggregation is then ``degree``
    times one unit row, the largest own-row change a node of degree D can make (the D² term
    of :func:`~dpgnn_core.methods.gap.sensitivity`), and each leaf's aggregation is the
    hub's encoding (the D term). Hubs and leaves are fresh nodes in the ``unused`` split,
    so the encoder and classifier train on the same rows whatever the bits.

    An excluded hub stays a node, isolated (no edges): PMA's derivation compares a node
    with its edges to the node made isolated (its aggregation row then 0 + noise), and an
    isolated ``unused`` node reaches nothing else of the release, so its row is
    data-independent noise appended to the release of the graph without the hub.

    Args:
        data (GraphData): single-label node data.
        m (int): canaries.
        degree (int): D, each hub's degree (at most the method's degree bound).
        rng (np.random.Generator, optional): source of the bits and the copied nodes; a
            fresh CSPRNG-seeded one by default. (default: :obj:`None`)
        included (np.ndarray, optional): bool ``[m]``, bits to use instead of drawn ones.
            (default: :obj:`None`)

    Returns:
        (GraphData, Canaries): the training data and the auditor's record (``node_ids``:
        the hubs, ``leaves``: ``[m, degree]``).
    """
    check_node_data(data, m)
    if int(degree) != degree or degree < 1:
        raise DataError("a star canary needs a degree >= 1", field="degree", value=degree)
    rng = rng if rng is not None else secret_generator()
    included = draw_bits(m, rng, included)
    n, d = data.num_nodes, int(degree)
    hub_src = rng.integers(0, n, size=m)
    leaf_src = rng.integers(0, n, size=m)
    hubs = n + np.arange(m, dtype=np.int64)
    leaves = (n + m + np.arange(m * d, dtype=np.int64)).reshape(m, d)
    src = np.concatenate([hub_src, np.repeat(leaf_src, d)])
    h = np.repeat(hubs[included], d)
    lv = leaves[included].reshape(-1)
    new_edges = np.stack([np.concatenate([h, lv]), np.concatenate([lv, h])])
    unused = SPLIT_NAMES.index("unused")
    y = np.asarray(data.y, np.int64)
    out = replace(data, x=np.concatenate([data.x, data.x[src]]).astype(np.float32),
                  y=np.concatenate([y, y[src]]),
                  split=np.concatenate([data.split, np.full(src.shape[0], unused, np.int8)]),
                  edge_index=np.ascontiguousarray(
                      np.concatenate([data.edge_index, new_edges], 1), dtype=np.int64),
                  meta={**data.meta, "audit": {"canaries": "star", "m": m, "degree": d}})
    return out, Canaries(kind="star", relation="add/remove", included=included,
                         node_ids=hubs, leaves=leaves)


def score_star_canaries(model: torch.nn.Module, aggregations: torch.Tensor, data: GraphData,
                        canaries: Canaries) -> npt.NDArray[np.float64]:
    """Each star canary's score from the release: minus
    ``D · <X1[h], X0[leaf]> + sum over leaves l of <X1[l], X0[h]>``, X(1) the released
    first-hop aggregations, X(0) the normalised encodings from the released encoder (the
    hub's row carries D aligned messages, each leaf's one; lower = more likely a member).
    """
    hubs, leaves = canaries.node_ids, canaries.leaves
    d = leaves.shape[1]
    x0 = released_encodings(model, data, aggregations)
    x1 = aggregations[:, 0].cpu()
    own = d * (x1[hubs] * x0[leaves[:, 0]]).sum(1)
    theirs = (x1[torch.from_numpy(leaves)] * x0[hubs].unsqueeze(1)).sum((1, 2))
    return np.asarray(-(own + theirs).double().numpy())


def _insert(plan: CanaryPlan, data: GraphData, m: int, scale: float,
            rng: np.random.Generator | None, included: npt.NDArray[np.bool_] | None
            ) -> tuple[GraphData, Canaries]:
    return insert_star_canaries(data, m, plan.degree, rng=rng, included=included)


def _score(plan: CanaryPlan, model: torch.nn.Module, extra: dict[str, Any], data: GraphData,
           canaries: Canaries, spec: Any) -> npt.NDArray[np.float64]:
    return score_star_canaries(model, extra["aggregations"], data, canaries)


#: The ``star`` row of the canary table.
STAR = CanaryKind(insert=_insert, score=_score)

__all__ = ["STAR", "insert_star_canaries", "score_star_canaries"]
