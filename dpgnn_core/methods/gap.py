"""GAP (Sajadmanesh et al., 2023): encoder module, private multi-hop aggregation (PMA),
classification module; edge-level (EDP), node-level (NDP) and non-private (GAP-∞).

1. **Encoder**: an MLP trained on node features and labels only (no edge is read); its
   last hidden layer, L2-row-normalised, is X(0). Adam for EDP / ∞; DP-Adam over
   Poisson-sampled rows for NDP (one :class:`~dpgnn_core.privacy.PoissonGaussianEvent`).
2. **PMA**: for k = 1..K,

   .. math::
       X^{(k)} = \\mathrm{normalise}\\big(\\mathrm{clip}_c(A^\\top X^{(k-1)})
                 + \\mathcal{N}(0, \\sigma^2 I)\\big)

   a sum aggregation of rows of norm at most 1, optionally clipped row-wise to norm c
   (``row_clip``; no clipping by default). Sensitivity Δ per hop (:func:`sensitivity`),
   with d_in / d_out the in / out degree of the changed node:

   * edge level: one directed edge changes one row by at most 1 (Δ = 1, graph flagged
     directed); on a graph flagged undirected one edge is two messages (Δ = √2; GAP's code
     uses 1). Decided by the manifest flag ``directed`` only, never by the edges.
   * node level (the node removed, i.e. made isolated, its aggregation row then 0): its own
     row changes by ``||sum of its in-neighbours' rows|| <= min(c, d_in)`` and each of its
     d_out out-neighbours' rows by at most 1 (clipping is non-expansive), so

     .. math::
         \\Delta^2 = \\max_{(d_\\mathrm{in}, d_\\mathrm{out})}
                     \\min(c, d_\\mathrm{in})^2 + d_\\mathrm{out}

     over the degrees allowed: d_in, d_out <= D on a graph flagged undirected
     (Δ = √(D² + D) unclipped, √(min(c, D)² + D) clipped); d_in + d_out <= D on a directed
     one (Δ = D unclipped). GAP's Lemma 2 states √D, which omits the node's own row.
     The node-level guarantee is stated for graphs whose degrees are all within D: a graph
     with a larger degree is refused (no degree-bounding projection is applied, because
     GAP's edge sampler is not stable under node removal; see docs/privacy.md).

   One :class:`~dpgnn_core.privacy.GaussianEvent` of K releases. The noise is drawn once
   from a secret generator (:class:`~dpgnn_core.privacy.randomness.Randomness`); reusing
   the release costs nothing more.
3. **Classifier**: one MLP per hop, combined (concatenation, sum or attention), then a
   head; Adam for EDP / ∞, DP-Adam over rows for NDP (a row holds the node's own encoding
   X(0) and its private aggregations X(1..K), which are post-processing). The private
   release is X(1..K); X(0) is recomputed from the encoder and each node's own features
   where needed and never stored with the release.

One noise scale z for the whole composition: the accountant solves for z so that encoder,
PMA and classifier together spend the target (ε, δ); ``budget_split`` scales each
module's multiplier relative to z.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from dpgnn_core.data.graph import GraphData
from dpgnn_core.methods._private import (
    check_node_task,
    check_weak_budget,
    guarantee_scope,
)
from dpgnn_core.methods._row_training import batches_per_epoch, fit_source, val_rows
from dpgnn_core.methods._staged import (
    Calibration,
    Stage,
    StageContext,
    Staged,
    StageOutput,
    admit_plan,
    degree_check_note,
    gate_plan,
    graph_stage,
    is_directed,
    module,
    release_report,
    run_in_memory,
    solve_composition,
)
from dpgnn_core.methods._staged import prepare_graph as prepare_graph
from dpgnn_core.methods.contract import Fitted, aggregating
from dpgnn_core.methods.private_run import PrivateRun, assemble_report
from dpgnn_core.models.gap import GapClassifier as GapClassifier
from dpgnn_core.models.gap import GapEncoder as GapEncoder
from dpgnn_core.models.gap import new_classifier as new_classifier
from dpgnn_core.models.gap import new_encoder as new_encoder
from dpgnn_core.models.gap import norm_layer as norm_layer
from dpgnn_core.models.gap import selu_block as selu_block
from dpgnn_core.models.gap import with_own_encoding as with_own_encoding
from dpgnn_core.privacy import (
    GaussianEvent,
    Ledger,
    PoissonGaussianEvent,
    PrivacyError,
    make_accountant,
)
from dpgnn_core.privacy.accountants import RdpAccountant
from dpgnn_core.privacy.events import LedgerEntry
from dpgnn_core.privacy.pma import aggregation_matrix as aggregation_matrix
from dpgnn_core.privacy.pma import clip_rows as clip_rows
from dpgnn_core.privacy.pma import pma as pma
from dpgnn_core.privacy.pma import row_normalise as row_normalise
from dpgnn_core.privacy.pma import sensitivity as sensitivity
from dpgnn_core.privacy.randomness import Randomness
from dpgnn_core.privacy.report import PrivacyReport
from dpgnn_core.specs import GapSpec
from dpgnn_core.training.batches import RowSource, TensorRows
from dpgnn_core.training.device import resolve_device
from dpgnn_core.training.loop import seeded
from dpgnn_core.training.metrics import metrics_by_split

# The PMA math (dpgnn_core/privacy/pma.py) and the modules (dpgnn_core/models/gap.py) live in
# their own modules (issue 27 §3); their names stay importable from here. What GAP shares with
# ProGAP lives beside it: the row training of its modules (methods/_row_training.py) and the
# staged composition's stage contract, graph, noise scale, gate and report
# (methods/_staged.py).

#: The ledger's note on the data-dependent degree check of GAP-NDP.
DEGREE_CHECK_NOTE = degree_check_note("GAP-NDP")

# --- the recipe ------------------------------------------------------------------------


def ledger_for(spec: GapSpec, num_train: int) -> Callable[[float], Ledger]:
    """z ↦ the ledger of the whole composition (empty for GAP-∞)."""
    w_enc, w_pma, w_cls = spec.budget_split
    spec = spec.with_batch_size(num_train)
    rate = spec.batch / num_train

    def ledger(z: float) -> Ledger:
        out = Ledger()
        if spec.level == "none":
            return out
        if spec.level == "node":
            out = out.add(PoissonGaussianEvent(noise_multiplier=z * w_enc, sampling_rate=rate,
                                               steps=spec.steps, level="node",
                                               description="GAP encoder (DP-Adam)"),
                          sampler_scheme="poisson")
        out = out.add(GaussianEvent(noise_multiplier=z * w_pma, count=spec.hops,
                                    level=spec.level, description=f"GAP PMA, {spec.hops} hops"))
        if spec.level == "node":
            out = out.add(PoissonGaussianEvent(noise_multiplier=z * w_cls, sampling_rate=rate,
                                               steps=spec.steps, level="node",
                                               description="GAP classifier (DP-Adam)"),
                          sampler_scheme="poisson")
            out = out.flag(DEGREE_CHECK_NOTE)
        return out
    return ledger


@dataclass
class GapResult:
    """Everything a GAP run produces."""

    encoder: GapEncoder
    classifier: GapClassifier  # with the encoder attached (recomputes X(0))
    aggregations: Tensor  # [n, K, d]: X(1..K), the private release (post-processing after)
    ledger: Ledger
    report: dict[str, Any]
    history: list[dict[str, float]]


def calibrate_gap(data: GraphData, spec: GapSpec) -> tuple[Ledger, float, dict[str, Any]]:
    """The common noise scale z of the composition, its ledger and the privacy report;
    checks the input before anything is trained."""
    return calibrate_gap_for(spec, check_node_task(data, spec, "GAP"), data.num_features, data)


def calibrate_gap_for(spec: GapSpec, n_train: int, num_features: int, graph: Any
                      ) -> tuple[Ledger, float, dict[str, Any]]:
    """:func:`calibrate_gap` from the training nodes' count, the feature width and the
    graph's ``directed`` flag and ``meta`` (a partitioned dataset's manifest's)."""
    if spec.encoder_dim > num_features:
        warnings.warn(f"encoder_dim {spec.encoder_dim} exceeds the {num_features} input "
                      "features: the encoding cannot compress them", stacklevel=3)
    data = graph
    private = spec.level != "none"
    delta = spec.delta if spec.delta is not None else 1.0 / (10 * n_train)
    make = ledger_for(spec, n_train)
    report: dict[str, Any] = {
        "method": "gap-" + {"edge": "edp", "node": "ndp", "none": "inf"}[spec.level],
        "private": private, "level": spec.level, "delta": delta, "hops": spec.hops,
        "steps": spec.steps, "unaccounted": [], "budget_split": list(spec.budget_split)}
    z = solve_composition(spec, make, delta, report,
                          f"GAP-{spec.level} composition (encoder, {spec.hops} PMA hops, "
                          "classifier)")
    delta_pma = sensitivity(spec.level, spec.max_degree, is_directed(data), spec.row_clip)
    report.update({"pma_sensitivity": delta_pma,
                   "pma_noise_std": z * spec.budget_split[1] * delta_pma})
    report.update(release_report(data, spec, "the encoder's and classifier's parameters",
                                 "its encoding X(0)", "PMA ran"))
    if private:
        report.update(guarantee_scope(make(z)))
        report["warnings"] = check_weak_budget(spec.epsilon, delta, n_train)
        report["unaccounted"] = list(make(z).unaccounted)
    return (make(z) if private else Ledger()), z, report


