"""The per-dataset privacy odometer: composition per unit, the budget check, concurrency,
reservations given back, resets and dataset versions (dpgnn_core.budget)."""

from __future__ import annotations

import math
import multiprocessing as mp
from pathlib import Path

import numpy as np
import pytest

from dpgnn_core.budget import (
    BudgetExceeded,
    BudgetStore,
    Charge,
    _add_remove_as_replace,
    compose,
)
from dpgnn_core.privacy import (
    GaussianEvent,
    Ledger,
    PldAccountant,
    PoissonGaussianEvent,
    RdpAccountant,
    UniformGaussianEvent,
)
from dpgnn_core.privacy.rdp import epsilon_from_rdp, rdp_gaussian

DELTA = 1e-5


def dp_sgd(z: float, steps: int = 50, q: float = 0.05, level: str = "node") -> Ledger:
    return Ledger().add(PoissonGaussianEvent(noise_multiplier=z, sampling_rate=q, steps=steps,
                                             level=level), sampler_scheme="poisson")


def pma(z: float, hops: int = 2, level: str = "edge") -> Ledger:
    return Ledger().add(GaussianEvent(noise_multiplier=z, count=hops, level=level))


def uniform(z: float, steps: int = 40, level: str = "node") -> Ledger:
    return Ledger().add(UniformGaussianEvent(noise_multiplier=z, sampling_rate=0.05,
                                             steps=steps, level=level),
                        sampler_scheme="fixed_size_without_replacement")


# --- composition ------------------------------------------------------------------------


@pytest.mark.parametrize("zs", [(1.0,), (1.0, 1.5), (0.8, 1.2, 2.0)])
def test_cumulative_epsilon_is_the_composition_of_every_ledger(zs) -> None:
    ledgers = [dp_sgd(z) for z in zs]
    got = compose([Charge(led) for led in ledgers], DELTA)
    joint = Ledger()
    for led in ledgers:
        joint = joint + led
    expected = min(RdpAccountant().epsilon(joint, DELTA), PldAccountant().epsilon(joint, DELTA))
    assert set(got) == {"node"}
    assert got["node"].epsilon == pytest.approx(expected, rel=1e-9)
    # Composition grows with every release and stays below the sum of the runs' own ε.
    alone = [min(RdpAccountant().epsilon(led, DELTA), PldAccountant().epsilon(led, DELTA))
             for led in ledgers]
    assert max(alone) <= got["node"].epsilon <= sum(alone) + 1e-9


def test_units_are_never_summed() -> None:
    got = compose([Charge(pma(2.0)), Charge(dp_sgd(1.0)), Charge(pma(3.0))], DELTA)
    assert set(got) == {"edge", "node"}
    edge_only = compose([Charge(pma(2.0)), Charge(pma(3.0))], DELTA)["edge"].epsilon
    node_only = compose([Charge(dp_sgd(1.0))], DELTA)["node"].epsilon
    assert got["edge"].epsilon == pytest.approx(edge_only)
    assert got["node"].epsilon == pytest.approx(node_only)


@pytest.mark.parametrize("z", [0.7, 1.0, 2.0, 5.0])
def test_add_remove_to_replace_is_at_least_the_exact_replace_epsilon(z: float) -> None:
    """A Gaussian release of sensitivity 1 under add/remove has sensitivity 2 under
    replace-one (a clipped sum: one record out, another in), i.e. multiplier z/2. The
    group-privacy conversion must never claim less than that exact ε (it would if the
    factor 2 were dropped), and stays within a small factor of it."""
    conv = _add_remove_as_replace(pma(z, hops=1).entries, DELTA)
    orders = RdpAccountant().orders
    exact = epsilon_from_rdp(orders, rdp_gaussian(z / 2.0, orders, 1), DELTA)[0]
    own = epsilon_from_rdp(orders, rdp_gaussian(z, orders, 1), DELTA)[0]
    assert conv >= exact * (1 - 1e-9)
    assert conv > own  # more than the add/remove ε itself
    assert conv <= 3.0 * exact + 1.0


def test_mixed_relations_compose_conservatively() -> None:
    """DP-MLP (add/remove) and DP-GCN-like (replace-one) runs on the same nodes: the total
    exceeds each part and includes the group-privacy factor."""
    a, r = dp_sgd(1.0), uniform(1.5)
    got = compose([Charge(a), Charge(r)], DELTA)["node"]
    assert got.relations == ("add_remove", "replace")
    eps_r = RdpAccountant().epsilon(r, DELTA / 2)
    eps_a = _add_remove_as_replace(a.entries, DELTA / 2)
    assert got.epsilon == pytest.approx(eps_r + eps_a)
    assert got.epsilon > RdpAccountant().epsilon(a, DELTA) + RdpAccountant().epsilon(r, DELTA)


