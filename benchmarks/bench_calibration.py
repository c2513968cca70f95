"""Calibration speed: the smallest noise for a target (ε, δ) over T = 10,000 steps.

Plans (T = 10,000, ε = 4, δ = 1e-6): DP-GNN's hypergeometric mechanism with N = 100,000,
m = 1,000, K = 7, r = 1; the Poisson-subsampled Gaussian (DP-SGD, rate q = m / N); DRW's
Gaussian on fixed-size batches without replacement (rate q; RDP only: no PLD exists for
it); GAP-NDP's composition (Poisson encoder, 2 PMA hops, Poisson classifier, common
noise). Each under the RDP and the PLD accountant where it applies. Peer: dp-accounting's
own ``calibrate_dp_mechanism`` for the Poisson-subsampled Gaussian under RDP.

Also: ``epsilon_curve`` of the PLD-calibrated Poisson plan (20 points) and its last point
against the calibrated ε; ε under RDP and PLD for DP-SGD at z = 1, q = 0.01, T = 1,000,
δ = 1e-5.

Usage: python benchmarks/bench_calibration.py [--quick]   (--quick: skip the peer)
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _util import machine
from dp_accounting import dp_event, mechanism_calibration
from dp_accounting.rdp import rdp_privacy_accountant as dpa_rdp

from dpgnn_core.privacy import (
    DpgnnEvent,
    GaussianEvent,
    Ledger,
    PldAccountant,
    PoissonGaussianEvent,
    RdpAccountant,
    UniformGaussianEvent,
    calibrate_noise,
)
from dpgnn_core.privacy.rdp import DEFAULT_ORDERS, hypergeometric_log_pmf

T, N, M, K, R, EPS, DELTA = 10_000, 100_000, 1_000, 7, 1, 4.0, 1e-6
Q = M / N


def dpgnn_plan(z: float) -> Ledger:
    return Ledger().add(DpgnnEvent(noise_multiplier=z, num_train=N, batch_size=M, max_degree=K,
                                   layers=R, steps=T),
                        sampler_scheme="fixed_size_without_replacement")


def poisson_plan(z: float, steps: int = T) -> Ledger:
    return Ledger().add(PoissonGaussianEvent(noise_multiplier=z, sampling_rate=Q, steps=steps),
                        sampler_scheme="poisson")


def drw_plan(z: float) -> Ledger:
    return Ledger().add(UniformGaussianEvent(noise_multiplier=z, sampling_rate=Q, steps=T),
                        sampler_scheme="fixed_size_without_replacement")


def gap_plan(z: float) -> Ledger:
    enc = PoissonGaussianEvent(noise_multiplier=z, sampling_rate=Q, steps=T, level="node")
    cls = PoissonGaussianEvent(noise_multiplier=z, sampling_rate=Q, steps=T, level="node",
                               description="classifier")
    return (Ledger().add(enc, sampler_scheme="poisson")
            .add(GaussianEvent(noise_multiplier=z, count=2, level="node"))
            .add(cls, sampler_scheme="poisson"))


PLANS: dict[str, tuple[Callable[[float], Ledger], tuple[str, ...]]] = {
    "dpgnn": (dpgnn_plan, ("rdp", "pld")),
    "poisson": (poisson_plan, ("rdp", "pld")),
    "drw": (drw_plan, ("rdp",)),
    "gap_ndp": (gap_plan, ("rdp", "pld")),
}


def timed(fn):  # type: ignore[no-untyped-def]
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def main() -> None:
    quick = "--quick" in sys.argv
    res: dict[str, dict[str, float]] = {}
    accountants = {"rdp": RdpAccountant, "pld": PldAccountant}
    for name, (plan, names) in PLANS.items():
        for acc in names:
            hypergeometric_log_pmf.cache_clear()
            t, cal = timed(lambda: calibrate_noise(plan, EPS, DELTA,  # noqa: B023
                                                   accountants[acc]()))  # noqa: B023
            res[f"{name}_{acc}"] = {"seconds": round(t, 4),
                                    "noise_multiplier": cal.noise_multiplier,
                                    "epsilon": cal.epsilon, "evaluations": cal.evaluations,
                                    "proxy_evaluations": cal.proxy_evaluations}
            assert cal.epsilon <= EPS, (name, acc, cal)
            print(name, acc, res[f"{name}_{acc}"], file=sys.stderr)
    pld = PldAccountant()
    z = res["poisson_pld"]["noise_multiplier"]
    from dpgnn_core.privacy.calibrate import epsilon_curve

    t, curve = timed(lambda: epsilon_curve(lambda s: poisson_plan(z, s), T, DELTA, pld))
    res["epsilon_curve_poisson_pld"] = {"seconds": round(t, 4), "points": len(curve),
                                        "last": curve[-1][1],
                                        "calibrated": res["poisson_pld"]["epsilon"]}
    example = Ledger().add(PoissonGaussianEvent(noise_multiplier=1.0, sampling_rate=0.01,
                                                steps=1000), sampler_scheme="poisson")
    res["dp_sgd_z1_q001_T1000_delta1e-5"] = {
        "rdp": RdpAccountant().epsilon(example, 1e-5), "pld": pld.epsilon(example, 1e-5)}
    if not quick:
        def peer() -> float:
            return float(mechanism_calibration.calibrate_dp_mechanism(
                lambda: dpa_rdp.RdpAccountant(list(DEFAULT_ORDERS)),
                lambda z: dp_event.SelfComposedDpEvent(
                    dp_event.PoissonSampledDpEvent(Q, dp_event.GaussianDpEvent(z)), T),
                EPS, DELTA, mechanism_calibration.ExplicitBracketInterval(0.1, 100.0),
                tol=1e-4 * 1.0))

        t, zp = timed(peer)
        res["poisson_rdp_dp_accounting"] = {"seconds": round(t, 4), "noise_multiplier": zp}
    print(json.dumps({"machine": machine(), "plan": {"T": T, "N": N, "m": M, "K": K, "r": R,
                                                     "q": Q, "epsilon": EPS, "delta": DELTA},
                      "results": res}, indent=2))


if __name__ == "__main__":
    main()
