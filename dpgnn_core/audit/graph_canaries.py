r"""Graph canaries for the one-run audit of private graph classification (family
``graph-cls``, Mueller et al.): the method protects one graph (its nodes, edges, features
and label) under *add/remove*, so a canary is a whole graph.

Canary i is a small graph of ``nodes`` nodes (a cycle for three or more, one undirected
edge for two, an isolated node for one) whose nodes all carry the same feature row: zero
except one extra feature column of its own, ``d + i``, set to ``scale`` (a "Dirac"
canary, as the node canaries of :mod:`.canaries`: its direction is orthogonal to every real
node and to every other canary, so only canary i's own gradient moves the first-layer
weights that read column ``d + i``), and a graph label drawn uniformly from the classes.
All m extra columns exist in the audited dataset whatever the bits; a column is all zero in
the training data unless its canary is included. Each canary is included independently with
probability 1/2 as a *training* graph; an excluded canary is not in the data at all (no
node, edge, feature row or label), so the datasets of each bit are add/remove neighbours
exactly as the accounting assumes. The canary graphs are regular and their nodes
identical, so a GCN or GraphSAGE layer maps each node to the same row and mean pooling
returns it: the graph's structure adds nothing for the attacker to separate, the model
sees one out-of-distribution point per canary.

Attack (black-box; the attacker's guess "in" for the lowest scores): the cross-entropy of
the canary's label under the final model on the canary graph, logit-scaled
(:func:`score_graph_canaries`: the same ranking, without the floating-point ties at 0).

The inclusion bits and labels come from :func:`~dpgnn_core.audit.canary_record.secret_generator`
(128 bits from the operating system's CSPRNG, never from the spec's seed) unless the caller
passes a generator.

Fields of :class:`~dpgnn_core.audit.canary_record.Canaries` for ``kind="graph"`` (no field
added): ``features`` float32 ``[m, d']`` is the row every node of canary i carries
(d' = d + m); ``labels`` int64 ``[m]`` the graph labels; ``pairs`` int64 ``[e, 2]`` the
directed edges of the canary graph in local node numbering (the same graph for every
canary: an empty array for a one-node canary, both directions otherwise, so the node count
is ``pairs.max() + 1``); ``node_ids`` int64 ``[m]`` the canary's *graph* id in the
training data, -1 when excluded.
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
    draw_bits,
    secret_generator,
)
from dpgnn_core.audit.defaults import DEFAULT_SCALE
from dpgnn_core.data.graph import TRAIN, GraphData
from dpgnn_core.errors import DataError

#: Default nodes of a canary graph.
DEFAULT_NODES = 4


def canary_graph_edges(nodes: int) -> npt.NDArray[np.int64]:
    """Directed edges ``[e, 2]`` (both directions) of the canary graph on ``nodes`` local
    nodes: a cycle for three or more, one undirected edge for two, none for one.

    Raises:
        DataError: ``nodes`` < 1.
    """
    if nodes < 1:
        raise DataError("a canary graph needs at least one node", field="nodes", value=nodes)
    if nodes == 1:
        return np.zeros((0, 2), np.int64)
    ring = np.arange(nodes, dtype=np.int64)
    succ = (ring + 1) % nodes
    und = np.stack([ring, succ], 1) if nodes > 2 else np.array([[0, 1]], np.int64)
    return np.ascontiguousarray(np.concatenate([und, und[:, ::-1]]), dtype=np.int64)


def check_spec(spec: Any) -> None:
    """Refuse a model the canaries cannot reach, before anything is trained: instance norm
    maps each canary graph (identical nodes) to zero rows, so the model cannot tell the
    canaries apart and the audit would have no power (a bound of 0 that says nothing).

    Raises:
        DataError: ``spec.norm`` is ``"instance"``.
    """
    if getattr(spec, "norm", None) == "instance":
        raise DataError("graph canaries are invisible under instance norm (every canary "
                        "graph normalises to zero rows): audit a model without it",
                        field="norm", value="instance")


def _check_graph_data(data: GraphData, m: int) -> None:
    if (data.task != "graph" or data.graph_id is None or data.graph_y is None
            or data.graph_split is None):
        raise DataError("graph canaries are inserted into graph-classification data",
                        field="task", value=data.task)
    if m < 1:
        raise DataError("an audit needs at least one canary", field="m", value=m)


def insert_graph_canaries(data: GraphData, m: int, *, rng: np.random.Generator | None = None,
                          nodes: int = DEFAULT_NODES, scale: float = DEFAULT_SCALE,
                          included: npt.NDArray[np.bool_] | None = None
                          ) -> tuple[GraphData, Canaries]:
    """Add m graph canaries (see the module docstring): m extra feature columns, one per
    canary, and the included canaries as training graphs after the real ones.

    Args:
        data (GraphData): graph-classification data.
        m (int): canaries.
        rng (np.random.Generator, optional): source of the bits and labels; a fresh
            CSPRNG-seeded one by default (:func:`secret_generator`). (default: :obj:`None`)
        nodes (int, optional): nodes of each canary graph. (default: :obj:`4`)
        scale (float, optional): value of a canary's own feature column.
            (default: :obj:`10.0`)
        included (np.ndarray, optional): bool ``[m]``, bits to use instead of drawn ones
            (the multi-run audit). (default: :obj:`None`)

    Returns:
        (GraphData, Canaries): the training data and the auditor's record.

    Raises:
        DataError: not graph data, m < 1, or ``nodes`` < 1.
    """
    _check_graph_data(data, m)
    local = canary_graph_edges(nodes)
    rng = rng if rng is not None else secret_generator()
    included = draw_bits(m, rng, included)
    labels = rng.integers(0, data.num_classes, size=m, dtype=np.int64)
    assert data.graph_id is not None and data.graph_y is not None
    assert data.graph_split is not None
    n, d, g = data.num_nodes, data.num_features, data.num_graphs
    features = np.zeros((m, d + m), dtype=np.float32)
    features[np.arange(m), d + np.arange(m)] = np.float32(scale)
    slots = np.flatnonzero(included)
    k = int(slots.shape[0])
    graph_ids = np.full(m, -1, dtype=np.int64)
    graph_ids[slots] = g + np.arange(k)
    # the included canaries' nodes: `nodes` per canary, numbered after the real nodes
    rows = np.repeat(features[slots], nodes, axis=0)
    first = n + nodes * np.arange(k, dtype=np.int64)
    new_edges = (first[:, None, None] + local[None]).reshape(-1, 2).T
    x = np.concatenate([np.concatenate([data.x, np.zeros((n, m), np.float32)], 1), rows])
    edge_attr = data.edge_attr
    if edge_attr is not None:  # canary edges carry no attributes: zero rows
        edge_attr = np.concatenate(
            [edge_attr, np.zeros((new_edges.shape[1], edge_attr.shape[1]), np.float32)])
    out = replace(
        data, x=np.ascontiguousarray(x, dtype=np.float32),
        edge_index=np.ascontiguousarray(np.concatenate([data.edge_index, new_edges], 1),
                                        dtype=np.int64),
        y=np.concatenate([np.asarray(data.y, np.int64), np.full(k * nodes, -1, np.int64)]),
        split=np.concatenate([data.split, np.full(k * nodes, TRAIN, np.int8)]),
        graph_id=np.concatenate([np.asarray(data.graph_id, np.int64),
                                 np.repeat(g + np.arange(k, dtype=np.int64), nodes)]),
        graph_y=np.concatenate([np.asarray(data.graph_y, np.int64), labels[slots]]),
        graph_split=np.concatenate([np.asarray(data.graph_split, np.int8),
                                    np.full(k, TRAIN, np.int8)]),
        edge_attr=edge_attr,
        meta={**data.meta, "audit": {"canaries": "graph", "m": m, "relation": "add/remove",
                                     "nodes": nodes}})
    return out, Canaries(kind="graph", relation="add/remove", included=included,
                         features=features, labels=labels, pairs=local, node_ids=graph_ids)


def canary_logits(model: torch.nn.Module, canaries: Canaries, chunk: int = 512
                  ) -> torch.Tensor:
    """Logits ``[m, C]`` of ``model`` (a :class:`~dpgnn_core.models.graph_gnn.GraphGNN`) on
    every canary graph, included or not, in the dense form the model trains on."""
    local = canaries.pairs
    nodes = int(local.max()) + 1 if local.shape[0] else 1
    adj = torch.zeros((nodes, nodes), dtype=torch.float32)
    adj[torch.from_numpy(local[:, 1]), torch.from_numpy(local[:, 0])] = 1.0  # j -> i
    dev = next(model.parameters()).device
    feats = torch.from_numpy(np.ascontiguousarray(canaries.features))
    model.eval()
    out = []
    with torch.no_grad():
        for s in range(0, canaries.m, chunk):
            f = feats[s:s + chunk]
            b = f.shape[0]
            x = f[:, None, :].expand(b, nodes, f.shape[1]).contiguous()
            mask = torch.ones((b, nodes), dtype=torch.bool)
            out.append(model(x.to(dev), adj.expand(b, nodes, nodes).contiguous().to(dev),
                             mask.to(dev)).cpu())
    return torch.cat(out)


def score_graph_canaries(model: torch.nn.Module, canaries: Canaries
                         ) -> npt.NDArray[np.float64]:
    r"""Each graph canary's score: the logit-scaled cross-entropy of its label y under
    ``model`` on the canary graph (lower = more likely a member),

    .. math::
        s = \log\frac{1 - p_y}{p_y} = \operatorname{logsumexp}_{j \ne y} z_j - z_y,

    a strictly increasing function of the cross-entropy :math:`-\log p_y` (the same
    ranking, so the same guesses in exact arithmetic) computed from the logits z directly:
    the cross-entropy of a memorised canary and of a confidently right excluded one both
    round to 0 in floating point, a tie the guess would break by position, while their
    logit margins still differ (LiRA's logit scaling, Carlini et al. 2022).

    Raises:
        DataError: the record is not of graph canaries, or the model uses instance norm
            (:func:`check_spec`).
    """
    if canaries.kind != "graph":
        raise DataError("these are not graph canaries", field="kind", value=canaries.kind)
    check_spec(model)
    z = canary_logits(model, canaries).double()
    y = torch.from_numpy(canaries.labels)
    zy = z.gather(1, y[:, None])[:, 0]
    others = z.scatter(1, y[:, None], -torch.inf)
    return np.asarray((torch.logsumexp(others, 1) - zy).numpy())


def _insert(plan: CanaryPlan, data: GraphData, m: int, scale: float,
            rng: np.random.Generator | None, included: npt.NDArray[np.bool_] | None
            ) -> tuple[GraphData, Canaries]:
    return insert_graph_canaries(data, m, scale=scale, rng=rng, included=included)


def _score(plan: CanaryPlan, model: torch.nn.Module, extra: dict[str, Any], data: GraphData,
           canaries: Canaries, spec: Any) -> npt.NDArray[np.float64]:
    return score_graph_canaries(model, canaries)


#: The ``graph`` row of the canary table.
GRAPH = CanaryKind(insert=_insert, score=_score)

__all__ = ["DEFAULT_NODES", "GRAPH", "canary_graph_edges", "canary_logits", "check_spec",
           "insert_graph_canaries", "score_graph_canaries"]
