"""PMA at scale against plain ``torch.sparse.mm`` on the same data, in one run.

Needs a dataset folder (e.g. the 2.5M-node / 100M-edge CSBM that
``bench_scale_data.py --dir D --keep`` writes to D/ds). Times K = 3 hops of PMA (sum
aggregation, Gaussian noise, row normalisation) on 16-dimensional encodings against K plain
``torch.sparse.mm`` products with the same sparse matrix, best of ``--repeat``, and reports
peak RSS.

    python benchmarks/bench_pma.py --dataset D/ds [--hops 3] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _util import machine, peak_rss_gib

from dpgnn_core.data.store import read_edges, read_manifest
from dpgnn_core.methods.gap import aggregation_matrix, pma, row_normalise


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dataset", required=True)
    ap.add_argument("--hops", type=int, default=3)
    ap.add_argument("--dim", type=int, default=16)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    n = int(read_manifest(a.dataset)["num_nodes"])
    t = time.perf_counter()
    ei = torch.from_numpy(read_edges(a.dataset)[0])
    read_s = time.perf_counter() - t
    t = time.perf_counter()
    adj = aggregation_matrix(ei, n)
    build_s = time.perf_counter() - t
    del ei
    x0 = row_normalise(torch.randn(n, a.dim, generator=torch.Generator().manual_seed(0)))

    def plain() -> torch.Tensor:
        h = x0
        for _ in range(a.hops):
            h = torch.sparse.mm(adj, h)
        return h

    def ours() -> list[torch.Tensor]:
        return pma(x0, adj, a.hops, 1.0, torch.Generator().manual_seed(1))

    best = {"plain": float("inf"), "pma": float("inf")}
    for _ in range(a.repeat):
        for name, fn in (("plain", plain), ("pma", ours)):
            t = time.perf_counter()
            out = fn()
            best[name] = min(best[name], time.perf_counter() - t)
            del out
    print(json.dumps({"machine": machine(), "nodes": n, "edges": int(adj._nnz()),
                      "hops": a.hops, "dim": a.dim, "read_edges_s": read_s,
                      "build_sparse_s": build_s, "plain_sparse_mm_s": best["plain"],
                      "pma_s": best["pma"], "ratio_pma_vs_plain": best["pma"] / best["plain"],
                      "peak_rss_gib": peak_rss_gib()}, indent=1))


if __name__ == "__main__":
    main()
