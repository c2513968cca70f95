"""Training from a partitioned dataset (issue 51 §3): GAP-EDP end to end on 2 Dask
workers against one process, and what one batch costs when every partition draws it.

Usage: python benchmarks/bench_partitioned_training.py [--nodes 100000] [--avg-degree 10]
       [--feature-dim 32] [--partition-nodes 25000] [--epochs 2] [--worker-memory 1GiB]
       [--dir D]

Generates a partitioned CSBM, then: (1) GAP-EDP (ε = 4, 2 hops) in one process on the
partitions read whole (:func:`dpgnn_core.methods.gap.train_gap`), in a child process so
that its peak RSS is its own; (2) the same spec on a ``LocalCluster`` of 2 single-threaded
worker processes (:func:`dpgnn_core.distributed.gap.train_gap_partitioned`: the encoder and
the classifier on batches the partitions send, PMA block by block), with each worker's peak
RSS and whether one was restarted; (3) the trainer's cost per batch: a Poisson batch at
q = 0.01 drawn by every partition, and a 256-row mini-batch fetched from them (what the
EDP modules' epochs do). Prints one JSON record.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def _spec(args: argparse.Namespace) -> Any:
    from dpgnn_core.specs import GapSpec

    return GapSpec(level="edge", epsilon=4.0, hops=2, epochs=args.epochs, encoder_dim=16,
                   device="cpu")


def stage_single(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    from dpgnn_core.data.partitioned import read_partitioned
    from dpgnn_core.methods.gap import evaluate_gap, train_gap

    torch.set_num_threads(1)
    t0 = time.perf_counter()
    data = read_partitioned(Path(args.dir) / "ds")
    r = train_gap(data, _spec(args))
    acc = evaluate_gap(r.classifier, r.aggregations, data, "cpu")["test"]["accuracy"]
    return {"total_s": time.perf_counter() - t0, "epsilon": r.report["epsilon"],
            "test_accuracy": acc,
            "peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20}


def _worker_peak() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def _per_batch(client: Any, ds: Path) -> dict[str, float]:
    import torch

    from dpgnn_core.data.partitioned import verify_partitioned
    from dpgnn_core.distributed.rows import AsTensor, FeatureRows, PartitionedRows
    from dpgnn_core.privacy.randomness import Randomness

    rows = PartitionedRows(client, ds, verify_partitioned(ds), FeatureRows(), AsTensor(),
                           torch.device("cpu"), Randomness.secret(), "bench")
    t0 = time.perf_counter()
    for _ in range(20):
        rows.poisson(0.01)
    poisson = (time.perf_counter() - t0) / 20
    gen = torch.Generator().manual_seed(0)  # which rows: not privacy randomness here
    t1 = time.perf_counter()
    for _ in range(20):
        rows.take(torch.randperm(rows.num_rows, generator=gen)[:256])
    return {"poisson_q0.01_ms": 1000 * poisson, "take_256_ms": 50 * (time.perf_counter() - t1),
            "mean_poisson_batch": sum(rows.batch_sizes[:20]) / 20}


def stage_cluster(args: argparse.Namespace) -> dict[str, Any]:
    from distributed import Client, LocalCluster

    from dpgnn_core.distributed.gap import train_gap_partitioned

    ds = Path(args.dir) / "ds"
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      memory_limit=args.worker_memory, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        pids = client.run(lambda: __import__("os").getpid())
        before = client.run(_worker_peak)
        t0 = time.perf_counter()
        r = train_gap_partitioned(client, ds, _spec(args), Path(args.dir) / "work")
        total = time.perf_counter() - t0
        batch = _per_batch(client, ds)
        after = client.run(_worker_peak)
        same = client.run(lambda: __import__("os").getpid()) == pids
    return {"total_s": total, "epsilon": r.report["epsilon"],
            "test_accuracy": r.metrics["test"]["accuracy"],
            "worker_peak_gib_before": sorted(before.values()),
            "worker_peak_gib_after": sorted(after.values()),
            "workers_not_restarted": same, **batch,
            "trainer_peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--nodes", type=int, default=100_000)
    p.add_argument("--avg-degree", type=float, default=10.0)
    p.add_argument("--feature-dim", type=int, default=32)
    p.add_argument("--partition-nodes", type=int, default=25_000)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--worker-memory", default="1GiB")
    p.add_argument("--dir", default=None)
    p.add_argument("--stage", choices=("single", "cluster"), default=None)
    args = p.parse_args()
    if args.stage:  # a child: one stage, its own peak RSS
        out = stage_single(args) if args.stage == "single" else stage_cluster(args)
        print(json.dumps(out))
        return
    from dpgnn_core.data.partitioned import write_partitioned_csbm

    own = args.dir is None
    args.dir = args.dir or tempfile.mkdtemp(prefix="bench-ptrain-")
    try:
        t0 = time.perf_counter()
        write_partitioned_csbm(Path(args.dir) / "ds", partition_nodes=args.partition_nodes,
                               num_nodes=args.nodes, avg_degree=args.avg_degree,
                               feature_dim=args.feature_dim, feature_signal=1.0,
                               overwrite=True)
        record: dict[str, Any] = {"args": {k: v for k, v in vars(args).items()
                                           if k not in ("dir", "stage")},
                                  "generate_s": time.perf_counter() - t0}
        for stage in ("single", "cluster"):
            cmd = [sys.executable, __file__, "--stage", stage, "--dir", args.dir,
                   *[f"--{k.replace('_', '-')}={v}" for k, v in record["args"].items()]]
            res = subprocess.run(cmd, capture_output=True, text=True, check=True,
                                 env={"OMP_NUM_THREADS": "1", **__import__("os").environ})
            record[stage] = json.loads(res.stdout.strip().splitlines()[-1])
        print(json.dumps(record, indent=1))
    finally:
        if own:
            shutil.rmtree(args.dir, ignore_errors=True)


if __name__ == "__main__":
    main()
