"""The statistics of the empirical privacy audit (dpgnn_core.audit.bounds): the one-run
bound of Steinke, Nasr & Jagielski (2023) against an independent binomial computation,
the paper's published values, monotonicity, calibration by simulation, refusals; the
multi-run bound against the Clopper–Pearson limit."""

from __future__ import annotations

import itertools
import json
import math
import re

import numpy as np
import pytest
from scipy import stats

from dpgnn_core.audit import (
    AuditBound,
    clopper_pearson,
    multi_run_audit,
    multi_run_epsilon_lower_bound,
    one_run_audit,
    one_run_epsilon_lower_bound,
    one_run_p_value,
)
from dpgnn_core.errors import PrivacyError


def _rr_accuracy(eps: float) -> float:
    return math.exp(eps) / (1.0 + math.exp(eps))


def _tail(r: int, v: int, eps: float) -> float:
    """P[Binom(r, e^eps / (1 + e^eps)) >= v], summed term by term from the pmf."""
    q = _rr_accuracy(eps)
    return math.fsum(math.comb(r, k) * q**k * (1.0 - q) ** (r - k) for k in range(v, r + 1))


# ------------------------------------------------------------------ one run: exact values


@pytest.mark.parametrize(("m", "r", "v", "beta"), [
    (100, 100, 80, 0.05),
    (1000, 200, 150, 0.05),
    (1000, 50, 50, 0.01),
    (500, 300, 170, 0.1),
])
def test_pure_dp_matches_binomial_tail(m: int, r: int, v: int, beta: float) -> None:
    eps = one_run_epsilon_lower_bound(m, r, v, delta=0.0, beta=beta)
    assert eps > 0.0
    assert _tail(r, v, eps) <= beta
    assert _tail(r, v, eps + 1e-6) > beta


@pytest.mark.parametrize(("m", "r", "v", "delta", "published"), [
    (1000, 100, 75, 1e-4, 0.673),  # arXiv:2305.08846v1, Appendix D's worked example
    (100000, 1510, 1439, 1e-5, 2.675),  # ibid., Section 7 (printed truncated, 2.6758...)
])
def test_reproduces_the_papers_values(m: int, r: int, v: int, delta: float,
                                      published: float) -> None:
    assert one_run_epsilon_lower_bound(m, r, v, delta, 0.05) == pytest.approx(published,
                                                                               abs=1e-3)


def test_approximate_dp_p_value_by_hand() -> None:
    # (2) with the maximum written out: f(v) + 2 m delta max_i P[v - i <= W < v] / i
    m, r, v, eps, delta = 50, 20, 15, 0.7, 1e-3
    q = _rr_accuracy(eps)
    pmf = [math.comb(r, k) * q**k * (1 - q) ** (r - k) for k in range(r + 1)]
    alpha = max(math.fsum(pmf[v - i:v]) / i for i in range(1, m + 1) if v - i >= 0)
    alpha = max(alpha, max((1.0 - _tail(r, v, eps)) / i for i in range(v, m + 1)))
    expected = min(1.0, _tail(r, v, eps) + 2 * m * delta * alpha)
    assert one_run_p_value(m, r, v, eps, delta) == pytest.approx(expected, rel=1e-10)
    assert one_run_p_value(m, r, v, eps, 0.0) == pytest.approx(_tail(r, v, eps), rel=1e-10)


# ------------------------------------------------------------------ one run: monotonicity


def test_more_correct_guesses_give_a_larger_bound() -> None:
    bounds = [one_run_epsilon_lower_bound(1000, 200, v, 1e-5) for v in range(100, 201, 10)]
    assert all(a <= b for a, b in itertools.pairwise(bounds))
    assert bounds[0] == 0.0 < bounds[-1]
    assert all(a < b for a, b in itertools.pairwise(bounds[3:]))


@pytest.mark.parametrize(("m", "r", "v"), [(1000, 200, 170), (200, 200, 190), (5000, 500, 400)])
def test_more_delta_gives_a_smaller_or_equal_bound(m: int, r: int, v: int) -> None:
    bounds = [one_run_epsilon_lower_bound(m, r, v, d) for d in (0.0, 1e-6, 1e-5, 1e-4, 1e-3)]
    assert all(a >= b for a, b in itertools.pairwise(bounds))
    assert bounds[0] > bounds[-1]


