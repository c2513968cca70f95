"""Checkpoints of long training, so a killed run resumes instead of starting over.

:func:`~dpgnn_core.training.dp_sgd.train_steps` saves, every ``every_seconds`` while a
:func:`checkpointing` block is active, what the remaining steps need: the step count, the
model's and the optimizer's state, the history so far and the best weights of model
selection. A rerun of the same training inside a block on the same folder resumes from the
last checkpoint.

What is never saved: the noise generator or the batch sampler's state. The remaining steps
draw fresh secret randomness (:class:`~dpgnn_core.privacy.randomness.Randomness`), so a
checkpoint holds nothing the privacy proof needs secret; the model after ``k`` noisy steps
is itself a post-processing of those ``k`` steps. The ledger is the plan's ``T`` steps: the
released model is the result of exactly ``T`` steps (``k`` before the checkpoint, ``T - k``
after), each counted once; steps run after the last checkpoint by the killed process were
lost with it and their results never stored (docs/privacy.md, "Resuming a killed run").

A checkpoint records the shape of the training it belongs to (steps, parameter names and
shapes, optimizer); one that does not match is ignored, so a changed spec never resumes
from another run's state.

A checkpoint also carries the budget reservation of the release it continues
(:attr:`Checkpointer.carry`: the odometer's record id and a token only that record and this
checkpoint hold), so that a resumed run is charged once (:class:`tasks.budget.TaskGate`).
"""

from __future__ import annotations

import contextlib
import contextvars
import shutil
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from dpgnn_core.io import atomic_file
from dpgnn_core.serialize import torch_save

FORMAT = 1


@dataclass
class Checkpointer:
    """Save and load one training's state in ``folder``.

    Args:
        folder (Path): where ``checkpoint.pt`` goes (created on the first save).
        every_seconds (float, optional): the least time between two saves.
            (default: :obj:`60.0`)
    """

    folder: Path
    every_seconds: float = 60.0
    #: The step a run resumed from (``None``: it started from scratch), per training.
    resumed_from: list[int] = field(default_factory=list)
    #: The budget reservation this training's release is charged to (``{"record": id,
    #: "token": hex}``), saved with every checkpoint; None: nothing carried.
    carry: dict[str, Any] | None = None
    #: Whether the resumed run adopted the reservation its checkpoint carried (charged
    #: once); False: it was charged as a release of its own.
    carried_over: bool = False
    _last: float = field(default_factory=time.monotonic)

    @property
    def path(self) -> Path:
        return self.folder / "checkpoint.pt"

    def due(self) -> bool:
        return time.monotonic() - self._last >= self.every_seconds

    def save(self, signature: dict[str, Any], state: dict[str, Any]) -> None:
        """Write ``state`` atomically (a reader never sees half a checkpoint)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        with atomic_file(self.path) as tmp:
            torch_save({"format": FORMAT, "signature": signature, **state,
                        "reservation": self.carry}, tmp, target=self.path)
        self._last = time.monotonic()

    def load(self, signature: dict[str, Any]) -> dict[str, Any] | None:
        """The saved state if it belongs to a training of this ``signature``, else None."""
        if not self.path.is_file():
            return None
        try:
            state: dict[str, Any] = torch.load(self.path, map_location="cpu",
                                               weights_only=True)
        except Exception:  # a damaged checkpoint is no checkpoint: start over
            return None
        if state.get("format") != FORMAT or state.get("signature") != signature:
            return None
        return state

    def carried(self) -> tuple[dict[str, Any], int] | None:
        """(the reservation, the step) a stored checkpoint carries, if any: what a rerun
        resuming from it continues."""
        if not self.path.is_file():
            return None
        try:
            state = torch.load(self.path, map_location="cpu", weights_only=True)
        except Exception:  # a damaged checkpoint carries nothing (and is not resumed)
            return None
        carry = state.get("reservation") if isinstance(state, dict) else None
        if state.get("format") != FORMAT or not isinstance(carry, dict):
            return None
        return carry, int(state.get("step", 0))

    def clear(self) -> None:
        """Remove the folder (the training finished and its result is stored)."""
        shutil.rmtree(self.folder, ignore_errors=True)


class Stopped(KeyboardInterrupt):
    """A training stopped on request (:func:`request_stop`, a Ctrl-C) at the end of a step,
    after saving its checkpoint: a rerun of the same training resumes from it.

    Attributes:
        step (int): the last step done. steps (int): the plan's steps.
        path (Path or None): the checkpoint saved (None outside a :func:`checkpointing`
            block, or when every step was done).
    """

    def __init__(self, step: int, steps: int, path: Path | None) -> None:
        self.step, self.steps, self.path = step, steps, path
        super().__init__(f"stopped after step {step} of {steps}"
                         + (f"; checkpoint kept at {path}" if path is not None else ""))


_STOP = threading.Event()
_TRAINING = [0]  # trainings under way in this process (stop requests are for them)


def request_stop() -> bool:
    """Ask the trainings under way to stop at the end of their current step, saving their
    checkpoint (:class:`Stopped`). Returns whether any is under way (else nothing will
    see the request; the caller then stops by other means, e.g. ``KeyboardInterrupt``)."""
    if _TRAINING[0] <= 0:
        return False
    _STOP.set()
    return True


def stop_requested() -> bool:
    return _STOP.is_set()


def training_started() -> None:
    """A training loop starts (for :func:`request_stop`); pair with
    :func:`training_ended`."""
    _TRAINING[0] += 1


def training_ended() -> None:
    """A training loop ended; a stop request is cleared when the last one ends."""
    _TRAINING[0] -= 1
    if _TRAINING[0] <= 0:
        _TRAINING[0] = 0
        _STOP.clear()


_CURRENT: contextvars.ContextVar[Checkpointer | None] = contextvars.ContextVar(
    "dpgnn_checkpointer", default=None)


def current() -> Checkpointer | None:
    """The checkpointer of the enclosing :func:`checkpointing` block, if any."""
    return _CURRENT.get()


@contextlib.contextmanager
def checkpointing(folder: str | Path, every_seconds: float = 60.0
                  ) -> Iterator[Checkpointer]:
    """Within the block, :func:`~dpgnn_core.training.dp_sgd.train_steps` saves its state
    to ``folder`` every ``every_seconds`` and resumes from it. A context variable, so no
    method needs a parameter for it; the caller clears the folder once the result is
    stored (:meth:`Checkpointer.clear`).

    Args:
        folder (str or Path): the checkpoint folder of this training.
        every_seconds (float, optional): the least time between two saves.
            (default: :obj:`60.0`)
    """
    ckpt = Checkpointer(Path(folder), every_seconds)
    token = _CURRENT.set(ckpt)
    try:
        yield ckpt
    finally:
        _CURRENT.reset(token)


@contextlib.contextmanager
def suspended() -> Iterator[None]:
    """No checkpointing (neither save nor resume) within the block, inside a
    :func:`checkpointing` one: for a training whose input a rerun draws afresh in the same
    task (ProGAP's stage k >= 1 in one task trains on a private aggregation recomputed with
    fresh noise on a rerun; resuming its weights would mix two releases the ledger counts
    once)."""
    token = _CURRENT.set(None)
    try:
        yield
    finally:
        _CURRENT.reset(token)


def signature(model: torch.nn.Module, optimizer: torch.optim.Optimizer, steps: int
              ) -> dict[str, Any]:
    """What identifies a training: its steps, parameter names and shapes, optimizer."""
    return {"steps": int(steps), "optimizer": type(optimizer).__name__,
            "params": [[n, list(p.shape)] for n, p in model.named_parameters()]}
