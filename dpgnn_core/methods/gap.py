"""GAP (Sajadmanesh et al., 2023): encoder module, private multi-hop aggregation (PMA),
classification module; edge-level (EDP), node-level (NDP) and non-private (GAP-∞).

1. **Encoder**: an MLP trained on node features and labels only (no edge is read); its
   last hidden layer, L2-row-normalised, is X(0). Adam for EDP / ∞; DP-Adam over
   Poisson-sampled rows for NDP (one :class:`~dpgnn_core.privacy.PoissonGaussianEvent`).
2. **PMA**: for k = 1..K,

   .. math::
       X^{(k)} = \\mathrm{normalise}\\big(A^\\top X^{(k-1)} + \\mathcal{N}(0, \\sigma^2 I)\\big)

   a sum aggregation of unit-norm rows, so one neighbouring change moves the sum by at most
   Δ: one directed edge changes one row (Δ = 1); on an undirected graph one edge is two
   messages (Δ = √2; GAP's code uses 1); at node level with every degree ≤ D, Δ = √D as in
   GAP's analysis. One :class:`~dpgnn_core.privacy.GaussianEvent` of K releases. The noise
   is drawn once; reusing the release costs nothing more.
3. **Classifier**: one MLP per hop, combined (concatenation, sum or attention), then a
   head; Adam for EDP / ∞, DP-Adam over rows for NDP (a row holds the node's own encoding
   and its private aggregations, which are post-processing).

One noise scale z for the whole composition: the accountant solves for z so that encoder,
PMA and classifier together spend the target (ε, δ); ``budget_split`` scales each
module's multiplier relative to z.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from dpgnn_core.data.clean import is_symmetric
from dpgnn_core.data.graph import GraphData
from dpgnn_core.errors import DataError
from dpgnn_core.graph.degree_bound import bound_degree
from dpgnn_core.methods._private import check_node_task, save_model
from dpgnn_core.privacy import (
    GaussianEvent,
    Ledger,
    PoissonGaussianEvent,
    PrivacyError,
    calibrate_noise,
    make_accountant,
)
from dpgnn_core.specs import GapSpec
from dpgnn_core.training.device import resolve_device
from dpgnn_core.training.dp_sgd import Clipping, PoissonSampler, train_steps
from dpgnn_core.training.loop import seeded
from dpgnn_core.training.metrics import metrics_by_split
from dpgnn_core.training.per_sample import group_noise_stds

#: Largest noise multiplier GAP's calibration accepts: beyond it every release is noise, so
#: a budget that needs more is refused with the smallest ε reached at this noise.
MAX_NOISE = 1e3

# --- pure math -------------------------------------------------------------------------


def row_normalise(x: Tensor) -> Tensor:
    """Each row scaled to unit L2 norm (zero rows stay zero)."""
    out: Tensor = x / x.norm(dim=1, keepdim=True).clamp_min(1e-12)
    return out


def aggregation_matrix(edge_index: Tensor, num_nodes: int) -> Tensor:
    """:math:`A^\\top` as a sparse CSR matrix: row i sums the rows of the nodes that send to
    i (``edge_index`` src -> dst, without duplicates, as datasets store them).

    CSR rather than COO: ``torch.sparse.mm`` runs about twice as fast, and a stable sort by
    destination replaces COO's coalesce (a sort and a merge of duplicates) at build time."""
    src, dst = edge_index[0], edge_index[1]
    if edge_index.shape[1] and not bool((dst[1:] >= dst[:-1]).all()):
        dst, order = torch.sort(dst, stable=True)
        src = src[order]
    crow = torch.zeros(num_nodes + 1, dtype=torch.int64, device=edge_index.device)
    crow[1:] = torch.cumsum(torch.bincount(dst, minlength=num_nodes), 0)
    values = torch.ones(src.shape[0], device=edge_index.device)
    with warnings.catch_warnings():  # torch marks sparse CSR as beta at every construction
        warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
        return torch.sparse_csr_tensor(crow, src, values, (num_nodes, num_nodes),
                                       check_invariants=False)