def test_fixed_charges_take_their_delta_and_add_their_epsilon() -> None:
    led = dp_sgd(1.0)
    got = compose([Charge(led), Charge(fixed=(1.5, 4e-6, "node", "add_remove"))], DELTA)
    base = compose([Charge(led)], DELTA - 4e-6)["node"].epsilon
    assert got["node"].epsilon == pytest.approx(base + 1.5)
    used_up = compose([Charge(led), Charge(fixed=(1.0, DELTA, "node", "add_remove"))], DELTA)
    assert math.isinf(used_up["node"].epsilon)


# --- the store ---------------------------------------------------------------------------


SHA = "ab" * 32


def _store(tmp_path: Path) -> BudgetStore:
    return BudgetStore(tmp_path / "budget.sqlite")


def _eps(led: Ledger, delta: float = DELTA) -> float:
    return compose([Charge(led)], delta)["node"].epsilon


def test_reservation_refused_past_the_budget_names_spent_requested_remaining(
        tmp_path: Path) -> None:
    s = _store(tmp_path)
    one = _eps(dp_sgd(1.0))
    s.set_budget(SHA, "toy", "/data/toy", epsilon=1.1 * one, delta=DELTA)
    first = s.reserve(SHA, "toy", "/data/toy", Charge(dp_sgd(1.0)), method="dp-mlp",
                      run_id="r1", delta=DELTA, epsilon=one)
    s.mark_spent(first)
    with pytest.raises(BudgetExceeded) as err:
        s.reserve(SHA, "toy", "/data/toy", Charge(dp_sgd(1.0)), method="dp-mlp",
                  run_id="r2", delta=DELTA, epsilon=one)
    e = err.value
    assert e.spent == pytest.approx(one) and e.requested == pytest.approx(one)
    assert e.cumulative > e.budget and e.unit == "node"
    msg = str(e)
    assert f"spent ε = {one:.4g}" in msg and "remaining ε" in msg and "toy" in msg
    assert "Nothing was trained" in msg
    import pickle  # Dask sends it back from a worker

    assert str(pickle.loads(pickle.dumps(e))) == msg
    summary = s.summary(s.resolve(SHA))
    assert [r.status for r in summary.records] == ["spent"]  # the refusal recorded nothing
    # A smaller release still fits, and an edge-level one is another unit's budget.
    s.reserve(SHA, "toy", "/data/toy", Charge(dp_sgd(6.0, steps=5)), method="dp-mlp",
              run_id="r3", delta=DELTA, epsilon=None)
    s.reserve(SHA, "toy", "/data/toy", Charge(pma(3.0)), method="gap-edp", run_id="r4",
              delta=DELTA, epsilon=None)
    assert set(s.summary(s.resolve(SHA)).spent) == {"edge", "node"}


def test_reserved_counts_and_only_unreleased_reservations_are_given_back(
        tmp_path: Path) -> None:
    s = _store(tmp_path)
    one = _eps(dp_sgd(1.0))
    s.set_budget(SHA, "toy", None, epsilon=1.1 * one, delta=DELTA)
    r1 = s.reserve(SHA, "toy", None, Charge(dp_sgd(1.0)), method="m", run_id="a",
                   delta=DELTA, epsilon=one)
    with pytest.raises(BudgetExceeded):  # an in-flight reservation counts
        s.reserve(SHA, "toy", None, Charge(dp_sgd(1.0)), method="m", run_id="b",
                  delta=DELTA, epsilon=one)
    assert s.release_unused(r1, "failed before any release")
    r2 = s.reserve(SHA, "toy", None, Charge(dp_sgd(1.0)), method="m", run_id="c",
                   delta=DELTA, epsilon=one)
    s.mark_spent(r2)
    assert not s.release_unused(r2, "too late: it released something")
    statuses = [r.status for r in s.summary(s.resolve(SHA)).records]
    assert statuses == ["released-unused", "spent"]


def _reserve_in_process(path: str, barrier, out) -> None:  # type: ignore[no-untyped-def]
    s = BudgetStore(path)
    barrier.wait()
    try:
        s.reserve(SHA, "toy", None, Charge(dp_sgd(1.0)), method="m",
                  run_id=f"p{mp.current_process().pid}", delta=DELTA, epsilon=None)
        out.put("ok")
    except BudgetExceeded:
        out.put("refused")


