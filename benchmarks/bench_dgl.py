"""The optional DGL backend against the default paths, in one run (issue 18).

1. Sparse inference of the subgraph models (gcn, sage, gin; 2 layers): DGL's GraphConv /
   SAGEConv / GINConv with the trained weights (``backend="dgl"``) against PyG's
   ``SimpleConv`` path (``backend="pyg"``, the peer), from the same ``edge_index`` (DGL builds
   its graph in the call, as evaluation does). Outputs checked equal to 1e-5.
2. Random walks: ``dgl.sampling.random_walk`` from every training node, length L, against
   DRW's numba kernel (:func:`dpgnn_core.graph.random_walk.drw`, the peer) on the same graph.
   DGL's walks are plain walks, not DRW's disjoint ones (a step there chooses among
   neighbours not yet used by any subgraph, state that DGL's walk cannot see): the DGL time
   is a lower bound on anything DGL-based, for the ratio only (docs/privacy.md).

Usage: nice -n 10 python benchmarks/bench_dgl.py [--nodes 100000] [--avg-degree 20]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _util import machine, timed

from dpgnn_core.data.synthetic import csbm
from dpgnn_core.graph.random_walk import drw
from dpgnn_core.interop.dgl import import_dgl
from dpgnn_core.models.subgraph_gnn import SubgraphGNN, sparse_logits


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--nodes", type=int, default=100_000)
    p.add_argument("--avg-degree", type=float, default=20.0)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--walk-length", type=int, default=4)
    p.add_argument("--repeat", type=int, default=3)
    a = p.parse_args()
    dgl = import_dgl()
    g = csbm(num_nodes=a.nodes, avg_degree=a.avg_degree, feature_dim=32, num_classes=5,
             seed=0)
    x, ei = torch.from_numpy(g.x), torch.from_numpy(g.edge_index)
    out: dict[str, object] = {"machine": machine(), "torch": torch.__version__,
                              "dgl": dgl.__version__, "threads": torch.get_num_threads(),
                              "nodes": g.num_nodes, "edges": g.num_edges,
                              "hidden": a.hidden, "layers": a.layers}
    inference = {}
    for conv in ("gcn", "sage", "gin"):
        torch.manual_seed(0)
        model = SubgraphGNN(conv, g.num_features, g.num_classes, hidden=a.hidden,
                            layers=a.layers, gin_eps=0.2).eval()
        with torch.no_grad():
            t_pyg, ref = timed(lambda m=model: sparse_logits(m, x, ei, "pyg"), a.repeat)
            t_dgl, got = timed(lambda m=model: sparse_logits(m, x, ei, "dgl"), a.repeat)
        inference[conv] = {"pyg_s": round(t_pyg, 4), "dgl_s": round(t_dgl, 4),
                           "ratio_dgl_over_pyg": round(t_dgl / t_pyg, 3),
                           "max_abs_diff": float((got - ref).abs().max())}
        print(conv, inference[conv], flush=True)
    out["inference"] = inference

    train = g.mask("train")
    drw(g.edge_index, g.num_nodes, train, a.walk_length, rng=0)  # numba compile (cached)
    t_drw, sg = timed(lambda: drw(g.edge_index, g.num_nodes, train, a.walk_length,
                                  rng=np.random.default_rng(1)), a.repeat)
    graph = dgl.graph((ei[0], ei[1]), num_nodes=g.num_nodes)
    roots = torch.from_numpy(np.flatnonzero(train))
    t_walk, (traces, _) = timed(lambda: dgl.sampling.random_walk(graph, roots,
                                                                 length=a.walk_length),
                                a.repeat)
    out["walks"] = {"roots": int(train.sum()), "walk_length": a.walk_length,
                    "drw_numba_s": round(t_drw, 4), "dgl_random_walk_s": round(t_walk, 4),
                    "ratio_dgl_over_drw": round(t_walk / t_drw, 3),
                    "drw_subgraphs": int(sg.num_subgraphs),
                    "dgl_walks": int(traces.shape[0])}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
