"""DP-GNN (Daigavane et al.): the recipe tying sampler, model, DP optimizer and ledger.

1. SAMPLE-EDGELISTS and SAMPLE-SUBGRAPHS on the training nodes (every node in at most
   N(K, r) subgraphs).
2. Calibrate the noise multiplier λ so that T steps of fixed-size batches of m of the N
   subgraphs spend at most the target (ε, δ) (hypergeometric amplification; the ledger
   holds one :class:`~dpgnn_core.privacy.DpgnnEvent`).
3. Train on padded dense batches with per-subgraph clipping to C and noise std λ·2C·N(K,r).
4. Predict on the full graph with the same weights (sparse path).

Without ``epsilon`` the same path runs without noise or clipping (the non-private model),
and the ledger is empty with ``epsilon = inf`` in the report.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from dpgnn_core.data.clean import is_symmetric
from dpgnn_core.data.graph import GraphData
from dpgnn_core.errors import DataError
from dpgnn_core.graph.degree_bounded import SAMPLING_SCHEME, sample_edgelists, sample_subgraphs
from dpgnn_core.graph.subgraphs import Subgraphs, build_batch
from dpgnn_core.methods._private import PrivateResult, calibrated_plan, save_model
from dpgnn_core.models.subgraph_gnn import SubgraphGNN
from dpgnn_core.privacy import DpgnnEvent, Ledger
from dpgnn_core.specs import DpgnnSpec
from dpgnn_core.training.device import resolve_device
from dpgnn_core.training.dp_sgd import (
    FixedSizeSampler,
    dpgnn_noise_std,
    train_steps,
)
from dpgnn_core.training.loop import seeded
from dpgnn_core.training.metrics import metrics_by_split

DpgnnResult = PrivateResult[SubgraphGNN]


def plan(spec: DpgnnSpec, num_train: int) -> Callable[[float], Ledger]:
    """λ ↦ the ledger of the whole training plan."""
    def ledger(lam: float) -> Ledger:
        return Ledger().add(DpgnnEvent(noise_multiplier=lam, num_train=num_train,
                                       batch_size=spec.batch_size, max_degree=spec.max_degree,
                                       layers=spec.layers, steps=spec.steps,
                                       description="DP-GNN training"),
                            sampler_scheme=SAMPLING_SCHEME)
    return ledger


def _subgraphs(data: GraphData, spec: DpgnnSpec) -> Subgraphs:
    train = data.mask("train")
    ei = data.edge_index
    if data.directed and not is_symmetric(ei, data.num_nodes):
        ei = np.ascontiguousarray(ei[::-1])  # messages follow real edges (see degree_bounded)
    sampled = sample_edgelists(ei, data.num_nodes, train, spec.max_degree,
                               np.random.default_rng(spec.seed))
    return sample_subgraphs(sampled, data.num_nodes, train, spec.layers, spec.max_degree)


def train_dpgnn(data: GraphData, spec: DpgnnSpec,
                on_step: Callable[[int, dict[str, float]], None] | None = None) -> DpgnnResult:
    """Train DP-GNN on ``data``'s training split; see the module docstring.

    Raises:
        DataError: not a node-classification dataset, no labels on training nodes, or a
            batch larger than the training set.
        PrivacyError: a budget too small for the plan.
    """
    if data.task != "node" or data.multi_label:
        raise DataError("DP-GNN classifies nodes with single labels", field="task",
                        value=data.task)
    train_idx = np.flatnonzero(data.mask("train"))
    n_train = int(train_idx.shape[0])
    if spec.batch_size > n_train:
        raise DataError(f"batch size {spec.batch_size} exceeds the {n_train} training nodes",
                        field="batch_size", value=spec.batch_size)
    ledger, lam, report = calibrated_plan(
        spec, n_train, plan(spec, n_train), method=f"dp-{spec.conv}",
        protects="model parameters against replacing one node (features, label, edges) of "
        "the training graph; not predictions made on the private graph")
    private = report["private"]
    sg = _subgraphs(data, spec)
    report["occurrence_bound"] = sg.occurrence_bound
    device = resolve_device(spec.device)
    gen = torch.Generator().manual_seed(spec.seed)
    y = torch.from_numpy(np.asarray(data.y[sg.roots]))
    with seeded(spec.seed, device):
        model = SubgraphGNN(spec.conv, data.num_features, data.num_classes, spec.hidden,
                            spec.layers, spec.activation).to(device)
        base = (torch.optim.Adam(model.parameters(), lr=spec.lr) if spec.optimizer == "adam"
                else torch.optim.SGD(model.parameters(), lr=spec.lr))
        noise_std = 0.0
        if private:
            noise_std = dpgnn_noise_std(lam, spec.clip, spec.max_degree, spec.layers)
            report["noise_std"] = noise_std
        sampler = FixedSizeSampler(n_train, spec.batch_size, gen)

        def step_loss(net: torch.nn.Module) -> tuple[torch.Tensor, float]:
            ids = sampler.sample().numpy()
            batch = build_batch(sg, ids, data.x, normalisation="none")
            logits = net(batch.x.to(device), batch.adj.to(device), batch.mask.to(device))
            loss = torch.nn.functional.cross_entropy(logits, y[ids].to(device))
            return loss, float(loss.item())

        history = train_steps(model, base, spec.steps, step_loss, private=private,
                              noise_std=noise_std, clip=spec.clip, batch_size=spec.batch_size,
                              generator=gen, on_step=on_step)
    return DpgnnResult(model=model.eval(), ledger=ledger, report=report, history=history)


def evaluate_dpgnn(model: SubgraphGNN, data: GraphData, device: str = "auto"
                   ) -> dict[str, dict[str, float]]:
    """Transductive evaluation: full neighbourhoods of the whole graph (sparse path)."""
    dev = resolve_device(device)
    model = model.to(dev).eval()
    with torch.no_grad():
        logits = model.forward_sparse(torch.tensor(data.x, device=dev),
                                      torch.tensor(data.edge_index, device=dev)).cpu().numpy()
    return metrics_by_split(data, logits)


def save_dpgnn(path: str, model: SubgraphGNN, spec: DpgnnSpec, in_dim: int,
               num_classes: int) -> None:
    """Write weights and what rebuilds the model, atomically."""
    save_model(path, "dpgnn", model, spec, in_dim, num_classes)


def load_dpgnn(blob: dict[str, Any]) -> tuple[SubgraphGNN, DpgnnSpec]:
    spec = DpgnnSpec(**blob["spec"])
    model = SubgraphGNN(spec.conv, blob["in_dim"], blob["num_classes"], spec.hidden,
                        spec.layers, spec.activation)
    model.load_state_dict(blob["state_dict"])
    return model.eval(), spec
