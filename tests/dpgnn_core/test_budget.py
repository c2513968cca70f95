"""The per-dataset privacy odometer: composition per unit, the budget check, concurrency,
reservations given back, resets and dataset versions (dpgnn_core.budget)."""

from __future__ import annotations

import contextlib
import math
import multiprocessing as mp
import queue
from pathlib import Path

import numpy as np
import pytest
from scipy.special import logsumexp

from dpgnn_core.budget import (
    BudgetExceeded,
    BudgetStore,
    Charge,
    Filter,
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
from dpgnn_core.privacy.odometer import cost, group2_rdp
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


def test_every_release_counts_in_every_unit_it_bears_on() -> None:
    """Issue 26 §2: a node-level release (node with its edges) also bounds an edge, at
    group size 2, so the edge unit counts it; an edge-level release bounds nothing about a
    node (it reads features without noise): the node unit is ∞, not a separate odometer
    that ignores it (the old code reported the edge releases alone for edge and the node
    release alone for node)."""
    got = compose([Charge(pma(2.0)), Charge(dp_sgd(1.0)), Charge(pma(3.0))], DELTA)
    assert set(got) == {"edge", "node"}
    edge_only = compose([Charge(pma(2.0)), Charge(pma(3.0))], DELTA)["edge"].epsilon
    assert got["edge"].epsilon > edge_only
    node_as_edge = group2_rdp(RdpAccountant().rdp(dp_sgd(1.0)))
    pmas = RdpAccountant().rdp(pma(2.0)) + RdpAccountant().rdp(pma(3.0))
    orders = RdpAccountant().orders
    assert got["edge"].epsilon == pytest.approx(
        epsilon_from_rdp(orders, pmas + node_as_edge, DELTA)[0])
    assert math.isinf(got["node"].epsilon) and got["node"].unbounded == ("edge/add_remove",)


def test_node_level_dp_gnn_is_its_own_unit_never_the_node_unit() -> None:
    """Issue 26 §7: DP-GNN's --level node (replace-one, its out-edge row) protects neither
    the node with its in-edges nor add/remove: it is unit node_row. The old code composed
    it into `node` with DP-MLP's add/remove runs; here `node` is ∞ and `node_row` counts
    the add/remove run at group size 2."""
    a, r = dp_sgd(1.0), uniform(1.5)
    got = compose([Charge(a), Charge(r)], DELTA)
    assert set(got) == {"node", "node_row"}
    assert math.isinf(got["node"].epsilon)
    orders = RdpAccountant().orders
    expected = epsilon_from_rdp(orders, group2_rdp(RdpAccountant().rdp(a))
                                + RdpAccountant().rdp(r), DELTA)[0]
    assert got["node_row"].epsilon == pytest.approx(expected)
    assert got["node_row"].epsilon > RdpAccountant().epsilon(a, DELTA)
    # and node_row bounds node features at group size 1
    assert compose([Charge(r)], DELTA, ["node_feature"])["node_feature"].epsilon == \
        pytest.approx(RdpAccountant().epsilon(r, DELTA))


@pytest.mark.parametrize("z", [0.7, 1.0, 2.0, 5.0])
def test_add_remove_to_replace_is_at_least_the_exact_replace_epsilon(z: float) -> None:
    """A Gaussian release of sensitivity 1 under add/remove has sensitivity 2 under
    replace-one (a clipped sum: one record out, another in), i.e. multiplier z/2. The
    group-privacy conversion must never claim less than that exact ε (it would if the
    factor 2 were dropped); the generic conversion (weak triangle inequality), used for
    every non-Gaussian mechanism, must not either."""
    led = pma(z, hops=1, level="node_feature")
    orders = RdpAccountant().orders
    exact = epsilon_from_rdp(orders, rdp_gaussian(z / 2.0, orders, 1), DELTA)[0]
    own = epsilon_from_rdp(orders, rdp_gaussian(z, orders, 1), DELTA)[0]
    conv = compose([Charge(led)], DELTA)["node_feature"].epsilon
    generic = epsilon_from_rdp(orders, group2_rdp(rdp_gaussian(z, orders, 1)), DELTA)[0]
    assert conv == pytest.approx(exact) and cost(Charge(led), "node_feature").mu2 == \
        pytest.approx(4.0 / z ** 2)
    assert generic >= exact * (1 - 1e-9) and conv > own
    assert generic <= 3.0 * exact + 1.0


@pytest.mark.parametrize("seed", range(6))
def test_group2_rdp_bounds_the_renyi_divergence_of_every_chain(seed: int) -> None:
    """The weak triangle inequality behind group2_rdp, on adversarial discrete chains
    P ~ Q ~ R: the bound from the curves of (P, Q) and (Q, R) (their worst at every order)
    is never below D_α(P || R)."""
    rng = np.random.default_rng(seed)
    p, q, r = (rng.dirichlet(np.full(5, 0.3)) for _ in range(3))
    orders = RdpAccountant().orders

    def renyi(a: np.ndarray, b: np.ndarray, alpha: np.ndarray) -> np.ndarray:
        terms = alpha[:, None] * np.log(a)[None, :] + (1 - alpha[:, None]) * np.log(b)[None, :]
        return np.asarray(logsumexp(terms, axis=1) / (alpha - 1))

    curve = np.maximum(renyi(p, q, orders), renyi(q, r, orders))
    bound = group2_rdp(curve)
    ok = np.isfinite(bound)
    assert ok.sum() > 50
    assert np.all(renyi(p, r, orders)[ok] <= bound[ok] * (1 + 1e-9) + 1e-12)


def test_fixed_charges_take_their_delta_and_add_their_epsilon() -> None:
    led = dp_sgd(1.0)
    got = compose([Charge(led), Charge(fixed=(1.5, 4e-6, "node", "add_remove"))], DELTA)
    base = compose([Charge(led)], DELTA - 4e-6)["node"].epsilon
    assert got["node"].epsilon == pytest.approx(base + 1.5)
    used_up = compose([Charge(led), Charge(fixed=(1.0, DELTA, "node", "add_remove"))], DELTA)
    assert math.isinf(used_up["node"].epsilon)


def test_fixed_charges_alone_must_fit_the_delta() -> None:
    """Issue 26 §3: three fixed charges at δ = 7e-4 each were shown as ε = 6 "at 1e-6"
    (the old code checked their δ only when a ledger was recorded too)."""
    three = [Charge(fixed=(2.0, 7e-4, "node", "add_remove"))] * 3
    assert math.isinf(compose(three, 1e-6)["node"].epsilon)
    assert compose(three, 3e-3)["node"].epsilon == pytest.approx(6.0)


# --- the store ---------------------------------------------------------------------------


SHA = "ab" * 32


def _store(tmp_path: Path) -> BudgetStore:
    return BudgetStore(tmp_path / "budget.sqlite")


def _eps(led: Ledger, delta: float = DELTA) -> float:
    return compose([Charge(led)], delta)["node"].epsilon


def _need(charges: list[Charge], unit: str = "node", delta: float = DELTA) -> float:
    """The smallest budget ε (to 1e-4) whose filter admits ``charges``."""
    lo, hi = 0.01, 100.0
    while hi - lo > 1e-4:
        mid = 0.5 * (lo + hi)
        if Filter.register(mid, delta).check(charges, unit).admits:
            hi = mid
        else:
            lo = mid
    return hi


def test_reservation_refused_past_the_budget_names_spent_requested_remaining(
        tmp_path: Path) -> None:
    s = _store(tmp_path)
    one = _eps(dp_sgd(1.0))
    budget = 1.01 * _need([Charge(dp_sgd(1.0))])
    s.set_budget(SHA, "toy", "/data/toy", epsilon=budget, delta=DELTA)
    first = s.reserve(SHA, "toy", "/data/toy", Charge(dp_sgd(1.0)), method="dp-mlp",
                      run_id="r1", delta=DELTA, epsilon=one)
    s.mark_spent(first)
    with pytest.raises(BudgetExceeded) as err:  # fits post hoc, not the filter
        s.reserve(SHA, "toy", "/data/toy", Charge(dp_sgd(1.0)), method="dp-mlp",
                  run_id="r2", delta=DELTA, epsilon=one)
    e = err.value
    assert e.spent == pytest.approx(one) and e.requested == pytest.approx(one)
    assert e.cumulative <= e.budget and "privacy filter" in str(e)
    with pytest.raises(BudgetExceeded) as err:  # past the budget even post hoc
        s.reserve(SHA, "toy", "/data/toy", Charge(dp_sgd(0.6)), method="dp-mlp",
                  run_id="r2", delta=DELTA, epsilon=one)
    e = err.value
    assert e.spent == pytest.approx(one) and e.requested == pytest.approx(_eps(dp_sgd(0.6)))
    assert e.cumulative > e.budget and e.unit == "node"
    msg = str(e)
    assert f"spent ε = {one:.4g}" in msg and "remaining ε" in msg and "toy" in msg
    assert "Nothing was trained" in msg
    import pickle  # Dask sends it back from a worker

    assert str(pickle.loads(pickle.dumps(e))) == msg
    summary = s.summary(s.resolve(SHA))
    assert [r.status for r in summary.records] == ["spent"]  # the refusal recorded nothing
    # A smaller release still fits; an edge-level one bounds nothing about the node unit
    # the budget protects (issue 26 §2: the old code admitted it as "another unit's
    # budget", an unsound double spend).
    s.reserve(SHA, "toy", "/data/toy", Charge(dp_sgd(6.0, steps=5)), method="dp-mlp",
              run_id="r3", delta=DELTA, epsilon=None)
    with pytest.raises(BudgetExceeded, match="bound nothing about it") as err:
        s.reserve(SHA, "toy", "/data/toy", Charge(pma(3.0)), method="gap-edp", run_id="r4",
                  delta=DELTA, epsilon=None)
    assert err.value.unit in ("node", "node_row", "node_feature")
    shown = s.summary(s.resolve(SHA))
    assert set(shown.spent) == {"edge", "node", "node_row", "node_feature"}  # one line each
    assert all(f.admits is not None for f in shown.filter.values())


def test_reserved_counts_and_only_unreleased_reservations_are_given_back(
        tmp_path: Path) -> None:
    s = _store(tmp_path)
    one = _eps(dp_sgd(1.0))
    s.set_budget(SHA, "toy", None, epsilon=1.01 * _need([Charge(dp_sgd(1.0))]), delta=DELTA)
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
    """One reservation; puts "ok", "refused" or the traceback, then ends the process with
    0, or 1 after a traceback, itself. The child is forked from a test worker: what
    multiprocessing runs after the target (the finalizers and exit handlers the worker had
    registered, before the child exits) is the worker's, not the budget's, and in two full
    runs it turned both children's exit codes to 1 after they had reported "ok" and
    "refused" (its traceback went to the worker's captured stderr, in the child's memory)."""
    import os
    import traceback

    code = 1
    try:
        s = BudgetStore(path)
        barrier.wait()
        try:
            s.reserve(SHA, "toy", None, Charge(dp_sgd(1.0)), method="m",
                      run_id=f"p{mp.current_process().pid}", delta=DELTA, epsilon=None)
            out.put("ok")
        except BudgetExceeded:
            out.put("refused")
        code = 0
    except BaseException:  # the test shows it, rather than an exit code alone
        out.put(traceback.format_exc())
    finally:
        out.close()
        out.join_thread()  # what was put is in the pipe
        os._exit(code)


def test_two_processes_reserving_at_once_exactly_one_fits(tmp_path: Path) -> None:
    path = tmp_path / "budget.sqlite"
    s = BudgetStore(path)
    s.set_budget(SHA, "toy", None, epsilon=1.01 * _need([Charge(dp_sgd(1.0))]), delta=DELTA)
    # Forked: no re-import per child. Each child reports its result and ends itself
    # (``_reserve_in_process``): an exit code of 1 is a traceback in ``got``.
    ctx = mp.get_context("fork")
    barrier, out = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=_reserve_in_process, args=(str(path), barrier, out))
             for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    got: list[str] = []
    with contextlib.suppress(queue.Empty):  # a child killed outright said nothing
        for _ in procs:
            got.append(out.get(timeout=5))
    got.sort()
    assert [p.exitcode for p in procs] == [0, 0], got
    assert got == ["ok", "refused"]
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
    s.set_budget(SHA, "toy", None, epsilon=1.01 * _need([Charge(dp_sgd(1.0))]), delta=DELTA)
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