def test_two_processes_reserving_at_once_exactly_one_fits(tmp_path: Path) -> None:
    path = tmp_path / "budget.sqlite"
    s = BudgetStore(path)
    s.set_budget(SHA, "toy", None, epsilon=1.1 * _eps(dp_sgd(1.0)), delta=DELTA)
    ctx = mp.get_context("fork")  # no re-import of torch in the children
    barrier, out = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=_reserve_in_process, args=(str(path), barrier, out))
             for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    assert sorted(out.get(timeout=5) for _ in procs) == ["ok", "refused"]
    assert [r.status for r in s.summary(s.resolve(SHA)).records] == ["reserved"]


def test_new_version_of_a_folder_shares_its_budget(tmp_path: Path) -> None:
    s = _store(tmp_path)
    s.set_budget(SHA, "toy", "/data/toy", epsilon=5.0, delta=DELTA)
    r = s.reserve(SHA, "toy", "/data/toy", Charge(dp_sgd(1.0)), method="m", run_id="a",
                  delta=DELTA, epsilon=None)
    s.mark_spent(r)
    other = "cd" * 32  # re-ingested: new content, same folder
    assert s.register(other, "toy", "/data/toy") == s.resolve(SHA)
    s.reserve(other, "toy", "/data/toy", Charge(dp_sgd(1.0)), method="m", run_id="b",
              delta=DELTA, epsilon=None)
    summary = s.summary(s.resolve(other))
    assert len(summary.datasets) == 2
    assert summary.spent["node"].epsilon == pytest.approx(
        compose([Charge(dp_sgd(1.0)), Charge(dp_sgd(1.0))], DELTA)["node"].epsilon)
    assert s.register("ef" * 32, "else", "/data/else") == "ef" * 32  # another folder


def test_reset_starts_a_new_epoch_and_is_logged(tmp_path: Path) -> None:
    s = _store(tmp_path)
    one = _eps(dp_sgd(1.0))
    s.set_budget(SHA, "toy", None, epsilon=1.1 * one, delta=DELTA)
    s.mark_spent(s.reserve(SHA, "toy", None, Charge(dp_sgd(1.0)), method="m", run_id="a",
                           delta=DELTA, epsilon=one))
    bid = s.resolve(SHA[:10])
    s.reset(bid, "new consent round")
    s.reserve(SHA, "toy", None, Charge(dp_sgd(1.0)), method="m", run_id="b",
              delta=DELTA, epsilon=one)  # fits again
    now = s.summary(bid)
    assert len(now.records) == 1 and len(s.summary(bid, all_epochs=True).records) == 2
    assert [e["action"] for e in now.log] == ["set", "reset"]
    assert "new consent round" in now.log[-1]["detail"]


def test_timeline_is_the_running_composition(tmp_path: Path) -> None:
    s = _store(tmp_path)
    for i, z in enumerate((1.0, 2.0, 1.5)):
        s.mark_spent(s.reserve(SHA, "toy", None, Charge(dp_sgd(z)), method="m",
                               run_id=str(i), delta=DELTA, epsilon=None))
    pts = s.timeline(s.resolve(SHA))["node"]
    eps = [e for _t, e in pts]
    assert len(eps) == 3 and np.all(np.diff(eps) > 0)
    assert eps[-1] == pytest.approx(s.summary(s.resolve(SHA)).spent["node"].epsilon)


def test_unknown_dataset_and_bad_budget_are_refused(tmp_path: Path) -> None:
    s = _store(tmp_path)
    with pytest.raises(Exception, match="no dataset 'nope'"):
        s.resolve("nope")
    with pytest.raises(Exception, match="budget epsilon"):
        s.set_budget(SHA, "toy", None, epsilon=math.inf, delta=DELTA)
    with pytest.raises(Exception, match="budget delta"):
        s.set_budget(SHA, "toy", None, epsilon=1.0, delta=1.0)


def test_selection_covers_its_candidates_only_within_its_own_flow_run(tmp_path: Path) -> None:
    """A later run of a configuration a private selection trained (say, retraining the
    selected one on a schedule) is a new release: it must not adopt the selection's
    record (and so skip the budget check)."""
    s = _store(tmp_path)
    rid = s.reserve(SHA, "toy", None, Charge(fixed=(1.0, 1e-6, "node", "add_remove")),
                    method="m (private selection)", run_id="sweeprun:tuning:tok",
                    delta=1e-6, epsilon=1.0, covers=["K1", "K2"])
    assert s.find_reservation(SHA, "sweeprun:K1:tok", "K1", "tok") == rid
    assert s.find_reservation(SHA, "retrainrun:K1:tok", "K1", "tok") is None
    assert s.find_reservation(SHA, "sweeprun:K3:tok", "K3", "tok") is None
    # only the selection's own candidates (its owner token) adopt it
    assert s.find_reservation(SHA, "sweeprun:K1:x", "K1") is None
    assert s.find_reservation(SHA, "sweeprun:K1:x", "K1", "x") is None
