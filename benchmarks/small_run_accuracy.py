"""Test accuracy and CPU seconds of the core GAP-EDP / DPDGC-EDP fits on Cora at ε = 1,
per seed, with noise reproducible from the seed (``insecure_reproducible_noise``: a
benchmark only, never a release), so that two versions of the training code are compared
on the same draws (issue 52 §7). Run it under each version's ``PYTHONPATH``.

Usage: python benchmarks/small_run_accuracy.py DATASET_FOLDER 1,2,3 gap-edp,dpdgc-edp [OPTIONS]

OPTIONS: a JSON object of spec fields given to every method (a recipe to compare, e.g.
``'{"batch_size": 256, "lr": 0.003}'``); choose recipes on the ``val`` column only.
"""

from __future__ import annotations

import json
import sys
import time

import torch

from dpgnn_core.data.store import read_dataset
from dpgnn_core.methods.registry import get


def main() -> None:
    torch.set_num_threads(1)  # as the CLI
    data = read_dataset(sys.argv[1])
    options = json.loads(sys.argv[4]) if len(sys.argv) > 4 else {}
    out = {}
    for seed in (int(s) for s in sys.argv[2].split(",")):
        for name in sys.argv[3].split(","):
            method = get(name)
            spec = method.spec(epsilon=1.0, seed=seed, insecure_reproducible_noise=True,
                                **options)
            t = time.process_time()
            fitted = method.fit(data, spec)
            cpu = time.process_time() - t
            m = method.evaluate(fitted.model, data, spec, fitted.extra)
            out[f"{name}/{seed}"] = {"test": round(m["test"]["accuracy"], 4),
                                     "val": round(m["val"]["accuracy"], 4),
                                     "fit_cpu_s": round(cpu, 2)}
            print(f"{name}/{seed}", out[f"{name}/{seed}"], flush=True)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