@pytest.mark.parametrize("delta", [0.0, 1e-5])
def test_higher_confidence_gives_a_smaller_or_equal_bound(delta: float) -> None:
    bounds = [one_run_epsilon_lower_bound(1000, 300, 240, delta, b)
              for b in (0.2, 0.1, 0.05, 0.01, 0.001)]
    assert all(a >= b for a, b in itertools.pairwise(bounds))
    assert bounds[0] > bounds[-1]


# ------------------------------------------------------------------ one run: calibration


def _simulated_correct_guesses(rng: np.random.Generator, trials: int, m: int, r: int,
                               eps0: float, leak: float) -> np.ndarray:
    """Correct guesses per trial against a mechanism that, for each canary independently,
    reveals its membership bit with probability ``leak`` and otherwise releases it through
    eps0-randomized response; it is (eps0, leak)-DP in each canary. The attacker guesses
    the released bit for the first r canaries and abstains on the rest."""
    member = rng.integers(0, 2, size=(trials, m), dtype=np.int8)
    flip = rng.random((trials, m)) >= _rr_accuracy(eps0)
    flip &= rng.random((trials, m)) >= leak
    released = member ^ flip.astype(np.int8)
    return np.asarray((released[:, :r] == member[:, :r]).sum(axis=1))


@pytest.mark.parametrize(("eps0", "delta"), [(1.0, 0.0), (2.0, 1e-3)])
def test_bound_exceeds_the_true_epsilon_in_at_most_beta_of_trials(eps0: float,
                                                                 delta: float) -> None:
    rng = np.random.default_rng(20230515)
    trials, m, r, beta = 2000, 1000, 400, 0.05
    correct = _simulated_correct_guesses(rng, trials, m, r, eps0, leak=delta)
    bound_of = {int(v): one_run_epsilon_lower_bound(m, r, int(v), delta, beta)
                for v in np.unique(correct)}
    bounds = np.array([bound_of[int(v)] for v in correct])
    exceed = int((bounds > eps0).sum())
    assert exceed <= beta * trials + 3.0 * math.sqrt(trials * beta * (1 - beta))
    # and the audit has power: typical bounds are well above 0
    assert float(np.median(bounds)) > 0.5 * eps0


def test_large_epsilon_all_correct_gives_a_bound_well_above_one() -> None:
    rng = np.random.default_rng(7)
    correct = _simulated_correct_guesses(rng, 1, 1000, 1000, eps0=12.0, leak=0.0)
    assert int(correct[0]) == 1000  # a miss has probability about 6e-3 at eps0 = 12
    bound = one_run_epsilon_lower_bound(1000, 1000, 1000, delta=1e-5)
    assert bound > 4.0
    # all r guesses right: the pure-DP bound solves q^r = beta
    assert one_run_epsilon_lower_bound(1000, 1000, 1000) == pytest.approx(
        math.log(0.05 ** (1 / 1000) / (1 - 0.05 ** (1 / 1000))), abs=1e-6)


# ------------------------------------------------------------------ one run: edge cases


@pytest.mark.parametrize(("m", "r", "v"), [(100, 0, 0), (100, 50, 0), (100, 100, 50), (1, 1, 1)])
def test_no_evidence_gives_zero(m: int, r: int, v: int) -> None:
    assert one_run_epsilon_lower_bound(m, r, v, 1e-5) == 0.0


@pytest.mark.parametrize(("kwargs", "name", "value"), [
    ({"m": 10, "r": 5, "v": 6}, "v", "6"),
    ({"m": 10, "r": 11, "v": 3}, "r", "11"),
    ({"m": 0, "r": 0, "v": 0}, "m", "0"),
    ({"m": 10, "r": -1, "v": 0}, "r", "-1"),
    ({"m": 10, "r": 5, "v": 2.5}, "v", "2.5"),
    ({"m": 10, "r": 5, "v": 3, "delta": -0.1}, "delta", "-0.1"),
    ({"m": 10, "r": 5, "v": 3, "delta": 1.0}, "delta", "1.0"),
    ({"m": 10, "r": 5, "v": 3, "beta": 0.0}, "beta", "0.0"),
    ({"m": 10, "r": 5, "v": 3, "beta": 1.0}, "beta", "1.0"),
    ({"m": 10, "r": 5, "v": 3, "beta": float("nan")}, "beta", "nan"),
])
def test_invalid_one_run_inputs_raise(kwargs: dict[str, float], name: str,
                                      value: str) -> None:
    with pytest.raises(PrivacyError) as info:
        one_run_epsilon_lower_bound(**kwargs)  # type: ignore[arg-type]
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(name) and value in message


