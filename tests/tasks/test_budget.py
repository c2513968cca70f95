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
        fitted = method.fit(data, spec, on_step=lambda t, r: steps.append(t), gate=gate)
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
        method.fit(data, spec, on_step=lambda t, r: steps.append(t), gate=gate)
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
        method.fit(data, spec, gate=gate)
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
        method.fit(data, spec, on_step=crash_at_two, gate=gate)
    (rec,) = _records(ref)
    assert rec.status == "spent"  # step 1 changed the model: a release


def test_non_private_runs_touch_no_budget() -> None:
    data, ref = _dataset(104)
    method = get("dp-mlp")
    spec = method.spec(epsilon=None, steps=3, batch_size=32, hidden=8, device="cpu")
    with gate_for(ref, method.name, spec) as gate:  # type: ignore[arg-type]
        method.fit(data, spec, gate=gate)
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
        fitted = method.fit(data, spec, gate=gate)
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
        method.fit(data, spec, on_step=lambda t, r: steps.append(t), gate=gate)
    assert steps == []


def _stopped_at_two(ref: dict[str, Any], folder: Path) -> None:
    """A dp-mlp run stopped (as by Ctrl-C) after step 2 of 6, its checkpoint kept."""
    from dpgnn_core.training.checkpoint import Stopped, checkpointing, request_stop

    data, _ = _dataset(int(ref["content_sha256"], 16))
    method, spec = get("dp-mlp"), _spec()

    def stop_at_two(t: int, rec: dict[str, float]) -> None:
        if t == 2:
            request_stop()

    with pytest.raises(Stopped), gate_for(ref, method.name, spec) as gate, \
            checkpointing(folder, 3600.0):  # type: ignore[arg-type]
        method.fit(data, spec, on_step=stop_at_two, gate=gate)


def _resume(ref: dict[str, Any], folder: Path, release: str) -> Any:
    from dpgnn_core.training.checkpoint import checkpointing

    data, _ = _dataset(int(ref["content_sha256"], 16))
    method, spec = get("dp-mlp"), _spec()
    with gate_for(ref, method.name, spec) as gate, \
            checkpointing(folder, 3600.0) as ckpt:  # type: ignore[arg-type]
        fitted = method.fit(data, spec, gate=gate)
        gate.finish(fitted.report.with_release({"id": release}), fitted.ledger)
    return ckpt


@pytest.mark.slow
def test_a_run_resumed_from_its_checkpoint_is_charged_its_plan_once(tmp_path: Path) -> None:
    """Issue 33 §4: a run stopped after step 2 and resumed from its checkpoint was charged
    its whole plan again. The checkpoint carries the reservation (already spent when it
    stopped): the resumed run adopts it, charges nothing new and names its release on it;
    a copy of that checkpoint cannot be adopted again (its token was replaced, its release
    written), so a later resumption from it is charged as a release of its own."""
    import shutil

    _, ref = _dataset(107)
    folder = tmp_path / "ckpt"
    _stopped_at_two(ref, folder)
    (rec,) = _records(ref)
    assert rec.status == "spent" and rec.release_id is None  # step 1 was a release
    shutil.copytree(folder, tmp_path / "copy")
    ckpt = _resume(ref, folder, "r1")
    assert ckpt.resumed_from == [2] and ckpt.carried_over
    (after,) = _records(ref)
    assert (after.id, after.status, after.release_id) == (rec.id, "spent", "r1")
    assert "resumed from step 2" in after.note
    assert after.charge.ledger == rec.charge.ledger  # the plan, once

    again = _resume(ref, tmp_path / "copy", "r2")  # the same checkpoint, resumed twice
    assert again.resumed_from == [2] and not again.carried_over
    assert [(r.status, r.release_id) for r in _records(ref)] == [("spent", "r1"),
                                                                 ("spent", "r2")]


def test_a_carried_reservation_is_adopted_only_by_its_own_plan_and_token() -> None:
    """Another plan, a wrong token, a later epoch or a release already written: no
    adoption (each resumption of those is charged as its own release)."""
    from dpgnn_core.privacy import GaussianEvent
    from dpgnn_core.privacy.events import Ledger

    _, ref = _dataset(108)
    s = store()
    sha = ref["content_sha256"]
    rid = s.reserve(sha, ref["name"], ref["path"], Charge(Ledger().add(
        GaussianEvent(noise_multiplier=2.0, count=1, level="node"))), method="m",
        run_id="f:k:o", delta=1e-5, epsilon=None, plan_key="plan")
    token = s.carrier(rid)
    assert token is not None and s.carrier(rid) == token  # stable until adopted
    assert s.adopt_carried(sha, rid, token, "other-plan", "g:k:o", "x") is None
    assert s.adopt_carried(sha, rid, "f" * 32, "plan", "g:k:o", "x") is None
    new = s.adopt_carried(sha, rid, token, "plan", "g:k:o", "resumed")
    assert new is not None and new != token
    assert s.adopt_carried(sha, rid, token, "plan", "h:k:o", "x") is None  # used up
    s.attach_release(rid, "done")
    assert s.adopt_carried(sha, rid, new, "plan", "h:k:o", "x") is None  # released
    rid2 = s.reserve(sha, ref["name"], ref["path"], Charge(Ledger().add(
        GaussianEvent(noise_multiplier=2.0, count=1, level="node"))), method="m",
        run_id="f:k:p", delta=1e-5, epsilon=None, plan_key="plan")
    token2 = s.carrier(rid2)
    assert token2 is not None
    s.reset(s.resolve(sha), "test")
    assert s.adopt_carried(sha, rid2, token2, "plan", "g:k:p", "x") is None  # old epoch


@pytest.mark.slow
def test_a_checkpoint_another_live_run_trains_from_is_not_adopted(tmp_path: Path) -> None:
    """While a run holds its checkpoint folder (its lock), another run of the same plan
    resuming from that folder adopts nothing: it is a release of its own, charged."""
    import fcntl
    import os

    _, ref = _dataset(109)
    folder = tmp_path / "ckpt"
    _stopped_at_two(ref, folder)
    fd = os.open(folder / ".reservation.lock", os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # the live run's hold
        ckpt = _resume(ref, folder, "r1")
    finally:
        os.close(fd)
    assert ckpt.resumed_from == [2] and not ckpt.carried_over
    assert [r.release_id for r in _records(ref)] == [None, "r1"]


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
            fitted = method.fit(data, _spec(), gate=gate)
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
