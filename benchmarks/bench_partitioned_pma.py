"""PMA on a partitioned dataset (issue 51): one process against 2 Dask workers.

Usage: python benchmarks/bench_partitioned_pma.py [--nodes 200000] [--avg-degree 20]
       [--feature-dim 64] [--partition-nodes 50000] [--hops 2] [--worker-memory 1GiB]
       [--dir D]

Generates a partitioned CSBM (``dpgnn ingest --format synthetic --partition-nodes``), then
runs PMA with noise (σ = 1, secret) on it twice: in one process (the partitions read into
one graph, :func:`dpgnn_core.privacy.pma.pma`), in a child process so that its peak RSS is
its own; and on a ``LocalCluster`` of 2 single-threaded worker processes
(:func:`dpgnn_core.distributed.pma.pma_partitioned`, every partition hashed by the
workers first), with each worker's peak RSS (``ru_maxrss``) before the work (once
imported) and after, and whether a worker was restarted or paused for memory
(``--worker-memory``: each worker's limit).
Prints one JSON record.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def _peak_gib() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def stage_single(args: argparse.Namespace) -> dict:
    import torch

    from dpgnn_core.data.partitioned import read_partitioned
    from dpgnn_core.privacy.pma import aggregation_matrix, pma
    from dpgnn_core.privacy.randomness import Randomness

    torch.set_num_threads(1)  # one core, as one worker has
    t0 = time.perf_counter()
    data = read_partitioned(Path(args.dir) / "ds")  # checks every partition's sha256
    t_read = time.perf_counter() - t0
    adj = aggregation_matrix(torch.from_numpy(data.edge_index), data.num_nodes)
    gen = Randomness.secret().torch_generator("pma/noise")
    t1 = time.perf_counter()
    with torch.no_grad():
        pma(torch.from_numpy(data.x), adj, args.hops, 1.0, gen)
    return {"read_and_check_s": t_read, "pma_s": time.perf_counter() - t1,
            "total_s": time.perf_counter() - t0, "peak_rss_gib": _peak_gib()}


def _worker_peak() -> float:
    return _peak_gib()


def _warm_up() -> None:
    """What a worker's first task would import (torch, pyarrow, dpgnn), out of the timing."""
    import dpgnn_core.distributed.pma  # noqa: F401


def _health(client: Any, pids: dict[str, int]) -> dict[str, Any]:
    """Whether a worker was restarted (its process id changed, or it is gone) or paused
    for memory (distributed's "Pausing worker" log line) during the work."""
    now = client.run(os.getpid)
    logs = client.get_worker_logs()
    paused = sum("Pausing worker" in msg for lines in logs.values() for _, msg in lines)
    return {"workers_restarted": sum(now.get(a) != pid for a, pid in pids.items()),
            "worker_pause_lines": paused}


def run_distributed(args: argparse.Namespace) -> dict:
    from distributed import Client, LocalCluster

    from dpgnn_core.distributed.pma import pma_partitioned, write_x0

    d = Path(args.dir)
    limit = args.worker_memory or "auto"
    with LocalCluster(n_workers=2, processes=True, threads_per_worker=1, memory_limit=limit,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        client.run(_warm_up)
        pids = client.run(os.getpid)
        before = client.run(_worker_peak)
        t0 = time.perf_counter()
        write_x0(client, d / "ds", d / "x0")
        t1 = time.perf_counter()
        pma_partitioned(client, d / "ds", d / "x0", d / "release", args.hops, 1.0,
                        overwrite=True)
        t2 = time.perf_counter()
        after = client.run(_worker_peak)
        health = _health(client, pids)
    return {**health, "worker_memory_limit": limit, "write_x0_s": t1 - t0,
            "check_and_pma_s": t2 - t1, "total_s": t2 - t0,
            "worker_peak_rss_gib_before": sorted(before.values()),
            "worker_peak_rss_gib_after": sorted(after.values())}


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--nodes", type=int, default=200_000)
    p.add_argument("--avg-degree", type=float, default=20.0)
    p.add_argument("--feature-dim", type=int, default=64)
    p.add_argument("--partition-nodes", type=int, default=50_000)
    p.add_argument("--hops", type=int, default=2)
    p.add_argument("--worker-memory", default=None,
                   help="each worker's memory limit, e.g. 1GiB (default: dask's auto)")
    p.add_argument("--dir", default=None)
    p.add_argument("--stage", default=None)
    args = p.parse_args()
    if args.stage == "single":
        print(json.dumps(stage_single(args)))
        return
    from _util import machine

    from dpgnn_core.data.partitioned import write_partitioned_csbm

    own = args.dir is None
    tmp = Path(args.dir or tempfile.mkdtemp(prefix="dpgnn-bench-part-"))
    args.dir = str(tmp)
    res: dict = {"machine": machine(), "load_avg": os.getloadavg(), "args": vars(args)}
    try:
        t0 = time.perf_counter()
        m = write_partitioned_csbm(tmp / "ds", partition_nodes=args.partition_nodes,
                                   num_nodes=args.nodes, avg_degree=args.avg_degree,
                                   feature_dim=args.feature_dim, seed=0, overwrite=True)
        res["generate"] = {"s": time.perf_counter() - t0, "edges": m["num_edges"],
                           "blocks": len(m["partitions"]["bounds"]),
                           "dataset_bytes": folder_bytes(tmp / "ds"),
                           "peak_rss_gib": _peak_gib()}
        cmd = [sys.executable, __file__, "--stage", "single", "--dir", str(tmp),
               "--hops", str(args.hops)]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        res["single_process"] = json.loads(out.strip().splitlines()[-1])
        res["two_workers"] = run_distributed(args)
        res["load_avg_after"] = os.getloadavg()
    finally:
        if own:
            shutil.rmtree(tmp, ignore_errors=True)
    print(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
