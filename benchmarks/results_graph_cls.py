"""Issue 7's results: private graph classification (GCN) against ε on the paper's
synthetic set, Fingerprint (4-class merge), ogbg-molbace (scaffold split), MUTAG, PROTEINS
and ENZYMES, with the non-private model through the same path; and the DP step's overhead
against the non-private step at equal batch (ratio, measured in one run).

Appends one JSON line per run to ``benchmarks/results/graph_cls.jsonl`` (resumable);
``--summary`` prints the table.

    python benchmarks/results_graph_cls.py [--datasets ...] [--seeds 0,1,2]
    python benchmarks/results_graph_cls.py --summary
    python benchmarks/results_graph_cls.py --overhead

Recipe (chosen on the synthetic set's validation split, then fixed for every dataset):
3 GCN layers of width 64, mean pooling, DP-Adam lr 1e-2, expected batch 64, 300 steps,
clip 1; δ = 1 / N_train; splits: synthetic 600/100/300, TU random stratified 80/10/10 (seed
0), molbace OGB's scaffold split.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))
from _util import append_jsonl, read_jsonl  # noqa: E402

OUT = HERE / "results" / "graph_cls.jsonl"
SHARED = HERE.parent.parent / "shared" / "datasets"
EPSILONS = [1.0, 5.0, 10.0]
NAMES = ["synthetic", "fingerprint", "molbace", "mutag", "proteins", "enzymes"]


def load(name: str):  # type: ignore[no-untyped-def]
    from dpgnn_core.data.loaders.ogb import load_ogbg
    from dpgnn_core.data.loaders.tu import load_tu
    from dpgnn_core.data.synthetic import er_graphs

    if name == "synthetic":
        return er_graphs(seed=0)
    if name == "molbace":
        return load_ogbg(SHARED / "ogbg_molbace")
    tu = {"fingerprint": "Fingerprint", "mutag": "MUTAG", "proteins": "PROTEINS",
          "enzymes": "ENZYMES"}[name]
    return load_tu(SHARED / "tudataset" / tu / "raw", fingerprint_merge=name == "fingerprint")


def run_one(data, name: str, eps: float | None, seed: int) -> dict:  # type: ignore[no-untyped-def]
    from dpgnn_core.methods.graph_cls import evaluate_graphs, train_graph_classifier
    from dpgnn_core.specs import GraphClsSpec

    t = time.perf_counter()
    r = train_graph_classifier(data, GraphClsSpec(epsilon=eps, seed=seed, device="cpu",
                                                  eval_every=10**6))
    m = evaluate_graphs(r.model, data, "cpu")
    return {"dataset": name, "target_epsilon": eps, "seed": seed,
            "epsilon": r.report["epsilon"] if r.report["private"] else None,
            **{f"test_{k}": v for k, v in m["test"].items()},
            "val_accuracy": m["val"]["accuracy"], "seconds": time.perf_counter() - t}


def done() -> list[dict]:
    return read_jsonl(OUT)


def sweep(names: list[str], seeds: list[int]) -> None:
    have = {(r["dataset"], r["target_epsilon"], r["seed"]) for r in done()}
    for name in names:
        data = load(name)
        for seed in seeds:
            for eps in [None, *EPSILONS]:
                if (name, eps, seed) not in have:
                    append_jsonl(OUT, run_one(data, name, eps, seed))


def overhead(repeat: int = 5) -> dict:
    """Private vs non-private step on the same Poisson-size batch of 64 synthetic graphs."""
    import torch

    from dpgnn_core.data.synthetic import er_graphs
    from dpgnn_core.graph.subgraphs import build_batch
    from dpgnn_core.methods.graph_cls import graph_records
    from dpgnn_core.models.graph_gnn import GraphGNN
    from dpgnn_core.training.dp_sgd import Clipping, train_steps

    data = er_graphs(seed=0)
    b = build_batch(graph_records(data), np.arange(64), data.x, normalisation="none")
    y = torch.from_numpy(data.graph_y[:64])
    model = GraphGNN("gcn", 9, 2)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def losses():  # type: ignore[no-untyped-def]
        return torch.nn.functional.cross_entropy(model(b.x, b.adj, b.mask), y,
                                                 reduction="none"), 0.0

    best = {"non_private": float("inf"), "private": float("inf")}
    for _ in range(repeat):
        for k, clip in (("non_private", None), ("private", Clipping((1.0,), (1.0,), 64.0))):
            t = time.perf_counter()
            train_steps(model, opt, 20, losses, clipping=clip)
            best[k] = min(best[k], (time.perf_counter() - t) / 20)
    return {**best, "ratio": best["private"] / best["non_private"]}


def summary() -> str:
    rows: dict[tuple, list[dict]] = defaultdict(list)
    for r in done():
        rows[(r["dataset"], r["target_epsilon"])].append(r)

    def cell(name: str, e: float | None, key: str) -> str:
        v = [r[key] for r in rows.get((name, e), []) if r[key] == r[key]]
        return f"{np.mean(v):.3f} ± {np.std(v):.3f} ({len(v)})" if v else ""

    out = ["| dataset | metric | " + " | ".join(f"ε = {e:g}" for e in EPSILONS)
           + " | non-private |", "|---" * (len(EPSILONS) + 3) + "|"]
    for name in NAMES:
        for key in ("test_accuracy", "test_roc_auc"):
            out.append(f"| {name} | {key[5:]} | " + " | ".join(
                cell(name, e, key) for e in [*EPSILONS, None]) + " |")
    return "\n".join(out)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--datasets", default=",".join(NAMES))
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--summary", action="store_true")
    ap.add_argument("--overhead", action="store_true")
    a = ap.parse_args()
    if a.summary:
        print(summary())
    elif a.overhead:
        print(json.dumps(overhead(), indent=1))
    else:
        import torch

        torch.set_num_threads(1)
        sweep(a.datasets.split(","), [int(s) for s in a.seeds.split(",")])