def module_epochs(spec: GapSpec, module: str) -> int:
    """Adam epochs of the ``"encoder"`` (``encoder_epochs``, ``epochs`` when unset) or of
    the ``"classifier"`` (``epochs``) at edge level and ∞."""
    if module == "encoder" and spec.encoder_epochs is not None:
        return spec.encoder_epochs
    return spec.epochs


def module_steps(spec: GapSpec, num_train: int, module: str = "classifier") -> int:
    """Optimisation steps of the ``"encoder"`` or of the ``"classifier"``: ``steps`` under
    DP-Adam (node level), :func:`module_epochs` times :func:`batches_per_epoch`
    otherwise."""
    if spec.level == "node":
        return spec.steps
    return module_epochs(spec, module) * batches_per_epoch(spec, num_train)


def _stage_epsilons(spec: GapSpec, n_train: int, z: float, stage: str) -> list[float]:
    """ε spent after each step of the encoder (``stage="encoder"``) or of the classifier,
    counted over the whole run (:func:`epsilon_by_step`: the values the run's history
    gets); empty for GAP-∞."""
    if spec.level == "none":
        return []
    enc, cls = module_steps(spec, n_train, "encoder"), module_steps(spec, n_train)
    delta = spec.delta if spec.delta is not None else 1.0 / (10 * n_train)
    eps = epsilon_by_step(spec, n_train, z, delta, enc, cls)
    return eps[:enc] if stage == "encoder" else eps[enc:]


