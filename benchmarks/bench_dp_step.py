"""Issue 5's step benchmarks, each a ratio measured in one run (A/B interleaved, best of n):

1. One DP-GCN step (1 layer, batch 10,000 subgraphs, K = 7, latent 256) against the same
   model's non-private step on the same batch; also against the peer it replaced (Opacus's
   GradSampleModule hooks + DPOptimizer on the same dense model). Peak memory of the
   private step is measured in a fresh process (peak RSS, whole process).
2. One DP-MLP step against Opacus's own ``PrivacyEngine.make_private`` DP-MLP at the same
   batch.

    python benchmarks/bench_dp_step.py [--batch 10000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _util import machine, peak_rss_gib

from dpgnn_core.data.synthetic import csbm
from dpgnn_core.graph.dpgnn_sampler import sample_edgelists, sample_subgraphs
from dpgnn_core.graph.subgraphs import build_batch
from dpgnn_core.models.mlp import MLP
from dpgnn_core.models.subgraph_gnn import SubgraphGNN
from dpgnn_core.training.dp_sgd import Clipping, train_steps

FEATURES, CLASSES = 128, 6


def gcn_batch(batch: int, k: int = 7):  # type: ignore[no-untyped-def]
    g = csbm(num_nodes=int(batch * 1.4), avg_degree=12, feature_dim=FEATURES,
             num_classes=CLASSES, seed=0)
    train = np.ones(g.num_nodes, dtype=bool)
    sg = sample_subgraphs(sample_edgelists(g.edge_index, g.num_nodes, train, k,
                                           np.random.default_rng(0)), g.num_nodes, train, 1, k)
    t = time.perf_counter()
    b = build_batch(sg, np.arange(batch), g.x, normalisation="none")
    return b, torch.from_numpy(np.asarray(g.y)[sg.roots[:batch]]), time.perf_counter() - t


STEPS = 3  # steps per timed call: set-up (validation, hooks) is paid once per run, not step


def interleaved(fns: dict, repeat: int, per: int = 1) -> dict[str, float]:  # type: ignore[type-arg]
    """Best time per step of each function (each call runs ``per`` steps), A/B interleaved."""
    best = {k: float("inf") for k in fns}
    for _ in range(repeat):
        for k, fn in fns.items():
            t = time.perf_counter()
            fn()
            best[k] = min(best[k], (time.perf_counter() - t) / per)
    return best


def gcn_steps(batch: int, repeat: int) -> dict:  # type: ignore[type-arg]
    from opacus import GradSampleModule
    from opacus.optimizers import DPOptimizer

    b, y, build_s = gcn_batch(batch)
    torch.manual_seed(0)
    model = SubgraphGNN("gcn", FEATURES, CLASSES, hidden=256, layers=1)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def losses():  # type: ignore[no-untyped-def]
        out = model(b.x, b.adj, b.mask)
        return torch.nn.functional.cross_entropy(out, y, reduction="none"), 0.0

    clip = Clipping((1.0,), (3.0,), float(batch))
    gen = torch.Generator().manual_seed(0)
    twin = SubgraphGNN("gcn", FEATURES, CLASSES, hidden=256, layers=1)
    gsm = GradSampleModule(twin)
    dpo = DPOptimizer(torch.optim.Adam(twin.parameters(), lr=1e-3), noise_multiplier=3.0,
                      max_grad_norm=1.0, expected_batch_size=batch)

    def opacus_step() -> None:
        dpo.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(gsm(b.x, b.adj, b.mask), y).backward()
        dpo.step()

    fns = {"non_private": lambda: train_steps(model, opt, STEPS, losses, clipping=None),
           "private": lambda: train_steps(model, opt, STEPS, losses, clipping=clip,
                                          generator=gen)}
    best = interleaved(fns, repeat, STEPS)
    best["opacus_hooks"] = interleaved({"o": opacus_step}, max(2, repeat // 2))["o"]
    return {"batch": batch, "padded_size": int(b.x.shape[1]), "build_batch_s": build_s,
            **{f"{k}_s": v for k, v in best.items()},
            "ratio_private_vs_non_private": best["private"] / best["non_private"],
            "ratio_private_vs_opacus_hooks": best["private"] / best["opacus_hooks"]}


def gcn_peak_memory(batch: int) -> dict:  # type: ignore[type-arg]
    """Peak RSS of a fresh process that builds the batch and runs one private step, and of
    one that builds it and runs one non-private step (the same baseline of torch + data)."""
    import tempfile

    b, y, _ = gcn_batch(batch)
    out = {}
    with tempfile.TemporaryDirectory() as d:
        path = str(Path(d) / "batch.pt")
        torch.save({"x": b.x, "adj": b.adj, "mask": b.mask, "y": y}, path)
        for mode in ("private", "non_private", "load_only"):
            r = subprocess.run([sys.executable, __file__, "--memory-child", mode,
                                "--batch-file", path], capture_output=True, text=True,
                               check=True)
            out[f"peak_rss_gib_{mode}"] = float(r.stdout.strip().splitlines()[-1])
    return out


def memory_child(mode: str, path: str) -> None:
    blob = torch.load(path)
    x, adj, mask, y = blob["x"], blob["adj"], blob["mask"], blob["y"]
    batch = x.shape[0]
    if mode == "load_only":
        print(vm_hwm_gib())
        return
    model = SubgraphGNN("gcn", FEATURES, CLASSES, hidden=256, layers=1)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def losses():  # type: ignore[no-untyped-def]
        return torch.nn.functional.cross_entropy(model(x, adj, mask), y,
                                                 reduction="none"), 0.0

    clip = Clipping((1.0,), (3.0,), float(batch)) if mode == "private" else None
    train_steps(model, opt, 2, losses, clipping=clip)
    print(vm_hwm_gib())


def vm_hwm_gib() -> float:
    """Peak RSS of this process since exec (VmHWM; ru_maxrss would include the parent's
    footprint inherited at fork)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 2**20
    return peak_rss_gib()