# --- issue 26: adaptive composition and one guarantee per unit ---------------------------


def _gauss(z: float, level: str = "node") -> Ledger:
    return Ledger().add(GaussianEvent(noise_multiplier=z, level=level))


@pytest.mark.parametrize("branch", ["poisson", "gaussian"])
def test_adaptive_counterexample_is_refused(tmp_path: Path, branch: str) -> None:
    """Issue 26 §1: run 1 a Gaussian (z = 2); run 2 chosen after it between a
    Poisson-subsampled Gaussian step (q = 0.02, z = 0.5) and a Gaussian (z = 1.119). Each
    sequence alone composes to ε ≤ 4.5 at δ = 1e-5 post hoc (the old code admitted both),
    but the adaptive mechanism that picks the branch after run 1 has ε = 4.617: admission
    by the minimum over orders (or PLD) of the fixed sequence is not a filter. The filter
    refuses run 2 whichever branch is chosen."""
    second = (Ledger().add(PoissonGaussianEvent(noise_multiplier=0.5, sampling_rate=0.02,
                                                steps=1, level="node"),
                           sampler_scheme="poisson")
              if branch == "poisson" else _gauss(1.119))
    assert compose([Charge(_gauss(2.0)), Charge(second)], 1e-5)["node"].epsilon <= 4.5
    s = _store(tmp_path)
    s.set_budget(SHA, "toy", None, epsilon=4.5, delta=1e-5)
    s.mark_spent(s.reserve(SHA, "toy", None, Charge(_gauss(2.0)), method="m", run_id="1",
                           delta=1e-5, epsilon=None))
    with pytest.raises(BudgetExceeded, match="privacy filter"):
        s.reserve(SHA, "toy", None, Charge(second), method="m", run_id="2", delta=1e-5,
                  epsilon=None)


