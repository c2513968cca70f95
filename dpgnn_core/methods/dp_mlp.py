"""DP-MLP: the structure-free private baseline. DP-Adam over training rows drawn by Poisson
sampling (rate q = m / N), per-row clipping to C, noise std z·C, privacy by the
Poisson-subsampled Gaussian. Node level under add/remove: a node is one row, and the model
never reads an edge."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from dpgnn_core.data.graph import GraphData
from dpgnn_core.methods._private import (
    PrivateResult,
    check_node_task,
    poisson_plan,
    resolve_row_plan,
)
from dpgnn_core.methods.contract import Implementation, node_private
from dpgnn_core.methods.private_run import PrivateRun
from dpgnn_core.models.mlp import MLP
from dpgnn_core.privacy import Ledger
from dpgnn_core.privacy.randomness import Randomness
from dpgnn_core.specs import DpMlpSpec
from dpgnn_core.training.batches import RowSource, TensorRows, batch_losses
from dpgnn_core.training.device import resolve_device
from dpgnn_core.training.dp_sgd import Clipping, train_steps
from dpgnn_core.training.loop import seeded
from dpgnn_core.training.metrics import metrics_by_split
from dpgnn_core.training.optim import adam
from dpgnn_core.training.per_sample import group_noise_stds

DpMlpResult = PrivateResult[MLP]


def ledger_for(spec: DpMlpSpec, num_train: int) -> Callable[[float], Ledger]:
    """z ↦ the ledger of the whole training plan."""
    return poisson_plan(spec, num_train, "node", "DP-MLP training")


def plan_dp_mlp(spec: DpMlpSpec, n_train: int, run: PrivateRun | None = None
                ) -> tuple[DpMlpSpec, Ledger, float, dict[str, Any]]:
    """The spec resolved for ``n_train`` training rows (batch size, steps), the calibrated
    ledger, noise multiplier z and privacy report (calibrated and reserved by ``run``):
    the same for rows in memory and rows in partitions
    (:mod:`dpgnn_core.distributed.training`)."""
    spec = resolve_row_plan(spec, n_train, ledger_for)
    ledger, z, report = (run or PrivateRun()).calibrate(
        spec, n_train, ledger_for(spec, n_train), method="dp-mlp",
        protects="model parameters against adding or removing one node (its features and "
        "label)")
    if spec.epsilon is not None:
        report["noise_std"] = z * spec.clip
    return spec, ledger, z, report


def fit_dp_mlp(source: RowSource, spec: DpMlpSpec, plan: tuple[Ledger, float, dict[str, Any]],
               in_dim: int, num_classes: int, randomness: Randomness,
               run: PrivateRun | None = None) -> DpMlpResult:
    """DP-Adam (or, without ε, Adam on fixed-size batches) on the rows of ``source``, with
    the calibrated ``plan`` (ledger, z, report) of :func:`plan_dp_mlp`; each step through
    ``run``."""
    ledger, z, report = plan
    private = spec.epsilon is not None
    report = {**report, **randomness.describe()}
    device = source.device
    gen = randomness.torch_generator("batches")
    noise_gen = randomness.torch_generator("noise", device)
    n_train, rate = source.num_rows, spec.batch / source.num_rows
    with seeded(spec.seed, device):
        model = MLP(in_dim, spec.hidden, num_classes, spec.layers, dropout=0.0).to(device)
        opt = adam(model.parameters(), lr=spec.lr)

        def step_losses() -> tuple[torch.Tensor, float]:
            # Poisson batches vary in size and may be empty: the noise is added regardless,
            # and the sum is divided by the expected batch size, as the analysis assumes.
            batch = source.poisson(rate) if private else \
                source.take(torch.randperm(n_train, generator=gen)[: spec.batch])
            return batch_losses(model, batch)

        clipping = None
        if private:
            stds = group_noise_stds(z, 1.0, [spec.clip])
            clipping = Clipping((spec.clip,), tuple(stds), float(spec.batch))
        history = train_steps(model, opt, spec.steps, step_losses, clipping=clipping,
                              generator=noise_gen, on_step=(run or PrivateRun()).on_step,
                              log_raw_loss=spec.log_raw_loss)
    return DpMlpResult(model=model.eval(), ledger=ledger, report=report, history=history)


def train_dp_mlp(data: GraphData, spec: DpMlpSpec, run: PrivateRun | None = None
                 ) -> DpMlpResult:
    """Train DP-MLP on the training rows of ``data`` (features and labels only), through
    the fit's engine ``run`` (a bare one by default)."""
    run = run or PrivateRun()
    n_train = check_node_task(data, spec, "DP-MLP")
    spec, ledger, z, report = plan_dp_mlp(spec, n_train, run)
    train_idx = np.flatnonzero(data.mask("train"))
    device = resolve_device(spec.device)
    randomness = Randomness.for_spec(spec)
    source = TensorRows(torch.tensor(data.x[train_idx], device=device),
                        torch.tensor(data.y[train_idx], device=device),
                        randomness.torch_generator("batches"))
    return fit_dp_mlp(source, spec, (ledger, z, report), data.num_features,
                      data.num_classes, randomness, run)


def evaluate_dp_mlp(model: MLP, data: GraphData, device: str = "auto"
                    ) -> dict[str, dict[str, float]]:
    """Metrics per split from node features alone."""
    dev = resolve_device(device)
    with torch.no_grad():
        logits = model.to(dev).eval()(torch.tensor(data.x, device=dev)).cpu().numpy()
    return metrics_by_split(data, logits)


def build(spec: DpMlpSpec, in_dim: int, num_classes: int) -> MLP:
    """The (untrained) model ``spec`` describes."""
    return MLP(in_dim, spec.hidden, num_classes, spec.layers, dropout=0.0)


# --- the implementation (the catalogue's "dp-mlp" family) ----------------------------------
from dpgnn_core.methods.brute_force import rows  # noqa: E402

IMPLEMENTATION: Implementation = node_private(
    train=train_dp_mlp, ledger_for=ledger_for, build=build, evaluate=evaluate_dp_mlp,
    sensitivity=(rows.check("DP-MLP's clipped gradient sum over node rows "
                            "(add/remove one node's row)"),))
