"""DPDGC's stages (:mod:`dpgnn_core.methods.dpdgc`): the plan of their privacy events, what
each stage computes, and their declaration (:func:`dpdgc_stages`), which the in-memory
runner (:func:`~dpgnn_core.methods._staged.run_in_memory`: the library, the registry's
``fit``, the ``train`` task of a sweep point) and the pipeline's cached runner
(``tasks/staged.py``) both run.

After the calibration of the one noise scale z, each private release is its own stage,
with its events:

1. ``encoder`` (adjacency messages only): the embeddings W, trained on the adjacency by
   noisy full-batch gradient descent (:func:`~dpgnn_core.methods.dpdgc_encoder.
   fit_adjacency_encoder`; ``adj_steps`` Gaussian releases);
2. ``aggregate``: the hops over W (or over the training labels, ``messages="labels"``),
   one Gaussian release per released hop (the degree check's note at node level);
3. ``train``: the classifier on each node's features and its row of the release (DP-Adam
   at node, k-neighbour and ``node_feature`` level), then the run: the stages' events
   composed into its ledger (refused if they differ from the plan), its report, history.

Every gated stage reserves the whole plan through its engine (``ctx.run``) before its
private computation; the stages of one run share that one reservation (one owner token in
the pipeline, one engine in memory).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from dpgnn_core.data.graph import GraphData
from dpgnn_core.methods._private import OnStep
from dpgnn_core.methods._staged import (
    Calibration,
    Stage,
    StageContext,
    StageOutput,
    degree_check_note,
    gate_plan,
)
from dpgnn_core.methods.dpdgc_encoder import fit_adjacency_encoder
from dpgnn_core.methods.dpdgc_messages import (
    OWN_RETURN_LEVELS,
    classifier_inputs,
    first_messages,
    hop_deltas,
    label_rows,
    message_width,
    propagate,
    released_hops,
    without_own_return,
)
from dpgnn_core.methods.private_run import PrivateRun, assemble_report
from dpgnn_core.models.dpdgc import AdjacencyEncoder, DpdgcClassifier
from dpgnn_core.models.sparse_rows import SparseRows
from dpgnn_core.privacy import (
    GaussianEvent,
    Ledger,
    PoissonGaussianEvent,
    PrivacyError,
    make_accountant,
)
from dpgnn_core.privacy.pma import aggregation_matrix
from dpgnn_core.privacy.randomness import Randomness
from dpgnn_core.specs import DpdgcSpec
from dpgnn_core.training.device import resolve_device
from dpgnn_core.training.dp_sgd import Clipping, PoissonSampler, train_steps
from dpgnn_core.training.loop import seeded
from dpgnn_core.training.optim import adam

#: The ledger's note on the data-dependent degree check of DPDGC-NDP.
DEGREE_CHECK_NOTE = degree_check_note("DPDGC-NDP")

#: Levels whose classifier trains by DP-Adam (one Poisson-sampled Gaussian event).
DP_ADAM_LEVELS = ("node", "k_neighbor", "node_feature")


# --- the plan --------------------------------------------------------------------------


def _private(spec: DpdgcSpec) -> bool:
    return spec.level != "none"


def ledger_for(spec: DpdgcSpec, num_train: int) -> Callable[[float], Ledger]:
    """z ↦ the ledger of the whole run: the encoder's ``adj_steps`` Gaussian releases (if
    any, adjacency messages only), one Gaussian release per released hop
    (:func:`~dpgnn_core.methods.dpdgc_messages.released_hops`), and at node, k-neighbour
    and ``node_feature`` level the classifier's DP-Adam; empty for DPDGC-∞."""
    w_adj, w_agg, w_cls = spec.budget_split
    spec = spec.with_batch_size(num_train)
    rate = spec.batch / num_train
    level: Any = spec.level
    # the k-neighbour unit depends on k: each event names it (a k = 1 guarantee says
    # nothing at group size 1 about changes of k = 5 edges)
    unit = f" (k-neighbour, k = {spec.k})" if spec.level == "k_neighbor" else ""
    labels = spec.messages == "labels"
    hops = released_hops(spec.messages, spec.level, spec.hops)

    def hop_name(t: int) -> str:
        if t == 1:
            return ("DPDGC label messages hop 1 (A Y_train)" if labels
                    else "DPDGC aggregation A W")
        return f"DPDGC hop {t} (A normalise(H{t - 1}))"

    def ledger(z: float) -> Ledger:
        out = Ledger()
        if spec.level == "none":
            return out
        if spec.adj_steps > 0 and not labels:
            out = out.add(GaussianEvent(noise_multiplier=z * w_adj, count=spec.adj_steps,
                                        level=level, description="DPDGC adjacency encoder "
                                        f"(noisy full-batch gradient descent){unit}"))
        for t in hops:
            out = out.add(GaussianEvent(noise_multiplier=z * w_agg, count=1, level=level,
                                        description=f"{hop_name(t)}{unit}"))
        if spec.level in DP_ADAM_LEVELS:
            out = out.add(PoissonGaussianEvent(noise_multiplier=z * w_cls, sampling_rate=rate,
                                               steps=spec.steps, level=level,
                                               description=f"DPDGC classifier (DP-Adam){unit}"),
                          sampler_scheme="poisson")
        if spec.level == "node":
            out = out.flag(DEGREE_CHECK_NOTE)
        return out
    return ledger


