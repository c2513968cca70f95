"""DP-SGD / DP-Adam building blocks: batch samplers that declare their scheme, and Opacus's
DP optimizer configured by the noise standard deviation a mechanism needs.

Opacus adds noise of std ``noise_multiplier * max_grad_norm`` to the sum of clipped
per-sample gradients (then divides by the expected batch size for ``loss_reduction="mean"``).
Each mechanism states its own std; :func:`dp_optimizer` converts, so the noise is never "the
multiplier alone" (the pitfall of Mueller et al.'s code).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from opacus import GradSampleModule
from opacus.optimizers import DPOptimizer

from dpgnn_core.privacy.events import PrivacyError, neighbourhood_size


@dataclass
class FixedSizeSampler:
    """Batches of exactly ``batch_size`` distinct items drawn uniformly without replacement
    (independently at every step): the scheme DP-GNN's and DRW's accountants assume."""

    num_items: int
    batch_size: int
    generator: torch.Generator = field(default_factory=torch.Generator)
    scheme: str = "fixed_size_without_replacement"

    def __post_init__(self) -> None:
        if not 1 <= self.batch_size <= self.num_items:
            raise PrivacyError(f"batch size {self.batch_size} must lie in [1, "
                               f"{self.num_items}] (the number of training subgraphs)")

    def sample(self) -> torch.Tensor:
        return torch.randperm(self.num_items, generator=self.generator)[: self.batch_size]


@dataclass
class PoissonSampler:
    """Each item joins a batch independently with probability ``rate``: the scheme of DP-SGD
    over independent rows (DP-MLP, GAP's modules, graph classification)."""

    num_items: int
    rate: float
    generator: torch.Generator = field(default_factory=torch.Generator)
    scheme: str = "poisson"

    def __post_init__(self) -> None:
        if not 0 < self.rate <= 1:
            raise PrivacyError(f"sampling rate must lie in (0, 1], got {self.rate}")

    def sample(self) -> torch.Tensor:
        keep = torch.rand(self.num_items, generator=self.generator) < self.rate
        return keep.nonzero().flatten()


def dpgnn_noise_std(noise_multiplier: float, clip: float, max_degree: int, layers: int
                    ) -> float:
    """DP-GNN's noise std :math:`\\lambda \\cdot 2C \\cdot N(K, r)`."""
    if clip <= 0:
        raise PrivacyError(f"clipping norm must be > 0, got {clip}")
    return noise_multiplier * 2.0 * clip * neighbourhood_size(max_degree, layers)


def dp_optimizer(optimizer: torch.optim.Optimizer, *, noise_std: float, clip: float,
                 batch_size: int, generator: torch.Generator | None = None) -> DPOptimizer:
    """Wrap ``optimizer`` so each step clips per-sample gradients to ``clip``, adds
    :math:`\\mathcal{N}(0, \\text{noise\\_std}^2)` to their sum and divides by
    ``batch_size``. The model must be an Opacus ``GradSampleModule``."""
    if clip <= 0 or noise_std < 0:
        raise PrivacyError(f"need clip > 0 and noise_std >= 0, got {clip}, {noise_std}")
    return DPOptimizer(optimizer, noise_multiplier=noise_std / clip, max_grad_norm=clip,
                       expected_batch_size=batch_size, loss_reduction="mean",
                       generator=generator)


def check_dp_compatible(model: torch.nn.Module) -> None:
    """Refuse layers that break per-example privacy (BatchNorm mixes the examples of a batch)
    before any training starts, with Opacus's validator."""
    from opacus.validators import ModuleValidator

    errors = ModuleValidator.validate(model, strict=False)
    if errors:
        raise PrivacyError("model is not compatible with DP training: "
                           + "; ".join(str(e) for e in errors)
                           + " (use GroupNorm, LayerNorm or InstanceNorm instead of BatchNorm)")


def train_steps(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    steps: int,
    step_loss: Callable[[torch.nn.Module], tuple[torch.Tensor, float]],
    *,
    private: bool,
    noise_std: float = 0.0,
    clip: float = 1.0,
    batch_size: int = 1,
    generator: torch.Generator | None = None,
    on_step: Callable[[int, dict[str, float]], None] | None = None,
) -> list[dict[str, float]]:
    """Run ``steps`` optimisation steps; return ``[{"step", "train_loss"}]``.

    ``step_loss(net)`` draws a batch, runs ``net`` and returns (the loss to minimise, the
    loss to report). With ``private``, the model is validated for DP, wrapped in Opacus's
    ``GradSampleModule``, and the optimizer clips per-sample gradients to ``clip`` and adds
    noise of std ``noise_std`` (:func:`dp_optimizer`); the hooks are removed afterwards.
    """
    net: torch.nn.Module = model
    opt = optimizer
    if private:
        check_dp_compatible(model)
        net = GradSampleModule(model)
        opt = dp_optimizer(optimizer, noise_std=noise_std, clip=clip, batch_size=batch_size,
                           generator=generator)
    history: list[dict[str, float]] = []
    try:
        for step in range(1, steps + 1):
            loss, reported = step_loss(net)
            opt.zero_grad(set_to_none=True)
            loss.backward()  # type: ignore[no-untyped-call]
            opt.step()
            rec = {"step": step, "train_loss": reported}
            history.append(rec)
            if on_step is not None:
                on_step(step, rec)
    finally:
        if isinstance(net, GradSampleModule):
            net.cleanup()
    return history
