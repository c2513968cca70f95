"""Issue 6's results table: GAP's test accuracy against ε at edge level (ε ∈ {1, 2, 4, 8})
and node level (ε ∈ {4, 8, 16}), with GAP-∞, MLP and DP-MLP beside, on Cornell5, Amherst41
and Cora; plus the budget-split comparison at equal ε.

Runs the core library (the functions the GAP tasks call) and appends one JSON line per run
to ``benchmarks/results/gap.jsonl`` (resumable). ``--summary`` prints the tables.

    python benchmarks/results_gap.py [--datasets cornell5,amherst41,cora] [--seeds 0,1,2]
    python benchmarks/results_gap.py --summary
    python benchmarks/results_gap.py --issue11 [--datasets amherst41,cornell5] [--seeds 0,1,2]
    python benchmarks/results_gap.py --issue11 --summary

Recipe (GAP's defaults where the paper gives them): encoder 16 dims, hidden 64, K = 2 hops,
concatenation, Adam 100 epochs (EDP / ∞); DP-Adam 500 steps at expected batch 256 and
clip 1 (NDP) with degree bound D = 100; δ = 1 / (10 n_train); Facebook100 schools with
GAP's featurisation predicting year (classes >= 1000 nodes for Cornell5, >= 100 for
Amherst41, which has 1,934 labelled nodes), Cora on a stratified 75/10/15 split.

``--issue11`` re-runs GAP-NDP after the privacy audit (issue 11) into
``benchmarks/results/gap_issue11.jsonl``: node-level sensitivity √(D² + D) (√(min(c, D)² + D)
with row clipping c) instead of √D, D = the graph's maximum degree (GAP-NDP refuses a graph
beyond D; the old edge sampler is gone), secret noise, PLD accountant; same recipe
otherwise. Two configurations: no row clipping, and row clipping with c picked on validation
accuracy at ε = 8, seed 0 from the grid {1, √D, D/4} (those runs carry ``selection``);
DP-MLP with the current code (PLD) beside them.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))
from _util import append_jsonl, read_jsonl  # noqa: E402

OUT = HERE / "results" / "gap.jsonl"
OUT11 = HERE / "results" / "gap_issue11.jsonl"
EDGE_EPS = [1.0, 2.0, 4.0, 8.0]
NODE_EPS = [4.0, 8.0, 16.0]
SPLITS = {"even": (1.0, 1.0, 1.0), "pma-heavy": (1.3, 0.7, 1.3)}


def load(name: str):  # type: ignore[no-untyped-def]
    from results_node_level import SHARED
    from results_node_level import load as load_node

    from dpgnn_core.data.loaders.facebook100 import load_facebook100

    if name == "amherst41":
        return load_facebook100(SHARED / "facebook100" / "Amherst41.mat", min_class_size=100)
    return load_node(name)


def run_one(data, name: str, method: str, eps: float | None, seed: int,  # type: ignore[no-untyped-def]
            split: str = "even") -> dict:
    from dpgnn_core.methods import baseline, dp_mlp, gap
    from dpgnn_core.specs import DpMlpSpec, GapSpec, TrainSpec

    t = time.perf_counter()
    if method == "mlp":
        spec = TrainSpec(method="mlp", seed=seed, device="cpu")
        r = baseline.fit(data, spec)
        metrics = baseline.evaluate(data, baseline.predict(r.model, data, spec))
        spent = None
    elif method == "dp-mlp":
        res = dp_mlp.train_dp_mlp(data, DpMlpSpec(epsilon=eps, seed=seed, device="cpu"))
        metrics, spent = dp_mlp.evaluate_dp_mlp(res.model, data, "cpu"), res.report["epsilon"]
    else:
        level = {"gap-edp": "edge", "gap-ndp": "node", "gap-inf": "none"}[method]
        spec = GapSpec(level=level, epsilon=eps, seed=seed, device="cpu",
                       max_degree=100 if level == "node" else None,
                       budget_split=SPLITS[split])
        res = gap.train_gap(data, spec)
        metrics = gap.evaluate_gap(res.classifier, res.aggregations, data, "cpu")
        spent = res.report["epsilon"] if res.report["private"] else None
    return {"dataset": name, "method": method, "target_epsilon": eps, "epsilon": spent,
            "seed": seed, "split": split, "test_accuracy": metrics["test"]["accuracy"],
            "val_accuracy": metrics["val"]["accuracy"], "seconds": time.perf_counter() - t}


def done() -> list[dict]:
    return read_jsonl(OUT)


def record(r: dict) -> None:
    append_jsonl(OUT, r)


def sweep(names: list[str], seeds: list[int]) -> None:
    have = {(r["dataset"], r["method"], r["target_epsilon"], r["seed"], r["split"])
            for r in done()}
    for name in names:
        data = load(name)
        jobs = [("gap-inf", None, "even"), ("mlp", None, "even")]
        jobs += [("gap-edp", e, "even") for e in EDGE_EPS]
        jobs += [("gap-ndp", e, "even") for e in NODE_EPS]
        jobs += [("dp-mlp", e, "even") for e in NODE_EPS]
        jobs += [("gap-edp", 4.0, "pma-heavy"), ("gap-ndp", 8.0, "pma-heavy")]
        for seed in seeds:
            for method, eps, split in jobs:
                if (name, method, eps, seed, split) not in have:
                    record(run_one(data, name, method, eps, seed, split))


def summary() -> str:
    rows: dict[tuple, list[float]] = defaultdict(list)
    for r in done():
        rows[(r["dataset"], r["method"], r["target_epsilon"], r["split"])].append(
            r["test_accuracy"])

    def cell(k: tuple) -> str:
        v = rows.get(k)
        return f"{np.mean(v):.3f} ± {np.std(v):.3f} ({len(v)})" if v else ""

    out = []
    for name in ("cornell5", "amherst41", "cora"):
        out += [f"\n{name}: test accuracy, mean ± std over seeds (n)\n",
                "| method | " + " | ".join(f"ε = {e:g}" for e in EDGE_EPS) + " |",
                "|---" * (len(EDGE_EPS) + 1) + "|",
                "| GAP-EDP | " + " | ".join(cell((name, "gap-edp", e, "even"))
                                         for e in EDGE_EPS) + " |",
                "", "| method | " + " | ".join(f"ε = {e:g}" for e in NODE_EPS) + " |",
                "|---" * (len(NODE_EPS) + 1) + "|"]
        for m, label in (("gap-ndp", "GAP-NDP (before issue 11: ε not valid)"),
                         ("dp-mlp", "DP-MLP")):
            out.append(f"| {label} | " + " | ".join(cell((name, m, e, "even"))
                                                 for e in NODE_EPS) + " |")
        out.append(f"\nGAP-∞ {cell((name, 'gap-inf', None, 'even'))}; "
                   f"MLP {cell((name, 'mlp', None, 'even'))}")
        out.append("Budget split at equal ε: GAP-EDP ε=4 even "
                   f"{cell((name, 'gap-edp', 4.0, 'even'))} vs pma-heavy "
                   f"{cell((name, 'gap-edp', 4.0, 'pma-heavy'))}; GAP-NDP ε=8 "
                   f"even {cell((name, 'gap-ndp', 8.0, 'even'))} vs pma-heavy "
                   f"{cell((name, 'gap-ndp', 8.0, 'pma-heavy'))}")
    return "\n".join(out)


# --- issue 11: GAP-NDP after the privacy audit ------------------------------------------

#: Row clipping grid (label, c as a function of D), fixed before any run.
CLIP_GRID = {"1": lambda d: 1.0, "sqrt(D)": lambda d: float(np.sqrt(d)),
             "D/4": lambda d: d / 4.0}


def max_degree(data) -> int:  # type: ignore[no-untyped-def]
    """D as GAP-NDP's degree check computes it (max over nodes of max(d_in, d_out) on a
    graph flagged undirected, d_in + d_out on a directed one)."""
    from dpgnn_core.graph.gap_degree import max_degree_for_pma

    return max_degree_for_pma(np.asarray(data.edge_index), data.num_nodes,
                              directed=bool(data.directed))


def run_issue11(data, name: str, eps: float, seed: int, d: int,  # type: ignore[no-untyped-def]
                clip_label: str) -> dict:
    from dpgnn_core.methods import gap
    from dpgnn_core.specs import GapSpec

    c = None if clip_label == "none" else CLIP_GRID[clip_label](d)
    spec = GapSpec(level="node", epsilon=eps, seed=seed, device="cpu", max_degree=d,
                   row_clip=c)
    t = time.perf_counter()
    res = gap.train_gap(data, spec)
    metrics = gap.evaluate_gap(res.classifier, res.aggregations, data, "cpu")
    rep = res.report
    return {"dataset": name, "method": "gap-ndp", "clip": clip_label, "row_clip": c,
            "max_degree": d, "target_epsilon": eps, "epsilon": rep["epsilon"],
            "accountant": rep["accountant"], "delta": rep["delta"],
            "noise_multiplier": rep["noise_multiplier"],
            "pma_sensitivity": rep["pma_sensitivity"], "pma_noise_std": rep["pma_noise_std"],
            "seed": seed, "test_accuracy": metrics["test"]["accuracy"],
            "val_accuracy": metrics["val"]["accuracy"], "seconds": time.perf_counter() - t}


def before_noise(data, name: str) -> list[dict]:  # type: ignore[no-untyped-def]
    """The noise the issue-6 runs used (RDP, Δ = √100): calibration only, no training."""
    from dpgnn_core.methods import gap
    from dpgnn_core.specs import GapSpec

    out = []
    for eps in NODE_EPS:
        spec = GapSpec(level="node", epsilon=eps, seed=0, device="cpu", max_degree=100,
                       accountant="rdp")
        _, z, _ = gap.calibrate_gap(data, spec)
        out.append({"dataset": name, "method": "gap-ndp-before-calibration",
                    "target_epsilon": eps, "accountant": "rdp", "noise_multiplier": z,
                    "pma_sensitivity": 10.0, "pma_noise_std": 10.0 * z, "max_degree": 100})
    return out


def key11(r: dict) -> tuple:
    return (r["dataset"], r["method"], r.get("clip"), r["target_epsilon"], r.get("seed"),
            r.get("selection", False))


def selected_clip(name: str) -> str | None:
    sel = [r for r in read_jsonl(OUT11) if r["dataset"] == name and r.get("selection")]
    return max(sel, key=lambda r: r["val_accuracy"])["clip"] if sel else None


def sweep_issue11(names: list[str], seeds: list[int]) -> None:
    for name in names:
        data = load(name)
        d = max_degree(data)
        have = {key11(r) for r in read_jsonl(OUT11)}
        if (name, "gap-ndp-before-calibration", None, NODE_EPS[0], None, False) not in have:
            for r in before_noise(data, name):
                append_jsonl(OUT11, r)
        for label in CLIP_GRID:  # 1. row clipping c on validation at ε = 8, seed 0
            if (name, "gap-ndp", label, 8.0, 0, True) not in have:
                append_jsonl(OUT11, {**run_issue11(data, name, 8.0, 0, d, label),
                                     "selection": True})
        best = selected_clip(name)
        assert best is not None
        for seed in seeds:  # 2. no clipping and the selected c, every ε
            for label in ("none", best):
                for eps in NODE_EPS:
                    if (name, "gap-ndp", label, eps, seed, False) not in have:
                        append_jsonl(OUT11, run_issue11(data, name, eps, seed, d, label))
            for eps in NODE_EPS:  # 3. DP-MLP with the current code (PLD) beside it
                if (name, "dp-mlp", None, eps, seed, False) not in have:
                    r = run_one(data, name, "dp-mlp", eps, seed)
                    append_jsonl(OUT11, {**r, "accountant": "pld"})


def clip_name(label: str | None, c: float | None) -> str:
    """``D/4 = 169.5``, or just ``1`` where the label is the value."""
    if c is None:
        return str(label)
    return label if label == f"{c:.4g}" else f"{label} = {c:.4g}"


def summary_issue11() -> str:
    def fmt(v: list[float]) -> str:
        return f"{np.mean(v):.3f} ± {np.std(v):.3f} ({len(v)})" if v else ""

    old, new = done(), read_jsonl(OUT11)
    out = []
    for name in ("cornell5", "amherst41"):
        rs = [r for r in new if r["dataset"] == name]
        if not rs:
            continue
        best = selected_clip(name)
        runs = [r for r in rs if r["method"] == "gap-ndp" and not r.get("selection")]
        d = next(r["max_degree"] for r in runs) if runs else None
        c = next((r["row_clip"] for r in rs if r.get("clip") == best), None)

        def old_cell(m: str, e: float, n: str = name) -> str:
            return fmt([r["test_accuracy"] for r in old if r["dataset"] == n
                        and r["method"] == m and r["target_epsilon"] == e
                        and r["split"] == "even"])

        def new_cell(label: str | None, e: float, runs: list = runs) -> str:
            return fmt([r["test_accuracy"] for r in runs
                        if r["clip"] == label and r["target_epsilon"] == e])

        out += [f"\n{name}: test accuracy, mean ± std over seeds (n)\n",
                "| method | " + " | ".join(f"ε = {e:g}" for e in NODE_EPS) + " |",
                "|---" * (len(NODE_EPS) + 1) + "|",
                "| GAP-NDP before (D = 100 edge sampler, √D, RDP; unsound) | "
                + " | ".join(old_cell("gap-ndp", e) for e in NODE_EPS) + " |",
                f"| GAP-NDP after, no clipping (D = max degree = {d}) | "
                + " | ".join(new_cell("none", e) for e in NODE_EPS) + " |",
                f"| GAP-NDP after, row clip c = {clip_name(best, c)} | "
                + " | ".join(new_cell(best, e) for e in NODE_EPS) + " |",
                "| DP-MLP (issue 6 runs, RDP) | "
                + " | ".join(old_cell("dp-mlp", e) for e in NODE_EPS) + " |",
                "| DP-MLP (current code, PLD) | "
                + " | ".join(fmt([r["test_accuracy"] for r in rs if r["method"] == "dp-mlp"
                                  and r["target_epsilon"] == e]) for e in NODE_EPS) + " |",
                ""]

        def noise(rows: list[dict], e: float) -> str:
            r = next((r for r in rows if r["target_epsilon"] == e), None)
            return f"{r['pma_noise_std']:.4g}" if r else "?"

        confs = [("before", [r for r in rs if r["method"] == "gap-ndp-before-calibration"]),
                 ("no clipping", [r for r in runs if r["clip"] == "none"]),
                 (f"c = {clip_name(best, c)}", [r for r in runs if r["clip"] == best])]
        for label, rows in confs:
            if rows:
                out.append(f"- {label}: D = {rows[0]['max_degree']}, Δ = "
                           f"{rows[0]['pma_sensitivity']:.4g}, PMA noise std (ε = 4 / 8 / 16)"
                           f" = {' / '.join(noise(rows, e) for e in NODE_EPS)}")
        sel = [r for r in rs if r.get("selection")]
        out.append("- row clipping selection (ε = 8, seed 0, validation accuracy): "
                   + ", ".join(f"c = {clip_name(r['clip'], r['row_clip'])} (Δ = "
                               f"{r['pma_sensitivity']:.4g}): val {r['val_accuracy']:.3f}, "
                               f"test {r['test_accuracy']:.3f}" for r in sel))
    return "\n".join(out)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--datasets", default="cornell5,amherst41,cora")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--summary", action="store_true")
    ap.add_argument("--issue11", action="store_true",
                    help="GAP-NDP after the privacy audit (gap_issue11.jsonl)")
    a = ap.parse_args()
    if a.issue11 and a.summary:
        print(summary_issue11())
    elif a.issue11:
        import torch

        torch.set_num_threads(1)
        sweep_issue11(a.datasets.split(","), [int(s) for s in a.seeds.split(",")])
    elif a.summary:
        print(summary())
    else:
        import torch

        torch.set_num_threads(1)
        sweep(a.datasets.split(","), [int(s) for s in a.seeds.split(",")])
