"""Samplers at scale (issue 4): SAMPLE-EDGELISTS, subgraphs r = 1, 2, DRW, GAP's degree bound.

Scale: CSBM with 2.5M nodes and ~100M directed edges (all nodes training nodes: the hardest
case). Ratios: each vectorised sampler against its per-node Python reference
(benchmarks/reference_samplers.py) on the same 200k-node graph, in the same run.

Usage: python benchmarks/bench_samplers.py [--nodes 2500000] [--avg-degree 40]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _util import machine
from reference_samplers import (
    degree_bound_ref,
    drw_ref,
    sample_edgelists_ref,
    subgraphs_ref,
)

from dpgnn_core.data.synthetic import csbm
from dpgnn_core.graph.dpgnn_sampler import sample_edgelists, sample_subgraphs
from dpgnn_core.graph.gap_degree import bound_degree
from dpgnn_core.graph.random_walk import drw

PAGE = os.sysconf("SC_PAGE_SIZE")


class PeakRss:
    """Peak resident memory during a block, polled every 20 ms (GiB)."""

    def __enter__(self) -> PeakRss:
        self.peak = self._rss()
        self._stop = False
        self._t = threading.Thread(target=self._poll, daemon=True)
        self._t.start()
        return self

    def _rss(self) -> int:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * PAGE

    def _poll(self) -> None:
        while not self._stop:
            self.peak = max(self.peak, self._rss())
            time.sleep(0.02)

    def __exit__(self, *exc: object) -> None:
        self._stop = True
        self._t.join()
        self.peak = max(self.peak, self._rss())

    @property
    def gib(self) -> float:
        return self.peak / 2**30


def stage(fn):  # type: ignore[no-untyped-def]
    with PeakRss() as mem:
        t = time.perf_counter()
        out = fn()
        dt = time.perf_counter() - t
    return dt, mem.gib, out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--nodes", type=int, default=2_500_000)
    p.add_argument("--avg-degree", type=float, default=40.0)
    p.add_argument("--ref-nodes", type=int, default=200_000)
    args = p.parse_args()
    res: dict[str, dict[str, float]] = {}

    # Ratios against the references, on a graph they can finish.
    small = csbm(num_nodes=args.ref_nodes, avg_degree=10, seed=1)
    tr = np.ones(small.num_nodes, bool)
    k = 7
    t_ours, _, s_small = stage(lambda: sample_edgelists(small.edge_index, small.num_nodes, tr,
                                                        k, np.random.default_rng(0)))
    t_ref, _, ref_edges = stage(lambda: sample_edgelists_ref(small.edge_index, tr, k, 0))
    res["ratio_sample_edgelists"] = {"ours_s": t_ours, "reference_s": t_ref,
                                     "speedup": t_ref / t_ours}
    for r in (1, 2):
        t_ours, _, _ = stage(lambda r=r: sample_subgraphs(s_small, small.num_nodes, tr, r, k))
        t_ref, _, _ = stage(lambda r=r: subgraphs_ref(ref_edges, np.flatnonzero(tr), r))
        res[f"ratio_subgraphs_r{r}"] = {"ours_s": t_ours, "reference_s": t_ref,
                                        "speedup": t_ref / t_ours}
    drw(small.edge_index, small.num_nodes, tr, 4, seed=0)  # compile once (cached on disk)
    t_ours, _, _ = stage(lambda: drw(small.edge_index, small.num_nodes, tr, 4, seed=0))
    t_ref, _, _ = stage(lambda: drw_ref(small.edge_index, tr, 4, 0))
    res["ratio_drw"] = {"ours_s": t_ours, "reference_s": t_ref, "speedup": t_ref / t_ours}
    t_ours, _, _ = stage(lambda: bound_degree(small.edge_index, small.num_nodes, 10,
                                              directed=False, rng=np.random.default_rng(0)))
    t_ref, _, _ = stage(lambda: degree_bound_ref(small.edge_index, 10, 0))
    res["ratio_degree_bound"] = {"ours_s": t_ours, "reference_s": t_ref,
                                 "speedup": t_ref / t_ours}

    # DRW on a 170k-node graph (target <= 10 s).
    g170 = csbm(num_nodes=170_000, avg_degree=20, seed=2)
    tr170 = np.ones(g170.num_nodes, bool)
    t, gib, sg = stage(lambda: drw(g170.edge_index, g170.num_nodes, tr170, 4, seed=0))
    res["drw_170k"] = {"seconds": t, "subgraphs": sg.num_subgraphs, "peak_rss_gib": gib}

    # Full scale.
    t, gib, big = stage(lambda: csbm(num_nodes=args.nodes, avg_degree=args.avg_degree,
                                     feature_dim=4, seed=0))
    res["generate"] = {"seconds": t, "edges": big.num_edges, "peak_rss_gib": gib}
    train = np.ones(big.num_nodes, bool)
    t, gib, sampled = stage(lambda: sample_edgelists(big.edge_index, big.num_nodes, train, k,
                                                     np.random.default_rng(0)))
    res["sample_edgelists_100M"] = {"seconds": t, "edges_per_s": big.num_edges / t,
                                    "kept_edges": int(sampled.edge_index.shape[1]),
                                    "peak_rss_gib": gib}
    for r in (1, 2):
        t, gib, sg = stage(lambda r=r: sample_subgraphs(sampled, big.num_nodes, train, r, k))
        res[f"subgraphs_r{r}_2.5M_roots"] = {
            "seconds": t, "memberships": int(sg.nodes.shape[0]),
            "max_occurrence": int(sg.occurrences(big.num_nodes).max()),
            "bound": sg.occurrence_bound, "peak_rss_gib": gib}
        del sg
    t, gib, bounded = stage(lambda: bound_degree(big.edge_index, big.num_nodes, 10,
                                                 directed=False, rng=np.random.default_rng(0)))
    res["gap_degree_bound_100M"] = {"seconds": t, "edges_per_s": big.num_edges / t,
                                    "kept_edges": int(bounded.shape[1]), "peak_rss_gib": gib}
    print(json.dumps({"machine": machine(), "nodes": args.nodes, "results": res}, indent=2))


if __name__ == "__main__":
    main()
