r"""Canaries and membership attacks for the one-run audit (:mod:`.bounds`): insert m
canaries, each included independently with probability 1/2, train once through the
registry, score every canary, guess, and bound ε.

Two kinds of canary, by what the method protects:

* **Node canaries** (DP-MLP, DP-GNN, DRW: a node's features and label). Canary i is an
  isolated node whose features are zero except one extra feature column of its own,
  ``d + i``, set to ``scale`` (a "Dirac" canary: its direction is orthogonal to every
  real node and to every other canary, so nothing but the canary itself moves the
  parameters that read it), with a label drawn uniformly. All m extra columns exist in the
  audited dataset whatever the bits; a column is all zero in the training data unless its
  canary is included. Isolated, because a canary's effect on the model must come from its
  own record only: an edge to a real node would put the canary into that node's subgraph
  (DP-GNN, DRW) and, for an excluded canary, the edge itself would have to go too, which
  changes the structure these methods treat as public. The neighbouring relation follows
  the method's claim: *add/remove* (DP-MLP) builds the training data with the included
  canaries only (an excluded one is not a node at all); *replace-one* (DP-GNN and DRW,
  whose accounting fixes the number of training records N) keeps m canary slots as
  training nodes and fills an excluded slot with a blank record (all-zero features, the
  same label), so the two datasets of each bit are replace-one neighbours and no excluded
  canary's features reach the training data.
  GAP-NDP (a node with its edges, add/remove) takes the same isolated canaries, scored
  by its classifier on the canary's own encoding with zero aggregations (what an isolated
  node aggregates before the noise).
* **Edge canaries** (GAP-EDP, and GAP-∞ as its non-private control: one edge). 2m fresh
  nodes in the ``unused`` split (so the encoder and classifier train on the same rows
  whatever the bits), with the features of random real nodes (public at edge level);
  canary i is the undirected edge between the pair (u_i, v_i), included with probability
  1/2. An isolated pair makes the canary edge the only message each endpoint receives, so
  u_i's first aggregation is v_i's encoding plus noise when the edge is in, and noise alone
  when it is out: the largest effect a single edge can have on the release.

Attacks (scores; the attacker's guess "in" for the lowest scores):

* node canaries, black-box: the cross-entropy of the canary's label under the final model
  on the canary's features as an isolated node;
* edge canaries, the released aggregations: minus the inner product of each endpoint's
  private first-hop aggregation X(1) with the other endpoint's encoding X(0) (the encoder
  is released with the classifier), summed over both directions.

The number of guesses is fixed before any score is seen: the k lowest scores are guessed
"in", the k highest "out", with k = ``round(guess_fraction · m / 2)``; r = 2k. The
inclusion bits come from :mod:`secrets` (never from the spec's seed) unless the caller
passes a generator.
"""

from __future__ import annotations

import math
import secrets
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import torch

from dpgnn_core.audit.bounds import DEFAULT_BETA, AuditBound, one_run_audit
from dpgnn_core.audit.defaults import DEFAULT_GUESS_FRACTION, DEFAULT_SCALE
from dpgnn_core.data.graph import SPLIT_NAMES, TRAIN, GraphData
from dpgnn_core.errors import DataError

Relation = Literal["add/remove", "replace-one"]
Kind = Literal["node", "edge", "star", "node-edges", "graph"]


#: The canary kind and the neighbouring relation of each method family.
FAMILY_CANARIES: dict[str, tuple[Kind, Relation]] = {
    "dp-mlp": ("node", "add/remove"),
    "dp-gnn": ("node", "replace-one"),
    "drw": ("node", "replace-one"),
    "gap": ("edge", "add/remove"),
    "progap": ("edge", "add/remove"),
    "graph-cls": ("graph", "add/remove"),
}

