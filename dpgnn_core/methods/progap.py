"""ProGAP (Sajadmanesh and Gatica-Perez, WSDM 2024): progressive private GNN training;
edge-level (EDP), node-level (NDP) and non-private (ProGAP-∞).

The model is K + 1 stages. Stage k has a base MLP :math:`g_k` (``base_layers`` Linear +
SELU layers to ``hidden``) and a head :math:`f_k` (one Linear layer):

.. math::
    h_0 = g_0(x), \\qquad
    X^{(k)} = \\mathrm{normalise}\\big(\\mathrm{clip}_c(A^\\top \\mathrm{normalise}(h_{k-1}))
              + \\mathcal{N}(0, \\sigma^2 I)\\big), \\qquad h_k = g_k(X^{(k)}),

    \\hat y^{(k)} = f_k\\big(\\mathrm{normalise}([h_0 \\,\\|\\, h_1 \\,\\|\\, \\cdots
                  \\,\\|\\, h_k])\\big)

1. **Stage 0** trains :math:`g_0, f_0` on node features and labels (no edge is read).
2. **Stage k = 1..K**: one private aggregation of the previous stage's embeddings (one
   release of GAP's PMA, :func:`~dpgnn_core.methods.gap.pma` with one hop, same
   sensitivity :func:`~dpgnn_core.methods.gap.sensitivity`), cached and reused, then
   :math:`g_k, f_k` trained with every earlier stage frozen (their embeddings
   :math:`h_0..h_{k-1}` are computed once, without gradients).
3. The last stage's head predicts.

This follows the paper's code (sisaman/ProGAP, ``ProgressiveModule``): one base MLP and one
head per stage, jumping knowledge by concatenation of every stage's base output, the
combination row-normalised before the head, the next stage aggregating the current stage's
base output. Departures, all on the conservative side or post-processing: earlier stages are
frozen (the code's ``layerwise`` option; its default fine-tunes earlier base layers); the
noisy aggregation is row-normalised after the noise (post-processing, as in GAP's PMA; the
code feeds it unnormalised to a batch-normalised MLP); batch norm (``norm``) at edge level
and ∞ only (it mixes the rows of a batch, which DP-SGD's per-row clipping cannot allow; the
code swaps it out at node level, the spec refuses it there);
edge level uses Δ = √2 on a graph flagged undirected (the code uses 1); node level uses
GAP-NDP's corrected Δ = √(D² + D) (√(min(c, D)² + D) with row clipping) and refuses a graph
with a degree above D, where the paper's analysis uses √D over a neighbour-sampled graph
(docs/privacy.md, "ProGAP").

Privacy: edge level, K Gaussian releases (training reads features, labels and the releases:
post-processing); node level, K + 1 DP-Adam stages over Poisson-sampled rows and K Gaussian
releases. One noise scale z for the whole composition, calibrated by the accountant to the
target (ε, δ); every release and every DP-Adam stage is its own event in the ledger.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from dpgnn_core.data.graph import GraphData
from dpgnn_core.errors import DataError
from dpgnn_core.methods._private import (
    check_node_task,
    check_weak_budget,
    guarantee_scope,
)
from dpgnn_core.methods._row_training import batches_per_epoch, fit_rows, val_rows
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
from dpgnn_core.methods.contract import Fitted, aggregating
from dpgnn_core.methods.private_run import PrivateRun, assemble_report
from dpgnn_core.models.gap import selu_block
from dpgnn_core.privacy import (
    GaussianEvent,
    Ledger,
    PoissonGaussianEvent,
    PrivacyError,
    make_accountant,
)
from dpgnn_core.privacy.pma import (
    aggregation_matrix,
    clip_rows,
    pma,
    row_normalise,
    sensitivity,
)
from dpgnn_core.privacy.randomness import Randomness
from dpgnn_core.privacy.report import PrivacyReport
from dpgnn_core.specs import ProgapSpec
from dpgnn_core.training.device import resolve_device
from dpgnn_core.training.loop import seeded
from dpgnn_core.training.metrics import metrics_by_split

#: The ledger's note on ProGAP-NDP's data-dependent degree check (GAP-NDP's check).
DEGREE_CHECK_NOTE = degree_check_note("ProGAP-NDP")

# --- modules ---------------------------------------------------------------------------


class ProgapStage(nn.Module):
    """One stage: a base MLP on this stage's input and a head on the row-normalised
    concatenation of the frozen earlier embeddings and this stage's.

    .. math::
        h_k = g_k(X^{(k)}), \\qquad
        \\hat y = f_k(\\mathrm{normalise}([h_0 \\| \\cdots \\| h_{k-1} \\| h_k]))

    Args:
        in_dim (int): width of this stage's input (features at stage 0, else ``hidden``).
        hidden (int): embedding width.
        base_layers (int): Linear + norm + SELU layers of the base.
        prev_width (int): width of the earlier stages' embeddings (``k * hidden``).
        num_classes (int): classes.
        dropout (float, optional): dropout probability between base layers and on the
            head's input (training mode only). (default: :obj:`0.0`)
        norm (str, optional): ``batch``, ``layer`` or ``none`` after every Linear layer of
            the base (:func:`~dpgnn_core.methods.gap.norm_layer`). (default: ``"none"``)
    """

    def __init__(self, in_dim: int, hidden: int, base_layers: int, prev_width: int,
                 num_classes: int, dropout: float = 0.0, norm: str = "none") -> None:
        super().__init__()
        layers: list[nn.Module] = []
        for i in range(base_layers):
            if i > 0:
                layers.append(nn.Dropout(dropout))
            layers.extend(selu_block(in_dim if i == 0 else hidden, hidden, norm))
        self.base = nn.Sequential(*layers)
        self.dropout = nn.Dropout(dropout)
        self.head = nn.Linear(prev_width + hidden, num_classes)
        self.prev_width = prev_width

    def forward(self, inputs: Tensor) -> Tensor:
        """``inputs`` ``[n, prev_width + in_dim]`` (the earlier embeddings, then this stage's
        input) -> logits ``[n, C]``. One row per node: rows never mix (DP-Adam clips rows)."""
        prev, x = inputs[:, :self.prev_width], inputs[:, self.prev_width:]
        out: Tensor = self.head(self.dropout(row_normalise(torch.cat([prev, self.base(x)],
                                                                      1))))
        return out


class ProgapModel(nn.Module):
    """The K + 1 stages; :meth:`forward` predicts with the last stage's head from the node
    features and the private aggregations X(1..K) ``[n, K, hidden]``.

    Args:
        in_dim (int): node features.
        hidden (int): embedding width.
        base_layers (int): layers of each base MLP.
        stages (int): K, the private aggregations (K + 1 trained stages).
        num_classes (int): classes.
        dropout (float, optional): each stage's dropout (:class:`ProgapStage`).
            (default: :obj:`0.0`)
        norm (str, optional): each stage's normalisation (:class:`ProgapStage`).
            (default: ``"none"``)
    """

    def __init__(self, in_dim: int, hidden: int, base_layers: int, stages: int,
                 num_classes: int, dropout: float = 0.0, norm: str = "none") -> None:
        super().__init__()
        self.hidden = hidden
        self.stages = nn.ModuleList(
            ProgapStage(in_dim if k == 0 else hidden, hidden, base_layers, k * hidden,
                        num_classes, dropout, norm) for k in range(stages + 1))

    def embeddings(self, x: Tensor, aggregations: Tensor, upto: int) -> list[Tensor]:
        """``[h_0, ..., h_upto]``: each stage's base output on its own input."""
        stages: list[ProgapStage] = list(self.stages)  # type: ignore[arg-type]
        return [stages[0].base(x)] + [stages[k].base(aggregations[:, k - 1])
                                      for k in range(1, upto + 1)]

    def stage_inputs(self, x: Tensor, aggregations: Tensor, k: int) -> Tensor:
        """Stage k's input rows ``[n, k * hidden + in_k]``: the earlier stages' embeddings
        (no gradient: they are frozen), then X(k) (the features at k = 0)."""
        with torch.no_grad():
            prev = self.embeddings(x, aggregations, k - 1) if k > 0 else []
        own = x if k == 0 else aggregations[:, k - 1]
        return torch.cat([*prev, own], 1)

    def forward(self, x: Tensor, aggregations: Tensor) -> Tensor:
        k = len(self.stages) - 1
        if aggregations.shape[1] != k:
            raise DataError(f"expected {k} private aggregations per node, got "
                            f"{aggregations.shape[1]}", field="aggregations",
                            value=list(aggregations.shape))
        hs = self.embeddings(x, aggregations, k)
        last: ProgapStage = self.stages[k]  # type: ignore[assignment]
        out: Tensor = last.head(row_normalise(torch.cat(hs, 1)))
        return out


