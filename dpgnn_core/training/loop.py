"""Full-batch training loop for the non-private baselines."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import Tensor, nn

from dpgnn_core.training import eager_optim
from dpgnn_core.training.optim import adam


@contextlib.contextmanager
def seeded(seed: int, device: torch.device) -> Iterator[None]:
    """Run a block under torch's global RNG seeded with ``seed``, restoring it afterwards.

    Module initialisation and dropout draw from torch's global generator and accept no
    ``torch.Generator``; forking the RNG keeps the run deterministic per seed without
    changing the caller's random state.
    """
    devices = [device.index or 0] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        yield


def train_full_batch(
    model: nn.Module,
    x: Tensor,
    edge_index: Tensor,
    y: Tensor,
    train_mask: Tensor,
    val_mask: Tensor,
    *,
    epochs: int,
    lr: float,
    weight_decay: float,
    on_epoch: Callable[[int, dict[str, float]], None] | None = None,
) -> list[dict[str, Any]]:
    """Train ``model`` with Adam over ``train_mask``; return the history.

    The loss is cross-entropy for labels ``[n]`` and binary cross-entropy on logits for
    multi-label targets ``[n, C]``. Each history entry has ``epoch``, ``train_loss``,
    ``train_accuracy``, ``val_accuracy`` (measured in eval mode after the step; for
    multi-label, the fraction of correct label entries).
    """
    multi = y.dim() == 2
    opt = adam(model.parameters(), lr=lr, weight_decay=weight_decay)

    def loss_fn(out: Tensor, target: Tensor) -> Tensor:
        if multi:
            return nn.functional.binary_cross_entropy_with_logits(out, target.float())
        return nn.functional.cross_entropy(out, target)

    def accuracy(out: Tensor, target: Tensor) -> float:
        if target.shape[0] == 0:
            return float("nan")
        hit = (out > 0).long() == target if multi else out.argmax(dim=1) == target
        return float(hit.float().mean())

    history: list[dict[str, Any]] = []
    for epoch in range(1, epochs + 1):
        model.train()
        opt.zero_grad(set_to_none=True)
        out = model(x, edge_index)
        loss = loss_fn(out[train_mask], y[train_mask])
        loss.backward()  # type: ignore[no-untyped-call]
        eager_optim.step(opt)
        model.eval()
        with torch.no_grad():
            logits = model(x, edge_index)
        rec = {
            "epoch": epoch,
            "train_loss": float(loss.item()),
            "train_accuracy": accuracy(logits[train_mask], y[train_mask]),
            "val_accuracy": accuracy(logits[val_mask], y[val_mask]),
        }
        history.append(rec)
        if on_epoch is not None:
            on_epoch(epoch, rec)
    return history
