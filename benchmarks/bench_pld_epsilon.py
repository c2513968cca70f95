"""PLD accounting speed: ε for δ on a composed PLD, and the ε-by-step curve.

1. ``dpgnn_core.privacy.pld.epsilon_for_delta`` (numpy: cumulative sums over the grid)
   against its peer, dp-accounting's own ``PrivacyLossDistribution.get_epsilon_for_delta``
   (a Python loop over every grid point above ε), on the same composed PLD object (its
   composition is not timed), with both answers printed.
2. ``calibrate.epsilon_curve`` with PLD (20 points; the points before the last on the
   accountant's 10x coarser proxy grid, capped at the exact last value) against the same
   20 points all computed exactly (what it did before), with the largest gap between them.

Plans: DP-SGD (Poisson-subsampled Gaussian, q = 0.01) at z = 1.0 for T = 1,000 and
10,000 steps, δ = 1e-5; the default grid (1e-4).

Usage: python benchmarks/bench_pld_epsilon.py
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _util import machine

from dpgnn_core.privacy import Ledger, PldAccountant, PoissonGaussianEvent
from dpgnn_core.privacy.calibrate import epsilon_curve
from dpgnn_core.privacy.pld import epsilon_for_delta

DELTA, Q, Z = 1e-5, 0.01, 1.0


def plan(steps: int) -> Ledger:
    return Ledger().add(PoissonGaussianEvent(noise_multiplier=Z, sampling_rate=Q, steps=steps),
                        sampler_scheme="poisson")


def best_of(fn, repeats: int = 3) -> tuple[float, object]:  # type: ignore[no-untyped-def]
    times, out = [], None
    for _ in range(repeats):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return min(times), out


def one(acc: PldAccountant, steps: int) -> list[dict[str, object]]:
    pld = acc.pld(plan(steps))
    t_peer, e_peer = best_of(lambda: float(pld.get_epsilon_for_delta(DELTA)))
    t_ours, e_ours = best_of(lambda: epsilon_for_delta(pld, DELTA))
    t_new, new = best_of(lambda: epsilon_curve(plan, steps, DELTA, acc), repeats=1)
    points = [t for t, _ in new]  # type: ignore[attr-defined]
    t_old, old = best_of(lambda: [(t, acc.epsilon(plan(t), DELTA)) for t in points],
                         repeats=1)
    gap = max(n - o for (_, n), (_, o) in zip(new, old, strict=True))  # type: ignore
    return [{"what": "epsilon_for_delta", "steps": steps,
             "dp_accounting_s": round(t_peer, 4), "dpgnn_s": round(t_ours, 4),
             "speedup": round(t_peer / t_ours, 1),
             "epsilon_dp_accounting": e_peer, "epsilon_dpgnn": e_ours},
            {"what": "epsilon_curve (20 points)", "steps": steps,
             "all_exact_s": round(t_old, 2), "proxy_then_exact_s": round(t_new, 2),
             "speedup": round(t_old / t_new, 1), "largest_excess": gap,
             "last_equal": new[-1] == old[-1]}]  # type: ignore[index]


def main() -> None:
    acc = PldAccountant()
    rows = [r for steps in (1_000, 10_000) for r in one(acc, steps)]
    print(json.dumps({"machine": machine(), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