def mlp_steps(batch: int, repeat: int) -> dict:  # type: ignore[type-arg]
    from opacus import PrivacyEngine

    torch.manual_seed(0)
    x, y = torch.randn(batch, FEATURES), torch.randint(0, CLASSES, (batch,))
    ours = MLP(FEATURES, 256, CLASSES, 2, dropout=0.0)
    theirs = MLP(FEATURES, 256, CLASSES, 2, dropout=0.0)
    theirs.load_state_dict(ours.state_dict())
    opt = torch.optim.Adam(ours.parameters(), lr=1e-3)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y),
                                         batch_size=batch)
    engine = PrivacyEngine(accountant="rdp")
    model_o, opt_o, _ = engine.make_private(
        module=theirs, optimizer=torch.optim.Adam(theirs.parameters(), lr=1e-3),
        data_loader=loader, noise_multiplier=1.0, max_grad_norm=1.0, poisson_sampling=False)
    clip = Clipping((1.0,), (1.0,), float(batch))
    gen = torch.Generator().manual_seed(0)

    def ours_steps() -> None:
        train_steps(ours, opt, STEPS, lambda: (torch.nn.functional.cross_entropy(
            ours(x), y, reduction="none"), 0.0), clipping=clip, generator=gen)

    def opacus_step() -> None:
        opt_o.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(model_o(x), y).backward()
        opt_o.step()

    def opacus_steps() -> None:
        for _ in range(STEPS):
            opacus_step()

    best = interleaved({"dp_mlp": ours_steps, "opacus_make_private": opacus_steps}, repeat,
                       STEPS)
    return {"batch": batch, **{f"{k}_s": v for k, v in best.items()},
            "ratio_dp_mlp_vs_opacus": best["dp_mlp"] / best["opacus_make_private"]}


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--memory-child")
    ap.add_argument("--batch-file")
    a = ap.parse_args()
    if a.memory_child:
        memory_child(a.memory_child, a.batch_file)
        sys.exit(0)
    res = {"machine": machine(), "torch_threads": torch.get_num_threads(),
           "dp_gcn_step": {**gcn_steps(a.batch, a.repeat), **gcn_peak_memory(a.batch)},
           "dp_mlp_step": mlp_steps(a.batch, a.repeat)}
    print(json.dumps(res, indent=1))