# --- the plan --------------------------------------------------------------------------


def ledger_for(spec: ProgapSpec, num_train: int) -> Callable[[float], Ledger]:
    """z ↦ the ledger of the whole composition, stage by stage (empty for ProGAP-∞): at
    node level stage 0's DP-Adam, then for k = 1..K the stage-k aggregation and stage k's
    DP-Adam; at edge level the K aggregations only."""
    spec = spec.with_batch_size(num_train)
    rate = spec.batch / num_train

    def ledger(z: float) -> Ledger:
        out = Ledger()
        for k in range(spec.stages + 1):
            out = out + stage_events(spec, rate, z, k)
        return out
    return ledger


def stage_events(spec: ProgapSpec, rate: float, z: float, k: int) -> Ledger:
    """The privacy events of stage k: its aggregation (k >= 1) then its DP-Adam (node
    level); the degree check's note rides on the first aggregation."""
    out = Ledger()
    if spec.level == "none":
        return out
    if k > 0:
        out = out.add(GaussianEvent(noise_multiplier=z, count=1, level=spec.level,
                                    description=f"ProGAP aggregation, stage {k}"))
        if spec.level == "node" and k == 1:
            out = out.flag(DEGREE_CHECK_NOTE)
    if spec.level == "node":
        out = out.add(PoissonGaussianEvent(noise_multiplier=z, sampling_rate=rate,
                                           steps=spec.steps, level="node",
                                           description=f"ProGAP stage {k} (DP-Adam)"),
                      sampler_scheme="poisson")
    return out


