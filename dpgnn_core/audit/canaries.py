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

Each kind lives in a module of its own (:mod:`.node_canaries`, :mod:`.edge_canaries`,
:mod:`.star_canaries`, :mod:`.node_edge_canaries`, :mod:`.graph_canaries`) and gives one
row of :data:`CANARY_KINDS`, the (insert, score) table :func:`insert_canaries` and
:func:`score_canaries` read; the record and its secret bits are in :mod:`.canary_record`.
This module keeps the audit itself and re-exports the kinds' public names.
"""

from __future__ import annotations

import math
import secrets
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import torch

from dpgnn_core.audit.bounds import DEFAULT_BETA, AuditBound, one_run_audit
from dpgnn_core.audit.canary_record import (
    Canaries,
    CanaryKind,
    Kind,
    Relation,
    secret_generator,
)
from dpgnn_core.audit.defaults import DEFAULT_GUESS_FRACTION, DEFAULT_SCALE
from dpgnn_core.audit.edge_canaries import (
    EDGE,
    insert_edge_canaries,
    released_encodings,
    score_edge_canaries,
    score_edge_canaries_reproduced_noise,
)
from dpgnn_core.audit.graph_canaries import DEFAULT_NODES, GRAPH, check_spec
from dpgnn_core.audit.node_canaries import NODE, insert_node_canaries, score_node_canaries
from dpgnn_core.audit.node_edge_canaries import (
    NODE_EDGES,
    insert_node_edge_canaries,
    score_node_edge_canaries,
)
from dpgnn_core.audit.star_canaries import STAR, insert_star_canaries, score_star_canaries
from dpgnn_core.data.graph import GraphData
from dpgnn_core.errors import DataError
from dpgnn_core.privacy.report import PrivacyReport

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

#: How each canary kind is inserted and scored (one row per kind's module).
CANARY_KINDS: dict[str, CanaryKind] = {"node": NODE, "edge": EDGE, "star": STAR,
                                       "node-edges": NODE_EDGES, "graph": GRAPH}


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
        report (PrivacyReport): the fitted run's privacy report.
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
    report: PrivacyReport | None = None

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


def canaries_for(method_name: str, spec: Any = None) -> tuple[Kind, Relation]:
    """The canary kind and neighbouring relation audited for a method (at ``spec``'s level:
    GAP-NDP and ProGAP-NDP protect a node with its edges, DP-GNN at level node a node's
    features, label and out-edge row), from the method catalogue.

    Raises:
        DataError: a method without canaries yet (the baselines).
    """
    from dpgnn_core.methods.catalog import entry

    found = entry(method_name).canary_for(getattr(spec, "level", None))
    if found is None:
        raise DataError("no canaries for this method yet", field="method", value=method_name)
    return found  # type: ignore[return-value]


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
    from dpgnn_core.methods.catalog import entry

    family = entry(method_name).family
    kind, relation = canaries_for(method_name, spec)
    degree = 0
    if kind == "star":  # GAP-NDP, ProGAP-NDP: a node with its edges, degree D
        degree = int(spec.max_degree)
    elif kind == "graph":
        check_spec(spec)  # instance norm would hide the canaries
    if attack not in ("default", "reproduced-noise"):
        raise DataError("unknown attack", field="attack", value=attack)
    if attack == "reproduced-noise" and kind != "edge":
        raise DataError("the reproduced-noise attack is implemented for GAP-EDP only",
                        field="attack", value=attack)
    threat = THREAT_MODELS[kind if attack == "default" else f"{kind}-{attack}"]
    return AuditPlan(method=method_name, family=family, kind=kind,
                     relation=relation, attack=attack, threat_model=threat, degree=degree)
def insert_canaries(plan: AuditPlan, data: GraphData, m: int, *,
                    scale: float = DEFAULT_SCALE, rng: np.random.Generator | None = None,
                    included: npt.NDArray[np.bool_] | None = None
                    ) -> tuple[GraphData, Canaries]:
    """Insert the plan's m canaries into ``data`` (each in with probability 1/2, or the
    given bits): the :data:`CANARY_KINDS` row of ``plan.kind``; see
    :func:`insert_node_canaries`, :func:`insert_edge_canaries` and
    :func:`insert_star_canaries`."""
    return CANARY_KINDS[plan.kind].insert(plan, data, m, scale, rng, included)


def score_canaries(plan: AuditPlan, model: torch.nn.Module, extra: dict[str, Any],
                   data: GraphData, canaries: Canaries, spec: Any
                   ) -> npt.NDArray[np.float64]:
    """Every canary's score under the plan's attack (lower = guessed "in"), from the
    fitted model and what it released (``extra["aggregations"]`` for GAP): the
    :data:`CANARY_KINDS` row of ``plan.kind``."""
    return CANARY_KINDS[plan.kind].score(plan, model, extra, data, canaries, spec)


#: Copies of the audited data's feature matrix ``[n + rows, d]`` that an audit with edge or
#: star canaries holds at its peak (insertion, the written dataset, the training's reads
#: and torch copies). Measured: ``dpgnn audit gap-edp --canaries 50000 --epochs 1`` on Cora
#: (102,708 nodes of 1,433 features, 0.59 GB a copy) peaked at 4.21 GB resident, about 0.6
#: GB of it imports: six copies; eight leave a margin (issue 33: 9.3 GB in 45 s with a
#: count that two copies admitted).
EDGE_TRAINING_COPIES = 8


def canary_bytes(kind: str, m: int, num_nodes: int, num_features: int, degree: int = 0
                 ) -> int:
    """Bytes of the float32 feature matrices that inserting ``m`` canaries of ``kind``
    builds at its peak (the audited data's and the canaries' own, with the copies a
    concatenation makes): node, node-with-edges and graph canaries add a feature column
    each, so this grows as m²; edge and star canaries copy real rows, that is add nodes,
    and the training of the audited data then holds :data:`EDGE_TRAINING_COPIES` copies of
    its feature matrix at once (GAP's, ProGAP's and DPDGC's stages each read it and move
    it to torch).

    Args:
        kind (str): ``node``, ``node-edges``, ``graph``, ``edge`` or ``star``.
        m (int): canaries.
        num_nodes (int): nodes of the dataset.
        num_features (int): its feature width.
        degree (int, optional): star canaries' degree D. (default: :obj:`0`)
    """
    n, d = int(num_nodes), int(num_features)
    if kind in ("node", "node-edges"):  # x [n + m, d + m] from [n, d + m], canaries [m, d + m]
        return 4 * (d + m) * (2 * n + 3 * m)
    if kind == "graph":  # as node canaries, with each canary's row repeated on its nodes
        return 4 * (d + m) * (2 * n + m * (2 + 2 * DEFAULT_NODES))
    rows = 2 * m if kind == "edge" else m * (int(degree) + 1)  # edge: 2m copied endpoints
    return 4 * d * EDGE_TRAINING_COPIES * (n + rows)


def max_canaries(kind: str, limit_bytes: int, num_nodes: int, num_features: int,
                 degree: int = 0) -> int:
    """The most canaries whose :func:`canary_bytes` stays within ``limit_bytes`` (0 when
    not even one does)."""
    lo, hi = 0, 1
    while canary_bytes(kind, hi, num_nodes, num_features, degree) <= limit_bytes:
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if canary_bytes(kind, mid, num_nodes, num_features, degree) <= limit_bytes:
            lo = mid
        else:
            hi = mid
    return lo


def guesses_per_side(m: int, guess_fraction: float = DEFAULT_GUESS_FRACTION) -> int:
    """k = round(guess_fraction · m / 2): the guesses made on each side, fixed before any
    score is seen."""
    if not 0.0 < guess_fraction <= 1.0:
        raise DataError("guess_fraction must lie in (0, 1]", field="guess_fraction",
                        value=guess_fraction)
    return round(guess_fraction * m / 2)


def conclude(plan: AuditPlan, scores: npt.NDArray[np.float64], canaries: Canaries,
             report: PrivacyReport, *, guess_fraction: float = DEFAULT_GUESS_FRACTION,
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
    d = float(delta) if delta is not None else float(report.delta or 0.0)
    bound = one_run_audit(m, r, v, d, beta)
    return AuditResult(method=plan.method, bound=bound,
                       reported_epsilon=report.epsilon, delta=d,
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


def multi_run_seeds(runs: int, rng: np.random.Generator | None = None
                    ) -> npt.NDArray[np.int64]:
    """Each run's initialisation seed in a multi-run audit: ``runs`` independent uniform
    draws from [0, 2^31), from a CSPRNG-seeded generator by default.

    The audit's statistics treat the runs as independent and identically distributed
    given the canary's bit (the first half's scores choose a threshold that the second
    half is judged by), so every run's initialisation is its own random draw, as its noise
    is: never ``spec.seed + r``, which fixes each run's initialisation to a different
    known value that follows from one public number.

    Raises:
        DataError: ``runs`` is not a positive integer.
    """
    if int(runs) != runs or runs < 1:
        raise DataError("a multi-run audit needs a positive number of runs", field="runs",
                        value=runs)
    rng = rng if rng is not None else secret_generator()
    return rng.integers(0, 2**31, size=int(runs), dtype=np.int64)


def multi_run_conclude(plan: AuditPlan, scores: npt.NDArray[np.float64],
                       included: npt.NDArray[np.bool_], report: PrivacyReport, *,
                       delta: float | None = None, beta: float = DEFAULT_BETA
                       ) -> AuditResult:
    """The classic multi-run audit from one canary's score in each run.

    The test must be fixed before the outcomes it is judged on: the first half of the runs
    (by index) chooses the threshold t, the one among their scores whose test "in iff
    score <= t" has the largest empirical ε on that half; the second half is judged with
    it: TP, FN, FP, TN there give the Clopper–Pearson bound
    (:func:`~dpgnn_core.audit.bounds.multi_run_audit`). The runs are independent
    trainings (fresh secret noise, each its own independently drawn initialisation seed:
    :func:`multi_run_seeds`), so the second half's
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
    d = float(delta) if delta is not None else float(report.delta or 0.0)
    if tp + fn == 0 or fp + tn == 0:
        # The secret bits left the judged half without a run with (or without) the
        # canary: no test can be judged, and the only sound lower bound is 0.
        from dpgnn_core.audit.bounds import AuditBound

        bound = AuditBound(epsilon_lower=0.0, confidence=1.0 - float(beta),
                           method="multi-run", delta=d,
                           counts={"tp": tp, "fn": fn, "fp": fp, "tn": tn})
    else:
        bound = multi_run_audit(tp, fn, fp, tn, d, beta)
    guesses = np.where(scores <= best_t, 1, -1).astype(np.int8)
    guesses[:half] = 0  # the first half chose the test; only the second half is judged
    return AuditResult(method=plan.method, bound=bound,
                       reported_epsilon=report.epsilon, delta=d,
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
    run r trains with its own initialisation seed (:func:`multi_run_seeds`, independent
    draws; ``rng`` when given, else a CSPRNG) and fresh secret noise. See
    :func:`multi_run_conclude` for the test. The ``dpgnn audit --runs R`` flow runs the
    same steps as cached tasks.

    Returns:
        AuditResult: ``bound.method == "multi-run"``, m = 1, r = judged runs, v = correct.
    """
    from dpgnn_core.methods.registry import get

    plan = plan_audit(method_name, spec, attack)
    bits = multi_run_bits(runs, rng)
    inits = multi_run_seeds(runs, rng)
    seed = secrets.randbits(128) if rng is None else int(rng.integers(2**62))
    pair = {b: insert_canaries(plan, data, 1, scale=scale, rng=np.random.default_rng(seed),
                               included=np.array([b])) for b in (True, False)}
    method = get(method_name)
    scores = np.zeros(runs)
    report = PrivacyReport(method=method_name, private=False, epsilon=math.inf)  # no run yet
    for r, b in enumerate(bits):
        train_data, can = pair[bool(b)]
        fitted = method.fit(train_data, spec.model_copy(update={"seed": int(inits[r])}))
        scores[r] = score_canaries(plan, fitted.model, fitted.extra, train_data, can, spec)[0]
        report = fitted.report
    return multi_run_conclude(plan, scores, bits, report, delta=delta, beta=beta)


__all__ = [
    "CANARY_KINDS",
    "DEFAULT_GUESS_FRACTION",
    "DEFAULT_SCALE",
    "THREAT_MODELS",
    "AuditPlan",
    "AuditResult",
    "Canaries",
    "audit",
    "audit_multi_run",
    "canaries_for",
    "conclude",
    "guess",
    "guesses_per_side",
    "insert_canaries",
    "insert_edge_canaries",
    "insert_node_canaries",
    "insert_node_edge_canaries",
    "insert_star_canaries",
    "multi_run_bits",
    "multi_run_conclude",
    "multi_run_seeds",
    "plan_audit",
    "released_encodings",
    "score_canaries",
    "score_edge_canaries",
    "score_edge_canaries_reproduced_noise",
    "score_node_canaries",
    "score_node_edge_canaries",
    "score_star_canaries",
    "secret_generator",
]