def _gate(run: PrivateRun, spec: GapSpec, n_train: int, z: float) -> None:
    """Before a stage's private computation: the whole calibrated plan to the engine's
    budget keeper (:meth:`PrivateRun.reserve`); the stages of one run share one
    reservation."""
    gate_plan(run, spec, ledger_for(spec, n_train)(z), n_train)


def fit_encoder(data: GraphData, spec: GapSpec, z: float, run: PrivateRun | None = None
                ) -> tuple[GapEncoder, list[dict[str, float]], Ledger]:
    """Stage 1: the encoder on features and labels of training nodes, through the fit's
    engine ``run``; its privacy event (NDP) comes with it. A private run's step records
    hold ``epsilon``, ε spent so far."""
    device = resolve_device(spec.device)
    train = torch.from_numpy(data.mask("train")).to(device)
    x = torch.tensor(data.x, device=device)
    y = torch.tensor(np.asarray(data.y), device=device)
    rows = TensorRows(x[train], y[train], Randomness.for_spec(spec).torch_generator(
        "encoder/batches"), val_rows(data, x, y, spec))
    return fit_encoder_on(rows, spec, z, (data.num_features, data.num_classes), run)


def fit_encoder_on(rows: RowSource, spec: GapSpec, z: float, shape: tuple[int, int],
                   run: PrivateRun | None = None
                   ) -> tuple[GapEncoder, list[dict[str, float]], Ledger]:
    """:func:`fit_encoder` on any source of training rows (features, label), in memory or
    in partitions; ``shape`` = (features, classes)."""
    run = run or PrivateRun()
    n_train = rows.num_rows
    if spec.level == "node":  # the encoder is a private release at node level
        _gate(run, spec, n_train, z)
    elif spec.level == "edge":  # it releases nothing private: the plan is checked first
        admit_plan(run, spec, ledger_for(spec, n_train)(z), n_train)
    if run.watched:
        run.follow(_stage_epsilons(spec, n_train, z, "encoder"))
    with seeded(spec.seed, rows.device):
        enc = new_encoder(spec, *shape).to(rows.device)
        hist = fit_source(enc, rows, spec, spec.level == "node", z * spec.budget_split[0],
                          "encoder", run.on_step, epochs=module_epochs(spec, "encoder"))
    events = Ledger()
    if spec.level == "node":
        events = Ledger(ledger_for(spec, n_train)(z).entries[:1])
    return enc.eval(), hist, events


