"""Non-private node-classification baselines: MLP, GCN, GraphSAGE (full batch).

These carry no privacy guarantee; their runs report ``epsilon = inf``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import torch
from torch import nn

from dpgnn_core.data.graph import GraphData
from dpgnn_core.errors import DataError
from dpgnn_core.methods.contract import Fitted, Implementation, read_model, write_model
from dpgnn_core.methods.private_run import PrivateRun
from dpgnn_core.models.gnn import build_model
from dpgnn_core.privacy import Ledger, PrivacyReport
from dpgnn_core.specs import TrainSpec
from dpgnn_core.training.device import resolve_device
from dpgnn_core.training.loop import seeded, train_full_batch
from dpgnn_core.training.metrics import metrics_by_split


@dataclass
class FitResult:
    model: nn.Module
    history: list[dict[str, Any]]


def _check(data: GraphData) -> None:
    if data.task != "node":
        raise DataError("baseline methods mlp/gcn/sage classify nodes; this dataset is a "
                        "graph-classification dataset", field="task", value=data.task)


def _tensors(data: GraphData, device: torch.device,
             feature_norm: str = "none") -> tuple[torch.Tensor, torch.Tensor]:
    # A copy: arrays read from Parquet are read-only views of Arrow buffers.
    x = torch.tensor(data.x, device=device)
    if feature_norm == "row":
        # Divide by the absolute row sum; all-zero rows stay zero.
        x = x / x.abs().sum(dim=1, keepdim=True).clamp_min(1e-12)
    ei = torch.tensor(data.edge_index, device=device)
    return x, ei


def fit(data: GraphData, spec: TrainSpec,
        on_epoch: Callable[[int, dict[str, float]], None] | None = None) -> FitResult:
    """Train the baseline ``spec.method`` on ``data``'s training split.

    Args:
        data (GraphData): a node-classification dataset.
        spec (TrainSpec): hyper-parameters and seed.
        on_epoch (callable, optional): called as ``on_epoch(epoch, record)`` after each epoch.
    """
    _check(data)
    device = resolve_device(spec.device)
    x, ei = _tensors(data, device, spec.feature_norm)
    y = torch.tensor(data.y, device=device)
    split = torch.tensor(data.split.astype(np.int64), device=device)
    with seeded(spec.seed, device):
        model = build_model(spec.method, data.num_features, spec.hidden, data.num_classes,
                            spec.layers, spec.dropout).to(device)
        history = train_full_batch(model, x, ei, y, split == 0, split == 1, epochs=spec.epochs,
                                   lr=spec.lr, weight_decay=spec.weight_decay,
                                   on_epoch=on_epoch)
    return FitResult(model=model, history=history)


def predict(model: nn.Module, data: GraphData, spec: TrainSpec) -> npt.NDArray[np.float32]:
    """Logits ``[n, C]`` of every node (eval mode, full graph)."""
    dev = resolve_device(spec.device)
    model = model.to(dev).eval()
    x, ei = _tensors(data, dev, spec.feature_norm)
    with torch.no_grad():
        logits: npt.NDArray[np.float32] = model(x, ei).float().cpu().numpy()
    return logits


def evaluate(data: GraphData, logits: npt.NDArray[np.floating]) -> dict[str, dict[str, float]]:
    """Metrics per split (train, val, test) of node ``logits``."""
    return metrics_by_split(data, logits)


def build(spec: TrainSpec, in_dim: int, num_classes: int) -> nn.Module:
    """The (untrained) model ``spec`` describes."""
    return build_model(spec.method, in_dim, spec.hidden, num_classes, spec.layers,
                       spec.dropout)


def save_model(path: str | Path, model: nn.Module, spec: TrainSpec, in_dim: int,
               num_classes: int) -> None:
    """Write the weights and what is needed to rebuild the model, atomically (the
    registry's :func:`~dpgnn_core.methods.contract.write_model`)."""
    write_model(str(path), model, spec, in_dim, num_classes)


def load_model(path: str | Path) -> tuple[nn.Module, TrainSpec]:
    """Rebuild a model written by :func:`save_model`."""
    model, spec = read_model(torch.load(path, map_location="cpu", weights_only=True),
                             TrainSpec, build)
    return model, spec


# --- the implementation (the catalogue's "baseline" family: mlp, gcn, sage) ---------------
def _fit(data: GraphData, spec: TrainSpec, run: PrivateRun) -> Fitted:
    r = fit(data, spec, on_epoch=run.on_step)  # run: the fit's engine (PrivateRun)
    return Fitted(r.model, Ledger(), PrivacyReport.from_dict(
        {"method": spec.method, "private": False, "epsilon": None, "protects": "nothing"}),
        r.history)


def _evaluate(model: nn.Module, data: GraphData, spec: TrainSpec,
              extra: Any) -> dict[str, dict[str, float]]:
    return evaluate(data, predict(model, data, spec))


def _no_ledger(spec: TrainSpec, n: int) -> Callable[[float], Ledger]:
    return lambda z: Ledger()


IMPLEMENTATION = Implementation(fit=_fit, ledger_for=_no_ledger, build=build,
                                evaluate=_evaluate)
