r"""Node canaries (DP-MLP, DP-GNN, DRW, and GAP-NDP's isolated-node form): an isolated
node with a Dirac feature column of its own and a uniform label, scored black-box by the
cross-entropy of its label under the final model (see :mod:`.canaries`).
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
    Relation,
    check_node_data,
    draw_bits,
    secret_generator,
)
from dpgnn_core.audit.defaults import DEFAULT_SCALE
from dpgnn_core.data.graph import TRAIN, GraphData
from dpgnn_core.errors import DataError


def insert_node_canaries(data: GraphData, m: int, *, relation: Relation = "add/remove",
                         scale: float = DEFAULT_SCALE,
                         rng: np.random.Generator | None = None,
                         included: npt.NDArray[np.bool_] | None = None
                         ) -> tuple[GraphData, Canaries]:
    """Add m node canaries (see the module docstring): m extra feature columns, one per
    canary, and the included canaries as isolated training nodes.

    Args:
        data (GraphData): single-label node data.
        m (int): canaries.
        relation (str, optional): ``"add/remove"``: an excluded canary is not a node of the
            result; ``"replace-one"``: its slot is a training node with all-zero features
            and the canary's label. (default: ``"add/remove"``)
        scale (float, optional): value of a canary's own feature column.
            (default: :obj:`10.0`)
        rng (np.random.Generator, optional): source of the bits and labels; a fresh
            CSPRNG-seeded one by default (:func:`secret_generator`). (default: :obj:`None`)
        included (np.ndarray, optional): bool ``[m]``, bits to use instead of drawn ones
            (the multi-run audit). (default: :obj:`None`)

    Returns:
        (GraphData, Canaries): the training data and the auditor's record.
    """
    check_node_data(data, m)
    rng = rng if rng is not None else secret_generator()
    included = draw_bits(m, rng, included)
    labels = rng.integers(0, data.num_classes, size=m, dtype=np.int64)
    n, d = data.num_nodes, data.num_features
    features = np.zeros((m, d + m), dtype=np.float32)
    features[np.arange(m), d + np.arange(m)] = np.float32(scale)
    if relation == "add/remove":
        slots = np.flatnonzero(included)
        rows = features[slots]
    elif relation == "replace-one":
        slots = np.arange(m)
        rows = np.where(included[:, None], features, np.float32(0.0))
    else:
        raise DataError("unknown neighbouring relation", field="relation", value=relation)
    x = np.concatenate([np.concatenate([data.x, np.zeros((n, m), np.float32)], 1), rows])
    node_ids = np.full(m, -1, dtype=np.int64)
    node_ids[slots] = n + np.arange(slots.shape[0])
    out = replace(data, x=np.ascontiguousarray(x, dtype=np.float32),
                  y=np.concatenate([np.asarray(data.y, np.int64), labels[slots]]),
                  split=np.concatenate([data.split, np.full(slots.shape[0], TRAIN, np.int8)]),
                  meta={**data.meta, "audit": {"canaries": "node", "m": m,
                                               "relation": relation}})
    return out, Canaries(kind="node", relation=relation, included=included,
                         features=features, labels=labels, node_ids=node_ids)

def canary_logits(model: torch.nn.Module, x: npt.NDArray[np.float32]) -> torch.Tensor:
    """Logits of the model on canary features, each canary an isolated node: a subgraph
    model (DP-GNN, DRW) on an empty edge set, GAP's and DPDGC's classifiers on zero
    aggregations (an isolated node aggregates nothing), any other model (DP-MLP) on the
    features alone."""
    from dpgnn_core.methods.gap import GapClassifier
    from dpgnn_core.models.dpdgc import DpdgcClassifier

    model = model.cpu().eval()
    xt = torch.from_numpy(np.ascontiguousarray(x))
    with torch.no_grad():
        if isinstance(model, GapClassifier):
            enc_dim = model.encoder.encoder_dim if model.encoder is not None else 0
            zeros = torch.zeros((xt.shape[0], model.hops, enc_dim))
            out: torch.Tensor = model(model.inputs(xt, zeros))
        elif isinstance(model, DpdgcClassifier):  # zero rows for every released hop
            out = model(torch.cat([xt, torch.zeros((xt.shape[0], model.agg.in_features))],
                                  1))
        elif hasattr(model, "forward_sparse"):
            out = model.forward_sparse(xt, torch.zeros((2, 0), dtype=torch.int64))  # type: ignore[operator]
        else:
            out = model(xt)
    return out


def score_node_canaries(model: torch.nn.Module, canaries: Canaries
                        ) -> npt.NDArray[np.float64]:
    """Each canary's score: the cross-entropy of its label under ``model`` on its features
    as an isolated node (lower = more likely a member)."""
    logits = canary_logits(model, canaries.features)
    loss = torch.nn.functional.cross_entropy(logits, torch.from_numpy(canaries.labels),
                                             reduction="none")
    return np.asarray(loss.double().numpy())


def _insert(plan: CanaryPlan, data: GraphData, m: int, scale: float,
            rng: np.random.Generator | None, included: npt.NDArray[np.bool_] | None
            ) -> tuple[GraphData, Canaries]:
    return insert_node_canaries(data, m, relation=plan.relation, scale=scale, rng=rng,
                                included=included)


def _score(plan: CanaryPlan, model: torch.nn.Module, extra: dict[str, Any], data: GraphData,
           canaries: Canaries, spec: Any) -> npt.NDArray[np.float64]:
    return score_node_canaries(model, canaries)


#: The ``node`` row of the canary table.
NODE = CanaryKind(insert=_insert, score=_score)

__all__ = ["NODE", "canary_logits", "insert_node_canaries", "score_node_canaries"]