def pma(x0: Tensor, adj_t: Tensor, hops: int, sigma: float,
        generator: torch.Generator | None = None) -> list[Tensor]:
    """PMA: ``[X(0), X(1), ..., X(K)]`` with noise std ``sigma`` on every aggregation.

    Args:
        x0 (Tensor): encodings ``[n, d]`` (normalised here).
        adj_t (Tensor): :func:`aggregation_matrix`.
        hops (int): K >= 1.
        sigma (float): noise std (multiplier times sensitivity); 0 for GAP-∞.
        generator (torch.Generator, optional): the noise's source, on ``x0``'s device.
    """
    if hops < 1:
        raise DataError("PMA needs at least one hop", field="hops", value=hops)
    out = [row_normalise(x0)]
    for _ in range(hops):
        agg = torch.sparse.mm(adj_t, out[-1])
        if sigma > 0:
            agg.add_(torch.randn(agg.shape, generator=generator, device=agg.device,
                                 dtype=agg.dtype), alpha=sigma)
        out.append(row_normalise(agg))
    return out


def sensitivity(level: str, max_degree: int | None, directed: bool) -> float:
    """PMA's sensitivity per hop (see the module docstring)."""
    if level == "edge":
        return 1.0 if directed else math.sqrt(2.0)
    if level == "node":
        assert max_degree is not None
        return math.sqrt(max_degree)
    return 0.0


# --- modules ---------------------------------------------------------------------------


class GapEncoder(nn.Module):
    """``in -> hidden -> encoder_dim -> classes``; :meth:`encode` gives X(0) before
    normalisation.

    Args:
        in_dim (int): input features.
        hidden (int): hidden width.
        encoder_dim (int): width of the encoding.
        num_classes (int): classes (the pre-training head).
    """

    def __init__(self, in_dim: int, hidden: int, encoder_dim: int, num_classes: int) -> None:
        super().__init__()
        self.lin1 = nn.Linear(in_dim, hidden)
        self.lin2 = nn.Linear(hidden, encoder_dim)
        self.head = nn.Linear(encoder_dim, num_classes)

    def encode(self, x: Tensor) -> Tensor:
        return torch.selu(self.lin2(torch.selu(self.lin1(x))))

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = self.head(self.encode(x))
        return out


class GapClassifier(nn.Module):
    """One base layer per hop, a combination, a head.

    .. math::
        h_v = \\mathrm{combine}_k\\, \\mathrm{SELU}(W_k X^{(k)}_v), \\qquad
        \\hat y_v = W_2\\, \\mathrm{SELU}(W_1 h_v)

    Args:
        hops (int): K (the input holds K + 1 matrices).
        in_dim (int): encoding width.
        hidden (int): hidden width.
        num_classes (int): classes.
        combine (str, optional): ``cat``, ``sum`` or ``attn`` (softmax over hops of a
            learned score of each hop's representation). (default: ``"cat"``)
    """

    def __init__(self, hops: int, in_dim: int, hidden: int, num_classes: int,
                 combine: str = "cat") -> None:
        super().__init__()
        if combine not in ("cat", "sum", "attn"):
            raise ValueError(f"unknown combine {combine!r}; choose cat, sum or attn")
        self.combine = combine
        self.base = nn.ModuleList(nn.Linear(in_dim, hidden) for _ in range(hops + 1))
        self.score = nn.Linear(hidden, 1) if combine == "attn" else None
        width = hidden * (hops + 1) if combine == "cat" else hidden
        self.lin1 = nn.Linear(width, hidden)
        self.lin2 = nn.Linear(hidden, num_classes)

    def forward(self, xs: Tensor) -> Tensor:
        """``xs`` ``[n, K + 1, d]`` -> logits ``[n, C]``."""
        hs = torch.stack([torch.selu(lin(xs[:, k])) for k, lin in enumerate(self.base)], 1)
        if self.combine == "cat":
            h = hs.flatten(1)
        elif self.combine == "sum":
            h = hs.sum(1)
        else:
            assert self.score is not None
            h = (torch.softmax(self.score(hs), dim=1) * hs).sum(1)
        out: Tensor = self.lin2(torch.selu(self.lin1(h)))
        return out


# --- the recipe ------------------------------------------------------------------------