THREAT_MODELS: dict[str, str] = {
    "graph": "black-box: the final model's cross-entropy loss of each canary graph's label "
             "on the canary graph, logit-scaled (log((1 - p) / p), the same ranking; lower "
             "= member)",
    "node": "black-box: the final model's cross-entropy loss of each canary's label on its "
            "features as an isolated node (lower = member)",
    "edge": "released aggregations: inner product of each canary endpoint's private "
            "first-hop aggregation X(1) with the other endpoint's encoding X(0) from the "
            "released encoder, both directions summed (higher = member)",
    "edge-reproduced-noise": "released aggregations and the stored spec seed: PMA's "
            "first-hop noise regenerated from the seed (valid only against "
            "insecure_reproducible_noise), each canary endpoint's X(1) compared with it "
            "(an endpoint whose row is the normalised noise received no canary message)",
    "node-edges": "black-box: the final model's cross-entropy of each canary's label on "
            "its features as an isolated node, plus on each of its leaves fed with the "
            "canary's message along its out-edge (lower = member)",
    "star": "released aggregations: each hub's private first-hop aggregation X(1) against "
            "its leaves' encoding X(0), weighted by the degree D, plus each leaf's X(1) "
            "against the hub's X(0), with the released encoder (higher = member)",
}


def secret_generator() -> np.random.Generator:
    """A numpy generator seeded with 128 bits from the operating system's CSPRNG: the
    canaries' inclusion bits must not be derivable from anything the run stores."""
    return np.random.default_rng(secrets.randbits(128))


@dataclass(frozen=True)
class Canaries:
    """The canaries of one audit: what the auditor keeps (the trainer sees ``data`` only).

    Attributes:
        kind (str): ``"node"`` or ``"edge"``.
        relation (str): ``"add/remove"`` or ``"replace-one"``.
        included (np.ndarray): bool ``[m]``, the secret inclusion bits.
        features (np.ndarray): node canaries: float32 ``[m, d']``, each canary's features
            in the audited feature space (d' = d + m); edge canaries: ``[0, 0]``.
        labels (np.ndarray): node canaries: int64 ``[m]``; edge canaries: empty.
        pairs (np.ndarray): edge canaries: int64 ``[m, 2]``, the endpoints (node ids of the
            audited data); node canaries: ``[0, 2]``.
        node_ids (np.ndarray): node canaries: int64 ``[m]``, the canary's node in the
            training data, -1 when it is not a node there (excluded under add/remove).

    Graph canaries (``kind="graph"``) use the same fields for a graph each:
    ``features`` is the row every node of the canary carries, ``labels`` the graph labels,
    ``pairs`` the canary graph's local edges, ``node_ids`` its graph id in the training
    data (see :mod:`~dpgnn_core.audit.graph_canaries`).
    """

    kind: Kind
    relation: Relation
    included: npt.NDArray[np.bool_]
    features: npt.NDArray[np.float32] = field(
        default_factory=lambda: np.zeros((0, 0), np.float32))
    labels: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, np.int64))
    pairs: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros((0, 2), np.int64))
    node_ids: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, np.int64))
    leaves: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros((0, 0), np.int64))

    @property
    def m(self) -> int:
        return int(self.included.shape[0])

    def save(self, path: str | Path) -> None:
        """Write the record to ``path`` (``.npz``), atomically: it is the auditor's, kept
        beside the audited dataset so the score step can read the bits after guessing."""
        from dpgnn_core.io import atomic_file

        arrays = {f.name: np.asarray(getattr(self, f.name)) for f in fields(self)}
        with atomic_file(path) as tmp, open(tmp, "wb") as fh:
            np.savez(fh, **arrays)  # type: ignore[arg-type]

    @classmethod
    def load(cls, path: str | Path) -> Canaries:
        """Read a record written by :meth:`save`."""
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
        return cls(kind=str(arrays.pop("kind")), relation=str(arrays.pop("relation")),  # type: ignore[arg-type]
                   **arrays)


def _draw_bits(m: int, rng: np.random.Generator,
               included: npt.NDArray[np.bool_] | None = None) -> npt.NDArray[np.bool_]:
    """Each canary in with probability 1/2, or the caller's bits (a multi-run audit builds
    the same canary once in and once out). The draw is made either way, so the rest of the
    canary (labels, copied nodes) is the same for both."""
    bits = np.asarray(rng.random(m) < 0.5)
    if included is None:
        return bits
    forced = np.asarray(included, dtype=bool)
    if forced.shape != (m,):
        raise DataError("included must hold one bit per canary", field="included",
                        value=list(forced.shape))
    return forced


