"""`dpgnn run`'s early budget check remembers a spec's calibrated plan under the project
home (issue 52 §7): a rerun reads it back instead of calibrating again, and another spec
or another N_train is calibrated afresh."""

from __future__ import annotations

from pathlib import Path

import pytest

import dpgnn_core.methods.early_plan as early_plan
from dpgnn_core.specs import GapSpec
from flows.cli.execute import remembered_plan


def test_a_rerun_reads_the_plan_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DPGNN_HOME", str(tmp_path / "home"))
    calls: list[tuple[str, int]] = []
    real = early_plan.planned_ledger

    def counted(spec: object, records: int, structure: object = None) -> object:
        calls.append((str(getattr(spec, "epsilon", "")), records))
        return real(spec, records, structure)  # type: ignore[arg-type]

    monkeypatch.setattr(early_plan, "planned_ledger", counted)
    spec = GapSpec(method="gap-edp", epsilon=1.0, seed=1, accountant="rdp")
    first = remembered_plan(spec, 2033, None, "sha")
    assert first is not None and first.entries and len(calls) == 1
    again = remembered_plan(spec, 2033, None, "sha")
    assert again is not None and again.to_dict() == first.to_dict() and len(calls) == 1
    other = remembered_plan(spec.model_copy(update={"epsilon": 2.0}), 2033, None, "sha")
    assert other is not None and len(calls) == 2
    assert other.events[0].noise_multiplier < first.events[0].noise_multiplier
    remembered_plan(spec, 1000, None, "sha")
    assert len(calls) == 3  # another N_train: calibrated again
    remembered_plan(spec, 1000, None, "another dataset")
    assert len(calls) == 4  # another dataset's content: calibrated again
    stored = list((tmp_path / "home" / "cache" / "plans").glob("*.json"))
    assert len(stored) == 4
    for path in stored:
        path.write_text("{not json")  # unreadable files: computed afresh
    rerun = [remembered_plan(s, n, None, "sha") for s, n in ((spec, 2033), (spec, 1000))]
    assert all(r is not None for r in rerun) and len(calls) == 6
    assert rerun[0].to_dict() == first.to_dict()  # type: ignore[union-attr]
