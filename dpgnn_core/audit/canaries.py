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
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import torch

from dpgnn_core.audit.bounds import DEFAULT_BETA, AuditBound, one_run_audit
from dpgnn_core.data.graph import SPLIT_NAMES, TRAIN, GraphData
from dpgnn_core.errors import DataError

Relation = Literal["add/remove", "replace-one"]
Kind = Literal["node", "edge"]

#: Default scale of a node canary's own feature column.
DEFAULT_SCALE = 10.0
#: Default fraction of the canaries guessed (half of them "in", half "out").
DEFAULT_GUESS_FRACTION = 0.5

#: The canary kind and the neighbouring relation of each method family.
FAMILY_CANARIES: dict[str, tuple[Kind, Relation]] = {
    "dp-mlp": ("node", "add/remove"),
    "dp-gnn": ("node", "replace-one"),
    "drw": ("node", "replace-one"),
    "gap": ("edge", "add/remove"),
}

THREAT_MODELS: dict[str, str] = {
    "node": "black-box: the final model's cross-entropy loss of each canary's label on its "
            "features as an isolated node (lower = member)",
    "edge": "released aggregations: inner product of each canary endpoint's private "
            "first-hop aggregation X(1) with the other endpoint's encoding X(0) from the "
            "released encoder, both directions summed (higher = member)",
    "edge-reproduced-noise": "released aggregations and the stored spec seed: PMA's "
            "first-hop noise regenerated from the seed (valid only against "
            "insecure_reproducible_noise), each canary endpoint's X(1) compared with it "
            "(an endpoint whose row is the normalised noise received no canary message)",
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
    """

    kind: Kind
    relation: Relation
    included: npt.NDArray[np.bool_]
    features: npt.NDArray[np.float32] = field(
        default_factory=lambda: np.zeros((0, 0), np.float32))
    labels: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, np.int64))
    pairs: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros((0, 2), np.int64))
    node_ids: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, np.int64))

    @property
    def m(self) -> int:
        return int(self.included.shape[0])


def _draw_bits(m: int, rng: np.random.Generator) -> npt.NDArray[np.bool_]:
    return np.asarray(rng.random(m) < 0.5)


def _check_node_data(data: GraphData, m: int) -> None:
    if data.task != "node" or data.multi_label:
        raise DataError("canaries are inserted into single-label node data", field="task",
                        value=data.task)
    if m < 1:
        raise DataError("an audit needs at least one canary", field="m", value=m)


def insert_node_canaries(data: GraphData, m: int, *, relation: Relation = "add/remove",
                         scale: float = DEFAULT_SCALE,
                         rng: np.random.Generator | None = None
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

    Returns:
        (GraphData, Canaries): the training data and the auditor's record.
    """
    _check_node_data(data, m)
    rng = rng if rng is not None else secret_generator()
    included = _draw_bits(m, rng)
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


def insert_edge_canaries(data: GraphData, m: int, *, rng: np.random.Generator | None = None
                         ) -> tuple[GraphData, Canaries]:
    """Add m edge canaries (see the module docstring): 2m fresh ``unused`` nodes with the
    features and labels of random real nodes, and the included pairs' undirected edges.

    Args:
        data (GraphData): single-label node data.
        m (int): canaries.
        rng (np.random.Generator, optional): source of the bits and the copied nodes; a
            fresh CSPRNG-seeded one by default. (default: :obj:`None`)

    Returns:
        (GraphData, Canaries): the training data and the auditor's record.
    """
    _check_node_data(data, m)
    rng = rng if rng is not None else secret_generator()
    included = _draw_bits(m, rng)
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
            enc_dim = int(model.encoder.lin2.out_features) if model.encoder is not None else 0
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


def score_edge_canaries(model: torch.nn.Module, aggregations: torch.Tensor, data: GraphData,
                        canaries: Canaries) -> npt.NDArray[np.float64]:
    """Each edge canary's score: minus ``<X1[u], X0[v]> + <X1[v], X0[u]>``, with X(1) the
    released first-hop aggregations and X(0) the normalised encodings from the encoder
    attached to the released classifier (lower = more likely a member)."""
    from dpgnn_core.methods.gap import row_normalise

    encoder = getattr(model, "encoder", None)
    if encoder is None:
        raise DataError("edge canaries are scored with the released encoder",
                        field="encoder", value=None)
    u, v = canaries.pairs[:, 0], canaries.pairs[:, 1]
    with torch.no_grad():
        x0 = row_normalise(encoder.cpu().eval().encode(torch.from_numpy(data.x)))
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
        DataError: a family without canaries yet (baselines, graph classification).
    """
    try:
        return FAMILY_CANARIES[family]
    except KeyError:
        raise DataError("no canaries for this method family yet", field="family",
                        value=family) from None


def audit(method_name: str, data: GraphData, spec: Any, m: int, delta: float | None = None,
          beta: float = DEFAULT_BETA, rng: np.random.Generator | None = None, *,
          guess_fraction: float = DEFAULT_GUESS_FRACTION, scale: float = DEFAULT_SCALE,
          attack: Literal["default", "reproduced-noise"] = "default") -> AuditResult:
    """One-run audit of ``method_name`` on ``data`` with m canaries: insert them (each in
    with probability 1/2), train ``spec`` through the registry, score every canary, guess
    the k lowest scores "in" and the k highest "out" (k fixed in advance from
    ``guess_fraction``), and bound ε from the correct guesses
    (:func:`~dpgnn_core.audit.bounds.one_run_audit`).

    Args:
        method_name (str): a registered name (``dp-mlp``, ``dp-gcn``, ``drw-gcn``,
            ``gap-edp``, and the non-private controls ``gap-inf`` or a spec with
            ``epsilon=None``).
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
        attack (str, optional): ``"default"`` (:data:`THREAT_MODELS` ``node`` / ``edge``)
            or, for GAP, ``"reproduced-noise"``: the attacker regenerates PMA's noise from
            the spec's seed (:func:`score_edge_canaries_reproduced_noise`), the control
            that shows ``insecure_reproducible_noise`` voids the guarantee.
            (default: ``"default"``)

    Returns:
        AuditResult: the bound, the reported ε, the threat model, counts and scores.
    """
    from dpgnn_core.methods.registry import get

    method = get(method_name)
    kind, relation = canaries_for(method.family)
    if method.family == "gap" and getattr(spec, "level", None) == "node":
        kind, relation = "node", "add/remove"  # GAP-NDP protects a node with its edges
    if not 0.0 < guess_fraction <= 1.0:
        raise DataError("guess_fraction must lie in (0, 1]", field="guess_fraction",
                        value=guess_fraction)
    k = round(guess_fraction * m / 2)
    if attack == "reproduced-noise" and kind != "edge":
        raise DataError("the reproduced-noise attack is implemented for GAP only",
                        field="attack", value=attack)
    if kind == "node":
        train_data, can = insert_node_canaries(data, m, relation=relation, scale=scale,
                                               rng=rng)
    else:
        train_data, can = insert_edge_canaries(data, m, rng=rng)
    fitted = method.fit(train_data, spec)
    if kind == "node":
        scores = score_node_canaries(method.family, fitted.model, can)
    elif attack == "reproduced-noise":
        scores = score_edge_canaries_reproduced_noise(spec, fitted.extra["aggregations"], can)
    else:
        scores = score_edge_canaries(fitted.model, fitted.extra["aggregations"], train_data,
                                     can)
    guesses = guess(scores, k)
    made = guesses != 0
    truth = np.where(can.included, 1, -1)
    v = int((guesses[made] == truth[made]).sum())
    r = int(made.sum())
    report = fitted.report
    d = float(delta) if delta is not None else float(report.get("delta") or 0.0)
    bound = one_run_audit(m, r, v, d, beta)
    eps = report.get("epsilon")
    threat = THREAT_MODELS[kind if attack == "default" else f"{kind}-{attack}"]
    return AuditResult(method=method_name, bound=bound,
                       reported_epsilon=math.inf if eps is None else float(eps), delta=d,
                       threat_model=threat, kind=kind, relation=relation, m=m,
                       r=r, v=v, scores=scores, included=can.included, guesses=guesses,
                       report=report)


__all__ = ["DEFAULT_GUESS_FRACTION", "DEFAULT_SCALE", "FAMILY_CANARIES", "THREAT_MODELS",
           "AuditResult", "Canaries", "audit", "canaries_for", "guess",
           "insert_edge_canaries", "insert_node_canaries", "score_edge_canaries",
           "score_edge_canaries_reproduced_noise", "score_node_canaries",
           "secret_generator"]