def test_filter_is_fixed_at_budget_set_and_stored(tmp_path: Path) -> None:
    """The orders, bounds and μ the filter admits with are registered when the budget is
    set (not chosen from the runs), stored, and logged."""
    s = _store(tmp_path)
    s.set_budget(SHA, "toy", None, epsilon=4.5, delta=1e-5)
    b = s.summary(s.resolve(SHA)).budget
    assert b.filter == Filter.register(4.5, 1e-5)
    assert len(b.filter.orders) >= 2 and b.filter.mu > 0
    assert "privacy filter" in s.summary(s.resolve(SHA)).log[-1]["detail"]
    flt = b.filter  # each component converts to (4.5, its δ share)
    for o, bound in zip(flt.orders, flt.bounds, strict=True):
        assert epsilon_from_rdp(np.array([o]), np.array([bound]),
                                flt.component_delta)[0] <= 4.5 + 1e-9
    from dpgnn_core.privacy.odometer import gdp_delta

    assert gdp_delta(flt.mu, 4.5) <= flt.component_delta
    assert flt.component_delta * (len(flt.orders) + 1) + flt.tv * (1 + math.exp(4.5)) \
        <= 1e-5 * (1 + 1e-12)


def _node_feature_run(z: float) -> Ledger:
    return Ledger().add(UniformGaussianEvent(noise_multiplier=z, sampling_rate=0.05, steps=40,
                                             level="node_feature"),
                        sampler_scheme="fixed_size_without_replacement")