def _check_node_data(data: GraphData, m: int) -> None:
    if data.task != "node" or data.multi_label:
        raise DataError("canaries are inserted into single-label node data", field="task",
                        value=data.task)
    if m < 1:
        raise DataError("an audit needs at least one canary", field="m", value=m)


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
    _check_node_data(data, m)
    rng = rng if rng is not None else secret_generator()
    included = _draw_bits(m, rng, included)
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
    _check_node_data(data, m)
    rng = rng if rng is not None else secret_generator()
    included = _draw_bits(m, rng, included)
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
    _check_node_data(data, m)
    if int(degree) != degree or degree < 1:
        raise DataError("a star canary needs a degree >= 1", field="degree", value=degree)
    rng = rng if rng is not None else secret_generator()
    included = _draw_bits(m, rng, included)
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


# --------------------------------------------------------------------------- scoring


def _canary_logits(family: str, model: torch.nn.Module, x: npt.NDArray[np.float32]
                   ) -> torch.Tensor:
    """Logits of the model on canary features, each canary an isolated node."""
    model = model.cpu().eval()
    xt = torch.from_numpy(np.ascontiguousarray(x))
    with torch.no_grad():
        if family == "dp-mlp":
            out: torch.Tensor = model(xt)
        elif family == "gap":  # GAP-NDP: an isolated node aggregates nothing (zero rows)
            from dpgnn_core.methods.gap import GapClassifier

            assert isinstance(model, GapClassifier)
            enc_dim = model.encoder.encoder_dim if model.encoder is not None else 0
            zeros = torch.zeros((xt.shape[0], model.hops, enc_dim))
            out = model(model.inputs(xt, zeros))
        else:
            out = model.forward_sparse(xt, torch.zeros((2, 0), dtype=torch.int64))  # type: ignore[operator]
    return out


def score_node_canaries(family: str, model: torch.nn.Module, canaries: Canaries
                        ) -> npt.NDArray[np.float64]:
    """Each canary's score: the cross-entropy of its label under ``model`` on its features
    as an isolated node (lower = more likely a member)."""
    logits = _canary_logits(family, model, canaries.features)
    loss = torch.nn.functional.cross_entropy(logits, torch.from_numpy(canaries.labels),
                                             reduction="none")
    return np.asarray(loss.double().numpy())


def released_encodings(model: torch.nn.Module, data: GraphData, aggregations: torch.Tensor
                       ) -> torch.Tensor:
    """X(0), the row-normalised rows the first private aggregation summed, recomputed from
    the released model: GAP's encoder, or ProGAP's frozen stage 0 (its first aggregation
    sums stage 0's normalised embeddings).

    Raises:
        DataError: a model with neither.
    """
    from dpgnn_core.methods.gap import row_normalise

    x = torch.from_numpy(data.x)
    with torch.no_grad():
        encoder = getattr(model, "encoder", None)
        if encoder is not None:
            return row_normalise(encoder.cpu().eval().encode(x))
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


def score_node_edge_canaries(model: torch.nn.Module, canaries: Canaries
                             ) -> npt.NDArray[np.float64]:
    """Each node-with-edges canary's score: its own cross-entropy as an isolated node
    (:func:`score_node_canaries`) plus the mean cross-entropy of its label at its leaves,
    each leaf fed the canary's message along one edge (lower = more likely a member)."""
    own = score_node_canaries("dp-gnn", model, canaries)
    m, width = canaries.features.shape
    x = torch.from_numpy(np.concatenate([canaries.features, np.zeros((m, width), np.float32)]))
    edge = torch.stack([torch.arange(m), m + torch.arange(m)])  # canary i -> its leaf
    with torch.no_grad():
        logits = model.cpu().eval().forward_sparse(x, edge)[m:]  # type: ignore[operator]
    leaf = torch.nn.functional.cross_entropy(logits, torch.from_numpy(canaries.labels),
                                             reduction="none")
    return np.asarray(own + leaf.double().numpy(), dtype=np.float64)


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


def guess(scores: npt.NDArray[np.float64], k: int) -> npt.NDArray[np.int8]:
    """+1 ("in") for the k lowest scores, -1 ("out") for the k highest, 0 (abstain) for
    the rest; ties broken by position (stable sort).

    Raises:
        DataError: 2k exceeds the number of scores.
    """
    m = scores.shape[0]
    if k < 0 or 2 * k > m:
        raise DataError("guesses per side must be between 0 and m / 2", field="k", value=k)
    order = np.argsort(scores, kind="stable")
    out = np.zeros(m, dtype=np.int8)
    out[order[:k]] = 1
    if k:
        out[order[m - k:]] = -1
    return out


