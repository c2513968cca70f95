"""Sweeps on Dask: the same sweep on 2 Dask workers against the points run one after the
other in one process by calling the core directly, and the per-point orchestration overhead
of a sweep on 1 worker.

(a) ``sweep_2w_s / sequential_s`` (target <= 0.6): ``dpgnn sweep SPEC --workers 2`` (a
    fresh process, as a user runs it: Prefect, a LocalCluster of 2 single-threaded
    workers, the cached train and evaluate tasks, the table, plots and MLflow runs) against
    ``registry.get(method).fit(data, spec)`` and ``.evaluate`` for every point in a loop.
(b) ``(sweep_1w_s / points) / (sequential_s / points)`` (target <= 1.2): the same sweep on
    one worker (``--refresh``: every point trained again) per point, against the core's
    fit + evaluate per point.

The sequential loop runs in a fresh process twice: with the default threads, and with one
thread (OMP/MKL/OpenBLAS_NUM_THREADS=1), which is what distributed's nanny gives each
Dask worker; the ratios are taken against the one-thread loop (like for like), and also
reported against the default one.

The project home is warmed first with a one-point sweep (Prefect's and MLflow's databases
are a one-off cost per project, as in bench_run_overhead.py). Load averages are recorded
before and after each phase: on a shared machine they say how much the numbers can be
trusted.

Usage: python benchmarks/bench_sweep.py [--nodes 3000] [--steps 300] [--out results/sweep.jsonl]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent
sys.path.insert(0, str(HERE))

SPEC = """name = "{name}"
dataset = "{dataset}"
epsilons = [1, 2, 4, 8]
seeds = [0]

[[methods]]
method = "dp-mlp"
grid = {{lr = [3e-3, 1e-2]}}
fixed = {{steps = {steps}, device = "cpu"}}
"""

WARM = """name = "warm"
dataset = "{dataset}"

[[methods]]
method = "mlp"
fixed = {{epochs = 1, device = "cpu"}}
"""


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def _cli(args: list[str], env: dict[str, str]) -> tuple[float, dict[str, Any]]:
    t = time.perf_counter()
    r = subprocess.run([str(BIN / "dpgnn"), *args], env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t
    if r.returncode != 0:
        raise SystemExit(f"dpgnn {' '.join(args)} failed:\n{r.stderr[-3000:]}")
    return wall, json.loads(r.stdout)


def _cache(summary: dict[str, Any]) -> dict[str, int]:
    """How many points of a sweep came from where (the table's ``cache`` column)."""
    import pyarrow.parquet as pq

    states: dict[str, int] = {}
    for state in pq.read_table(summary["table"], columns=["cache"]).column(0).to_pylist():
        states[state] = states.get(state, 0) + 1
    return states


def sequential(spec_path: Path) -> tuple[float, list[dict[str, Any]]]:
    """Every point of the sweep, one after the other in this process, core only."""
    from dpgnn_core.data.store import read_dataset
    from dpgnn_core.methods import registry
    from dpgnn_core.sweeps import load_sweep_spec, points

    pts = points(load_sweep_spec(spec_path))
    t0 = time.perf_counter()
    data = read_dataset(load_sweep_spec(spec_path).dataset)
    per_point = []
    for p in pts:
        t = time.perf_counter()
        method = registry.get(p.method)
        fitted = method.fit(data, p.spec)
        metrics = method.evaluate(fitted.model, data, p.spec, fitted.extra)
        per_point.append({"config_id": p.config_id, "epsilon": p.epsilon,
                          "seconds": round(time.perf_counter() - t, 3),
                          "val_accuracy": metrics["val"]["accuracy"],
                          "test_accuracy": metrics["test"]["accuracy"]})
        print(f"  sequential {p.config_id} eps={p.epsilon}: {per_point[-1]['seconds']} s",
              flush=True)
    return time.perf_counter() - t0, per_point


#: What a Dask worker of the sweep's LocalCluster gets (distributed's nanny sets these).
ONE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}


def _sequential_process(spec: Path, env: dict[str, str]) -> tuple[float, list[dict[str, Any]]]:
    """:func:`sequential` in a fresh process (its own thread settings); imports not timed."""
    r = subprocess.run([sys.executable, __file__, "--sequential", str(spec)], env=env,
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"sequential run failed:\n{r.stderr[-3000:]}")
    print(r.stdout.rsplit("\n", 2)[0], flush=True)
    out = json.loads(r.stdout.strip().splitlines()[-1])
    return out["seconds"], out["points"]