@pytest.mark.parametrize("units", [None, ["node_feature"]])
def test_node_runs_then_a_node_feature_run_is_refused(tmp_path: Path, units) -> None:
    """Issue 26 §2: DP-MLP runs (unit node) spend most of a budget; a DP-GCN-like run at
    node_feature that alone fits the budget is then refused: with no unit named, the budget
    protects the first run's unit (node), which a node_feature release bounds nothing
    about; with node_feature named, the node runs count there at group size 2 (a node's
    features replaced = the node removed, then added back). The old code admitted it as
    another unit's odometer."""
    s = _store(tmp_path)
    budget = 8.0
    s.set_budget(SHA, "toy", None, epsilon=budget, delta=DELTA,
                 **({"units": units} if units else {}))
    n = 0
    with pytest.raises(BudgetExceeded):
        for n in range(1, 60):
            s.mark_spent(s.reserve(SHA, "toy", None, Charge(dp_sgd(1.2, steps=20)),
                                   method="dp-mlp", run_id=f"m{n}", delta=DELTA,
                                   epsilon=None))
    assert n >= 2
    gcn = _node_feature_run(1.2)
    assert compose([Charge(gcn)], DELTA)["node_feature"].epsilon < budget / 2
    with pytest.raises(BudgetExceeded) as err:
        s.reserve(SHA, "toy", None, Charge(gcn), method="dp-gcn", run_id="g", delta=DELTA,
                  epsilon=None)
    assert err.value.unit == (units or ["node"])[0]
    shown = s.summary(s.resolve(SHA)).spent
    assert set(shown) == {"edge", "node", "node_row", "node_feature"}
    assert shown["node_feature"].epsilon > shown["node"].epsilon  # group size 2