def _delta(spec: ProgapSpec, n_train: int) -> float:
    return spec.delta if spec.delta is not None else 1.0 / (10 * n_train)


def stage_steps(spec: ProgapSpec, num_train: int) -> int:
    """Optimisation steps of each stage: ``steps`` under DP-Adam (node level), ``epochs``
    times :func:`~dpgnn_core.methods._row_training.batches_per_epoch` otherwise."""
    if spec.level == "node":
        return spec.steps
    return spec.epochs * batches_per_epoch(spec, num_train)


def epsilon_by_stage(spec: ProgapSpec, num_train: int, z: float, delta: float
                     ) -> list[float]:
    """ε spent at the end of each stage (k = 0..K), by the run's accountant: the events of
    stages 0..k. Every step of stage k reports this value, an upper bound on what was spent
    after it (ε grows with the steps); the last is the reported ε."""
    if spec.level == "none":
        return [math.inf] * (spec.stages + 1)
    rate = spec.with_batch_size(num_train).batch / num_train
    accountant = make_accountant(spec.accountant)
    out, ledger = [], Ledger()
    for k in range(spec.stages + 1):
        ledger = ledger + stage_events(spec, rate, z, k)
        out.append(accountant.epsilon(ledger, delta) if ledger.entries else 0.0)
    return out


def calibrate_progap(data: GraphData, spec: ProgapSpec) -> tuple[Ledger, float, dict[str, Any]]:
    """The common noise scale z of the composition, its ledger and the privacy report;
    checks the input before anything is trained."""
    n_train = check_node_task(data, spec, "ProGAP")
    private = spec.level != "none"
    delta = _delta(spec, n_train)
    make = ledger_for(spec, n_train)
    report: dict[str, Any] = {
        "method": spec.method, "private": private, "level": spec.level, "delta": delta,
        "stages": spec.stages, "steps": spec.steps, "unaccounted": []}
    trained = f", {spec.stages + 1} DP-Adam stages" if spec.level == "node" else ""
    z = solve_composition(spec, make, delta, report, f"ProGAP-{spec.level} composition "
                          f"({spec.stages} aggregations{trained})")
    delta_agg = sensitivity(spec.level, spec.max_degree, is_directed(data), spec.row_clip)
    report.update({"aggregation_sensitivity": delta_agg, "aggregation_noise_std": z * delta_agg})
    report.update(release_report(data, spec, "every stage's parameters", "stage 0",
                                 "each aggregation ran"))
    if private:
        report.update(guarantee_scope(make(z)))
        report["warnings"] = check_weak_budget(spec.epsilon, delta, n_train)
        report["unaccounted"] = list(make(z).unaccounted)
    return (make(z) if private else Ledger()), z, report