def stage_events(spec: DpdgcSpec, num_train: int, z: float) -> tuple[Ledger, Ledger, Ledger]:
    """The plan's events (:func:`ledger_for`) by the stage that releases them: the
    adjacency encoder's (none with label messages or ``adj_steps = 0``), the released
    hops' (with the degree check's note at node level: the check of the graph they
    aggregate over) and the classifier's DP-Adam (none at edge level); all empty for
    DPDGC-∞."""
    plan = ledger_for(spec, num_train)(z)
    if not _private(spec):
        return Ledger(), Ledger(), Ledger()
    n_enc = 1 if spec.adj_steps > 0 and spec.messages == "adjacency" else 0
    n_hops = len(released_hops(spec.messages, spec.level, spec.hops))
    e = plan.entries
    return (Ledger(e[:n_enc]), Ledger(e[n_enc:n_enc + n_hops], plan.unaccounted),
            Ledger(e[n_enc + n_hops:]))


def epsilon_points(spec: DpdgcSpec, n_train: int, z: float, delta: float, enc_steps: int,
                   cls_steps: int) -> list[tuple[int, float]]:
    """ε spent at the end of the adjacency encoder and at the end of the run (history
    steps), from the run's plan and accountant: the aggregation is released before the
    classifier's first step, so ε after any classifier step is at most the last value."""
    acc = make_accountant(spec.accountant)
    entries = ledger_for(spec, n_train)(z).entries
    out: list[tuple[int, float]] = []
    if spec.adj_steps > 0 and enc_steps > 0:
        out.append((enc_steps, acc.epsilon(Ledger(entries[:1]), delta)))
    out.append((enc_steps + cls_steps, acc.epsilon(Ledger(entries), delta)))
    return out


# --- what the stages compute -----------------------------------------------------------


def aggregate(adj_t: Tensor, w: Tensor, spec: DpdgcSpec, z: float, directed: bool
              ) -> Tensor:
    """Stage 2: the hops ``[n, hops, width]`` over the first messages ``w`` (W or W_1 of
    the labels), each released hop :math:`\\mathrm{clip}_c(A W_t)` + noise of std
    z·w_H·Δ_t (secret; :func:`~dpgnn_core.methods.dpdgc_messages.propagate`)."""
    sigmas = [z * spec.budget_split[1] * d for d in hop_deltas(spec, directed)]
    gen = Randomness.for_spec(spec).torch_generator("aggregation/noise", w.device)
    return propagate(adj_t, w, sigmas, spec.row_clip, gen)