def plan(spec: GapSpec, num_train: int) -> Callable[[float], Ledger]:
    """z ↦ the ledger of the whole composition (empty for GAP-∞)."""
    w_enc, w_pma, w_cls = spec.budget_split
    rate = spec.batch_size / num_train

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
        return out
    return ledger


@dataclass
class GapResult:
    """Everything a GAP run produces."""

    encoder: GapEncoder
    classifier: GapClassifier
    aggregations: Tensor  # [n, K + 1, d], the private release (post-processing from here)
    ledger: Ledger
    report: dict[str, Any]
    history: list[dict[str, float]]


def prepare_graph(data: GraphData, spec: GapSpec) -> tuple[np.ndarray, dict[str, Any]]:
    """The edges PMA aggregates over: GAP's degree bound at node level (with counts)."""
    ei = np.asarray(data.edge_index)
    info: dict[str, Any] = {"edges_before": int(ei.shape[1])}
    if spec.level == "node":
        assert spec.max_degree is not None
        ei = bound_degree(ei, data.num_nodes, spec.max_degree, directed=is_directed(data),
                          rng=np.random.default_rng(spec.seed))
    if ei.shape[1] == 0:
        raise DataError("no edge left to aggregate over" + (
            f" after the degree bound {spec.max_degree}" if spec.level == "node" else ""),
            field="max_degree" if spec.level == "node" else "edge_index",
            value=spec.max_degree if spec.level == "node" else 0)
    info["edges_after"] = int(ei.shape[1])
    return ei, info


def is_directed(data: GraphData) -> bool:
    return bool(data.directed and not is_symmetric(np.asarray(data.edge_index),
                                                   data.num_nodes))


def _fit(model: nn.Module, inputs: Tensor, y: Tensor, spec: GapSpec, private: bool,
         z: float, seed: int, name: str,
         on_step: Callable[[int, dict[str, float]], None] | None) -> list[dict[str, float]]:
    """Adam full batch (``epochs``), or DP-Adam over Poisson-sampled rows (``steps``)."""
    gen = torch.Generator().manual_seed(seed)
    noise_gen = torch.Generator(device=inputs.device).manual_seed(seed + 1)
    opt = torch.optim.Adam(model.parameters(), lr=spec.lr)
    n = inputs.shape[0]
    if not private:
        def full() -> tuple[Tensor, float]:
            losses = nn.functional.cross_entropy(model(inputs), y, reduction="none")
            return losses, float(losses.detach().mean())
        hist = train_steps(model, opt, spec.epochs, full, clipping=None, on_step=on_step)
    else:
        sampler = PoissonSampler(n, spec.batch_size / n, gen)

        def batch() -> tuple[Tensor, float]:
            ids = sampler.sample().to(inputs.device)
            losses = nn.functional.cross_entropy(model(inputs[ids]), y[ids], reduction="none")
            return losses, float(losses.detach().mean()) if len(ids) else 0.0
        stds = group_noise_stds(z, 1.0, [spec.clip])
        hist = train_steps(model, opt, spec.steps, batch,
                           clipping=Clipping((spec.clip,), tuple(stds), float(spec.batch_size)),
                           generator=noise_gen, on_step=on_step)
    index = {"encoder": 0.0, "classifier": 1.0}[name]
    return [{**h, "module_index": index} for h in hist]