def test_audit_bound_record() -> None:
    bound = one_run_audit(1000, 100, 75, delta=1e-4)
    assert bound.method == "one-run" and bound.confidence == pytest.approx(0.95)
    assert bound.epsilon_lower == one_run_epsilon_lower_bound(1000, 100, 75, 1e-4)
    assert dict(bound.counts) == {"m": 1000, "r": 100, "v": 75}
    as_dict = json.loads(json.dumps(bound.to_dict()))
    assert as_dict == {"method": "one-run", "epsilon_lower": bound.epsilon_lower,
                       "confidence": bound.confidence, "delta": 1e-4,
                       "counts": {"m": 1000, "r": 100, "v": 75}}
    with pytest.raises(AttributeError):
        bound.epsilon_lower = 9.0  # type: ignore[misc]
    with pytest.raises(TypeError):
        bound.counts["v"] = 100  # type: ignore[index]
    assert hash(bound) == hash(one_run_audit(1000, 100, 75, delta=1e-4))
    assert isinstance(multi_run_audit(10, 0, 0, 10), AuditBound)


# ------------------------------------------------------------------ multi run


@pytest.mark.parametrize(("beta", "delta"), [(0.05, 0.0), (0.05, 1e-5), (0.01, 1e-3)])
def test_perfect_separation_reaches_the_clopper_pearson_limit(beta: float,
                                                              delta: float) -> None:
    runs = 1000
    # all runs right: the one-sided Clopper-Pearson ends at level beta/2 solve
    # P[Binom(R, p) = R] = beta/2 (TPR_lo) and P[Binom(R, p) = 0] = beta/2 (FPR_hi)
    tpr_lo = (beta / 2) ** (1 / runs)
    fpr_hi = 1 - (beta / 2) ** (1 / runs)
    limit = math.log((tpr_lo - delta) / fpr_hi)
    bound = multi_run_epsilon_lower_bound(runs, 0, 0, runs, delta, beta)
    assert bound == pytest.approx(limit, rel=1e-9)
    assert bound > 5.0 if beta == 0.05 else bound > 4.0


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_guessing_gives_zero(seed: int) -> None:
    rng = np.random.default_rng(seed)
    runs = 1000
    tp = int(rng.binomial(runs, 0.5))
    fp = int(rng.binomial(runs, 0.5))
    assert multi_run_epsilon_lower_bound(tp, runs - tp, fp, runs - fp, 1e-5) == 0.0
    assert multi_run_epsilon_lower_bound(500, 500, 500, 500) == 0.0


@pytest.mark.parametrize(("x", "n"), [(0, 20), (3, 20), (17, 20), (20, 20), (412, 1000)])
def test_clopper_pearson_ends_solve_the_binomial_tails(x: int, n: int) -> None:
    beta = 0.05
    lo, hi = clopper_pearson(x, n, beta)
    if x > 0:
        assert stats.binom.sf(x - 1, n, lo) == pytest.approx(beta / 2, rel=1e-6)
    else:
        assert lo == 0.0
    if x < n:
        assert stats.binom.cdf(x, n, hi) == pytest.approx(beta / 2, rel=1e-6)
    else:
        assert hi == 1.0


def test_multi_run_uses_the_better_of_its_two_statements() -> None:
    # a test that never says "in" wrongly but misses often: TPR/FPR is the strong statement
    a = multi_run_epsilon_lower_bound(300, 700, 0, 1000)
    tpr_lo = clopper_pearson(300, 1000)[0]
    fpr_hi = clopper_pearson(0, 1000)[1]
    assert a == pytest.approx(math.log(tpr_lo / fpr_hi))
    # the mirror image: TNR/FNR is
    b = multi_run_epsilon_lower_bound(1000, 0, 700, 300)
    assert b == pytest.approx(a)


@pytest.mark.parametrize(("args", "name"), [
    ((0, 0, 5, 5), "tp + fn"),
    ((5, 5, 0, 0), "fp + tn"),
    ((-1, 5, 5, 5), "tp"),
    ((5, 5, 5, 5, 1.5), "delta"),
    ((5, 5, 5, 5, 0.0, 1.5), "beta"),
])
def test_invalid_multi_run_inputs_raise(args: tuple[float, ...], name: str) -> None:
    with pytest.raises(PrivacyError, match="^" + re.escape(name) + " "):
        multi_run_epsilon_lower_bound(*args)  # type: ignore[arg-type]