def label_messages(data: GraphData, spec: DpdgcSpec, adj_t: Tensor, device: torch.device
                   ) -> Tensor:
    """W_1 of label messages: the training nodes' one-hot labels (no other label is read),
    divided by √(out-degree) at k-neighbour and ``node_feature`` level."""
    y = torch.tensor(np.asarray(data.y), device=device)
    train = torch.from_numpy(data.mask("train")).to(device)
    return first_messages(spec.level, label_rows(y, train, data.num_classes), adj_t)


def agg_width(spec: DpdgcSpec, num_classes: int) -> int:
    """Width of the classifier's aggregation branch: hops × the message width."""
    return spec.hops * message_width(spec.messages, spec.adj_dim, num_classes)


def fit_classifier(data: GraphData, h: Tensor, spec: DpdgcSpec, z: float,
                   device: torch.device, on_step: OnStep | None
                   ) -> tuple[DpdgcClassifier, list[dict[str, float]]]:
    """Stage 3: the classifier on training rows ``[x_v, H_v]``: Adam with dropout for
    ``epochs`` (edge, ∞), DP-Adam over Poisson-sampled rows for ``steps`` (node,
    k-neighbour)."""
    train = torch.from_numpy(data.mask("train")).to(device)
    y = torch.tensor(np.asarray(data.y), device=device)[train]
    inputs = classifier_inputs(torch.tensor(data.x, device=device), h.to(device))[train]
    rnd = Randomness.for_spec(spec)
    with seeded(spec.seed + 3, device):
        clf = DpdgcClassifier(data.num_features, agg_width(spec, data.num_classes),
                              spec.hidden, data.num_classes, spec.dropout).to(device)
        opt = adam(clf.parameters(), lr=spec.lr, weight_decay=spec.weight_decay)
        n = inputs.shape[0]
        if spec.level in ("edge", "none"):
            rows = SparseRows.of(inputs, data.num_features) or inputs  # fixed: built once

            def full() -> tuple[Tensor, float]:
                losses = nn.functional.cross_entropy(clf(rows), y, reduction="none")
                return losses, float(losses.detach().mean())
            hist = train_steps(clf, opt, spec.epochs, full, clipping=None, on_step=on_step)
        else:
            bspec = spec.with_batch_size(n)
            sampler = PoissonSampler(n, bspec.batch / n, rnd.torch_generator("classifier/"
                                                                             "batches"))

            def batch() -> tuple[Tensor, float]:
                ids = sampler.sample().to(device)
                losses = nn.functional.cross_entropy(clf(inputs[ids]), y[ids],
                                                     reduction="none")
                return losses, float(losses.detach().mean()) if len(ids) else 0.0
            std = z * spec.budget_split[2] * spec.clip
            hist = train_steps(clf, opt, spec.steps, batch,
                               clipping=Clipping((spec.clip,), (std,), float(bspec.batch)),
                               generator=rnd.torch_generator("classifier/noise", device),
                               on_step=on_step, log_raw_loss=spec.log_raw_loss)
    return clf.eval(), hist


def training_hops(spec: DpdgcSpec, adj_t: Tensor, w: Tensor, h: Tensor) -> Tensor:
    """The hops the classifier trains on: with label messages at
    :data:`~dpgnn_core.methods.dpdgc_messages.OWN_RETURN_LEVELS`, hop 2 without each
    training node's own label sent out and back (otherwise the classifier learns to read
    its training labels off its own input, most where degrees are small: issue 49);
    else the released hops as they are. Only the classifier's training rows read it;
    the released (stored) hops and every prediction stay :math:`\\tilde H`."""
    if spec.messages != "labels" or spec.level not in OWN_RETURN_LEVELS:
        return h
    return without_own_return(adj_t, w, h)




def classifier_steps(spec: DpdgcSpec) -> int:
    """The classifier's optimisation steps: ``epochs`` full-batch epochs (edge, ∞),
    ``steps`` DP-Adam steps (the other levels)."""
    return spec.epochs if spec.level in ("edge", "none") else spec.steps