# --- the stages ------------------------------------------------------------------------


def new_model(data: GraphData, spec: ProgapSpec) -> ProgapModel:
    """The untrained model; stage k initialised from ``seed + k`` (initialisation only)."""
    model = ProgapModel(data.num_features, spec.hidden, spec.base_layers, spec.stages,
                        data.num_classes, spec.dropout, spec.norm)
    for k, stage in enumerate(model.stages):
        with seeded(spec.seed + k, torch.device("cpu")):
            fresh = ProgapStage(data.num_features if k == 0 else spec.hidden, spec.hidden,
                                spec.base_layers, k * spec.hidden, data.num_classes,
                                spec.dropout, spec.norm)
        stage.load_state_dict(fresh.state_dict())
    return model


def _no_aggregations(data: GraphData, spec: ProgapSpec) -> Tensor:
    return torch.zeros(data.num_nodes, 0, spec.hidden)


def fit_stage(data: GraphData, spec: ProgapSpec, z: float, k: int, model: ProgapModel,
              aggregations: Tensor | None = None, run: PrivateRun | None = None
              ) -> tuple[ProgapModel, list[dict[str, float]], Ledger]:
    """Stage k: train its base and head on each training node's frozen earlier embeddings
    and X(k) (its features at k = 0), Adam full batch or DP-Adam over Poisson rows (node
    level); the earlier stages are not touched. Returns the model, the stage's history and
    its DP-Adam event (node level). ``aggregations`` holds X(1..k) ``[n, >= k, hidden]``;
    ``run`` is the fit's engine (the budget keeper, the steps)."""
    run = run or PrivateRun()
    device = resolve_device(spec.device)
    train = torch.from_numpy(data.mask("train")).to(device)
    n_train = int(train.sum())
    node = spec.level == "node"
    aggs = aggregations if aggregations is not None else _no_aggregations(data, spec)
    if aggs.shape[1] < k:
        raise DataError(f"stage {k} needs {k} aggregations, got {aggs.shape[1]}",
                        field="aggregations", value=list(aggs.shape))
    if node:  # the plan to the budget keeper before the first private step (as GAP's
        gate_plan(run, spec, ledger_for(spec, n_train)(z), n_train)  # encoder; at edge
        # level a stage reads no edge: the first aggregation is the first private
    elif spec.level == "edge" and k == 0:  # computation, and the plan is only checked
        admit_plan(run, spec, ledger_for(spec, n_train)(z), n_train)  # before stage 0)
    if run.watched and spec.level != "none":
        eps = epsilon_by_stage(spec, n_train, z, _delta(spec, n_train))[k]
        run.follow([eps] * stage_steps(spec, n_train))
    model = model.to(device).eval()
    x = torch.tensor(data.x, device=device)
    y = torch.tensor(np.asarray(data.y), device=device)
    inputs = model.stage_inputs(x, aggs.to(device), k)
    stage = model.stages[k].train()
    with seeded(spec.seed + k, device):  # dropout masks (not secret: not in the proof)
        hist = fit_rows(stage, inputs[train], y[train], spec, node, z, f"stage{k}", run.on_step,
                        val_rows(data, inputs, y, spec))
    stage.eval()
    events = Ledger()
    if node:
        rate = spec.with_batch_size(n_train).batch / n_train
        events = _part(stage_events(spec, rate, z, k), "poisson_gaussian")
    return model.eval(), hist, events


