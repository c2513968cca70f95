"""Checkpoints: a killed training resumes from its last checkpoint, every step once, with
fresh secret noise (no generator state is ever stored)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from dpgnn_core.data.synthetic import csbm
from dpgnn_core.methods.registry import get
from dpgnn_core.training.checkpoint import checkpointing
from dpgnn_core.training.dp_sgd import Clipping, train_steps


class Killed(Exception):
    """Stands for the process dying at a step."""


def _setup(seed: int) -> tuple[torch.nn.Module, torch.optim.Optimizer, list[int], object]:
    torch.manual_seed(seed)
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(16, 4), torch.randint(0, 2, (16,))
    calls: list[int] = []

    def step_losses() -> tuple[torch.Tensor, float]:
        calls.append(1)
        losses = torch.nn.functional.cross_entropy(model(x), y, reduction="none")
        return losses, float(losses.mean())

    return model, opt, calls, step_losses


def _kill_at(k: int):  # type: ignore[no-untyped-def]
    def on_step(step: int, rec: dict[str, float]) -> None:
        if step == k:
            raise Killed

    return on_step


@pytest.mark.parametrize("kill_at", [1, 4, 9])
def test_resume_runs_every_step_once(tmp_path: Path, kill_at: int) -> None:
    steps, clip = 10, Clipping((1.0,), (0.5,), 16.0)
    model, opt, _, losses = _setup(0)
    with checkpointing(tmp_path / "ck", every_seconds=0) as ck, pytest.raises(Killed):
        train_steps(model, opt, steps, losses, clipping=clip, generator=torch.Generator(),
                    on_step=_kill_at(kill_at))
    # The process died at step kill_at after its update: saved up to kill_at - 1.
    model2, opt2, calls2, losses2 = _setup(1)  # a fresh process: other initial weights
    with checkpointing(tmp_path / "ck", every_seconds=0) as ck:
        hist = train_steps(model2, opt2, steps, losses2, clipping=clip,
                           generator=torch.Generator())
    done = kill_at - 1
    assert ck.resumed_from == ([done] if done else [])
    assert len(calls2) == steps - done  # each remaining step once
    assert [r["step"] for r in hist] == list(range(1, steps + 1))  # every step once


def test_checkpoint_holds_no_generator_state(tmp_path: Path) -> None:
    model, opt, _, losses = _setup(0)
    gen = torch.Generator()
    with checkpointing(tmp_path / "ck", every_seconds=0), pytest.raises(Killed):
        train_steps(model, opt, 5, losses, clipping=Clipping((1.0,), (0.5,), 16.0),
                    generator=gen, on_step=_kill_at(3))
    saved = torch.load(tmp_path / "ck" / "checkpoint.pt", weights_only=True)
    assert set(saved) == {"format", "signature", "step", "history", "model", "optimizer",
                          "best", "reservation"}  # the budget record it continues (None)
    assert saved["reservation"] is None  # no gate outside a task
    state = gen.get_state()

    def contains(obj: object) -> bool:
        if isinstance(obj, torch.Tensor):
            return obj.dtype == state.dtype and obj.shape == state.shape
        if isinstance(obj, dict):
            return any(contains(v) for v in obj.values())
        if isinstance(obj, (list, tuple)):
            return any(contains(v) for v in obj)
        return False

    assert not contains(saved)


def test_a_different_training_does_not_resume(tmp_path: Path) -> None:
    model, opt, _, losses = _setup(0)
    with checkpointing(tmp_path / "ck", every_seconds=0), pytest.raises(Killed):
        train_steps(model, opt, 10, losses, clipping=None, on_step=_kill_at(5))
    model2, opt2, calls2, losses2 = _setup(0)
    with checkpointing(tmp_path / "ck", every_seconds=0) as ck:
        train_steps(model2, opt2, 12, losses2, clipping=None)  # 12 steps: another plan
    assert ck.resumed_from == [] and len(calls2) == 12


def test_no_checkpoint_outside_a_block(tmp_path: Path) -> None:
    model, opt, _, losses = _setup(0)
    train_steps(model, opt, 3, losses, clipping=None)
    assert not any(tmp_path.iterdir())


def test_a_private_method_resumes_with_its_whole_ledger(tmp_path: Path) -> None:
    """DP-MLP killed at step 30 of 60, rerun: the model trains 31..60 only, and the
    report and ledger are the plan's (60 steps counted once)."""
    data = csbm(num_nodes=400, seed=3)
    m = get("dp-mlp")
    spec = m.spec(epsilon=4.0, steps=60, batch_size=32, hidden=16, device="cpu")
    with checkpointing(tmp_path / "ck", every_seconds=0), pytest.raises(Killed):
        m.fit(data, spec, on_step=_kill_at(30))
    seen: list[int] = []
    with checkpointing(tmp_path / "ck", every_seconds=0) as ck:
        fitted = m.fit(data, spec, on_step=lambda step, rec: seen.append(step))
    assert ck.resumed_from == [29] and seen == list(range(30, 61))
    assert [r["step"] for r in fitted.history] == list(range(1, 61))
    (entry,) = fitted.ledger.entries
    assert entry.event.steps == 60 and fitted.report.steps == 60