def test_fixed_charge_whose_delta_does_not_fit_is_refused(tmp_path: Path) -> None:
    """Issue 26 §3: a private selection's fixed (ε, δ) at δ = 4.9e-5 was admitted under a
    budget at δ = 1e-5 and shown at 1e-5. A fixed (ε, δ) has no RDP curve, so the filter
    cannot admit it at all (selections now record their curve)."""
    s = _store(tmp_path)
    s.set_budget(SHA, "toy", None, epsilon=30.0, delta=1e-5)
    with pytest.raises(BudgetExceeded, match="fixed"):
        s.reserve(SHA, "toy", None, Charge(fixed=(1.0, 4.9e-5, "node", "add_remove")),
                  method="m (private selection)", run_id="t", delta=4.9e-5, epsilon=1.0)


def test_refusal_of_an_unbounded_release_names_no_remaining_epsilon(tmp_path: Path) -> None:
    """Issue 26 §3: a refusal read "cumulative inf > budget 30 … remaining ε = 27", which
    offers ε the run cannot use. A release with no finite ε is refused saying why, without
    a remaining ε."""
    s = _store(tmp_path)
    s.set_budget(SHA, "toy", None, epsilon=30.0, delta=DELTA)
    s.mark_spent(s.reserve(SHA, "toy", None, Charge(dp_sgd(1.0)), method="m", run_id="a",
                           delta=DELTA, epsilon=None))
    with pytest.raises(BudgetExceeded) as err:
        s.reserve(SHA, "toy", None, Charge(fixed=(math.inf, 0.0, "node", "add_remove")),
                  method="m", run_id="b", delta=DELTA, epsilon=math.inf)
    msg = str(err.value)
    assert "bounds nothing about the protected unit node" in msg and "insecure" in msg
    assert "requests ε = inf" not in msg and "remaining ε" not in msg