def finish_run(spec: DpdgcSpec, cal: Calibration, ledger: Ledger, z: float,
               encoder_history: list[dict[str, Any]], classifier_history: list[dict[str, Any]]
               ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The run's privacy report and history from its stages: the composed ``ledger`` must
    equal the calibrated plan; ε is the run's accountant's on it; the history numbers the
    encoder's steps then the classifier's, with ε spent at the end of each
    (:func:`epsilon_points`).

    Raises:
        PrivacyError: the stages' events differ from the plan.
    """
    if ledger.to_dict() != cal.planned.to_dict():
        raise PrivacyError("the DPDGC stages' privacy events differ from the calibrated plan")
    report = dict(cal.report)
    points: list[tuple[int, float]] = []
    if _private(spec):
        report["epsilon"] = make_accountant(spec.accountant).epsilon(ledger, report["delta"])
        points = epsilon_points(spec, cal.num_train, z, report["delta"],
                                len(encoder_history), len(classifier_history))
    history: list[dict[str, Any]] = []
    for i, rec in enumerate(encoder_history + classifier_history):
        name = "encoder_loss" if i < len(encoder_history) else "classifier_loss"
        history.append({"step": i + 1, **({name: rec["train_loss"],
                                           "train_loss": rec["train_loss"]}
                                          if "train_loss" in rec else {})})
    report, _, history = assemble_report(report, ledger, history, spec, points, who="DPDGC")
    return report, history


# --- the stages (run by _staged.run_in_memory in dpdgc.train_dpdgc, by tasks/staged.py) --


def _adjacency(data: GraphData, device: torch.device, *, reverse: bool = False) -> Tensor:
    """:func:`~dpgnn_core.privacy.pma.aggregation_matrix` of the edges (A^T: row i sums
    the senders to i) or, ``reverse``, of the reversed edges (A: row j sums over the
    receivers of j), on ``device``."""
    ei = torch.from_numpy(np.asarray(data.edge_index)).to(device)
    return aggregation_matrix(ei.flip(0) if reverse else ei, data.num_nodes)


def _reserve(run: PrivateRun, spec: DpdgcSpec, n_train: int, z: float) -> None:
    """Before a stage's private computation: the whole calibrated plan to the engine's
    budget keeper (:func:`~dpgnn_core.methods._staged.gate_plan`); the stages of one run
    share one reservation."""
    gate_plan(run, spec, ledger_for(spec, n_train)(z), n_train)


def _num_train(data: GraphData) -> int:
    return int(data.mask("train").sum())


def _encoder_stage(z: float, ctx: StageContext, reads: Mapping[str, Any]) -> StageOutput:
    """The adjacency embeddings W ``embeddings.pt`` (a private release: the encoder's
    event) and the encoder's history."""
    data, spec = ctx.data, ctx.spec
    n_train, device = _num_train(data), resolve_device(spec.device)
    if _private(spec):
        _reserve(ctx.run, spec, n_train, z)
    w, hist = fit_adjacency_encoder(data, spec, z, _adjacency(data, device),
                                    _adjacency(data, device, reverse=True), device)
    if _private(spec):
        ctx.run.released()  # W exists (and is stored): a release, spent for good
    return StageOutput({"embeddings.pt": w.cpu(), "history.json": hist},
                       stage_events(spec, n_train, z)[0])


def _first(ctx: StageContext, reads: Mapping[str, Any], adj_t: Tensor, device: torch.device
           ) -> Tensor:
    """The first hop's messages: the encoder stage's W, or the training labels
    (:func:`label_messages`)."""
    if ctx.spec.messages == "labels":
        return label_messages(ctx.data, ctx.spec, adj_t, device)
    w: Tensor = reads["encoder"].values["embeddings.pt"]
    return w.to(device)


def _aggregate_stage(z: float, ctx: StageContext, reads: Mapping[str, Any]) -> StageOutput:
    """The released hops ``aggregations.pt`` ``[n, hops, width]`` (one Gaussian event per
    released hop)."""
    data, spec = ctx.data, ctx.spec
    n_train, device = _num_train(data), resolve_device(spec.device)
    if _private(spec):
        _reserve(ctx.run, spec, n_train, z)
    adj_t = _adjacency(data, device)
    h = aggregate(adj_t, _first(ctx, reads, adj_t, device), spec, z, bool(data.directed))
    if _private(spec):
        ctx.run.released()  # the noisy hops exist: a release, spent for good
    return StageOutput({"aggregations.pt": h.cpu()}, stage_events(spec, n_train, z)[1],
                       manifest={"shape": list(h.shape),
                                 "release": "the released hops H(1..K)"})


def _classifier_stage(z: float, ctx: StageContext, reads: Mapping[str, Any]) -> StageOutput:
    """The classifier (with the embeddings W attached, adjacency messages), then the run:
    the encoder's, the hops' and the classifier's events composed into its ledger (refused
    if it differs from the plan), its report and history."""
    data, spec, run = ctx.data, ctx.spec, ctx.run
    cal = Calibration.of(reads["calibration"])
    device = resolve_device(spec.device)
    h = reads["aggregations"].values["aggregations.pt"].to(device)
    if spec.level in DP_ADAM_LEVELS:  # its DP-Adam steps are releases too
        _reserve(run, spec, cal.num_train, z)
    if _private(spec):  # the progress line's ε: the classifier trains after the release
        # of the aggregation, so ε after any of its steps is at most the plan's (an upper
        # bound, as epsilon_points says)
        run.follow([float(cal.report["epsilon"])] * classifier_steps(spec))
    rows = h
    if spec.messages == "labels" and spec.level in OWN_RETURN_LEVELS:
        adj_t = _adjacency(data, device)
        rows = training_hops(spec, adj_t, label_messages(data, spec, adj_t, device), h)
    clf, hist = fit_classifier(data, rows, spec, z, device, run.on_step)
    encoder = reads.get("encoder")
    if encoder is not None:  # W is a release; the training labels are not
        enc = AdjacencyEncoder(data.num_nodes, spec.adj_dim).to(device)
        enc.weight.copy_(encoder.values["embeddings.pt"].to(device))
        clf = clf.attach_encoder(enc)
    ledger = (encoder.events if encoder is not None else Ledger()) \
        + reads["aggregations"].events + stage_events(spec, cal.num_train, z)[2]
    report, history = finish_run(
        spec, cal, ledger, z, list(encoder.values["history.json"]) if encoder else [], hist)
    return StageOutput({"model.pt": clf, "history.json": history}, report=report)


def dpdgc_stages(spec: DpdgcSpec, z: float) -> tuple[Stage, ...]:
    """DPDGC's stages after the calibration of z: the adjacency encoder (adjacency messages
    only), the aggregation's hops (computed once, cached), then the classifier, which
    composes the run. The classifier trains on the aggregation's release: in one process
    a rerun redraws it, so it never resumes there (the pipeline keys its checkpoint on the
    stored release)."""
    def steps(n: int) -> int:
        return classifier_steps(spec)
    first: dict[str, str | tuple[str, ...] | None] = (
        {"encoder": "encoder"} if spec.messages == "adjacency" else {})
    encoder = (Stage("encoder", "dpdgc_encoder", functools.partial(_encoder_stage, z),
                     params={"z": z}, gated=True, label="adjacency encoder"),) if first else ()
    return (*encoder,
            Stage("aggregate", "dpdgc_aggregate", functools.partial(_aggregate_stage, z),
                  reads=first, params={"z": z}, gated=True),
            Stage("train", "dpdgc_classifier", functools.partial(_classifier_stage, z),
                  reads={"aggregations": "aggregate", "calibration": "calibrate", **first},
                  params={"z": z}, folder=(spec, z), gated=True, steps=steps,
                  label="classifier", resumable=False))


__all__ = ["DEGREE_CHECK_NOTE", "DP_ADAM_LEVELS", "agg_width", "aggregate",
           "classifier_steps", "dpdgc_stages", "epsilon_points", "finish_run",
           "fit_classifier", "label_messages", "ledger_for", "stage_events", "training_hops"]
