"""The loop that produced benchmarks/results/label-messages.jsonl (issue 34): the points of
``benchmarks/sweeps/labels-{amherst41,cornell5}.toml`` (DPDGC with label messages at node,
k-neighbour and node_feature level), run sequentially through the library
(``train_dpdgc`` then ``evaluate_dpdgc``) so that a 2-core machine shared with other work
could run them without Prefect's and Dask's overhead. One JSON line per run: dataset,
level, options, ε, seed, validation and test accuracy, the noise multiplier, seconds.
Defaults are chosen from the **validation** column only (``choose`` below).

    PYTHONPATH=. python benchmarks/label_messages_loop.py PLAN OUT.jsonl
    PYTHONPATH=. python benchmarks/label_messages_loop.py choose OUT.jsonl

PLAN: ``amherst41`` or ``cornell5`` (the search), ``confirm-DATASET`` (the chosen
defaults only). Datasets from ``$DPGNN_DATA`` (default ../shared/datasets).
"""

from __future__ import annotations

import itertools
import json
import os
import statistics
import sys
import time
import warnings
from collections import defaultdict
from typing import Any

DATA = os.environ.get("DPGNN_DATA", "../shared/datasets")
#: D = the observed maximum degree (marked not private in RESULTS.md).
MAX_DEGREE = {"amherst41": 448, "cornell5": 678}
FILES = {"amherst41": "Amherst41", "cornell5": "Cornell5"}
EPSILONS = (16.0, 4.0)
SEEDS = (0, 1, 2)


def grid(dataset: str) -> list[dict[str, Any]]:
    """The searched points (the TOML specs' grids)."""
    d = MAX_DEGREE[dataset]
    pts: list[dict[str, Any]] = []
    for w_h, steps in itertools.product((0.1, 0.3), (30, 60)):
        pts.append({"level": "node", "max_degree": d, "budget_split": (1.0, w_h, 1.0),
                    "steps": steps})
    for level in ("k_neighbor", "node_feature"):
        for hops, w_h in itertools.product((1, 2), (0.3, 1.0)):
            pts.append({"level": level, "hops": hops, "budget_split": (1.0, w_h, 1.0)})
    return pts


def load(dataset: str) -> Any:
    from dpgnn_core.data.loaders.facebook100 import load_facebook100

    return load_facebook100(f"{DATA}/facebook100/{FILES[dataset]}.mat", target="year",
                            min_class_size=100, fractions=(0.75, 0.1, 0.15), seed=0)


def run(data: Any, dataset: str, point: dict[str, Any], eps: float, seed: int
        ) -> dict[str, Any]:
    from dpgnn_core.methods.dpdgc import evaluate_dpdgc, train_dpdgc
    from dpgnn_core.specs import DpdgcSpec

    t = time.time()
    spec = DpdgcSpec(messages="labels", epsilon=eps, seed=seed, device="cpu", **point)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf, h, _, report, _ = train_dpdgc(data, spec)
        acc = evaluate_dpdgc(clf, h, data, "cpu")
    return {"dataset": dataset, "options": {k: list(v) if isinstance(v, tuple) else v
                                            for k, v in point.items()},
            "epsilon": eps, "seed": seed, "val": acc["val"]["accuracy"],
            "test": acc["test"]["accuracy"], "z": report["noise_multiplier"],
            "reported_epsilon": report["epsilon"], "seconds": round(time.time() - t, 1)}


def choose(path: str) -> None:
    """Mean validation accuracy per (level, ε, options) over datasets and seeds; the best
    per level (ties: the first), with its test accuracy shown beside (not used)."""
    rows = [json.loads(line) for line in open(path)]
    by: dict[tuple[str, float, str], list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        opts = {k: v for k, v in r["options"].items() if k not in ("level", "max_degree")}
        by[(r["options"]["level"], r["epsilon"], json.dumps(opts, sort_keys=True))].append(r)
    for (level, eps, opts), rs in sorted(by.items()):
        val = statistics.mean(r["val"] for r in rs)
        test = statistics.mean(r["test"] for r in rs)
        print(f"{level:13s} eps {eps:4g} {opts:60s} n={len(rs)} val {val:.3f} test {test:.3f}")


def main() -> None:
    plan, out = sys.argv[1], sys.argv[2]
    if plan == "choose":
        choose(out)
        return
    import torch

    torch.set_num_threads(1)
    dataset = plan.removeprefix("confirm-")
    points = grid(dataset)
    seeds = SEEDS if dataset == "amherst41" else SEEDS[:2]
    data = load(dataset)
    with open(out, "a") as f:
        for point, eps, seed in itertools.product(points, EPSILONS, seeds):
            row = run(data, dataset, point, eps, seed)
            f.write(json.dumps(row) + "\n")
            f.flush()
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