def stage_sum(model: ProgapModel, x: Tensor, aggregations: Tensor, edge_index: Tensor, k: int,
              row_clip: float | None = None) -> Tensor:
    r"""Stage k's aggregation before its noise, what the sensitivity bounds:

    .. math::
        \mathrm{clip}_c\big(A^\top \mathrm{normalise}(h_{k-1})\big), \qquad
        h_{k-1} = g_{k-1}(X^{(k-1)})

    Node u's row of :math:`h_{k-1}` reads only u's own row of the earlier releases (its
    features at k = 1) through the frozen, released stage k - 1: removing node v changes
    no other node's embedding, only the sums that v's edges enter (docs/privacy.md).
    :func:`aggregate_stage` adds the noise to exactly this (through GAP's
    :func:`~dpgnn_core.methods.gap.pma`)."""
    with torch.no_grad():
        h = model.eval().embeddings(x, aggregations, k - 1)[-1]
        adj_t = aggregation_matrix(edge_index, x.shape[0])
        out: Tensor = clip_rows(torch.sparse.mm(adj_t, row_normalise(h)), row_clip)
    return out


def aggregate_stage(data: GraphData, edge_index: np.ndarray, spec: ProgapSpec, z: float,
                    k: int, model: ProgapModel, aggregations: Tensor | None = None,
                    run: PrivateRun | None = None) -> tuple[Tensor, Ledger]:
    """Stage k's private aggregation X(k) ``[n, hidden]`` of the stage-(k-1) embeddings
    (one hop of GAP's PMA: normalise, aggregate, clip to ``row_clip``, Gaussian noise,
    normalise) and its privacy event (none for ProGAP-∞). The noise comes from a secret
    generator (:meth:`Randomness.for_spec`), one stream per stage. The fit's engine ``run``
    reserves the plan, is told of the release and follows the hop (its ``progress``)."""
    run = run or PrivateRun()
    if k < 1:
        raise DataError("aggregation stages are numbered from 1", field="stage", value=k)
    device = resolve_device(spec.device)
    aggs = aggregations if aggregations is not None else _no_aggregations(data, spec)
    n_train = int(data.mask("train").sum())
    sigma = z * sensitivity(spec.level, spec.max_degree, is_directed(data), spec.row_clip)
    gen = Randomness.for_spec(spec).torch_generator(f"progap/aggregation{k}/noise", device)
    if spec.level != "none":
        gate_plan(run, spec, ledger_for(spec, n_train)(z), n_train)
    with torch.no_grad():
        model = model.to(device).eval()
        h = model.embeddings(torch.tensor(data.x, device=device), aggs.to(device), k - 1)[-1]
        adj_t = aggregation_matrix(torch.from_numpy(edge_index).to(device), data.num_nodes)
        xk = pma(h, adj_t, 1, sigma, gen, spec.row_clip, run.stage_progress)[1].cpu()
    events = Ledger()
    if spec.level != "none":
        run.released()  # the noisy aggregation exists: a release, spent for good
        rate = spec.with_batch_size(n_train).batch / n_train
        events = _part(stage_events(spec, rate, z, k), "gaussian")
    return xk, events


def _part(events: Ledger, kind: str) -> Ledger:
    """The entries of ``events`` of one kind: ``gaussian`` (the aggregation, with the
    stage's unaccounted notes) or ``poisson_gaussian`` (the DP-Adam stage)."""
    return Ledger(tuple(e for e in events.entries if e.event.kind == kind),
                  events.unaccounted if kind == "gaussian" else ())