def calibrate_gap(data: GraphData, spec: GapSpec) -> tuple[Ledger, float, dict[str, Any]]:
    """The common noise scale z of the composition, its ledger and the privacy report;
    checks the input before anything is trained."""
    n_train = check_node_task(data, spec, "GAP")
    if spec.encoder_dim > data.num_features:
        warnings.warn(f"encoder_dim {spec.encoder_dim} exceeds the {data.num_features} input "
                      "features: the encoding cannot compress them", stacklevel=2)
    private = spec.level != "none"
    delta = spec.delta if spec.delta is not None else 1.0 / (10 * n_train)
    make = plan(spec, n_train)
    report: dict[str, Any] = {
        "method": "gap-" + {"edge": "edp", "node": "ndp", "none": "inf"}[spec.level],
        "private": private, "level": spec.level, "delta": delta, "hops": spec.hops,
        "steps": spec.steps, "unaccounted": [], "budget_split": list(spec.budget_split)}
    if private:
        assert spec.epsilon is not None
        try:
            cal = calibrate_noise(make, spec.epsilon, delta, make_accountant(spec.accountant),
                                  max_noise=MAX_NOISE)
        except PrivacyError as e:
            raise PrivacyError(f"GAP-{spec.level} composition (encoder, {spec.hops} PMA hops, "
                               f"classifier): {e}") from e
        z = cal.noise_multiplier
        report.update({"epsilon": cal.epsilon, "target_epsilon": spec.epsilon,
                       "noise_multiplier": z, "accountant": spec.accountant})
    else:
        z = 0.0
        report.update({"epsilon": math.inf, "noise_multiplier": 0.0})
    delta_pma = sensitivity(spec.level, spec.max_degree, is_directed(data))
    inductive = bool(data.meta.get("split", {}).get("inductive", False))
    report.update({
        "pma_sensitivity": delta_pma, "pma_noise_std": z * spec.budget_split[1] * delta_pma,
        "protects": {
            "edge": "aggregations, parameters and predictions against adding or removing one "
                    "edge; node features and labels are not protected",
            "node": "aggregations, parameters and predictions against adding or removing one "
                    f"node with its edges, given every degree <= {spec.max_degree}",
            "none": "nothing"}[spec.level],
        "inference": (
            "inductive: PMA ran once on the whole disjoint graph, i.e. separately on the "
            "training and test graphs (parallel composition): no extra budget" if inductive
            else "transductive: test nodes reuse the cached private aggregations (no extra "
            "budget)")})
    return (make(z) if private else Ledger()), z, report


def fit_encoder(data: GraphData, spec: GapSpec, z: float,
                on_step: Callable[[int, dict[str, float]], None] | None = None
                ) -> tuple[GapEncoder, list[dict[str, float]], Ledger]:
    """Stage 1: the encoder on features and labels of training nodes; its privacy event
    (NDP) comes with it."""
    device = resolve_device(spec.device)
    train = torch.from_numpy(data.mask("train")).to(device)
    x = torch.tensor(data.x, device=device)
    y = torch.tensor(np.asarray(data.y), device=device)
    n_train = int(train.sum())
    with seeded(spec.seed, device):
        enc = GapEncoder(data.num_features, spec.hidden, spec.encoder_dim,
                         data.num_classes).to(device)
        hist = _fit(enc, x[train], y[train], spec, spec.level == "node",
                    z * spec.budget_split[0], spec.seed, "encoder", on_step)
    events = Ledger()
    if spec.level == "node":
        events = Ledger(plan(spec, n_train)(z).entries[:1])
    return enc.eval(), hist, events


def aggregate(data: GraphData, edge_index: np.ndarray, encoder: GapEncoder, spec: GapSpec,
              z: float) -> tuple[Tensor, Ledger]:
    """Stage 2: X(0) from the encoder, then PMA over ``edge_index``; ``[n, K + 1, d]`` and
    its privacy event (K Gaussian releases; none for GAP-∞). The noise is seeded by
    ``spec.seed``: the same spec gives the same release."""
    device = resolve_device(spec.device)
    sigma = z * spec.budget_split[1] * sensitivity(spec.level, spec.max_degree,
                                                   is_directed(data))
    gen = torch.Generator(device=device).manual_seed(spec.seed + 2)
    with torch.no_grad():
        x0 = encoder.to(device).eval().encode(torch.tensor(data.x, device=device))
        adj_t = aggregation_matrix(torch.from_numpy(edge_index).to(device), data.num_nodes)
        xs = torch.stack(pma(x0, adj_t, spec.hops, sigma, gen), 1).cpu()
    events = Ledger()
    if spec.level != "none":
        n_train = int(data.mask("train").sum())
        events = Ledger(tuple(e for e in plan(spec, n_train)(z).entries
                              if e.event.kind == "gaussian"))
    return xs, events


