"""DPDGC (Chien et al., NeurIPS 2023): differentially private decoupled graph convolution,
at edge level (``dpdgc-edp``), node level (``dpdgc-ndp``), k-neighbour level
(``dpdgc-kndp``), ``node_feature`` level (``dpdgc-fdp``: structure public) and without
privacy (``dpdgc-inf``).

The messages are the paper's trained adjacency embeddings (``messages="adjacency"``,
below) or the training nodes' one-hot labels (``messages="labels"``: no encoder, ``hops``
private hops; :mod:`dpgnn_core.methods.dpdgc_messages` and docs/privacy.md, "DPDGC's label
messages").

The graph enters through one place only, the aggregation of learned node embeddings:

1. **Adjacency encoder**: one embedding row :math:`w_j \\in \\mathbb R^h` per node
   (a linear layer over rows of A, no bias), each row projected to L2 norm at most 1. It
   is trained on the training nodes' adjacency rows :math:`a_i` (the senders to i) and
   labels through a fixed random head R (public, from the seed):
   :math:`\\ell_i = \\mathrm{CE}((a_i W) R, y_i)`. At a private level by noisy *full-batch*
   gradient descent: each record's gradient :math:`a_i \\otimes g_i` (norm
   :math:`\\sqrt{|a_i|}\\,\\|g_i\\|`, exact) is clipped to C, summed over the training
   nodes, and Gaussian noise of std :math:`z_A \\Delta_A` is added (``adj_steps``
   Gaussian releases, no sampling).
2. **Aggregation** (one hop, one release): :math:`\\tilde H = \\mathrm{clip}_c(A W) +
   \\mathcal N(0, (z_H \\Delta_H)^2 I)`.
3. **Classifier**: an MLP on each node's own features and its row of :math:`\\tilde H`
   (a feature branch and an aggregation branch, concatenated, then a head). Adam with
   dropout where the features and labels are public (edge level, ∞); DP-Adam over
   Poisson-sampled rows at node and k-neighbour level.

Sensitivities (derived in docs/privacy.md, section "DPDGC"; checked by brute force in
tests/dpgnn_core/test_dpdgc.py), rows of W of norm <= 1, C the clipping norm:

=============  ======================================  ===============================
level          aggregation :math:`\\Delta_H`             adjacency encoder :math:`\\Delta_A`
=============  ======================================  ===============================
edge           1 (directed), √2 (undirected)           2C (directed), 4C (undirected)
node (D)       :math:`\\sqrt{\\min(c,D)^2 + D}` undir.    (2D + 1) C
k-neighbour    :math:`\\sqrt{\\min(2c,k)^2 + k}` undir.   2(k + 1) C
=============  ======================================  ===============================

(directed: :func:`aggregation_sensitivity`). The classifier's DP-Adam is add/remove of one
record (the node's features, label and its row of the release), as GAP's.

Inference reads only the released :math:`\\tilde H` and each node's own features: at edge
level (features public) every prediction is post-processing; at node and k-neighbour level
node v's own prediction also reads v's own features un-noised (the per-node statement
GAP-NDP makes; docs/privacy.md).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from dpgnn_core.data.graph import GraphData
from dpgnn_core.errors import DataError
from dpgnn_core.graph.gap_degree import check_degree_bound
from dpgnn_core.methods._private import (
    OnStep,
    check_node_task,
    check_weak_budget,
    guarantee_scope,
)
from dpgnn_core.methods._staged import MAX_NOISE
from dpgnn_core.methods.contract import Fitted, aggregating
from dpgnn_core.methods.dpdgc_messages import (
    OWN_RETURN_LEVELS,
    _bound,
    aggregation_sensitivity,  # the tests and docs name it here; its check is registered
    classifier_inputs,
    first_messages,
    hop_deltas,
    label_rows,
    label_sensitivity,
    level_defaults_used,
    message_width,
    propagate,
    released_hops,
    without_own_return,
)
from dpgnn_core.methods.private_run import PrivateRun, assemble_report
from dpgnn_core.models.dpdgc import AdjacencyEncoder, DpdgcClassifier
from dpgnn_core.privacy import (
    GaussianEvent,
    Ledger,
    PoissonGaussianEvent,
    PrivacyError,
    calibrate_noise,
    make_accountant,
)
from dpgnn_core.privacy.pma import aggregation_matrix, clip_rows
from dpgnn_core.privacy.randomness import Randomness
from dpgnn_core.privacy.report import PrivacyReport
from dpgnn_core.specs import DpdgcSpec
from dpgnn_core.specs.base import degree_alternatives
from dpgnn_core.training.checkpoint import suspended
from dpgnn_core.training.device import resolve_device
from dpgnn_core.training.dp_sgd import Clipping, PoissonSampler, train_steps
from dpgnn_core.training.loop import seeded
from dpgnn_core.training.metrics import metrics_by_split
from dpgnn_core.training.optim import adam

#: The ledger's note on the data-dependent degree check of DPDGC-NDP.
DEGREE_CHECK_NOTE = (
    "DPDGC-NDP degree check: the run proceeds only if every degree is within max_degree D "
    "and refuses otherwise, so whether it ran reveals whether the private graph's maximum "
    "degree is <= D (one bit, not accounted)")


# --- sensitivities (pure math) ---------------------------------------------------------


def encoder_sensitivity(level: str, directed: bool, clip: float, *,
                        max_degree: int | None = None, k: int | None = None) -> float:
    """L2 sensitivity of one step's sum of clipped per-record gradients of the adjacency
    encoder (one record per training node: its adjacency row and label).

    A record whose row changes (present in both graphs) moves its clipped gradient by at
    most 2C; a record present in one graph only by at most C. Edge: the receivers of the
    edge change their rows (1 directed, 2 undirected): 2C / 4C. Node: v's record (C) and
    its <= D receivers: (2D + 1) C. k-neighbour: v's record (kept with a changed row: 2C;
    or added / removed: C) and <= k other endpoints: 2(k + 1) C. ``node_feature`` (rows of
    A public): v's record only, added or removed: C.
    """
    if level == "none":
        return 0.0
    if level == "node_feature":
        return clip
    if level == "edge":
        return (2.0 if directed else 4.0) * clip
    if level not in ("node", "k_neighbor"):
        raise DataError(f"unknown DPDGC level {level!r}", field="level", value=level)
    bound = _bound(level, max_degree, k)
    return (2 * bound + (1 if level == "node" else 2)) * clip


# --- the modules -----------------------------------------------------------------------


def project_rows(w: Tensor) -> Tensor:
    """Each row scaled down to L2 norm at most 1 (the bound every sensitivity assumes)."""
    return clip_rows(w, 1.0)


def random_head(adj_dim: int, num_classes: int, seed: int) -> Tensor:
    """The adjacency encoder's fixed head R ``[h, C]``: a random matrix with orthonormal
    rows or columns, from the seed (public, data-independent), as in the reference code."""
    g = torch.Generator().manual_seed(int(seed) + 7919)
    q, _ = torch.linalg.qr(torch.randn(max(adj_dim, num_classes), max(adj_dim, num_classes),
                                       generator=g))
    out: Tensor = q[:adj_dim, :num_classes].contiguous()
    return out


def clipped_gradient_sum(adj_t: Tensor, adj: Tensor, w: Tensor, head: Tensor, y: Tensor,
                         train: Tensor, clip: float | None) -> tuple[Tensor, float]:
    """Sum over training nodes i of the gradient of :math:`\\mathrm{CE}((a_i W) R, y_i)`
    with respect to W, each record's gradient :math:`a_i \\otimes g_i` clipped to L2 norm
    ``clip`` (:obj:`None`: not clipped), and the records' mean loss. ``adj_t`` is
    :func:`aggregation_matrix` (row i sums the senders to i), ``adj`` its transpose (row j
    sums over the receivers of j); ``train`` a boolean mask."""
    h = torch.sparse.mm(adj_t, w)
    p = torch.softmax(h @ head, dim=1)
    onehot = torch.nn.functional.one_hot(y.clamp_min(0), head.shape[1]).to(p.dtype)
    loss = -(onehot * torch.log(p.clamp_min(1e-30))).sum(1)
    mean_loss = float(loss[train].mean()) if bool(train.any()) else 0.0
    g = (p - onehot) @ head.T  # dCE/dh_i, [n, h]
    g = g * train.to(g.dtype).unsqueeze(1)
    if clip is not None:
        deg = torch.sparse.mm(adj_t, torch.ones(w.shape[0], 1, dtype=w.dtype,
                                                device=w.device)).squeeze(1)
        norms = deg.sqrt() * g.norm(dim=1)  # ||a_i ⊗ g_i|| for a binary row a_i
        g = g * (clip / norms.clamp_min(1e-12)).clamp(max=1.0).unsqueeze(1)
    return torch.sparse.mm(adj, g), mean_loss


# --- the recipe ------------------------------------------------------------------------


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
        if spec.level in ("node", "k_neighbor", "node_feature"):
            out = out.add(PoissonGaussianEvent(noise_multiplier=z * w_cls, sampling_rate=rate,
                                               steps=spec.steps, level=level,
                                               description=f"DPDGC classifier (DP-Adam){unit}"),
                          sampler_scheme="poisson")
        if spec.level == "node":
            out = out.flag(DEGREE_CHECK_NOTE)
        return out
    return ledger


def _delta(spec: DpdgcSpec, n_train: int) -> float:
    return spec.delta if spec.delta is not None else 1.0 / (10 * n_train)


def calibrate_composition(spec: DpdgcSpec, make: Callable[[float], Ledger], delta: float
                          ) -> Any:
    """The :class:`~dpgnn_core.privacy.calibrate.Calibration` of a private ``spec``'s
    composition ``make`` (:func:`ledger_for`) to its target ε at ``delta``: what
    :func:`calibrate` and the early plan both calibrate with.

    Raises:
        PrivacyError: no noise up to :data:`~dpgnn_core.methods._staged.MAX_NOISE` reaches
            the target.
    """
    assert spec.epsilon is not None
    try:
        return calibrate_noise(make, spec.epsilon, delta, make_accountant(spec.accountant),
                               max_noise=MAX_NOISE)
    except PrivacyError as e:
        raise PrivacyError(f"DPDGC-{spec.level} composition (adjacency encoder, aggregation"
                           f", classifier): {e}") from e


def calibrate(data: GraphData, spec: DpdgcSpec) -> tuple[Ledger, float, dict[str, Any]]:
    """The common noise scale z, the run's planned ledger and the privacy report; checks
    the input (and, at node level, the degree bound) before anything trains.

    Raises:
        DataError: not single-label node classification, no training labels, a batch too
            large, a degree above D (node level), or no edge.
        PrivacyError: a budget no noise up to :data:`~dpgnn_core.methods._staged.MAX_NOISE`
            reaches.
    """
    n_train = check_node_task(data, spec, spec.method)
    ei = np.asarray(data.edge_index)
    if ei.shape[1] == 0:
        raise DataError("DPDGC aggregates over the edges: the graph has none",
                        field="edge_index", value=0)
    directed = bool(data.directed)
    if spec.level == "node":
        assert spec.max_degree is not None
        check_degree_bound(ei, data.num_nodes, spec.max_degree, directed=directed,
                           method=spec.method, instead=degree_alternatives(spec))
    delta = _delta(spec, n_train)
    make = ledger_for(spec, n_train)
    report: dict[str, Any] = {
        "method": spec.method, "private": _private(spec), "level": spec.level,
        "delta": delta, "steps": spec.steps, "adj_steps": spec.adj_steps, "unaccounted": [],
        "budget_split": list(spec.budget_split), "directed": directed,
        "messages": spec.messages, "hops": spec.hops, "row_clip": spec.row_clip,
        "structure_defaults": level_defaults_used(spec),
        **Randomness.for_spec(spec).describe()}
    if not _private(spec):
        report.update({"epsilon": math.inf, "noise_multiplier": 0.0, "protects": "nothing"})
        return Ledger(), 0.0, report
    cal = calibrate_composition(spec, make, delta)
    z = cal.noise_multiplier
    opts = {"max_degree": spec.max_degree, "k": spec.k}
    d_hops = hop_deltas(spec, directed)
    d_a = encoder_sensitivity(spec.level, directed, spec.clip, **opts)
    report.update({"epsilon": cal.epsilon, "target_epsilon": spec.epsilon,
                   "noise_multiplier": z, "accountant": spec.accountant,
                   "aggregation_sensitivity": d_hops[0],
                   "aggregation_noise_std": z * spec.budget_split[1] * d_hops[0],
                   "hop_sensitivities": d_hops,
                   "hop_noise_stds": [z * spec.budget_split[1] * d for d in d_hops],
                   **({"encoder_sensitivity": d_a,
                       "encoder_noise_std": z * spec.budget_split[0] * d_a}
                      if spec.messages == "adjacency" else {}),
                   "protects": _protects(spec, directed),
                   "inference": "transductive: predictions read the released aggregation "
                                "and each node's own features (no extra budget)"})
    planned = make(z)
    report.update(guarantee_scope(planned))
    report["warnings"] = check_weak_budget(spec.epsilon, delta, n_train)
    report["unaccounted"] = list(planned.unaccounted)
    return planned, z, report


def _protects(spec: DpdgcSpec, directed: bool) -> str:
    unit = "one directed edge" if directed else "one undirected edge (both directions)"
    own = ("Predictions: node v's prediction also reads v's own features, not noised; the "
           "predictions of every other node are post-processing of the private outputs and "
           "their own features, so they are protected against v")
    return {
        "edge": f"the embeddings W, the aggregation, the classifier and every prediction "
                f"against adding or removing {unit}; node features and labels are public",
        "node": "W, the aggregation and the classifier against adding or removing one node "
                "with its features, label and edges, on graphs whose every "
                f"{'in + out degree' if directed else 'degree'} is <= {spec.max_degree} (a "
                f"graph beyond it is refused, which reveals that bit). {own}",
        "k_neighbor": "W, the aggregation and the classifier against adding or removing one "
                      "node's features and label and / or up to k = "
                      f"{spec.k} of its edges (no degree bound; k >= 1 includes one edge). "
                      f"{own}",
        "node_feature": "the released messages and the classifier against adding or "
                        "removing one node's features and label; the graph structure is "
                        f"public (edges and degrees are read without noise). {own}",
    }[spec.level]


def _gate(run: PrivateRun, spec: DpdgcSpec, planned: Ledger, n_train: int) -> None:
    """The whole calibrated plan to the engine's budget keeper before the first private
    release (:meth:`PrivateRun.reserve`)."""
    run.reserve(planned, {"method": spec.method, "epsilon": spec.epsilon,
                          "delta": _delta(spec, n_train)})


def fit_adjacency_encoder(data: GraphData, spec: DpdgcSpec, z: float, adj_t: Tensor,
                          adj: Tensor, device: torch.device
                          ) -> tuple[Tensor, list[dict[str, float]]]:
    """Stage 1: W ``[n, h]`` from random unit rows (from the seed: public), then
    ``adj_steps`` (private) or ``adj_epochs`` (∞) Adam steps on the noisy (private) or exact
    sum of per-record gradients (clipped when private); rows projected to norm <= 1 after
    every step. Noise from a secret generator."""
    with seeded(spec.seed + 1, device):  # public initialisation: unit rows, data-free
        w0 = torch.nn.functional.normalize(torch.randn(data.num_nodes, spec.adj_dim,
                                                       device=device), dim=1)
    w = w0.requires_grad_(True)
    head = random_head(spec.adj_dim, data.num_classes, spec.seed).to(device)
    y = torch.tensor(np.asarray(data.y), device=device)
    train = torch.from_numpy(data.mask("train")).to(device)
    n_train = int(train.sum())
    private = _private(spec)
    steps = spec.adj_steps if private else spec.adj_epochs
    sigma = z * spec.budget_split[0] * encoder_sensitivity(
        spec.level, bool(data.directed), spec.clip, max_degree=spec.max_degree, k=spec.k)
    gen = Randomness.for_spec(spec).torch_generator("adjacency/noise", device)
    opt = adam([w], lr=spec.adj_lr)
    history: list[dict[str, float]] = []
    for step in range(1, steps + 1):
        with torch.no_grad():
            grad, loss = clipped_gradient_sum(adj_t, adj, w.detach(), head, y, train,
                                              spec.clip if private else None)
            if private:
                grad.add_(torch.randn(grad.shape, generator=gen, device=device,
                                      dtype=grad.dtype), alpha=sigma)
            w.grad = grad / n_train
        opt.step()
        with torch.no_grad():
            w.copy_(project_rows(w))
        # a private step's loss is read off the private adjacency without noise: recorded
        # only behind log_raw_loss (the run is then marked), as train_steps does
        history.append({"step": step, **({"train_loss": loss}
                                         if not private or spec.log_raw_loss else {})})
    return w.detach(), history


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
            def full() -> tuple[Tensor, float]:
                losses = nn.functional.cross_entropy(clf(inputs), y, reduction="none")
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


def train_dpdgc(data: GraphData, spec: DpdgcSpec, run: PrivateRun | None = None
                ) -> tuple[DpdgcClassifier, Tensor, Ledger, dict[str, Any],
                           list[dict[str, Any]]]:
    """Calibrate, then adjacency encoder -> aggregation -> classifier, through the fit's
    engine ``run`` (the budget keeper, the steps; a bare one by default). Returns the
    classifier (with the embeddings W attached), the released hops ``[n, hops, width]``,
    the ledger, the report and the history."""
    run = run or PrivateRun()
    planned, z, report = calibrate(data, spec)
    n_train = int(data.mask("train").sum())
    device = resolve_device(spec.device)
    ei = torch.from_numpy(np.asarray(data.edge_index)).to(device)
    adj_t = aggregation_matrix(ei, data.num_nodes)
    adj = aggregation_matrix(ei.flip(0), data.num_nodes)
    if _private(spec):
        _gate(run, spec, planned, n_train)
    h1: list[dict[str, float]] = []
    if spec.messages == "labels":
        w = label_messages(data, spec, adj_t, device)
    else:
        w, h1 = fit_adjacency_encoder(data, spec, z, adj_t, adj, device)
    h = aggregate(adj_t, w, spec, z, bool(data.directed))
    if _private(spec):
        run.released()
    # A rerun of the task redraws the aggregation's noise: resuming a classifier trained on
    # the earlier release would mix two releases the ledger counts once. No checkpoint.
    if _private(spec):  # the progress line's ε: the classifier trains after the release
        # of the aggregation, so ε after any of its steps is at most the plan's (an upper
        # bound, as _epsilon_points says)
        steps = spec.epochs if spec.level in ("edge", "none") else spec.steps
        run.follow([float(report["epsilon"])] * steps)
    with suspended():
        clf, h2 = fit_classifier(data, training_hops(spec, adj_t, w, h), spec, z, device,
                                 run.on_step)
    if spec.messages == "adjacency":  # W is a release; the training labels are not
        enc = AdjacencyEncoder(data.num_nodes, spec.adj_dim).to(device)
        enc.weight.copy_(w)
        clf = clf.attach_encoder(enc)
    points: list[tuple[int, float]] = []
    if _private(spec):
        report["epsilon"] = make_accountant(spec.accountant).epsilon(planned, report["delta"])
        points = _epsilon_points(spec, n_train, z, report["delta"], len(h1), len(h2))
    history: list[dict[str, Any]] = []
    for i, rec in enumerate(h1 + h2):
        name = "encoder_loss" if i < len(h1) else "classifier_loss"
        history.append({"step": i + 1, **({name: rec["train_loss"],
                                           "train_loss": rec["train_loss"]}
                                          if "train_loss" in rec else {})})
    report, ledger, history = assemble_report(report, planned, history, spec, points,
                                              who="DPDGC")
    return clf, h.cpu(), ledger, report, history


def _epsilon_points(spec: DpdgcSpec, n_train: int, z: float, delta: float, enc_steps: int,
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


def evaluate_dpdgc(classifier: DpdgcClassifier, aggregations: Tensor, data: GraphData,
                   device: str = "auto") -> dict[str, dict[str, float]]:
    """Metrics per split from each node's features and the released aggregation."""
    dev = resolve_device(device)
    clf = classifier.to(dev).eval()
    with torch.no_grad():
        xh = classifier_inputs(torch.tensor(data.x, device=dev), aggregations.to(dev))
        logits = clf(xh).cpu().numpy()
    return metrics_by_split(data, logits)


