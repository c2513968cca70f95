"""The loop that produced benchmarks/results/structure-defaults.jsonl (issue 29, §4): the
points of the `search-structure-*` and `defaults-structure-*` sweep specs, run as a plain
process pool over the registry (``Method.fit`` then ``Method.evaluate``) so that 16 cores
could run them at once. The ε-by-step curve (a report field; nothing trained depends on
it) is skipped to save time. One JSON line per run: dataset, method, options, ε, seed,
validation and test accuracy, noise multiplier, K used.

    PYTHONPATH=. python benchmarks/structure_defaults_loop.py PLAN OUT.jsonl [WORKERS]

PLAN: ``main`` (baselines on every dataset and the CSBM-3 / Cora / Cornell5 searches),
``caltech36``, ``amherst41``, ``dense`` (the other searches), ``confirm`` (the rule with
defaults, and the held-out graphs), ``drw`` (DRW's walk length on CSBM 2 and 3; a lead,
not a default). Datasets from ``$DPGNN_DATA`` (default
../shared/datasets).
"""

from __future__ import annotations

import itertools
import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Any

DATA = os.environ.get("DPGNN_DATA", "../shared/datasets")
DS: dict[str, tuple[str, Any]] = {
    "csbm-d2": ("synthetic", {"avg_degree": 2, "seed": 0}),
    "csbm-d3": ("synthetic", {"avg_degree": 3, "seed": 0}),
    "csbm-d4": ("synthetic", {"avg_degree": 4, "seed": 1}),
    "csbm-d5": ("synthetic", {"avg_degree": 5, "seed": 0}),
    "csbm-d3s1": ("synthetic", {"avg_degree": 3, "seed": 1}),
    "csbm-d10": ("synthetic", {"avg_degree": 10, "seed": 0}),
    "csbm-d20": ("synthetic", {"avg_degree": 20, "seed": 0}),
    "csbm-big": ("synthetic", {"avg_degree": 3, "seed": 2, "num_nodes": 12000}),
    "cora": ("planetoid", {"fractions": (0.75, 0.1, 0.15), "seed": 0}),
    "caltech36": ("fb", "Caltech36"), "reed98": ("fb", "Reed98"),
    "amherst41": ("fb", "Amherst41"), "cornell5": ("fb", "Cornell5"),
}
_cache: dict[str, Any] = {}


def load(key: str) -> Any:
    if key not in _cache:
        kind, o = DS[key]
        if kind == "synthetic":
            from dpgnn_core.data.synthetic import csbm
            _cache[key] = csbm(**{"num_nodes": 3000, **o})
        elif kind == "planetoid":
            from dpgnn_core.data.loaders.planetoid import load_planetoid
            _cache[key] = load_planetoid(f"{DATA}/planetoid/Cora/raw", **o)
        else:
            from dpgnn_core.data.loaders.facebook100 import load_facebook100
            _cache[key] = load_facebook100(f"{DATA}/facebook100/{o}.mat")
    return _cache[key]


def init() -> None:
    import torch

    torch.set_num_threads(1)  # m._fit outside Method.fit computes no epsilon curve


def job(task: tuple[str, str, dict[str, Any], float, int]) -> dict[str, Any]:
    from dpgnn_core.methods.registry import get

    key, method, opts, eps, seed = task
    row: dict[str, Any] = {"ds": key, "method": method, "opts": opts, "eps": eps,
                           "seed": seed}
    t = time.time()
    try:
        d = load(key)
        m = get(method)
        spec = m.spec(epsilon=eps, seed=seed, device=os.environ.get("DEV", "cpu"), **opts)
        f = m._fit(d, spec, None)
        met = m.evaluate(f.model, d, spec, {})
        row.update(val=met["val"]["accuracy"], test=met["test"]["accuracy"],
                   z=f.report.noise_multiplier, k=f.report.details.get("max_degree"),
                   s=round(time.time() - t, 2))
    except Exception as e:  # one failed point is a row, not a lost run
        row["error"] = repr(e)[:300]
    return row


