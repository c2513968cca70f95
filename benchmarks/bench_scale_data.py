"""Synthetic generation and ingest at 2.5M nodes / ~100M directed edges, then Parquet reads
against ``numpy.fromfile`` of the same bytes.

Usage: python benchmarks/bench_scale_data.py [--nodes 2500000] [--avg-degree 40] [--dir D]
Stages run in separate processes so each reports its own peak memory.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def stage_generate(args: argparse.Namespace) -> dict:
    from _util import peak_rss_gib, timed

    from dpgnn_core.data.store import write_dataset
    from dpgnn_core.data.synthetic import csbm

    t_gen, data = timed(lambda: csbm(num_nodes=args.nodes, avg_degree=args.avg_degree,
                                     feature_dim=16, num_classes=10, seed=0))
    peak_gen = peak_rss_gib()
    t_write, _ = timed(lambda: write_dataset(data, Path(args.dir) / "ds", overwrite=True))
    # Raw bytes of the same arrays for the fromfile baseline.
    data.edge_index[0].tofile(Path(args.dir) / "src.bin")
    data.edge_index[1].tofile(Path(args.dir) / "dst.bin")
    data.x.tofile(Path(args.dir) / "x.bin")
    return {"nodes": data.num_nodes, "edges": data.num_edges, "generate_s": t_gen,
            "write_parquet_s": t_write, "peak_rss_generate_gib": peak_gen,
            "peak_rss_total_gib": peak_rss_gib(),
            "edges_per_s_generate": data.num_edges / t_gen}


def stage_read(args: argparse.Namespace) -> dict:
    import numpy as np
    import torch
    from _util import peak_rss_gib, timed

    from dpgnn_core.data.store import read_edges, read_features

    d = Path(args.dir)

    def parquet_edges():
        ei, _ = read_edges(d / "ds")
        return torch.from_numpy(ei[0]), torch.from_numpy(ei[1])

    def fromfile_edges():
        return (torch.from_numpy(np.fromfile(d / "src.bin", dtype=np.int64)),
                torch.from_numpy(np.fromfile(d / "dst.bin", dtype=np.int64)))

    def parquet_x():
        return torch.from_numpy(read_features(d / "ds"))

    def fromfile_x():
        return torch.from_numpy(np.fromfile(d / "x.bin", dtype=np.float32))

    out = {}
    for name, fn in (("edges_parquet_s", parquet_edges), ("edges_fromfile_s", fromfile_edges),
                     ("features_parquet_s", parquet_x), ("features_fromfile_s", fromfile_x)):
        out[name], res = timed(fn, repeat=3)
        del res
    pe, fe = parquet_edges(), fromfile_edges()
    assert torch.equal(pe[0], fe[0]) and torch.equal(pe[1], fe[1])
    out["edges_ratio_parquet_over_fromfile"] = out["edges_parquet_s"] / out["edges_fromfile_s"]
    out["features_ratio_parquet_over_fromfile"] = (out["features_parquet_s"]
                                                   / out["features_fromfile_s"])
    out["peak_rss_read_gib"] = peak_rss_gib()
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--nodes", type=int, default=2_500_000)
    p.add_argument("--avg-degree", type=float, default=40.0)
    p.add_argument("--dir", default=None)
    p.add_argument("--stage", default=None)
    p.add_argument("--keep", action="store_true")
    args = p.parse_args()
    if args.stage:
        fn = {"generate": stage_generate, "read": stage_read}[args.stage]
        print(json.dumps(fn(args)))
        return
    from _util import machine

    tmp = args.dir or tempfile.mkdtemp(prefix="dpgnn-bench-")
    res = {"machine": machine()}
    try:
        for stage in ("generate", "read"):
            cmd = [sys.executable, __file__, "--stage", stage, "--dir", tmp, "--nodes",
                   str(args.nodes), "--avg-degree", str(args.avg_degree)]
            res[stage] = json.loads(subprocess.run(cmd, check=True, capture_output=True,
                                                   text=True).stdout.strip().splitlines()[-1])
    finally:
        if not args.keep and args.dir is None:
            shutil.rmtree(tmp, ignore_errors=True)
    print(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