def build_dpdgc(spec: DpdgcSpec, in_dim: int, num_classes: int) -> DpdgcClassifier:
    """The (untrained) classifier ``spec`` describes; loading a state dict that holds
    released embeddings W attaches them (:meth:`~dpgnn_core.models.dpdgc.DpdgcClassifier.
    load_state_dict`)."""
    return DpdgcClassifier(in_dim, agg_width(spec, num_classes), spec.hidden, num_classes,
                           spec.dropout)


# --- the implementation (the catalogue's "dpdgc" family) ----------------------------------
def _fit(data: GraphData, spec: DpdgcSpec, run: PrivateRun) -> Fitted:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
        clf, h, ledger, report, history = train_dpdgc(data, spec, run)
    return Fitted(clf, ledger, PrivacyReport.from_dict(report), history, {"aggregations": h})


from dpgnn_core.methods.brute_force import dpdgc_labels  # noqa: E402
from dpgnn_core.methods.brute_force.dpdgc import checks  # noqa: E402

IMPLEMENTATION = aggregating(
    "DPDGC", fit=_fit, ledger_for=ledger_for, build=build_dpdgc, evaluate=evaluate_dpdgc,
    sensitivity=(dpdgc_labels.check(label_sensitivity), *checks(
        aggregation_sensitivity, encoder_sensitivity, clipped_gradient_sum,
        random_head(3, 3, 1).double())))
