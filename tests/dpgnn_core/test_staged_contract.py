"""The stage contract (dpgnn_core/methods/_staged.py): the in-memory runner runs any
declaration in order, hands each stage what it reads, and suspends checkpoints for a stage
that may not resume."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from dpgnn_core.data.synthetic import csbm
from dpgnn_core.methods._staged import (
    Calibration,
    Stage,
    StageContext,
    Staged,
    StageOutput,
    run_in_memory,
)
from dpgnn_core.privacy import Ledger
from dpgnn_core.specs import GapSpec
from dpgnn_core.training import checkpoint

DATA = csbm(num_nodes=30, num_classes=2, feature_dim=4, avg_degree=3, seed=1)


def _toy(seen: list[tuple[str, Any]]) -> Staged:
    def calibrate(data: Any, spec: Any) -> tuple[Ledger, float, dict[str, Any]]:
        return Ledger(), 0.5, {"private": False}

    def first(ctx: StageContext, reads: Mapping[str, Any]) -> StageOutput:
        seen.append(("first", checkpoint.current()))
        return StageOutput({"x.json": [1, 2]}, info={"k": 1})

    def second(ctx: StageContext, reads: Mapping[str, Any]) -> StageOutput:
        seen.append(("second", checkpoint.current()))
        return StageOutput({"x.json": reads["one"].values["x.json"] + [3]}, info={"k": 2})

    def last(ctx: StageContext, reads: Mapping[str, Any]) -> StageOutput:
        seen.append(("train", (Calibration.of(reads["cal"]).z, reads["none"],
                               [r.info["k"] for r in reads["both"]],
                               reads["one"].values["x.json"])))
        return StageOutput(report={"private": False, "ledger": Ledger()})

    def stages(spec: Any, z: float) -> tuple[Stage, ...]:
        return (Stage("one", "toy_one", first),
                Stage("two", "toy_two", second, reads={"one": "one"}, resumable=False),
                Stage("train", "toy_train", last,
                      reads={"cal": "calibrate", "none": None, "both": ("one", "two"),
                             "one": "two"}))
    return Staged("toy", calibrate, stages)


def test_the_in_memory_runner_wires_reads_in_order(tmp_path: Path) -> None:
    seen: list[tuple[str, Any]] = []
    with checkpoint.checkpointing(tmp_path / "ckpt") as ckpt:
        out = run_in_memory(_toy(seen), DATA, GapSpec(method="gap-inf"))
    assert [name for name, _ in seen] == ["first", "second", "train"]
    assert seen[0][1] is ckpt and seen[1][1] is None  # "two" may not resume: suspended
    assert seen[2][1] == (0.5, None, [1, 2], [1, 2, 3])
    assert list(out) == ["calibrate", "one", "two", "train"]
    assert out["calibrate"].info["num_train"] == int(DATA.mask("train").sum())


def test_a_stage_reading_a_later_stage_fails() -> None:
    bad = Staged("bad", lambda data, spec: (Ledger(), 0.0, {}),
                 lambda spec, z: (Stage("a", "bad_a", lambda ctx, r: StageOutput(),
                                        reads={"b": "b"}),))
    with pytest.raises(KeyError, match="b"):
        run_in_memory(bad, DATA, GapSpec(method="gap-inf"))
