"""Calibration speed: the smallest noise for a target (ε, δ) over T = 10,000 steps.

Ours: DP-GNN's hypergeometric mechanism with N = 100,000 (RDP and PLD accountants), and
the Poisson-subsampled Gaussian through our bisection. Peer: dp-accounting's own
``calibrate_dp_mechanism`` for the Poisson-subsampled Gaussian with the same T, measured in
the same run.

Usage: python benchmarks/bench_calibration.py
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _util import machine
from dp_accounting import dp_event, mechanism_calibration
from dp_accounting.rdp import rdp_privacy_accountant as dpa_rdp

from dpgnn_core.privacy import (
    DpgnnEvent,
    Ledger,
    PldAccountant,
    PoissonGaussianEvent,
    RdpAccountant,
    calibrate_noise,
)
from dpgnn_core.privacy.rdp import DEFAULT_ORDERS, hypergeometric_log_pmf

T, N, M, K, R, EPS, DELTA = 10_000, 100_000, 1_000, 7, 1, 4.0, 1e-6
Q = M / N


def dpgnn_plan(z: float) -> Ledger:
    return Ledger().add(DpgnnEvent(noise_multiplier=z, num_train=N, batch_size=M, max_degree=K,
                                   layers=R, steps=T),
                        sampler_scheme="fixed_size_without_replacement")


def poisson_plan(z: float) -> Ledger:
    return Ledger().add(PoissonGaussianEvent(noise_multiplier=z, sampling_rate=Q, steps=T),
                        sampler_scheme="poisson")


def timed(fn):  # type: ignore[no-untyped-def]
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def main() -> None:
    res: dict[str, dict[str, float]] = {}
    hypergeometric_log_pmf.cache_clear()
    t, cal = timed(lambda: calibrate_noise(dpgnn_plan, EPS, DELTA, RdpAccountant()))
    res["dpgnn_rdp"] = {"seconds": t, "noise_multiplier": cal.noise_multiplier,
                        "epsilon": cal.epsilon, "evaluations": cal.evaluations}
    t, cal = timed(lambda: calibrate_noise(dpgnn_plan, EPS, DELTA, PldAccountant()))
    res["dpgnn_pld"] = {"seconds": t, "noise_multiplier": cal.noise_multiplier,
                        "epsilon": cal.epsilon, "evaluations": cal.evaluations}
    t, cal = timed(lambda: calibrate_noise(poisson_plan, EPS, DELTA, RdpAccountant()))
    res["poisson_rdp_ours"] = {"seconds": t, "noise_multiplier": cal.noise_multiplier,
                               "epsilon": cal.epsilon, "evaluations": cal.evaluations}

    def peer() -> float:
        return float(mechanism_calibration.calibrate_dp_mechanism(
            lambda: dpa_rdp.RdpAccountant(list(DEFAULT_ORDERS)),
            lambda z: dp_event.SelfComposedDpEvent(
                dp_event.PoissonSampledDpEvent(Q, dp_event.GaussianDpEvent(z)), T),
            EPS, DELTA, mechanism_calibration.ExplicitBracketInterval(0.1, 100.0),
            tol=1e-4 * 1.0))

    t, z = timed(peer)
    res["poisson_rdp_dp_accounting"] = {"seconds": t, "noise_multiplier": z}
    ratios = {
        "dpgnn_rdp_over_dp_accounting_poisson": res["dpgnn_rdp"]["seconds"]
        / res["poisson_rdp_dp_accounting"]["seconds"],
        "dpgnn_pld_over_dp_accounting_poisson": res["dpgnn_pld"]["seconds"]
        / res["poisson_rdp_dp_accounting"]["seconds"],
        "ours_poisson_over_dp_accounting_poisson": res["poisson_rdp_ours"]["seconds"]
        / res["poisson_rdp_dp_accounting"]["seconds"],
    }
    print(json.dumps({"machine": machine(), "plan": {"T": T, "N": N, "m": M, "K": K, "r": R,
                                                     "epsilon": EPS, "delta": DELTA},
                      "results": res, "ratios": ratios}, indent=2))


if __name__ == "__main__":
    main()
