"""DP-SGD / DP-Adam building blocks: batch samplers that declare their scheme, and the
training loop that clips per-sample gradients and adds the noise each mechanism states.

Each mechanism states its noise *std* (multiplier times sensitivity), never "the multiplier
alone" (the pitfall of Mueller et al.'s code). The optimizer (SGD or Adam) then runs on the
privatised gradient, which is DP-SGD or DP-Adam. Per-sample clipping is
:mod:`dpgnn_core.training.per_sample`; Opacus supplies the model validator (BatchNorm).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from dpgnn_core.privacy.events import PrivacyError, neighbourhood_size
from dpgnn_core.training import checkpoint, eager_optim
from dpgnn_core.training.per_sample import PerSampleClipper, private_step


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


def check_dp_compatible(model: torch.nn.Module) -> None:
    """Refuse layers that break per-example privacy (BatchNorm mixes the examples of a batch)
    before any training starts, with Opacus's validator."""
    from opacus.validators import ModuleValidator

    errors = ModuleValidator.validate(model, strict=False)
    if errors:
        raise PrivacyError("model is not compatible with DP training: "
                           + "; ".join(str(e) for e in errors)
                           + " (use GroupNorm, LayerNorm or InstanceNorm instead of BatchNorm)")


@dataclass(frozen=True)
class Clipping:
    """Per-sample clipping and noise of a private run.

    Args:
        clips (tuple[float, ...]): clipping norm per group (one: global clipping).
        noise_stds (tuple[float, ...]): noise std per group, added to the clipped sum.
        denominator (float): what the noisy sum is divided by: the fixed batch size, or the
            expected batch size under Poisson sampling.
        groups (list, optional): the clipping groups (modules); the whole model if omitted.
    """

    clips: tuple[float, ...]
    noise_stds: tuple[float, ...]
    denominator: float
    groups: list[list[torch.nn.Module]] | None = None


def _resume(ckpt: Any, sig: dict[str, Any], model: torch.nn.Module,
            optimizer: torch.optim.Optimizer
            ) -> tuple[list[dict[str, float]], int, tuple[float, dict[str, torch.Tensor]] | None]:
    """(history, first step, best) of a training: from the checkpoint a killed or stopped
    run left (model and optimizer state loaded; the remaining steps draw fresh secret noise
    and batches), or a fresh start."""
    saved = ckpt.load(sig) if ckpt is not None else None
    if saved is None:
        return [], 1, None
    model.load_state_dict(saved["model"])
    optimizer.load_state_dict(saved["optimizer"])
    best = None if saved["best"] is None else (float(saved["best"][0]), saved["best"][1])
    ckpt.resumed_from.append(int(saved["step"]))
    return list(saved["history"]), int(saved["step"]) + 1, best


def train_steps(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    steps: int,
    step_losses: Callable[[], tuple[torch.Tensor, float]],
    *,
    clipping: Clipping | None,
    generator: torch.Generator | None = None,
    on_step: Callable[[int, dict[str, float]], None] | None = None,
    select: Callable[[], float] | None = None,
    select_every: int = 50,
    log_raw_loss: bool = False,
) -> list[dict[str, float]]:
    """Run ``steps`` optimisation steps; return ``[{"step", ...}]``.

    A step's record holds ``train_loss`` (the reported loss of ``step_losses``) when the
    step is not private (``clipping`` None) or ``log_raw_loss`` is set: a private step's
    loss is computed on the private batch without noise, so by default it is not recorded
    (nor passed to ``on_step``), and a caller that sets ``log_raw_loss`` must mark the run
    (:func:`~dpgnn_core.privacy.report.with_loss_note`).

    ``step_losses()`` draws a batch, runs ``model`` and returns (per-sample losses ``[B]``,
    the loss to report). With ``clipping`` the model is validated for DP, and each step clips
    per-sample gradients by group, adds the group's noise and divides by the denominator
    (:func:`~dpgnn_core.training.per_sample.private_step`); without it, the mean loss is
    minimised (the non-private model, same path).

    ``select()`` (higher is better) is evaluated every ``select_every`` steps and at the end;
    the best weights are kept. It reads validation labels, so the caller must record that
    use in the privacy report.

    Inside a :func:`~dpgnn_core.training.checkpoint.checkpointing` block, the state is
    saved every so often and a rerun resumes from it, with fresh secret noise and batches
    for the remaining steps (never a stored generator state).
    """
    clipper = None
    if clipping is not None:
        if generator is None:  # torch's global RNG may be seeded from a stored spec seed
            raise PrivacyError("private training needs its own noise generator (secret, "
                               "from Randomness); torch's global RNG is not used for noise")
        check_dp_compatible(model)
        clipper = PerSampleClipper(model, clipping.groups)
    ckpt = checkpoint.current()  # inside a checkpointing() block: save and resume
    sig = checkpoint.signature(model, optimizer, steps) if ckpt is not None else {}
    history, start, best = _resume(ckpt, sig, model, optimizer)
    checkpoint.training_started()  # a stop request (Ctrl-C) ends it at a step's end
    try:
        for step in range(start, steps + 1):
            optimizer.zero_grad(set_to_none=True)
            if clipper is not None and clipping is not None:
                with clipper.capture():
                    losses, reported = step_losses()
                    private_step(clipper, losses, clips=clipping.clips,
                                 noise_stds=clipping.noise_stds,
                                 denominator=clipping.denominator, generator=generator)
            else:
                losses, reported = step_losses()
                losses.mean().backward()  # type: ignore[no-untyped-call]
            eager_optim.step(optimizer)
            rec: dict[str, float] = {"step": step}
            if clipper is None or log_raw_loss:
                rec["train_loss"] = reported
            if select is not None and (step % select_every == 0 or step == steps):
                score = select()
                rec["selection_score"] = score
                if best is None or score > best[0]:
                    best = (score, {k: v.detach().clone()
                                    for k, v in model.state_dict().items()})
            history.append(rec)
            if on_step is not None:
                on_step(step, rec)
            stop = step < steps and checkpoint.stop_requested()
            # the first step is saved at once: from it on the run's reservation is spent
            # and a rerun must resume it (charged once), however soon it was killed
            if ckpt is not None and step < steps and (ckpt.due() or stop or step == 1):
                ckpt.save(sig, {"step": step, "history": history,
                                "model": {k: v.detach().cpu() for k, v in
                                          model.state_dict().items()},
                                "optimizer": optimizer.state_dict(),
                                "best": None if best is None else
                                [best[0], {k: v.cpu() for k, v in best[1].items()}]})
            if stop:  # a Ctrl-C (flows.cli): the state of this step is saved
                raise checkpoint.Stopped(step, steps, ckpt.path if ckpt is not None else None)
    finally:
        checkpoint.training_ended()
        if clipper is not None:
            clipper.remove()
    if best is not None:
        model.load_state_dict(best[1])
    return history
