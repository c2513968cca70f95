"""Training on subgraph records, shared by DP-GNN and DRW: the model, clipping groups and
thresholds, the noise per group, batches drawn as the accountant assumes, model selection,
inference on the full graph."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from dpgnn_core.data.graph import GraphData
from dpgnn_core.errors import DataError
from dpgnn_core.graph.subgraphs import Subgraphs, build_batch
from dpgnn_core.methods._private import PrivateResult
from dpgnn_core.methods.private_run import PrivateRun
from dpgnn_core.models.subgraph_gnn import SubgraphGNN, sparse_logits
from dpgnn_core.privacy import Ledger
from dpgnn_core.privacy.randomness import Randomness
from dpgnn_core.specs import SubgraphSpec
from dpgnn_core.training.device import resolve_device
from dpgnn_core.training.dp_sgd import Clipping, FixedSizeSampler, train_steps
from dpgnn_core.training.loop import seeded
from dpgnn_core.training.metrics import metrics_by_split
from dpgnn_core.training.per_sample import PerSampleClipper, group_noise_stds

SubgraphResult = PrivateResult[SubgraphGNN]


def build_subgraph_model(spec: SubgraphSpec, in_dim: int, num_classes: int) -> SubgraphGNN:
    return SubgraphGNN(spec.conv, in_dim, num_classes, spec.hidden, spec.layers,
                       spec.activation)


def _percentile_clips(model: SubgraphGNN, groups: list[list[torch.nn.Module]],
                      losses_of: Callable[[], torch.Tensor], q: float) -> tuple[float, ...]:
    """The q-th percentile of per-sample gradient norms per group at initialisation."""
    clipper = PerSampleClipper(model, groups)
    try:
        with clipper.capture():
            losses_of().sum().backward()  # type: ignore[no-untyped-call]
            norms = clipper.group_norms()
            for s in clipper.slots:
                s.acts.clear()
                s.grads.clear()
    finally:
        clipper.remove()
    return tuple(max(float(v), 1e-6) for v in torch.quantile(norms, q / 100.0, dim=1))


def train_on_subgraphs(
    data: GraphData, spec: SubgraphSpec, *, method: str, n_train: int, randomness: Randomness,
    plan: Callable[[float], Ledger], unit_sensitivity: float, protects: str,
    subgraphs_at: Callable[[int], Subgraphs], all_nodes: bool,
    run: PrivateRun | None = None,
) -> SubgraphResult:
    """Calibrate, then train ``spec``'s model on fixed-size batches of subgraphs, through
    the fit's engine ``run`` (a bare one by default).

    Args:
        plan: noise multiplier ↦ the ledger of the whole run.
        unit_sensitivity: the mechanism's sensitivity per unit of clipping norm (2N(K,r)
            for DP-GNN, 2 for DRW's one replaced subgraph).
        subgraphs_at: step ↦ the subgraphs to sample from (a new object starts a new
            partition, as in DRW-D).
        all_nodes: the loss of a subgraph is the mean over all its nodes (DRW) instead of
            its root's loss (DP-GNN).
        randomness: the source of the batches and the noise (secret unless the spec asks
            for insecure reproducible noise).
    """
    run = run or PrivateRun()
    ledger, lam, report = run.calibrate(spec, n_train, plan, method=method,
                                        protects=protects)
    private = spec.epsilon is not None
    inductive = bool(data.meta.get("split", {}).get("inductive", False))
    report["inference"] = (
        "inductive: predictions on the validation / test graphs, which share no edge with "
        "the training graph" if inductive else
        "transductive: predictions read the full graph (features and edges of every node); "
        "the guarantee covers the model parameters, not the predictions")
    device = resolve_device(spec.device)
    report.update(randomness.describe())
    gen = randomness.torch_generator("batches")
    noise_gen = randomness.torch_generator("noise", device)
    y_all = torch.from_numpy(np.array(data.y, dtype=np.int64))  # a writable copy
    x_dev = torch.tensor(data.x, device=device)
    ei_dev = torch.tensor(data.edge_index, device=device)
    current: dict[str, Any] = {"sg": None, "sampler": None, "step": 0}

    def draw() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        current["step"] += 1
        sg = subgraphs_at(current["step"])
        if sg is not current["sg"]:
            current["sg"] = sg
            current["sampler"] = FixedSizeSampler(sg.num_subgraphs, spec.batch, gen)
            if sg.sampling_scheme != FixedSizeSampler.scheme:
                raise RuntimeError("subgraph sampler and batch sampler disagree")
        ids = current["sampler"].sample().numpy()
        b = build_batch(sg, ids, data.x, normalisation="none")
        labels = (y_all[b.nodes.clamp_min(0)] if all_nodes else y_all[b.roots])
        return (b.x.to(device), b.adj.to(device), b.mask.to(device), labels.to(device))

    def losses_of(model: torch.nn.Module) -> Callable[[], torch.Tensor]:
        def run() -> torch.Tensor:
            x, adj, mask, labels = draw()
            out = model(x, adj, mask, all_nodes=all_nodes)
            if not all_nodes:
                return torch.nn.functional.cross_entropy(out, labels, reduction="none")
            per = torch.nn.functional.cross_entropy(out.flatten(0, 1), labels.flatten(),
                                                    reduction="none").view(labels.shape)
            m = mask.to(per.dtype)
            return (per * m).sum(1) / m.sum(1)
        return run

    with seeded(spec.seed, device):
        model = build_subgraph_model(spec, data.num_features, data.num_classes).to(device)
        base = (torch.optim.Adam(model.parameters(), lr=spec.lr) if spec.optimizer == "adam"
                else torch.optim.SGD(model.parameters(), lr=spec.lr))
        clipping = None
        if private:
            groups = model.groups() if spec.clipping == "layerwise" else None
            clips = spec.clip_norms()
            if spec.clip_percentile is not None:
                clips = _percentile_clips(model, groups or [[model]], losses_of(model),
                                          spec.clip_percentile)
                current["step"] = 0
                ledger = ledger.flag(
                    f"clipping norms {[f'{c:.4g}' for c in clips]} are the "
                    f"{spec.clip_percentile:g}th percentile of per-sample gradient norms of "
                    "one batch of private training subgraphs at initialisation (no noise)")
            stds = group_noise_stds(lam, unit_sensitivity, clips)
            clipping = Clipping(tuple(clips), tuple(stds), float(spec.batch), groups)
            report.update({"clipping": spec.clipping, "clips": list(clips),
                           "noise_std": stds[0] if len(stds) == 1 else None,
                           "noise_stds": list(stds)})
        select = None
        if spec.select_on_validation:
            if not data.mask("val").any():
                raise DataError("model selection on validation needs validation nodes",
                                field="split", value="val")
            ledger = ledger.flag(
                f"model selection: the weights with the best validation accuracy (checked "
                f"every {spec.select_every} steps) are kept; each check runs the model over "
                "the full private graph (features and edges of every node) and reads "
                "validation labels, without noise")

            def select() -> float:
                with torch.no_grad():
                    logits = sparse_logits(model, x_dev, ei_dev, spec.backend).cpu().numpy()
                val = data.mask("val")
                return float((logits[val].argmax(1) == np.asarray(data.y)[val]).mean())

        batch_losses = losses_of(model)

        def step_losses() -> tuple[torch.Tensor, float]:
            losses = batch_losses()
            return losses, float(losses.detach().mean().item())

        history = train_steps(model, base, spec.steps, step_losses,
                              clipping=clipping, generator=noise_gen, on_step=run.on_step,
                              select=select, select_every=spec.select_every,
                              log_raw_loss=spec.log_raw_loss)
    report["unaccounted"] = list(ledger.unaccounted)
    return SubgraphResult(model=model.eval(), ledger=ledger, report=report, history=history)


def evaluate_subgraph_model(model: SubgraphGNN, data: GraphData, device: str = "auto",
                            backend: str = "auto") -> dict[str, dict[str, float]]:
    """Metrics per split from the full graph (sparse path, on ``backend``: the spec's
    ``auto``, ``pyg`` or ``dgl``; :func:`~dpgnn_core.models.subgraph_gnn.resolve_backend`).
    On a ``-disjoint`` dataset the test nodes see only the
    test graph: inductive evaluation."""
    dev = resolve_device(device)
    model = model.to(dev).eval()
    with torch.no_grad():
        logits = sparse_logits(model, torch.tensor(data.x, device=dev),
                               torch.tensor(data.edge_index, device=dev), backend
                               ).cpu().numpy()
    return metrics_by_split(data, logits)
