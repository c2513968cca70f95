"""Full-batch training loop for the non-private baselines."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import Tensor, nn


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
    """Train ``model`` with Adam on cross-entropy over ``train_mask``; return the history.

    Each history entry has ``epoch``, ``train_loss``, ``train_accuracy``, ``val_accuracy``
    (the latter two measured in eval mode after the step).
    """
    opt = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=weight_decay)
    history: list[dict[str, Any]] = []
    for epoch in range(1, epochs + 1):
        model.train()
        opt.zero_grad(set_to_none=True)
        out = model(x, edge_index)
        loss = nn.functional.cross_entropy(out[train_mask], y[train_mask])
        loss.backward()  # type: ignore[no-untyped-call]
        opt.step()
        model.eval()
        with torch.no_grad():
            pred = model(x, edge_index).argmax(dim=1)
        rec = {
            "epoch": epoch,
            "train_loss": float(loss.item()),
            "train_accuracy": float((pred[train_mask] == y[train_mask]).float().mean()),
            "val_accuracy": float((pred[val_mask] == y[val_mask]).float().mean())
            if bool(val_mask.any()) else float("nan"),
        }
        history.append(rec)
        if on_epoch is not None:
            on_epoch(epoch, rec)
    return history
