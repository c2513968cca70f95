r"""Edge canaries (GAP-EDP, and GAP-∞ as its control): an isolated pair of fresh
``unused`` nodes joined by the canary edge, scored from the released aggregations and
encoder, or, against ``insecure_reproducible_noise``, from the noise regenerated from the
spec's seed (see :mod:`.canaries`).
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
from dpgnn_core.data.graph import SPLIT_NAMES, GraphData
from dpgnn_core.errors import DataError


def insert_edge_canaries(data: GraphData, m: int, *, rng: np.random.Generator | None = None,
                         included: npt.NDArray[np.bool_] | None = None
                         ) -> tuple[GraphData, Canaries]:
    """Add m edge canaries (see the module docstring): 2m fresh ``unused`` nodes with the
    features and labels of random real nodes, and the included pairs' undirected edges.

    Args:
        data (GraphData): single-label node data.
        m (int): canaries.
        rng (np.random.Generator, optional): source of the bits and the copied nodes; a
            fresh CSPRNG-seeded one by default. (default: :obj:`None`)
        included (np.ndarray, optional): bool ``[m]``, bits to use instead of drawn ones.
            (default: :obj:`None`)

    Returns:
        (GraphData, Canaries): the training data and the auditor's record.
    """
    check_node_data(data, m)
    rng = rng if rng is not None else secret_generator()
    included = draw_bits(m, rng, included)
    n = data.num_nodes
    src = rng.integers(0, n, size=2 * m)
    pairs = (n + np.arange(2 * m, dtype=np.int64)).reshape(m, 2)
    u, v = pairs[included, 0], pairs[included, 1]
    new_edges = np.stack([np.concatenate([u, v]), np.concatenate([v, u])])
    unused = SPLIT_NAMES.index("unused")
    out = replace(data, x=np.concatenate([data.x, data.x[src]]).astype(np.float32),
                  y=np.concatenate([np.asarray(data.y, np.int64),
                                    np.asarray(data.y, np.int64)[src]]),
                  split=np.concatenate([data.split, np.full(2 * m, unused, np.int8)]),
                  edge_index=np.ascontiguousarray(
                      np.concatenate([data.edge_index, new_edges], 1), dtype=np.int64),
                  meta={**data.meta, "audit": {"canaries": "edge", "m": m}})
    return out, Canaries(kind="edge", relation="add/remove", included=included, pairs=pairs)

def released_encodings(model: torch.nn.Module, data: GraphData, aggregations: torch.Tensor
                       ) -> torch.Tensor:
    """X(0), the row-normalised rows the first private aggregation summed, recomputed from
    the released model: GAP's encoder, or ProGAP's frozen stage 0 (its first aggregation
    sums stage 0's normalised embeddings); for DPDGC with label messages (no encoder is
    released) the one-hot training labels of the audited dataset, which the auditor
    built.

    Raises:
        DataError: a model with neither.
    """
    from dpgnn_core.methods.gap import row_normalise
    from dpgnn_core.models.dpdgc import DpdgcClassifier

    x = torch.from_numpy(data.x)
    with torch.no_grad():
        encoder = getattr(model, "encoder", None)
        if encoder is not None:
            return row_normalise(encoder.cpu().eval().encode(x))
        if isinstance(model, DpdgcClassifier):  # label messages: the auditor's own labels
            from dpgnn_core.methods.dpdgc_messages import label_rows

            train = torch.from_numpy(data.mask("train"))
            return label_rows(torch.from_numpy(np.asarray(data.y)), train, data.num_classes)
        embeddings = getattr(model, "embeddings", None)
        if embeddings is None:
            raise DataError("edge and star canaries are scored with the released encoder "
                            "(GAP) or stage 0 (ProGAP)", field="model",
                            value=type(model).__name__)
        h0: torch.Tensor = model.cpu().eval().embeddings(x, aggregations.cpu(), 0)[0]  # type: ignore[operator]
        return row_normalise(h0)


def score_edge_canaries(model: torch.nn.Module, aggregations: torch.Tensor, data: GraphData,
                        canaries: Canaries) -> npt.NDArray[np.float64]:
    """Each edge canary's score: minus ``<X1[u], X0[v]> + <X1[v], X0[u]>``, with X(1) the
    released first-hop aggregations and X(0) the normalised encodings from the encoder
    attached to the released classifier (lower = more likely a member)."""
    u, v = canaries.pairs[:, 0], canaries.pairs[:, 1]
    x0 = released_encodings(model, data, aggregations)
    x1 = aggregations[:, 0].cpu()
    s = (x1[u] * x0[v]).sum(1) + (x1[v] * x0[u]).sum(1)
    return np.asarray(-s.double().numpy())

def score_edge_canaries_reproduced_noise(spec: Any, aggregations: torch.Tensor,
                                         canaries: Canaries) -> npt.NDArray[np.float64]:
    """The attack on ``insecure_reproducible_noise``: regenerate PMA's first-hop noise from
    the stored seed (the stream :func:`~dpgnn_core.methods.gap.aggregate` draws it from)
    and measure how far each endpoint's released X(1) row turns away from it. An isolated
    endpoint without its canary edge aggregates nothing, so its row is the normalised noise
    exactly; with the edge it is not. Score: minus the sum over both endpoints of
    ``1 - cos(X1[u], noise[u])`` (lower = more likely a member). Against secret noise
    the regenerated noise is independent of the release and the attack is blind.
    """
    from dpgnn_core.privacy.randomness import Randomness

    x1 = aggregations[:, 0].cpu().double()
    gen = Randomness(int(spec.seed)).torch_generator("pma/noise", "cpu")
    noise = torch.randn(aggregations[:, 0].shape, generator=gen,
                        dtype=aggregations.dtype).double()
    cos = torch.nn.functional.cosine_similarity(x1, noise, dim=1)
    u, v = canaries.pairs[:, 0], canaries.pairs[:, 1]
    return np.asarray(-((1.0 - cos[u]) + (1.0 - cos[v])).numpy())


def _insert(plan: CanaryPlan, data: GraphData, m: int, scale: float,
            rng: np.random.Generator | None, included: npt.NDArray[np.bool_] | None
            ) -> tuple[GraphData, Canaries]:
    return insert_edge_canaries(data, m, rng=rng, included=included)


def _score(plan: CanaryPlan, model: torch.nn.Module, extra: dict[str, Any], data: GraphData,
           canaries: Canaries, spec: Any) -> npt.NDArray[np.float64]:
    if plan.attack == "reproduced-noise":
        return score_edge_canaries_reproduced_noise(spec, extra["aggregations"], canaries)
    return score_edge_canaries(model, extra["aggregations"], data, canaries)


#: The ``edge`` row of the canary table.
EDGE = CanaryKind(insert=_insert, score=_score)

__all__ = ["EDGE", "insert_edge_canaries", "released_encodings", "score_edge_canaries",
           "score_edge_canaries_reproduced_noise"]
