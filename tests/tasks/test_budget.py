"""The release gate of the training tasks (tasks.budget): the core's calibrated plan is
reserved before training or refused, a failure before the first step gives it back, a
failure after keeps it spent."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dpgnn_core.budget import BudgetExceeded, Charge, compose
from dpgnn_core.data.synthetic import csbm
from dpgnn_core.methods.registry import get
from tasks.budget import gate_for, store


def _dataset(seed: int) -> tuple[Any, dict[str, Any]]:
    data = csbm(num_nodes=200, seed=seed)
    ref = {"path": f"/nowhere/budget-{seed}", "name": f"budget-{seed}",
           "content_sha256": f"{seed:064x}"}
    return data, ref


def _spec() -> Any:
    return get("dp-mlp").spec(epsilon=2.0, steps=6, batch_size=32, hidden=8, device="cpu")


def _records(ref: dict[str, Any]) -> list[Any]:
    s = store()
    return s.summary(s.resolve(ref["content_sha256"])).records


@pytest.fixture(autouse=True)
def _own_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DPGNN_HOME", str(tmp_path / "home"))


def test_run_over_budget_is_refused_before_any_step() -> None:
    data, ref = _dataset(101)
    method, spec = get("dp-mlp"), _spec()
    steps: list[int] = []
    with gate_for(ref, method.name, spec) as gate:  # type: ignore[arg-type]
        fitted = method.fit(data, spec, on_step=gate.on_step(lambda t, r: steps.append(t)))
        gate.finish(fitted.report.with_release({"id": "r1"}), fitted.ledger)
    assert steps == list(range(1, 7))
    (rec,) = _records(ref)
    assert rec.status == "spent" and rec.release_id == "r1"
    # The recorded ledger is the run's, and the odometer is its composition.
    own = compose([Charge(fitted.ledger)], 1e-4)["node"].epsilon
    s = store()
    s.set_budget(ref["content_sha256"], ref["name"], ref["path"], epsilon=own * 1.05,
                 delta=1e-4)
    assert s.summary(s.resolve(ref["content_sha256"])).spent["node"].epsilon == \
        pytest.approx(own)
    steps.clear()
    with pytest.raises(BudgetExceeded, match="remaining ε"), \
            gate_for(ref, method.name, spec) as gate:  # type: ignore[arg-type]
        method.fit(data, spec, on_step=gate.on_step(lambda t, r: steps.append(t)))
    assert steps == []  # nothing trained
    assert [r.status for r in _records(ref)] == ["spent"]


def test_failure_before_the_first_step_gives_the_reservation_back(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import dpgnn_core.methods.dp_mlp as dp_mlp

    data, ref = _dataset(102)
    method, spec = get("dp-mlp"), _spec()

    def broken(device: str) -> Any:
        raise RuntimeError("device lost")

    monkeypatch.setattr(dp_mlp, "resolve_device", broken)  # after calibration, before step 1
    with pytest.raises(RuntimeError, match="device lost"), \
            gate_for(ref, method.name, spec) as gate:  # type: ignore[arg-type]
        method.fit(data, spec, on_step=gate.on_step(None))
    (rec,) = _records(ref)
    assert rec.status == "released-unused" and "device lost" in rec.note


def test_failure_after_a_step_keeps_the_reservation_spent() -> None:
    data, ref = _dataset(103)
    method, spec = get("dp-mlp"), _spec()

    def crash_at_two(t: int, rec: dict[str, float]) -> None:
        if t == 2:
            raise RuntimeError("killed mid-training")

    with pytest.raises(RuntimeError, match="mid-training"), \
            gate_for(ref, method.name, spec) as gate:  # type: ignore[arg-type]
        method.fit(data, spec, on_step=gate.on_step(crash_at_two))
    (rec,) = _records(ref)
    assert rec.status == "spent"  # step 1 changed the model: a release


def test_non_private_runs_touch_no_budget() -> None:
    data, ref = _dataset(104)
    method = get("dp-mlp")
    spec = method.spec(epsilon=None, steps=3, batch_size=32, hidden=8, device="cpu")
    with gate_for(ref, method.name, spec) as gate:  # type: ignore[arg-type]
        method.fit(data, spec, on_step=gate.on_step(None))
    assert store().budget_id(ref["content_sha256"]) is None


def test_insecure_run_is_charged_an_unbounded_epsilon() -> None:
    """Noise recomputable from the stored seed: the release has no finite ε, so the
    odometer records ∞ for its unit, and a budget refuses such a run before training."""
    import math

    data, ref = _dataset(105)
    method = get("dp-mlp")
    spec = method.spec(epsilon=2.0, steps=4, batch_size=32, hidden=8, device="cpu",
                       insecure_reproducible_noise=True)
    with gate_for(ref, method.name, spec) as gate:  # type: ignore[arg-type]
        fitted = method.fit(data, spec, on_step=gate.on_step(None))
        gate.finish(fitted.report.with_release({"id": "ins"}), fitted.ledger)
    s = store()
    summary = s.summary(s.resolve(ref["content_sha256"]))
    (rec,) = summary.records
    assert rec.status == "spent" and math.isinf(rec.epsilon or 0.0)
    assert math.isinf(summary.spent["node"].epsilon)

    data, ref = _dataset(106)  # a budgeted dataset refuses it outright
    s.set_budget(ref["content_sha256"], ref["name"], ref["path"], epsilon=100.0, delta=1e-4)
    steps: list[int] = []
    with pytest.raises(BudgetExceeded, match="bounds nothing about the protected unit node"), \
            gate_for(ref, method.name, spec) as gate:  # type: ignore[arg-type]
        method.fit(data, spec, on_step=gate.on_step(lambda t, r: steps.append(t)))
    assert steps == []


def test_budget_tag_says_not_protected_and_that_the_filter_decides() -> None:
    """Issue 36 §4: the dataset-budget tag read "remaining edge: 0, node: 3.215" for units
    the budget does not cover (not used up: not bounded). It says "not protected" for them,
    and for a protected unit names the filter's reading, which decides admission, beside
    the post hoc figure (a filter past its bound while the post hoc figure fits)."""
    from tasks.budget import budget_tags, odometer

    data, ref = _dataset(107)
    method = get("dp-mlp")
    s = store()
    s.set_budget(ref["content_sha256"], ref["name"], ref["path"], epsilon=6.0, delta=1e-3)
    for _ in range(2):
        with gate_for(ref, method.name, _spec()) as gate:
            fitted = method.fit(data, _spec(), on_step=gate.on_step(None))
            gate.finish(fitted.report.with_release({"id": f"r{_}"}), fitted.ledger)
    reading = odometer(ref["content_sha256"], "node", "add_remove")
    tag = budget_tags(reading)["dpgnn.dataset_budget"]
    used = s.summary(s.resolve(ref["content_sha256"])).filter["node"].fits
    remaining = reading["dataset_budget"]["remaining"]
    assert tag.startswith("ε = 6 at δ = 0.001; remaining ")
    assert (f"node: {remaining['node']:.4g} post hoc (filter at {100 * used:.4g} % of its "
            "bound; the filter, not the post hoc figure, decides admission)") in tag
    others = [u for u in remaining if u != "node"]
    assert others and all(f"{u}: not protected" in tag for u in others)
    assert ": 0," not in tag and not tag.endswith(": 0")