# --------------------------------------------------------------------------- the audit


@dataclass(frozen=True)
class AuditResult:
    """The outcome of one one-run audit.

    Attributes:
        method (str): the registered method audited.
        bound (AuditBound): the ε lower bound at confidence 1 − β.
        reported_epsilon (float): ε the fitted run reports (inf for a non-private run).
        delta (float): δ the bound is stated at.
        threat_model (str): what the attacker sees and how it scores.
        kind (str): ``"node"`` or ``"edge"`` canaries.
        relation (str): the neighbouring relation the canaries realise.
        m (int): canaries.
        r (int): guesses made.
        v (int): correct guesses.
        scores (np.ndarray): float ``[m]``, each canary's score (lower = "in").
        included (np.ndarray): bool ``[m]``, the inclusion bits (revealed after the guess).
        guesses (np.ndarray): int8 ``[m]``: +1 "in", -1 "out", 0 abstained.
        report (Mapping): the fitted run's privacy report.
    """

    method: str
    bound: AuditBound
    reported_epsilon: float
    delta: float
    threat_model: str
    kind: Kind
    relation: Relation
    m: int
    r: int
    v: int
    scores: npt.NDArray[np.float64]
    included: npt.NDArray[np.bool_]
    guesses: npt.NDArray[np.int8]
    report: Any = None

    @property
    def epsilon_lower(self) -> float:
        return self.bound.epsilon_lower

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary (without the score arrays)."""
        return {"method": self.method, "reported_epsilon": self.reported_epsilon,
                "epsilon_lower": self.bound.epsilon_lower,
                "confidence": self.bound.confidence, "delta": self.delta,
                "threat_model": self.threat_model, "canaries": self.kind,
                "relation": self.relation, "m": self.m, "r": self.r, "v": self.v}


def canaries_for(family: str) -> tuple[Kind, Relation]:
    """The canary kind and neighbouring relation audited for a method family.

    Raises:
        DataError: a family without canaries yet (the baselines).
    """
    try:
        return FAMILY_CANARIES[family]
    except KeyError:
        raise DataError("no canaries for this method family yet", field="family",
                        value=family) from None


@dataclass(frozen=True)
class AuditPlan:
    """What an audit of one spec inserts and how it attacks, decided before any data is
    read (:func:`plan_audit`).

    Attributes:
        method (str): the registered method.
        family (str): its family.
        kind (str): canary kind (``node``, ``edge``, ``star``).
        relation (str): the neighbouring relation the canaries realise.
        attack (str): ``default`` or ``reproduced-noise``.
        threat_model (str): what the attacker sees and how it scores.
        degree (int): star canaries' degree D (0 for other kinds).
    """

    method: str
    family: str
    kind: Kind
    relation: Relation
    attack: str
    threat_model: str
    degree: int = 0


def plan_audit(method_name: str, spec: Any, attack: str = "default") -> AuditPlan:
    """The canaries and attack for ``spec``: the method family's unit (node canaries for
    DP-MLP, DP-GNN and DRW; edge canaries for GAP-EDP and GAP-∞), and for GAP-NDP, which
    protects a node *with its edges*, star canaries of degree D = ``max_degree``.

    Raises:
        DataError: a method without canaries, or an attack that does not apply.
    """
    from dpgnn_core.methods.registry import get

    method = get(method_name)
    kind, relation = canaries_for(method.family)
    degree = 0
    if method.family in ("gap", "progap") and getattr(spec, "level", None) == "node":
        kind, relation = "star", "add/remove"  # GAP-NDP: a node with its edges
        degree = int(spec.max_degree)
    elif method.family == "dp-gnn" and getattr(spec, "level", None) == "node":
        kind = "node-edges"  # DP-GNN's row model on directed graphs: features, label, row
    elif kind == "graph":
        from dpgnn_core.audit.graph_canaries import check_spec

        check_spec(spec)  # instance norm would hide the canaries
    if attack not in ("default", "reproduced-noise"):
        raise DataError("unknown attack", field="attack", value=attack)
    if attack == "reproduced-noise" and kind != "edge":
        raise DataError("the reproduced-noise attack is implemented for GAP-EDP only",
                        field="attack", value=attack)
    threat = THREAT_MODELS[kind if attack == "default" else f"{kind}-{attack}"]
    return AuditPlan(method=method_name, family=method.family, kind=kind,
                     relation=relation, attack=attack, threat_model=threat, degree=degree)


def insert_canaries(plan: AuditPlan, data: GraphData, m: int, *,
                    scale: float = DEFAULT_SCALE, rng: np.random.Generator | None = None,
                    included: npt.NDArray[np.bool_] | None = None
                    ) -> tuple[GraphData, Canaries]:
    """Insert the plan's m canaries into ``data`` (each in with probability 1/2, or the
    given bits); see :func:`insert_node_canaries`, :func:`insert_edge_canaries` and
    :func:`insert_star_canaries`."""
    if plan.kind == "node":
        return insert_node_canaries(data, m, relation=plan.relation, scale=scale, rng=rng,
                                    included=included)
    if plan.kind == "star":
        return insert_star_canaries(data, m, plan.degree, rng=rng, included=included)
    if plan.kind == "graph":
        from dpgnn_core.audit.graph_canaries import insert_graph_canaries

        return insert_graph_canaries(data, m, scale=scale, rng=rng, included=included)
    if plan.kind == "node-edges":
        return insert_node_edge_canaries(data, m, scale=scale, rng=rng, included=included)
    return insert_edge_canaries(data, m, rng=rng, included=included)


def score_canaries(plan: AuditPlan, model: torch.nn.Module, extra: dict[str, Any],
                   data: GraphData, canaries: Canaries, spec: Any
                   ) -> npt.NDArray[np.float64]:
    """Every canary's score under the plan's attack (lower = guessed "in"), from the
    fitted model and what it released (``extra["aggregations"]`` for GAP)."""
    if plan.kind == "node":
        return score_node_canaries(plan.family, model, canaries)
    if plan.kind == "star":
        return score_star_canaries(model, extra["aggregations"], data, canaries)
    if plan.kind == "node-edges":
        return score_node_edge_canaries(model, canaries)
    if plan.kind == "graph":
        from dpgnn_core.audit.graph_canaries import score_graph_canaries

        return score_graph_canaries(model, canaries)
    if plan.attack == "reproduced-noise":
        return score_edge_canaries_reproduced_noise(spec, extra["aggregations"], canaries)
    return score_edge_canaries(model, extra["aggregations"], data, canaries)


def guesses_per_side(m: int, guess_fraction: float = DEFAULT_GUESS_FRACTION) -> int:
    """k = round(guess_fraction · m / 2): the guesses made on each side, fixed before any
    score is seen."""
    if not 0.0 < guess_fraction <= 1.0:
        raise DataError("guess_fraction must lie in (0, 1]", field="guess_fraction",
                        value=guess_fraction)
    return round(guess_fraction * m / 2)


def conclude(plan: AuditPlan, scores: npt.NDArray[np.float64], canaries: Canaries,
             report: Any, *, guess_fraction: float = DEFAULT_GUESS_FRACTION,
             delta: float | None = None, beta: float = DEFAULT_BETA) -> AuditResult:
    """Guess (the k lowest scores "in", the k highest "out"), then reveal the bits, count
    the correct guesses and bound ε (:func:`~dpgnn_core.audit.bounds.one_run_audit`) at
    ``delta`` (the run's reported δ by default)."""
    m = canaries.m
    guesses = guess(scores, guesses_per_side(m, guess_fraction))
    made = guesses != 0
    truth = np.where(canaries.included, 1, -1)
    v = int((guesses[made] == truth[made]).sum())
    r = int(made.sum())
    d = float(delta) if delta is not None else float(report.get("delta") or 0.0)
    bound = one_run_audit(m, r, v, d, beta)
    eps = report.get("epsilon")
    return AuditResult(method=plan.method, bound=bound,
                       reported_epsilon=math.inf if eps is None else float(eps), delta=d,
                       threat_model=plan.threat_model, kind=plan.kind,
                       relation=plan.relation, m=m, r=r, v=v, scores=scores,
                       included=canaries.included, guesses=guesses, report=report)


def audit(method_name: str, data: GraphData, spec: Any, m: int, delta: float | None = None,
          beta: float = DEFAULT_BETA, rng: np.random.Generator | None = None, *,
          guess_fraction: float = DEFAULT_GUESS_FRACTION, scale: float = DEFAULT_SCALE,
          attack: Literal["default", "reproduced-noise"] = "default") -> AuditResult:
    """One-run audit of ``method_name`` on ``data`` with m canaries: insert them (each in
    with probability 1/2), train ``spec`` through the registry, score every canary, guess
    the k lowest scores "in" and the k highest "out" (k fixed in advance from
    ``guess_fraction``), and bound ε from the correct guesses
    (:func:`~dpgnn_core.audit.bounds.one_run_audit`). The ``dpgnn audit`` flow runs the
    same steps (:func:`plan_audit`, :func:`insert_canaries`, the registry's fit,
    :func:`score_canaries`, :func:`conclude`) as cached tasks.

    Args:
        method_name (str): a registered name (``dp-mlp``, ``dp-gcn``, ``drw-gcn``,
            ``gap-edp``, ``gap-ndp``, and the non-private controls ``gap-inf`` or a spec
            with ``epsilon=None``).
        data (GraphData): the base dataset.
        spec: the method's spec (batch size left unset adapts to the data with canaries).
        m (int): canaries.
        delta (float, optional): δ of the bound; the run's reported δ by default.
            (default: :obj:`None`)
        beta (float, optional): 1 − confidence. (default: :obj:`0.05`)
        rng (np.random.Generator, optional): source of the canaries' bits; a fresh
            CSPRNG-seeded generator by default. (default: :obj:`None`)
        guess_fraction (float, optional): fraction of canaries guessed, half "in" and half
            "out". (default: :obj:`0.5`)
        scale (float, optional): node canaries' feature value. (default: :obj:`10.0`)
        attack (str, optional): ``"default"`` (:data:`THREAT_MODELS` of the kind) or, for
            GAP-EDP, ``"reproduced-noise"``: the attacker regenerates PMA's noise from
            the spec's seed (:func:`score_edge_canaries_reproduced_noise`), the control
            that shows ``insecure_reproducible_noise`` voids the guarantee.
            (default: ``"default"``)

    Returns:
        AuditResult: the bound, the reported ε, the threat model, counts and scores.
    """
    from dpgnn_core.methods.registry import get

    plan = plan_audit(method_name, spec, attack)
    guesses_per_side(m, guess_fraction)  # refuse a bad fraction before training
    train_data, can = insert_canaries(plan, data, m, scale=scale, rng=rng)
    fitted = get(method_name).fit(train_data, spec)
    scores = score_canaries(plan, fitted.model, fitted.extra, train_data, can, spec)
    return conclude(plan, scores, can, fitted.report, guess_fraction=guess_fraction,
                    delta=delta, beta=beta)


# --------------------------------------------------------------------------- multi-run


def multi_run_bits(runs: int, rng: np.random.Generator | None = None
                   ) -> npt.NDArray[np.bool_]:
    """The canary's bit in each of ``runs`` trainings (in with probability 1/2), from a
    CSPRNG-seeded generator by default.

    Raises:
        DataError: fewer than 4 runs (two halves of at least two runs each).
    """
    if int(runs) != runs or runs < 4:
        raise DataError("a multi-run audit needs at least 4 runs", field="runs", value=runs)
    rng = rng if rng is not None else secret_generator()
    return np.asarray(rng.random(int(runs)) < 0.5)


def multi_run_conclude(plan: AuditPlan, scores: npt.NDArray[np.float64],
                       included: npt.NDArray[np.bool_], report: Any, *,
                       delta: float | None = None, beta: float = DEFAULT_BETA
                       ) -> AuditResult:
    """The classic multi-run audit from one canary's score in each run.

    The test must be fixed before the outcomes it is judged on: the first half of the runs
    (by index) chooses the threshold t, the one among their scores whose test "in iff
    score <= t" has the largest empirical ε on that half; the second half is judged with
    it: TP, FN, FP, TN there give the Clopper–Pearson bound
    (:func:`~dpgnn_core.audit.bounds.multi_run_audit`). The runs are independent
    trainings (fresh secret noise, each its own initialisation seed), so the second half's
    counts are independent Bernoulli trials given t.
    """
    from dpgnn_core.audit.bounds import multi_run_audit

    runs = scores.shape[0]
    half = runs // 2
    s1, b1 = scores[:half], included[:half]
    best_t, best = float(np.median(s1)), -math.inf
    for t in np.unique(s1):
        pin = s1 <= t
        tpr = (pin & b1).sum() / max(int(b1.sum()), 1)
        fpr = (pin & ~b1).sum() / max(int((~b1).sum()), 1)
        # empirical epsilon of the test, with +1/2 smoothing so 0 and 1 stay finite
        e = max(math.log((tpr + 0.5 / runs) / (fpr + 0.5 / runs)),
                math.log((1 - fpr + 0.5 / runs) / (1 - tpr + 0.5 / runs)))
        if e > best:
            best, best_t = e, float(t)
    s2, b2 = scores[half:], included[half:]
    pin = s2 <= best_t
    tp, fn = int((pin & b2).sum()), int((~pin & b2).sum())
    fp, tn = int((pin & ~b2).sum()), int((~pin & ~b2).sum())
    d = float(delta) if delta is not None else float(report.get("delta") or 0.0)
    bound = multi_run_audit(tp, fn, fp, tn, d, beta)
    eps = report.get("epsilon")
    guesses = np.where(scores <= best_t, 1, -1).astype(np.int8)
    guesses[:half] = 0  # the first half chose the test; only the second half is judged
    return AuditResult(method=plan.method, bound=bound,
                       reported_epsilon=math.inf if eps is None else float(eps), delta=d,
                       threat_model=plan.threat_model, kind=plan.kind,
                       relation=plan.relation, m=1, r=runs - half, v=tp + tn,
                       scores=scores, included=included, guesses=guesses, report=report)


def audit_multi_run(method_name: str, data: GraphData, spec: Any, runs: int,
                    delta: float | None = None, beta: float = DEFAULT_BETA,
                    rng: np.random.Generator | None = None, *, scale: float = DEFAULT_SCALE,
                    attack: Literal["default", "reproduced-noise"] = "default"
                    ) -> AuditResult:
    """The classic multi-run audit of one canary (for small settings: ``runs`` trainings):
    the canary is the same in every run (one draw), in or out by a secret coin per run;
    run r trains with initialisation seed ``spec.seed + r`` and fresh secret noise. See
    :func:`multi_run_conclude` for the test. The ``dpgnn audit --runs R`` flow runs the
    same steps as cached tasks.

    Returns:
        AuditResult: ``bound.method == "multi-run"``, m = 1, r = judged runs, v = correct.
    """
    from dpgnn_core.methods.registry import get

    plan = plan_audit(method_name, spec, attack)
    bits = multi_run_bits(runs, rng)
    seed = secrets.randbits(128) if rng is None else int(rng.integers(2**62))
    pair = {b: insert_canaries(plan, data, 1, scale=scale, rng=np.random.default_rng(seed),
                               included=np.array([b])) for b in (True, False)}
    method = get(method_name)
    scores = np.zeros(runs)
    report: Any = {}
    for r, b in enumerate(bits):
        train_data, can = pair[bool(b)]
        fitted = method.fit(train_data, spec.model_copy(update={"seed": spec.seed + r}))
        scores[r] = score_canaries(plan, fitted.model, fitted.extra, train_data, can, spec)[0]
        report = fitted.report
    return multi_run_conclude(plan, scores, bits, report, delta=delta, beta=beta)


__all__ = ["DEFAULT_GUESS_FRACTION", "DEFAULT_SCALE", "FAMILY_CANARIES", "THREAT_MODELS",
           "AuditPlan", "AuditResult", "Canaries", "audit", "audit_multi_run",
           "canaries_for", "conclude", "guess", "guesses_per_side", "insert_canaries",
           "insert_edge_canaries", "insert_node_canaries", "insert_node_edge_canaries",
           "insert_star_canaries",
           "multi_run_bits", "multi_run_conclude", "plan_audit", "score_canaries",
           "score_edge_canaries", "score_edge_canaries_reproduced_noise",
           "score_node_canaries", "score_node_edge_canaries", "score_star_canaries",
           "secret_generator"]