SMALL = ["csbm-d2", "csbm-d3", "csbm-d4", "csbm-d5", "csbm-d3s1", "cora", "caltech36",
         "reed98", "amherst41"]
CHOOSE = ["csbm-d3", "cora", "amherst41"]
E48, E148 = [4.0, 8.0], [1.0, 4.0, 8.0]
PLANS: dict[str, list[tuple[list[str], str, dict[str, list[Any]], list[float], list[int]]]] = {
    "main": [
        (["cornell5"], "dp-gcn", {"max_degree": [1, 2, 3], "steps": [30, 60]}, E48, [0, 1]),
        (["cornell5"], "dp-mlp", {}, E48, [0, 1]),
        (SMALL, "dp-mlp", {}, E148, [0, 1, 2]),
        (SMALL, "dp-gcn", {}, E148, [0, 1, 2]),
        (SMALL, "drw-gcn", {}, E48, [0, 1]),
        (CHOOSE, "dp-gcn", {"max_degree": [1, 2, 3, 4], "steps": [20, 40, 60, 100],
                            "lr": [0.02, 0.05]}, E48, [0, 1]),
        (CHOOSE, "dp-gcn", {"max_degree": [1], "layers": [2], "steps": [40, 60]}, E48, [0, 1]),
        (CHOOSE, "dp-gcn", {"max_degree": [1, 2], "batch_size": [512], "steps": [60, 150]},
         E48, [0, 1]),
        (CHOOSE, "drw-gcn", {"walk_length": [1, 2, 4], "steps": [30, 60]}, E48, [0, 1]),
    ],
    "caltech36": [(["caltech36"], "dp-gcn", {"max_degree": [1, 2], "steps": [10, 20, 30, 60],
                                             "lr": [0.02, 0.05]}, E48, [0, 1, 2])],
    "amherst41": [(["amherst41"], "dp-gcn", {"max_degree": [1, 2, 3], "steps": [60]}, E48,
                   [0, 1])],
    "dense": [(["csbm-d10", "csbm-d20"], "dp-gcn", {"max_degree": [1, 2], "steps": [60]}, E48,
               [0, 1]),
              (["csbm-d10", "csbm-d20"], "dp-mlp", {}, E48, [0])],
    "drw": [(["csbm-d2", "csbm-d3"], "drw-gcn", {"walk_length": [1, 2, 4, 8],
                                                 "steps": [30, 60]}, E48, [0, 1])],
    "confirm": [
        (["cora"], "dp-gcn", {}, E48, [0, 1, 2]),
        (["csbm-big"], "dp-gcn", {"max_degree": [1, 2]}, E48, [0, 1]),
        (["csbm-big"], "dp-mlp", {}, E48, [0, 1]),
        (["csbm-d2", "csbm-d3", "csbm-d4", "csbm-d5", "csbm-d3s1", "caltech36", "reed98",
          "amherst41", "csbm-d10"], "dp-gcn", {}, E48, [0, 1, 2]),
        (["csbm-big"], "dp-gcn", {}, [4.0], [0]),
        (["caltech36", "reed98"], "drw-gcn", {"walk_length": [1, 2]}, E48, [0, 1]),
    ],
}


def tasks(plan: str) -> list[tuple[str, str, dict[str, Any], float, int]]:
    out = []
    for keys, method, grid, epss, seeds in PLANS[plan]:
        for key in keys:
            for vals in itertools.product(*grid.values()):
                opts = dict(zip(grid, vals, strict=True))
                out += [(key, method, opts, e, s) for e in epss for s in seeds]
    return out


if __name__ == "__main__":
    plan, out = sys.argv[1], sys.argv[2]
    workers = int(sys.argv[3]) if len(sys.argv) > 3 else 16
    ts = tasks(plan)
    print(len(ts), "tasks", flush=True)
    with open(out, "w") as fh, ProcessPoolExecutor(workers, initializer=init) as ex:
        for fu in as_completed([ex.submit(job, t) for t in ts]):
            fh.write(json.dumps(fu.result()) + "\n")
            fh.flush()