def main() -> None:
    from _util import append_jsonl, machine

    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=3000)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--out", type=Path, default=HERE / "results" / "sweep.jsonl")
    ap.add_argument("--skip-default-threads", action="store_true",
                    help="run the sequential loop with one thread only")
    ap.add_argument("--sequential", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.sequential is not None:
        import torch

        seconds, pts = sequential(args.sequential)
        print(json.dumps({"seconds": seconds, "points": pts,
                          "torch_threads": torch.get_num_threads()}))
        return

    tmp = Path(tempfile.mkdtemp(prefix="dpgnn-bench-sweep-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env |= {"DPGNN_HOME": str(tmp / "home"), "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
            "DO_NOT_TRACK": "1"}
    os.environ |= {"DPGNN_HOME": str(tmp / "home"), "DO_NOT_TRACK": "1"}
    from dpgnn_core.data.store import write_dataset
    from dpgnn_core.data.synthetic import csbm

    ds = tmp / "csbm"
    write_dataset(csbm(num_nodes=args.nodes, seed=0), ds)
    spec = tmp / "sweep.toml"
    spec.write_text(SPEC.format(name="bench", dataset=ds, steps=args.steps))
    warm = tmp / "warm.toml"
    warm.write_text(WARM.format(dataset=ds))
    load: dict[str, Any] = {"start": _load()}

    warm_s, _ = _cli(["sweep", str(warm), "--workers", "1", "--json"], env)
    load["after_warmup"] = _load()
    print(f"warm-up sweep (creates Prefect's and MLflow's databases): {warm_s:.1f} s",
          flush=True)

    seq_default_s, per_point_default = math.nan, []
    if not args.skip_default_threads:
        seq_default_s, per_point_default = _sequential_process(spec, env)
        load["after_sequential_default_threads"] = _load()
        print(f"sequential, default threads: {seq_default_s:.1f} s", flush=True)
    seq_s, per_point = _sequential_process(spec, env | ONE_THREAD)
    n = len(per_point)
    load["after_sequential_1_thread"] = _load()
    print(f"sequential, 1 thread (as a Dask worker): {seq_s:.1f} s for {n} points",
          flush=True)

    sweep2_s, out2 = _cli(["sweep", str(spec), "--workers", "2", "--json"], env)
    cache2 = _cache(out2)  # the table is rewritten by each run of the same sweep
    load["after_sweep_2w"] = _load()
    print(f"sweep on 2 workers: {sweep2_s:.1f} s", flush=True)

    sweep1_s, out1 = _cli(["sweep", str(spec), "--workers", "1", "--refresh", "--json"], env)
    cache1 = _cache(out1)
    load["after_sweep_1w"] = _load()
    print(f"sweep on 1 worker (--refresh): {sweep1_s:.1f} s", flush=True)

    cached_s, out_cached = _cli(["sweep", str(spec), "--workers", "2", "--json"], env)
    load["after_cached"] = _load()
    print(f"sweep again, every point cached: {cached_s:.1f} s", flush=True)

    record = {
        "bench": "sweep", "machine": machine(), "cpu_affinity": len(os.sched_getaffinity(0)),
        "dataset": f"csbm {args.nodes} nodes", "method": "dp-mlp", "steps": args.steps,
        "points": n, "load_average_1_5_15": load,
        "seconds": {"warmup_sweep": round(warm_s, 2),
                    "sequential_default_threads": (None if math.isnan(seq_default_s)
                                                   else round(seq_default_s, 2)),
                    "sequential_1_thread": round(seq_s, 2),
                    "sweep_2_workers": round(sweep2_s, 2),
                    "sweep_1_worker_refresh": round(sweep1_s, 2),
                    "sweep_cached_2_workers": round(cached_s, 2)},
        "ratios": {"sweep_2w_over_sequential": round(sweep2_s / seq_s, 3),
                   "per_point_1w_over_core": round((sweep1_s / n) / (seq_s / n), 3),
                   # the fixed cost taken out: a fully cached sweep's time stands for it
                   "marginal_per_point_1w_over_core": round((sweep1_s - cached_s) / seq_s, 3),
                   "sweep_2w_minus_fixed_over_sequential":
                       round((sweep2_s - cached_s) / seq_s, 3),
                   "sweep_2w_over_sequential_default_threads":
                       None if math.isnan(seq_default_s) else round(sweep2_s / seq_default_s, 3),
                   "per_point_1w_over_core_default_threads":
                       None if math.isnan(seq_default_s) else round(sweep1_s / seq_default_s, 3)},
        "targets": {"sweep_2w_over_sequential": 0.6, "per_point_1w_over_core": 1.2},
        "sequential_points_1_thread": per_point,
        "sequential_points_default_threads": per_point_default,
        "best": [{k: b[k] for k in ("config_id", "epsilon", "val_accuracy_mean",
                                    "test_accuracy_mean")} for b in out2["best"]],
        "cache_states": {"sweep_2w": cache2, "sweep_1w_refresh": cache1,
                         "sweep_again": _cache(out_cached)},
        "command": "python benchmarks/bench_sweep.py " + " ".join(sys.argv[1:]),
    }
    append_jsonl(args.out, record)


if __name__ == "__main__":
    main()