def fit_classifier(data: GraphData, aggregations: Tensor, spec: GapSpec, z: float,
                   on_step: Callable[[int, dict[str, float]], None] | None = None
                   ) -> tuple[GapClassifier, list[dict[str, float]], Ledger]:
    """Stage 3: the classification module on the private aggregations of training nodes."""
    device = resolve_device(spec.device)
    train = torch.from_numpy(data.mask("train"))
    y = torch.tensor(np.asarray(data.y), device=device)
    xs = aggregations.to(device)
    n_train = int(train.sum())
    with seeded(spec.seed + 3, device):
        clf = GapClassifier(spec.hops, spec.encoder_dim, spec.hidden, data.num_classes,
                            spec.combine).to(device)
        hist = _fit(clf, xs[train.to(device)], y[train.to(device)], spec,
                    spec.level == "node", z * spec.budget_split[2], spec.seed + 3,
                    "classifier", on_step)
    events = Ledger()
    if spec.level == "node":
        events = Ledger(plan(spec, n_train)(z).entries[-1:])
    return clf.eval(), hist, events


def train_gap(data: GraphData, spec: GapSpec,
              on_step: Callable[[int, dict[str, float]], None] | None = None) -> GapResult:
    """Calibrate, then encoder -> PMA -> classifier; the ledger is the composition of the
    events each stage returned (and equals the calibrated plan).

    Raises:
        DataError: not single-label node classification, no training labels, a batch
            larger than the training set, or a degree bound that removes every edge.
        PrivacyError: a budget too small for the composition (names the smallest ε).
    """
    planned, z, report = calibrate_gap(data, spec)
    ei, report["graph"] = prepare_graph(data, spec)
    enc, h1, e1 = fit_encoder(data, spec, z, on_step)
    xs, e2 = aggregate(data, ei, enc, spec, z)
    clf, h2, e3 = fit_classifier(data, xs, spec, z, on_step)
    ledger = e1 + e2 + e3
    if ledger.to_dict() != planned.to_dict():
        raise RuntimeError("the stages' privacy events differ from the calibrated plan")
    return GapResult(encoder=enc, classifier=clf, aggregations=xs, ledger=ledger,
                     report=report, history=h1 + h2)


def evaluate_gap(classifier: GapClassifier, aggregations: Tensor, data: GraphData,
                 device: str = "auto") -> dict[str, dict[str, float]]:
    """Metrics per split from the (private) aggregations: no extra budget."""
    dev = resolve_device(device)
    with torch.no_grad():
        logits = classifier.to(dev).eval()(aggregations.to(dev)).cpu().numpy()
    return metrics_by_split(data, logits)


def save_gap(path: str, classifier: GapClassifier, spec: GapSpec, in_dim: int,
             num_classes: int) -> None:
    """The classifier's weights (what predicts from the aggregations) and its spec."""
    save_model(path, "gap", classifier, spec, in_dim, num_classes)


def load_gap(blob: dict[str, Any]) -> tuple[GapClassifier, GapSpec]:
    spec = GapSpec(**blob["spec"])
    model = GapClassifier(spec.hops, spec.encoder_dim, spec.hidden, blob["num_classes"],
                          spec.combine)
    model.load_state_dict(blob["state_dict"])
    return model.eval(), spec


def epsilon_by_step(spec: GapSpec, num_train: int, z: float, delta: float,
                    encoder_steps: int, classifier_steps: int) -> list[float]:
    """ε spent after each optimisation step of the run (encoder steps, then classifier
    steps; PMA's release counts from the first classifier step), from the RDP of the
    ledger's events (linear in steps)."""
    from dpgnn_core.privacy import RdpAccountant
    from dpgnn_core.privacy.rdp import epsilon_from_rdp

    if spec.level == "none":
        return [math.inf] * (encoder_steps + classifier_steps)
    acc = RdpAccountant()
    entries = plan(spec.model_copy(update={"steps": 1}), num_train)(z).entries
    rdp = [acc.rdp(Ledger((e,))) for e in entries]  # one step each; PMA's K hops at once
    zero = np.zeros_like(acc.orders)
    enc, pma_rdp, cls = (rdp[0], rdp[1], rdp[2]) if spec.level == "node" else (
        zero, rdp[0], zero)
    out = []
    for t in range(1, encoder_steps + 1):
        out.append(epsilon_from_rdp(acc.orders, t * enc, delta)[0] if spec.level == "node"
                   else 0.0)
    base = encoder_steps * enc + pma_rdp
    for t in range(1, classifier_steps + 1):
        out.append(epsilon_from_rdp(acc.orders, base + t * cls, delta)[0])
    return out
