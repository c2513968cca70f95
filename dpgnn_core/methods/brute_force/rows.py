"""DP-SGD over records (rows, graphs): the per-record clipped gradient sum, one record added
or removed. Each record's gradient is clipped to C and the noise std is
``group_noise_stds(z, 1, [C])`` = z·C, so the declared sensitivity is that function at
z = 1. The brute force runs the library's own per-sample clipping
(:func:`~dpgnn_core.training.per_sample.private_step`, noise 0) on a small MLP over
records whose gradients are far beyond C (every record clipped: removing one moves the
sum by C, the worst case) and of ordinary size, and removes each record in turn."""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch import nn

from dpgnn_core.privacy.sensitivity import Case, SensitivityCheck
from dpgnn_core.training.per_sample import PerSampleClipper, group_noise_stds, private_step


def clipped_sum_sensitivity(clip: float) -> float:
    """The L2 sensitivity of the clipped gradient sum under add/remove of one record: the
    noise std the families calibrate (``group_noise_stds(z, 1, [C])``) at z = 1."""
    return float(group_noise_stds(1.0, 1.0, [clip])[0])


def clipped_sum(model: nn.Module, x: torch.Tensor, y: torch.Tensor, clip: float
                ) -> torch.Tensor:
    """The sum of the per-record gradients of ``model`` on (x, y), each clipped to
    ``clip``, before noise, as one flat vector (what DP-SGD adds its noise to)."""
    clipper = PerSampleClipper(model)
    model.zero_grad(set_to_none=True)
    try:
        with clipper.capture():
            losses = nn.functional.cross_entropy(model(x), y, reduction="none")
            private_step(clipper, losses, clips=(clip,), noise_stds=(0.0,), denominator=1.0,
                         generator=None)
    finally:
        clipper.remove()
    return torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])


def _cases() -> Iterator[Case]:
    n, dim, classes = 8, 5, 3
    gen = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(dim, 6), nn.ReLU(), nn.Linear(6, classes)).double()
    y = torch.randint(0, classes, (n,), generator=gen)
    for clip, scale, tight in ((0.5, 100.0, True), (2.0, 100.0, True), (50.0, 0.1, False)):
        x = torch.randn(n, dim, generator=gen, dtype=torch.float64) * scale
        full = clipped_sum(model, x, y, clip)
        worst = 0.0
        for v in range(n):
            keep = torch.arange(n) != v
            worst = max(worst, float((full - clipped_sum(model, x[keep], y[keep], clip))
                                     .norm()))
        what = (f"{n} records at {scale:g}x scale ({'all clipped' if tight else 'small'}), "
                "each removed")
        yield Case(what, {"clip": clip}, worst, tight=tight)


def check(released: str) -> SensitivityCheck:
    """The check of a DP-SGD release over records (``released``: what the family calls
    its record and relation)."""
    return SensitivityCheck(released, clipped_sum_sensitivity, _cases)


__all__ = ["check", "clipped_sum", "clipped_sum_sensitivity"]