def aggregate(data: GraphData, edge_index: np.ndarray, encoder: GapEncoder, spec: GapSpec,
              z: float, run: PrivateRun | None = None) -> tuple[Tensor, Ledger]:
    """Stage 2: X(0) from the encoder, then PMA over ``edge_index``; the private release
    X(1..K) ``[n, K, d]`` (X(0) is not part of it) and its privacy event (K Gaussian
    releases; none for GAP-∞). The noise comes from a secret generator
    (:meth:`Randomness.for_spec`): two runs of the same spec give two different releases,
    and nothing stored lets anyone recompute the noise. The fit's engine ``run`` reserves
    the plan, is told of the release and follows the hops (its ``progress``)."""
    run = run or PrivateRun()
    device = resolve_device(spec.device)
    sigma = pma_noise_std(spec, z, is_directed(data))
    gen = Randomness.for_spec(spec).torch_generator("pma/noise", device)
    if spec.level != "none":
        _gate(run, spec, int(data.mask("train").sum()), z)
    with torch.no_grad():
        x0 = encoder.to(device).eval().encode(torch.tensor(data.x, device=device))
        adj_t = aggregation_matrix(torch.from_numpy(edge_index).to(device), data.num_nodes)
        xs = torch.stack(pma(x0, adj_t, spec.hops, sigma, gen, spec.row_clip,
                             run.stage_progress)[1:], 1).cpu()
    if spec.level != "none":
        run.released()  # the noisy aggregations exist: a release, spent for good
    return xs, pma_events(spec, int(data.mask("train").sum()), z)


def pma_noise_std(spec: GapSpec, z: float, directed: bool) -> float:
    """σ of every PMA hop: z times PMA's share of the budget times the sensitivity
    (:func:`sensitivity`); the single-process and the partitioned PMA
    (:mod:`dpgnn_core.distributed.pma`) both take it from here."""
    return z * spec.budget_split[1] * sensitivity(spec.level, spec.max_degree, directed,
                                                  spec.row_clip)


def pma_events(spec: GapSpec, n_train: int, z: float) -> Ledger:
    """PMA's privacy event (K Gaussian releases; none for GAP-∞), with the degree check's
    note at node level: what :func:`aggregate` and the partitioned PMA return."""
    if spec.level == "none":
        return Ledger()
    events = Ledger(tuple(e for e in ledger_for(spec, n_train)(z).entries
                          if e.event.kind == "gaussian"))
    return events.flag(DEGREE_CHECK_NOTE) if spec.level == "node" else events


def fit_classifier(data: GraphData, aggregations: Tensor, spec: GapSpec, z: float,
                   run: PrivateRun | None = None, *,
                   encoder: GapEncoder) -> tuple[GapClassifier, list[dict[str, float]], Ledger]:
    """Stage 3: the classification module on each training node's own encoding X(0)
    (recomputed by ``encoder`` from its features) and its private aggregations X(1..K)
    ``[n, K, d]``; returned with the encoder attached. A private run's step records (through
    the fit's engine ``run``) hold ``epsilon``, ε spent so far (the encoder's and PMA's
    included)."""
    device = resolve_device(spec.device)
    train = torch.from_numpy(data.mask("train")).to(device)
    y = torch.tensor(np.asarray(data.y), device=device)
    enc = encoder.to(device).eval()
    xs = with_own_encoding(enc, torch.tensor(data.x, device=device), aggregations.to(device),
                           spec.hops)
    rows = TensorRows(xs[train], y[train], Randomness.for_spec(spec).torch_generator(
        "classifier/batches"), val_rows(data, xs, y, spec))
    clf, hist, events = fit_classifier_on(rows, spec, z, data.num_classes, run)
    return clf.attach_encoder(enc), hist, events


