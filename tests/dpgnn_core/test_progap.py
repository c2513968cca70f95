"""ProGAP: the noise path is the bounded sum, the per-stage ledger and its one noise scale,
frozen earlier stages, learning, bad input refused (the stage aggregation's sensitivity is
brute-forced by ProGAP's registered check, dpgnn_core/methods/brute_force/pma.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from dpgnn_core.data.synthetic import csbm
from dpgnn_core.errors import DataError
from dpgnn_core.methods import progap
from dpgnn_core.methods.gap import row_normalise, sensitivity
from dpgnn_core.privacy import PrivacyError, make_accountant
from dpgnn_core.specs import ProgapSpec

SMALL = csbm(num_nodes=300, avg_degree=4, feature_dim=8, seed=8)
FAST = {"epochs": 20, "steps": 5, "batch_size": 40, "hidden": 8, "device": "cpu"}


# The brute force of the stage-k aggregation's sensitivity (random weights, adversarial
# earlier releases, every node of random bounded-degree graphs, aligned stars) is ProGAP's
# registered check, dpgnn_core/methods/brute_force/pma.py, run by
# tests/dpgnn_core/test_sensitivity_contract.py.


def test_aggregate_stage_adds_noise_to_the_bounded_sum() -> None:
    """The released X(k) is the normalised noisy stage sum: at noise 0 (ProGAP-∞) exactly
    normalise(stage_sum); private, its distance from it matches the stated std."""
    spec = ProgapSpec(level="none", stages=2, **FAST)
    model = progap.new_model(SMALL, spec)
    x = torch.tensor(SMALL.x)
    aggs = torch.randn(SMALL.num_nodes, 1, spec.hidden)
    ei = np.asarray(SMALL.edge_index)
    xk, events = progap.aggregate_stage(SMALL, ei, spec, 0.0, 2, model, aggs)
    clean = progap.stage_sum(model, x, aggs, torch.from_numpy(ei), 2)
    assert torch.allclose(xk, row_normalise(clean), atol=1e-6)
    assert not events.entries


@pytest.mark.parametrize("level", ["edge", "node"])
def test_ledger_one_event_per_release_one_noise_scale(level: str) -> None:
    extra = {"max_degree": 40} if level == "node" else {}
    spec = ProgapSpec(level=level, epsilon=3.0, stages=3, **FAST, **extra)
    r = progap.train_progap(SMALL, spec)
    kinds = [e.kind for e in r.ledger.events]
    if level == "edge":
        assert kinds == ["gaussian"] * 3
    else:
        assert kinds == ["poisson_gaussian"] + ["gaussian", "poisson_gaussian"] * 3
        assert progap.DEGREE_CHECK_NOTE in r.ledger.unaccounted
    z = r.report["noise_multiplier"]
    assert {e.noise_multiplier for e in r.ledger.events} == {z}
    eps = make_accountant(spec.accountant).epsilon(r.ledger, r.report["delta"])
    assert eps == pytest.approx(r.report["epsilon"]) and eps <= 3.0 + 1e-6
    assert r.report["aggregation_noise_std"] == pytest.approx(
        z * sensitivity(level, spec.max_degree, SMALL.directed))
    curve = [e for _, e in r.report["epsilon_by_step"]]
    assert curve == sorted(curve) and curve[-1] == pytest.approx(eps)
    assert len(curve) == len(r.history) == 4 * progap.stage_steps(
        spec, int(SMALL.mask("train").sum()))
    assert r.aggregations.shape == (SMALL.num_nodes, 3, spec.hidden)


def test_fit_stage_freezes_earlier_stages() -> None:
    spec = ProgapSpec(level="none", stages=2, **FAST)
    model = progap.new_model(SMALL, spec)
    model, _, _ = progap.fit_stage(SMALL, spec, 0.0, 0, model)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    aggs = torch.randn(SMALL.num_nodes, 1, spec.hidden)
    model, _, _ = progap.fit_stage(SMALL, spec, 0.0, 1, model, aggs)
    after = model.state_dict()
    changed = {k.split(".")[1] for k in after if not torch.equal(after[k], before[k])}
    assert changed == {"1"}  # only stage 1 trained: stage 0 frozen, stage 2 untouched


def test_progap_learns_and_edge_beats_chance() -> None:
    data = csbm(num_nodes=800, homophily=0.9, feature_signal=0.3, feature_dim=16, seed=9)
    spec = ProgapSpec(level="edge", epsilon=8.0, stages=2, epochs=60, hidden=16, device="cpu")
    r = progap.train_progap(data, spec)
    acc = progap.evaluate_progap(r.model, r.aggregations, data)["test"]["accuracy"]
    assert acc > 1.0 / data.num_classes + 0.15


def test_bad_input_refused_before_training() -> None:
    with pytest.raises(ValueError, match="max_degree"):
        ProgapSpec(level="node", epsilon=4.0)
    with pytest.raises(ValueError, match="drop epsilon"):
        ProgapSpec(level="none", epsilon=4.0)
    with pytest.raises(DataError, match="exceeds it"):
        progap.train_progap(SMALL, ProgapSpec(level="node", epsilon=4.0, max_degree=2,
                                              **FAST))
    # A target too small for any composition is now refused by the spec itself (targets
    # below 1e-3 are finer than the PLD accountant's grid; specs.base), before training.
    with pytest.raises(ValueError, match=r"greater than or equal to 0\.001"):
        ProgapSpec(level="node", epsilon=1e-6, max_degree=40, **FAST)


def test_finish_run_refuses_events_that_differ_from_the_plan() -> None:
    spec = ProgapSpec(level="edge", epsilon=2.0, stages=2, **FAST)
    planned, z, report = progap.calibrate_progap(SMALL, spec)
    short = type(planned)(planned.entries[:1])
    with pytest.raises(PrivacyError, match="differ from the calibrated plan"):
        progap.finish_run(spec, report, planned, short, 100, z, [[], [], []])


def test_one_task_run_resumes_no_stage_trained_on_a_recomputed_release(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Inside a checkpointing block (the one-task path), only stage 0 saves checkpoints:
    a rerun draws the aggregations afresh, so stage k >= 1 must not resume old weights."""
    from dpgnn_core.training import checkpoint

    spec = ProgapSpec(level="edge", epsilon=4.0, stages=2, **FAST)
    seen: list[object] = []
    original = progap.fit_stage

    def spy(*args: object, **kwargs: object) -> object:
        seen.append(checkpoint.current())
        return original(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(progap, "fit_stage", spy)
    with checkpoint.checkpointing(tmp_path / "ckpt", 0.0) as ckpt:
        progap.train_progap(SMALL, spec)
    assert seen[0] is ckpt and seen[1:] == [None, None]