def finish_run(spec: ProgapSpec, report: dict[str, Any], planned: Ledger, ledger: Ledger,
               num_train: int, z: float, histories: list[list[dict[str, float]]]
               ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The run's privacy report and history from its stages: the composed ``ledger`` must
    equal the calibrated ``planned`` one; ε is the run's accountant's on it; the history
    numbers the steps of all stages in order, each with ε spent by the end of its stage.

    Raises:
        PrivacyError: the stages' events differ from the plan.
    """
    if ledger.to_dict() != planned.to_dict():
        raise PrivacyError("the ProGAP stages' privacy events differ from the calibrated plan")
    report = dict(report)
    eps: list[float] = []
    if report["private"]:
        report["epsilon"] = make_accountant(spec.accountant).epsilon(ledger, report["delta"])
        eps = epsilon_by_stage(spec, num_train, z, report["delta"])
        eps[-1] = report["epsilon"]
    history: list[dict[str, Any]] = []
    for k, hist in enumerate(histories):
        for h in hist:
            rec: dict[str, Any] = {"step": len(history) + 1, "stage": k}
            if "train_loss" in h:  # private stages record none unless log_raw_loss
                rec.update({f"stage{k}_loss": h["train_loss"], "train_loss": h["train_loss"]})
            history.append(rec)
    points: list[tuple[int, float]] = []
    if eps:
        ends = np.cumsum([len(h) for h in histories])
        points = [(t + 1, eps[int(np.searchsorted(ends, t + 1))]) for t in range(len(history))]
    report, _, history = assemble_report(report, ledger, history, spec, points, who="ProGAP")
    return report, history


@dataclass
class ProgapResult:
    """Everything a ProGAP run produces."""

    model: ProgapModel
    aggregations: Tensor  # [n, K, hidden]: X(1..K), the private releases
    ledger: Ledger
    report: dict[str, Any]
    history: list[dict[str, float]]


# --- the stages (run by _staged.run_in_memory here, by tasks/staged.py in the pipeline) ---
def _model_of(ctx: StageContext, stage: StageOutput | None) -> ProgapModel:
    """The model after ``stage`` (untrained before stage 0)."""
    if stage is None:
        return new_model(ctx.data, ctx.spec)
    return module(stage.values["model.pt"],  # type: ignore[no-any-return]
                  lambda: new_model(ctx.data, ctx.spec))


def _stacked(ctx: StageContext, aggregations: list[StageOutput]) -> Tensor:
    """X(1..k) ``[n, k, hidden]`` from the aggregation stages read."""
    if not aggregations:
        return _no_aggregations(ctx.data, ctx.spec)
    return torch.stack([a.values["aggregation.pt"] for a in aggregations], 1)


def _train_stage(z: float, k: int, ctx: StageContext, reads: Mapping[str, Any]
                 ) -> StageOutput:
    model, hist, events = fit_stage(ctx.data, ctx.spec, z, k,
                                    _model_of(ctx, reads["previous"]),
                                    _stacked(ctx, reads["aggregations"]), ctx.run)
    return StageOutput({"model.pt": model, "history.json": hist}, events, info={"stage": k})


def _aggregate_stage(z: float, k: int, ctx: StageContext, reads: Mapping[str, Any]
                     ) -> StageOutput:
    xk, events = aggregate_stage(ctx.data, reads["graph"].values["edge_index.npy"], ctx.spec,
                                 z, k, _model_of(ctx, reads["previous"]),
                                 _stacked(ctx, reads["aggregations"]), ctx.run)
    return StageOutput({"aggregation.pt": xk}, events, info={"stage": k}, manifest={
        "shape": list(xk.shape),
        "release": f"X({k}): the private aggregation of stage {k - 1}'s embeddings"})


def _finish_stage(z: float, ctx: StageContext, reads: Mapping[str, Any]) -> StageOutput:
    """The run: the stages' events (aggregation k before stage k) composed into its ledger
    (refused if it differs from the plan), the model (the last stage's), X(1..K) stacked
    for evaluation, the report and the history."""
    stages, aggs = reads["stages"], reads["aggregations"]
    ledger = stages[0].events
    for a, s in zip(aggs, stages[1:], strict=True):
        ledger = ledger + a.events + s.events
    cal = Calibration.of(reads["calibration"])
    report, history = finish_run(ctx.spec, {**cal.report, "graph": reads["graph"].info["graph"]},
                                 cal.planned, ledger, cal.num_train, z,
                                 [list(s.values["history.json"]) for s in stages])
    return StageOutput({"model.pt": _model_of(ctx, stages[-1]),
                        "aggregations.pt": _stacked(ctx, aggs), "history.json": history},
                       report=report)


def progap_stages(spec: ProgapSpec, z: float) -> tuple[Stage, ...]:
    """ProGAP's stages after the calibration of z: the graph (the degree check at node
    level), stage 0, then for k = 1..K the stage-k aggregation of stage k-1's embeddings
    and stage k; the last composes the run. Stage k >= 1 trains on a release a rerun in
    one process redraws, so it never resumes there (the pipeline keys its checkpoint on
    the stored release); its steps are releases at node level only."""
    def steps(n: int) -> int:
        return stage_steps(spec, n)
    out = [graph_stage("progap", spec)]
    for k in range(spec.stages + 1):
        earlier = tuple(f"aggregate{j}" for j in range(1, k))
        if k > 0:
            out.append(Stage(f"aggregate{k}", "progap_aggregate",
                             functools.partial(_aggregate_stage, z, k),
                             reads={"graph": "graph", "previous": f"stage{k - 1}",
                                    "aggregations": earlier},
                             params={"z": z, "stage": k}, gated=True, aggregates=True))
        out.append(Stage(f"stage{k}", "progap_stage", functools.partial(_train_stage, z, k),
                         reads={"previous": f"stage{k - 1}" if k else None,
                                "aggregations": (*earlier, f"aggregate{k}") if k else ()},
                         params={"z": z, "stage": k}, gated=True, steps=steps,
                         label=f"stage {k}", step_releases=spec.level == "node",
                         resumable=k == 0))
    stages = tuple(f"stage{k}" for k in range(spec.stages + 1))
    out.append(Stage("train", "progap_finish", functools.partial(_finish_stage, z),
                     reads={"calibration": "calibrate", "graph": "graph", "stages": stages,
                            "aggregations": tuple(f"aggregate{k}"
                                                  for k in range(1, spec.stages + 1))},
                     params={"z": z}, gated=True))
    return tuple(out)


def train_progap(data: GraphData, spec: ProgapSpec, run: PrivateRun | None = None
                 ) -> ProgapResult:
    """Calibrate, then stage 0, then (aggregate k -> stage k) for k = 1..K
    (:func:`progap_stages`, in memory, through the fit's engine ``run``); the ledger is
    the composition of the events each stage returned (and equals the calibrated plan).

    Raises:
        DataError: not single-label node classification, no training labels, a batch
            larger than the training set, or a graph beyond the degree bound (node level).
        PrivacyError: a budget too small for the composition (names the smallest ε).
    """
    out = run_in_memory(STAGED, data, spec, run)
    final = out["train"]
    assert final.report is not None
    return ProgapResult(final.values["model.pt"], final.values["aggregations.pt"],
                        final.report["ledger"], final.report, final.values["history.json"])


def evaluate_progap(model: ProgapModel, aggregations: Tensor, data: GraphData,
                    device: str = "auto") -> dict[str, dict[str, float]]:
    """Metrics per split from the node features and the private aggregations X(1..K): no
    extra budget."""
    dev = resolve_device(device)
    net = model.to(dev).eval()
    with torch.no_grad():
        logits = net(torch.tensor(data.x, device=dev), aggregations.to(dev)).cpu().numpy()
    return metrics_by_split(data, logits)


def build_progap(spec: ProgapSpec, in_dim: int, num_classes: int) -> ProgapModel:
    """The (untrained) model of every stage ``spec`` describes."""
    return ProgapModel(in_dim, spec.hidden, spec.base_layers, spec.stages, num_classes,
                       spec.dropout, spec.norm)


# --- the implementation (the catalogue's "progap" family: progap-edp, -ndp, -inf) --------
def _fit(data: GraphData, spec: ProgapSpec, run: PrivateRun) -> Fitted:
    r = train_progap(data, spec, run)  # its report has the ε-by-step curve
    return Fitted(r.model, r.ledger, PrivacyReport.from_dict(r.report), r.history,
                  {"aggregations": r.aggregations})


from dpgnn_core.methods.brute_force.pma import progap_checks  # noqa: E402

STAGED = Staged("progap", calibrate_progap, progap_stages)
IMPLEMENTATION = aggregating("ProGAP", fit=_fit, ledger_for=ledger_for, build=build_progap,
                             evaluate=evaluate_progap,
                             sensitivity=progap_checks(stage_sum, ProgapModel), staged=STAGED)