def fit_classifier_on(rows: RowSource, spec: GapSpec, z: float, num_classes: int,
                      run: PrivateRun | None = None
                      ) -> tuple[GapClassifier, list[dict[str, float]], Ledger]:
    """:func:`fit_classifier` on any source of rows ``[X(0), X(1..K)]`` with labels, in
    memory or in partitions (the encoder is not attached)."""
    run = run or PrivateRun()
    n_train = rows.num_rows
    if spec.level == "node":
        _gate(run, spec, n_train, z)
    if run.watched:
        run.follow(_stage_epsilons(spec, n_train, z, "classifier"))
    with seeded(spec.seed + 3, rows.device):
        clf = new_classifier(spec, num_classes).to(rows.device)
        hist = fit_source(clf, rows, spec, spec.level == "node", z * spec.budget_split[2],
                          "classifier", run.on_step)
    events = Ledger()
    if spec.level == "node":
        events = Ledger(ledger_for(spec, n_train)(z).entries[-1:])
    return clf.eval(), hist, events


def finish_run(spec: GapSpec, report: dict[str, Any], planned: Ledger, ledger: Ledger,
               num_train: int, z: float, encoder_history: list[dict[str, float]],
               classifier_history: list[dict[str, float]]
               ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The run's privacy report and history from its stages: the composed ``ledger`` must
    equal the calibrated ``planned`` one; ε is the run's accountant's on it; the history
    numbers encoder steps then classifier steps, each with ε spent after it.

    Raises:
        PrivacyError: the stages' events differ from the plan.
    """
    if ledger.to_dict() != planned.to_dict():
        raise PrivacyError("the GAP stages' privacy events differ from the calibrated plan")
    report = dict(report)
    history: list[dict[str, Any]] = []
    points: list[tuple[int, float]] = []
    if report["private"]:
        report["epsilon"] = make_accountant(spec.accountant).epsilon(ledger, report["delta"])
        eps = epsilon_by_step(spec, num_train, z, report["delta"], len(encoder_history),
                              len(classifier_history))
        points = [(t + 1, e) for t, e in enumerate(eps)]
    for i, h in enumerate(encoder_history + classifier_history):
        name = "encoder_loss" if i < len(encoder_history) else "classifier_loss"
        rec: dict[str, Any] = {"step": i + 1}
        if "train_loss" in h:  # private stages record none unless log_raw_loss
            rec.update({name: h["train_loss"], "train_loss": h["train_loss"]})
        history.append(rec)
    report, _, history = assemble_report(report, ledger, history, spec, points, who="GAP")
    return report, history


# --- the stages (run by _staged.run_in_memory here, by tasks/staged.py in the pipeline) ---
def _encoder_stage(z: float, ctx: StageContext, reads: Mapping[str, Any]) -> StageOutput:
    enc, hist, events = fit_encoder(ctx.data, ctx.spec, z, ctx.run)
    return StageOutput({"encoder.pt": enc, "history.json": hist}, events)


def _encoder_of(ctx: StageContext, encoder: StageOutput) -> GapEncoder:
    return module(encoder.values["encoder.pt"],  # type: ignore[no-any-return]
                  lambda: new_encoder(ctx.spec, ctx.data.num_features, ctx.data.num_classes))


def _aggregate_stage(z: float, ctx: StageContext, reads: Mapping[str, Any]) -> StageOutput:
    spec = ctx.spec
    xs, events = aggregate(ctx.data, reads["graph"].values["edge_index.npy"],
                           _encoder_of(ctx, reads["encoder"]), spec, z, ctx.run)
    assert xs.shape[1] == spec.hops  # X(1..K) only: X(0) is never part of the release
    return StageOutput({"aggregations.pt": xs}, events, manifest={
        "shape": list(xs.shape),
        "release": "X(1..K): the private aggregations; X(0) is not stored"})


def _classifier_stage(z: float, ctx: StageContext, reads: Mapping[str, Any]) -> StageOutput:
    """The classifier, then the run: the encoder's, PMA's and the classifier's events
    composed into its ledger (refused if it differs from the plan), its report, history."""
    data, spec, encoder = ctx.data, ctx.spec, reads["encoder"]
    enc = _encoder_of(ctx, encoder)
    clf, hist, events = fit_classifier(data, reads["aggregations"].values["aggregations.pt"],
                                       spec, z, ctx.run, encoder=enc)
    cal = Calibration.of(reads["calibration"])
    ledger = encoder.events + reads["aggregations"].events + events
    report, history = finish_run(spec, {**cal.report, "graph": reads["graph"].info["graph"]},
                                 cal.planned, ledger, cal.num_train, z,
                                 list(encoder.values["history.json"]), hist)
    return StageOutput({"model.pt": clf, "history.json": history}, report=report)


def gap_stages(spec: GapSpec, z: float) -> tuple[Stage, ...]:
    """GAP's stages after the calibration of z: the graph PMA aggregates over (the degree
    check at node level), the encoder, PMA's K releases (computed once, cached), then the
    classifier, which composes the run. The classifier trains on PMA's release: in one
    process a rerun redraws it, so it never resumes there (the pipeline keys its
    checkpoint on the stored release)."""
    def steps(n: int) -> int:
        return module_steps(spec, n)

    def encoder_steps(n: int) -> int:
        return module_steps(spec, n, "encoder")
    return (graph_stage("gap", spec),
            Stage("encoder", "gap_encoder", functools.partial(_encoder_stage, z),
                  params={"z": z}, gated=True, steps=encoder_steps, label="encoder"),
            Stage("aggregate", "gap_aggregate", functools.partial(_aggregate_stage, z),
                  reads={"graph": "graph", "encoder": "encoder"}, params={"z": z},
                  gated=True, aggregates=True),
            Stage("train", "gap_classifier", functools.partial(_classifier_stage, z),
                  reads={"aggregations": "aggregate", "calibration": "calibrate",
                         "encoder": "encoder", "graph": "graph"}, params={"z": z},
                  folder=(spec, z), gated=True, steps=steps, label="classifier",
                  resumable=False))


def train_gap(data: GraphData, spec: GapSpec, run: PrivateRun | None = None) -> GapResult:
    """Calibrate, then encoder -> PMA -> classifier (:func:`gap_stages`, in memory, through
    the fit's engine ``run``); the ledger is the composition of the events each stage
    returned (and equals the calibrated plan).

    Raises:
        DataError: not single-label node classification, no training labels, a batch
            larger than the training set, or a graph beyond the degree bound (node level).
        PrivacyError: a budget too small for the composition (names the smallest ε).
    """
    out = run_in_memory(STAGED, data, spec, run)
    final = out["train"]
    assert final.report is not None
    return GapResult(encoder=out["encoder"].values["encoder.pt"],
                     classifier=final.values["model.pt"],
                     aggregations=out["aggregate"].values["aggregations.pt"],
                     ledger=final.report["ledger"], report=final.report,
                     history=final.values["history.json"])


def evaluate_gap(classifier: GapClassifier, aggregations: Tensor, data: GraphData,
                 device: str = "auto") -> dict[str, dict[str, float]]:
    """Metrics per split from each node's own encoding (recomputed by the attached
    encoder) and the private aggregations X(1..K): no extra budget."""
    dev = resolve_device(device)
    clf = classifier.to(dev).eval()
    with torch.no_grad():
        xs = clf.inputs(torch.tensor(data.x, device=dev), aggregations.to(dev))
        logits = clf(xs).cpu().numpy()
    return metrics_by_split(data, logits)


def build_gap(spec: GapSpec, in_dim: int, num_classes: int) -> GapClassifier:
    """The (untrained) classifier ``spec`` describes, with its encoder attached (what
    predicts from a node's features and the private aggregations)."""
    return new_classifier(spec, num_classes).attach_encoder(
        new_encoder(spec, in_dim, num_classes))


def epsilon_by_step(spec: GapSpec, num_train: int, z: float, delta: float,
                    encoder_steps: int, classifier_steps: int, points: int = 20
                    ) -> list[float]:
    """ε spent after each optimisation step of the run (encoder steps, then classifier
    steps; PMA's release counts from the first classifier step), by the run's accountant
    (``spec.accountant``), so the last value is the reported ε.

    RDP: every step exactly (the ledger's RDP is linear in its steps). PLD (or any other
    accountant): ``points`` evenly spaced steps are computed, and every step in between
    reports the next computed value, an upper bound since ε grows with the steps; the last
    step is always computed.

    Args:
        spec (GapSpec): the run's spec.
        num_train (int): training nodes (the Poisson rate is ``batch_size / num_train``).
        z (float): the calibrated noise scale.
        delta (float): δ.
        encoder_steps (int): steps the encoder ran.
        classifier_steps (int): steps the classifier ran.
        points (int, optional): computed points for non-RDP accountants. (default: 20)
    """
    return list(_epsilon_by_step(spec, num_train, float(z), float(delta), int(encoder_steps),
                                 int(classifier_steps), int(points)))


@functools.lru_cache(maxsize=8)
def _epsilon_by_step(spec: GapSpec, num_train: int, z: float, delta: float,
                     encoder_steps: int, classifier_steps: int, points: int
                     ) -> tuple[float, ...]:
    """:func:`epsilon_by_step`, cached: the encoder's and the classifier's progress and the
    run's history ask for the same curve (with PLD it takes seconds)."""
    total = encoder_steps + classifier_steps
    if spec.level == "none":
        return (math.inf,) * total
    entries = ledger_for(spec, num_train)(z).entries
    node = spec.level == "node"

    def with_steps(entry: LedgerEntry, k: int) -> LedgerEntry:
        event: Any = entry.event  # a PoissonGaussianEvent (it has steps)
        return dataclasses.replace(entry, event=dataclasses.replace(event, steps=k))

    def ledger_at(t: int) -> Ledger:
        """The ledger after global step t (1-based)."""
        if not node:  # edge level: PMA's release only, from the first classifier step
            return Ledger(entries) if t > encoder_steps else Ledger()
        if t <= encoder_steps:
            return Ledger((with_steps(entries[0], t),))
        return Ledger((with_steps(entries[0], encoder_steps), entries[1],
                       with_steps(entries[2], t - encoder_steps)))

    accountant = make_accountant(spec.accountant)
    if isinstance(accountant, RdpAccountant):
        from dpgnn_core.privacy.rdp import epsilon_from_rdp

        orders = accountant.orders
        zero = np.zeros_like(orders)
        enc1 = accountant.rdp(Ledger((with_steps(entries[0], 1),))) if node else zero
        pma_rdp = accountant.rdp(Ledger((entries[1 if node else 0],)))
        cls1 = accountant.rdp(Ledger((with_steps(entries[2], 1),))) if node else zero
        out = [epsilon_from_rdp(orders, t * enc1, delta)[0] if node else 0.0
               for t in range(1, encoder_steps + 1)]
        base = encoder_steps * enc1 + pma_rdp
        out += [epsilon_from_rdp(orders, base + t * cls1, delta)[0]
                for t in range(1, classifier_steps + 1)]
        return tuple(out)
    at = sorted({max(1, round(total * i / points)) for i in range(1, points + 1)} | {total})
    # The last point by the run's accountant, the others by its cheaper proxy capped at the
    # last, as a running maximum: upper bounds (privacy.calibrate.epsilon_curve says why).
    last = accountant.epsilon(ledger_at(total), delta)
    cheap = accountant.proxy() or accountant
    values, top = {total: last}, 0.0
    for t in at[:-1]:
        led = ledger_at(t)
        top = max(top, min(cheap.epsilon(led, delta), last) if led.entries else 0.0)
        values[t] = top
    out, j = [], 0
    for t in range(1, total + 1):
        while at[j] < t:
            j += 1
        out.append(values[at[j]])
    return tuple(out)


# --- the implementation (the catalogue's "gap" family: gap-edp, gap-ndp, gap-inf) ----------
def _fit(data: GraphData, spec: GapSpec, run: PrivateRun) -> Fitted:
    r = train_gap(data, spec, run)  # its report has the ε-by-step curve
    return Fitted(r.classifier, r.ledger, PrivacyReport.from_dict(r.report), r.history,
                  {"aggregations": r.aggregations})


from dpgnn_core.methods.brute_force.pma import gap_checks  # noqa: E402

STAGED = Staged("gap", calibrate_gap, gap_stages)
IMPLEMENTATION = aggregating("GAP", fit=_fit, ledger_for=ledger_for, build=build_gap,
                             evaluate=evaluate_gap, sensitivity=gap_checks(), staged=STAGED)