def test_k_neighbor_release_counts_as_an_edge_release(tmp_path: Path) -> None:
    """DPDGC-KNDP's events (level k_neighbor) are read as edge-level guarantees at group
    size 1 (every edge neighbour is a k-neighbour neighbour): they compose into the edge
    unit, an edge budget refuses them once spent, and they bound nothing about nodes."""
    from dpgnn_core.privacy.odometer import group_size, source_unit

    assert source_unit("k_neighbor", "add_remove") == ("edge", 1)
    assert group_size("k_neighbor", "add_remove", "node") == 0
    kn = Ledger().add(GaussianEvent(noise_multiplier=3.0, level="k_neighbor"))
    both = compose([Charge(kn), Charge(_gauss(1.0, level="edge"))], DELTA)
    one = compose([Charge(_gauss(1.0, level="edge"))], DELTA)
    assert one["edge"].epsilon < both["edge"].epsilon < math.inf  # it counts there
    s = _store(tmp_path)
    s.set_budget(SHA, "toy", None, epsilon=4.0, delta=DELTA)
    with pytest.raises(BudgetExceeded):
        for n in range(50):
            s.mark_spent(s.reserve(SHA, "toy", None, Charge(kn), method="dpdgc-kndp",
                                   run_id=f"k{n}", delta=DELTA, epsilon=None))
    assert n >= 1


def test_a_release_that_bounds_nothing_about_the_protected_unit_says_so(tmp_path: Path
                                                                        ) -> None:
    """Issue 36 §2: after a node-level release (the epoch's first: the protected unit is
    node), a node_feature release bounds nothing about node. The refusal says so, not
    "requests ε = inf"; a budget that names node_feature (which the node-level release
    bounds too) admits both, as the user guide's retraining example does."""
    s = _store(tmp_path)
    s.set_budget(SHA, "toy", None, epsilon=30.0, delta=DELTA)
    s.mark_spent(s.reserve(SHA, "toy", None, Charge(dp_sgd(1.0)), method="dp-mlp",
                           run_id="a", delta=DELTA, epsilon=None))
    feature_level = Charge(dp_sgd(1.0, level="node_feature"))
    with pytest.raises(BudgetExceeded) as err:
        s.reserve(SHA, "toy", None, feature_level, method="dp-gcn", run_id="b",
                  delta=DELTA, epsilon=None)
    msg = str(err.value)
    assert "this run's release bounds nothing about the protected unit node" in msg
    assert "requests ε = inf" not in msg and "--unit" in msg
    # Naming the unit after a release replaces the budget: a new epoch (issue 33 §1).
    s.set_budget(SHA, "toy", None, epsilon=30.0, delta=DELTA, units=["node_feature"],
                 replace=True, reason="protect node features")
    s.mark_spent(s.reserve(SHA, "toy", None, Charge(dp_sgd(1.0)), method="dp-mlp",
                           run_id="c", delta=DELTA, epsilon=None))
    s.mark_spent(s.reserve(SHA, "toy", None, feature_level, method="dp-gcn", run_id="b",
                           delta=DELTA, epsilon=None))
    assert [r.method for r in s.summary(s.resolve(SHA)).records][-2:] == ["dp-mlp", "dp-gcn"]


@pytest.mark.parametrize("epsilon", [8.0, 709.0, 1000.0, 1e5])
def test_a_large_budget_epsilon_registers_without_overflow(epsilon: float) -> None:
    """`budget set --epsilon 1000` raised OverflowError (e^ε in the filter's TV share and
    in μ-GDP's δ); the terms are now written so that they cannot overflow, and they agree
    with the direct formula where it is finite."""
    import math

    from scipy.special import ndtr

    from dpgnn_core.privacy.odometer import Filter, gdp_delta

    f = Filter.register(epsilon, 1e-3)
    assert f.epsilon == epsilon and all(math.isfinite(b) for b in f.bounds)
    for mu in (0.5, 3.0, 40.0):
        direct = (float(ndtr(-epsilon / mu + mu / 2) - math.exp(epsilon) * ndtr(
            -epsilon / mu - mu / 2)) if epsilon < 700 else None)
        got = gdp_delta(mu, epsilon)
        assert 0.0 <= got <= 1.0
        if direct is not None:
            assert got == pytest.approx(direct, rel=1e-9, abs=1e-15)