@pytest.mark.parametrize("stop_at", [1, 6])
def test_a_stop_request_ends_at_the_step_and_keeps_its_state(tmp_path: Path,
                                                             stop_at: int) -> None:
    """A stop request (the CLI's Ctrl-C) during a step ends the training after that step
    with a checkpoint of it, even when no periodic checkpoint is due; a rerun resumes from
    it; with no training under way a request is refused (nobody would see it)."""
    from dpgnn_core.training import checkpoint

    assert checkpoint.request_stop() is False
    steps, clip = 10, Clipping((1.0,), (0.5,), 16.0)
    model, opt, _, losses = _setup(0)

    def ctrl_c(step: int, rec: dict[str, float]) -> None:
        if step == stop_at:
            assert checkpoint.request_stop() is True

    with checkpointing(tmp_path / "ck", every_seconds=3600), \
            pytest.raises(checkpoint.Stopped) as stopped:
        train_steps(model, opt, steps, losses, clipping=clip, generator=torch.Generator(),
                    on_step=ctrl_c)
    assert (stopped.value.step, stopped.value.steps) == (stop_at, steps)
    assert stopped.value.path == tmp_path / "ck" / "checkpoint.pt"
    assert stopped.value.path.is_file()
    assert not checkpoint.stop_requested()  # cleared with the training
    model2, opt2, calls2, losses2 = _setup(1)
    with checkpointing(tmp_path / "ck", every_seconds=3600) as ck:
        hist = train_steps(model2, opt2, steps, losses2, clipping=clip,
                           generator=torch.Generator())
    assert ck.resumed_from == [stop_at]
    assert len(calls2) == steps - stop_at
    assert [r["step"] for r in hist] == list(range(1, steps + 1))


def test_the_first_step_is_checkpointed_at_once(tmp_path: Path) -> None:
    """Issue 48 §4: a run killed (its Prefect server killed) before its first periodic
    checkpoint had spent its reservation and kept no checkpoint, so the rerun was a new
    release, charged twice, while the error said it resumes. The first step is saved at
    once, whatever the period: a rerun resumes from it (and adopts its reservation)."""
    steps, clip = 10, Clipping((1.0,), (0.5,), 16.0)
    model, opt, _, losses = _setup(0)
    with checkpointing(tmp_path / "ck", every_seconds=3600), pytest.raises(Killed):
        train_steps(model, opt, steps, losses, clipping=clip, generator=torch.Generator(),
                    on_step=_kill_at(3))
    model2, opt2, calls2, losses2 = _setup(1)
    with checkpointing(tmp_path / "ck", every_seconds=3600) as ck:
        train_steps(model2, opt2, steps, losses2, clipping=clip, generator=torch.Generator())
    assert ck.resumed_from == [1] and len(calls2) == steps - 1
