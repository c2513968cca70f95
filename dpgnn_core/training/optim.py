"""The optimiser the training loops build: Adam with PyTorch's fused kernel where it
applies (issue 52 §7: a small run's fixed cost)."""

from __future__ import annotations

from collections.abc import Iterable

import torch

#: Devices whose floating-point parameters PyTorch's fused Adam kernel takes.
FUSED_DEVICES = ("cpu", "cuda")


def adam(params: Iterable[torch.Tensor], lr: float, weight_decay: float = 0.0
         ) -> torch.optim.Adam:
    """``torch.optim.Adam(params, lr, weight_decay)``, fused (one kernel per step for all
    parameters instead of about ten per parameter tensor) when every parameter is a
    floating-point tensor on the CPU or a CUDA device. The update is Adam's, unchanged: it
    acts on whatever gradient the loop leaves (the clipped, noised one under DP-Adam), so
    nothing about privacy depends on it; the fused kernel rounds in its own order, so the
    weights may differ from the unfused loop's in the last bits. On Cora's GAP modules it
    saves about a fifth of a step's CPU time (small models pay per kernel launch)."""
    params = list(params)
    fused = bool(params) and all(p.is_floating_point() and p.device.type in FUSED_DEVICES
                                 for p in params)
    return torch.optim.Adam(params, lr=lr, weight_decay=weight_decay,
                            fused=True if fused else None)
