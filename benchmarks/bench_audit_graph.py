"""One-run audits of private graph classification (graph canaries) on a TU dataset.

For each ε (and ``none``: the non-private control), one audit of ``--method`` with ``--m``
graph canaries (dpgnn_core.audit.graph_canaries) on the TU dataset in ``--source``, the
method's default spec otherwise. Prints one JSON object per audit: the reported ε, the
ε lower bound at 95 % confidence, m, r, v, δ, wall seconds (insert, train, score, bound),
the machine (benchmarks/RESULTS.md, "Empirical audit").

    python benchmarks/bench_audit_graph.py \
        --source ../shared/datasets/tudataset/MUTAG/raw --epsilons none,1,4,8 --m 500
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))
from _util import machine  # noqa: E402


def run(source: str, epsilons: list[float | None], m: int, method: str = "gcn",
        seed: int = 0, device: str = "auto", guess_fraction: float = 0.5
        ) -> list[dict[str, Any]]:
    from dpgnn_core.audit.canaries import audit
    from dpgnn_core.data.loaders.tu import load_tu
    from dpgnn_core.methods.registry import get

    data = load_tu(source, seed=seed)
    out = []
    for eps in epsilons:
        name = f"graph-{method}" if eps is None else f"dp-graph-{method}"
        spec = get(name).spec(device=device, seed=seed,
                              **({} if eps is None else {"epsilon": eps}))
        t = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            res = audit(name, data, spec, m=m, guess_fraction=guess_fraction)
        rec = {**res.to_dict(), "dataset": data.name, "graphs": data.num_graphs,
               "train_graphs": res.report.num_train if res.report else None,
               "guess_fraction": guess_fraction, "seconds": time.perf_counter() - t,
               "machine": machine()}
        print(json.dumps(rec), flush=True)
        out.append(rec)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source", required=True, help="TU raw folder (NAME_A.txt, ...)")
    ap.add_argument("--epsilons", default="none,1,4,8",
                    help="comma-separated; 'none' is the non-private control")
    ap.add_argument("--m", type=int, default=500, help="canaries")
    ap.add_argument("--method", default="gcn", choices=("gcn", "sage", "gat"))
    ap.add_argument("--seed", type=int, default=0, help="split and initialisation seed")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--guess-fraction", type=float, default=0.5,
                    help="fraction of the canaries guessed, fixed before the run")
    a = ap.parse_args()
    eps = [None if e.strip() == "none" else float(e) for e in a.epsilons.split(",")]
    run(a.source, eps, a.m, a.method, a.seed, a.device, a.guess_fraction)


if __name__ == "__main__":
    main()
