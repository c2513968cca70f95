"""Issue 5's step benchmarks, each a ratio measured in one run (A/B interleaved, best of n):

1. One DP-GCN step (1 layer, batch 10,000 subgraphs, K = 7, latent 256) against the same
   model's non-private step on the same batch; also against two Opacus peers on the same
   dense model: the one it replaced (``GradSampleModule`` hooks + ``DPOptimizer``, which
   materialises per-sample gradients) and Opacus's fastest mode, ghost clipping
   (``PrivacyEngine.make_private(..., grad_sample_mode="ghost")``: per-sample norms from
   activations and output gradients, then a second backward of the clip-weighted loss).
   Peak memory of the private steps is measured in fresh processes (peak RSS, whole
   process).
2. One DP-MLP step against Opacus's own ``PrivacyEngine.make_private`` DP-MLP at the same
   batch, in hooks mode and in ghost mode.

Every private step does the same work: per-sample clipping to C = 1 (one flat group),
Gaussian noise of std z*C added to the clipped sum, division by the batch size, one Adam
step. Ghost clipping never materialises a per-sample gradient, so what is equal is the
update, not the intermediate tensors: before timing, :func:`check_same_update` asserts on a
tiny batch that dpgnn and Opacus ghost leave the same clipped sum (no noise) in ``p.grad``.

With ``--device cuda`` every model, batch and noise generator lives on the GPU, each timing
synchronises the device before reading the clock, and peak memory is the CUDA allocator's
peak of one step of each mode in this process (``torch.cuda.max_memory_allocated`` after a
reset), not a child's RSS.

    python benchmarks/bench_dp_step.py [--batch 10000] [--repeat 5] [--no-memory]
                                       [--device cpu|cuda]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _util import device_name, machine, peak_rss_gib

from dpgnn_core.data.synthetic import csbm
from dpgnn_core.graph.dpgnn_sampler import sample_edgelists, sample_subgraphs
from dpgnn_core.graph.subgraphs import build_batch
from dpgnn_core.models.mlp import MLP
from dpgnn_core.models.subgraph_gnn import SubgraphGNN
from dpgnn_core.training.dp_sgd import Clipping, train_steps

FEATURES, CLASSES = 128, 6
DEVICE = torch.device("cpu")  # set once from --device in __main__


def sync() -> None:
    """Wait for the device's queued work, so a timer reads finished steps (CUDA is async)."""
    if DEVICE.type == "cuda":
        torch.cuda.synchronize()


def gcn_batch(batch: int, k: int = 7):  # type: ignore[no-untyped-def]
    g = csbm(num_nodes=int(batch * 1.4), avg_degree=12, feature_dim=FEATURES,
             num_classes=CLASSES, seed=0)
    train = np.ones(g.num_nodes, dtype=bool)
    sg = sample_subgraphs(sample_edgelists(g.edge_index, g.num_nodes, train, k,
                                           np.random.default_rng(0)), g.num_nodes, train, 1, k)
    t = time.perf_counter()
    b = build_batch(sg, np.arange(batch), g.x, normalisation="none")
    build_s = time.perf_counter() - t
    b = dataclasses.replace(b, x=b.x.to(DEVICE), adj=b.adj.to(DEVICE), mask=b.mask.to(DEVICE))
    return b, torch.from_numpy(np.asarray(g.y)[sg.roots[:batch]]).to(DEVICE), build_s


STEPS = 3  # steps per timed call: set-up (validation, hooks) is paid once per run, not step


def interleaved(fns: dict, repeat: int, per: int = 1) -> dict[str, float]:  # type: ignore[type-arg]
    """Best time per step of each function (each call runs ``per`` steps), A/B interleaved."""
    best = {k: float("inf") for k in fns}
    for _ in range(repeat):
        for k, fn in fns.items():
            sync()
            t = time.perf_counter()
            fn()
            sync()
            best[k] = min(best[k], (time.perf_counter() - t) / per)
    return best


def opacus_ghost(model: torch.nn.Module, inputs: tuple[torch.Tensor, ...], y: torch.Tensor,
                 noise_multiplier: float, clip: float, lr: float = 1e-3
                 ) -> tuple[Any, Any, Any]:
    """Opacus's ghost-clipping peer of ``model`` through ``PrivacyEngine.make_private``:
    returns (wrapped model, DP optimizer, DP criterion). The loader (one batch of the given
    tensors, no Poisson sampling) only tells Opacus the batch size; noise std = z * C and
    the noisy sum is divided by that batch size, as dpgnn's ``Clipping`` below."""
    import warnings

    from opacus import PrivacyEngine

    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(*inputs, y),
                                         batch_size=len(y))
    with warnings.catch_warnings():  # "secure_mode off" and the like
        warnings.simplefilter("ignore")
        module, opt, crit, _ = PrivacyEngine(accountant="rdp").make_private(
            module=model, optimizer=torch.optim.Adam(model.parameters(), lr=lr),
            criterion=torch.nn.CrossEntropyLoss(), data_loader=loader,
            noise_multiplier=noise_multiplier, max_grad_norm=clip, poisson_sampling=False,
            grad_sample_mode="ghost")
    return module, opt, crit


def check_same_update() -> float:
    """On a tiny DP-GCN batch (16 subgraphs, K = 3, 2 layers, latent 16) with no noise,
    dpgnn's one-pass clipping and Opacus's ghost clipping must leave the same clipped sum
    :math:`\\sum_b \\min(1, C/\\|g_b\\|) g_b` in every ``p.grad``. Returns the largest
    absolute difference (asserted below 1e-5)."""
    import copy

    from dpgnn_core.training.per_sample import PerSampleClipper, private_step

    g = csbm(num_nodes=200, avg_degree=8, feature_dim=10, num_classes=3, seed=1)
    train = np.ones(g.num_nodes, dtype=bool)
    sg = sample_subgraphs(sample_edgelists(g.edge_index, g.num_nodes, train, 3,
                                           np.random.default_rng(0)), g.num_nodes, train, 2, 3)
    b = build_batch(sg, np.arange(16), g.x, normalisation="none")
    torch.manual_seed(0)
    y = torch.randint(0, 3, (16,))
    ours = SubgraphGNN("gcn", 10, 3, hidden=16, layers=2)
    theirs = copy.deepcopy(ours)
    clipper = PerSampleClipper(ours)
    with clipper.capture():
        private_step(clipper, torch.nn.functional.cross_entropy(
            ours(b.x, b.adj, b.mask), y, reduction="none"), clips=[0.1], noise_stds=[0.0],
            denominator=1.0, generator=None)
    clipper.remove()
    module, opt, crit = opacus_ghost(theirs, (b.x, b.adj, b.mask), y, 0.0, 0.1)
    opt.zero_grad(set_to_none=True)
    crit(module(b.x, b.adj, b.mask), y).backward()  # leaves the clipped sum in p.grad
    diff = max(float((p.grad - q.grad).abs().max())  # type: ignore[operator]
               for p, q in zip(ours.parameters(), theirs.parameters(), strict=True))
    assert diff < 1e-5, f"dpgnn and Opacus ghost clipping disagree by {diff}"
    return diff


def gcn_steps(batch: int, repeat: int) -> dict:  # type: ignore[type-arg]
    from opacus import GradSampleModule
    from opacus.optimizers import DPOptimizer

    b, y, build_s = gcn_batch(batch)
    torch.manual_seed(0)
    model = SubgraphGNN("gcn", FEATURES, CLASSES, hidden=256, layers=1).to(DEVICE)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def losses():  # type: ignore[no-untyped-def]
        out = model(b.x, b.adj, b.mask)
        return torch.nn.functional.cross_entropy(out, y, reduction="none"), 0.0

    clip = Clipping((1.0,), (3.0,), float(batch))
    gen = torch.Generator(device=DEVICE).manual_seed(0)
    twin = SubgraphGNN("gcn", FEATURES, CLASSES, hidden=256, layers=1).to(DEVICE)
    gsm = GradSampleModule(twin)
    dpo = DPOptimizer(torch.optim.Adam(twin.parameters(), lr=1e-3), noise_multiplier=3.0,
                      max_grad_norm=1.0, expected_batch_size=batch)

    def opacus_step() -> None:
        dpo.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(gsm(b.x, b.adj, b.mask), y).backward()
        dpo.step()

    ghost = SubgraphGNN("gcn", FEATURES, CLASSES, hidden=256, layers=1).to(DEVICE)
    ghost.load_state_dict(model.state_dict())
    g_mod, g_opt, g_crit = opacus_ghost(ghost, (b.x, b.adj, b.mask), y, 3.0, 1.0)

    def ghost_steps() -> None:
        for _ in range(STEPS):
            g_opt.zero_grad(set_to_none=True)
            g_crit(g_mod(b.x, b.adj, b.mask), y).backward()  # two backward passes
            g_opt.step()

    fns = {"non_private": lambda: train_steps(model, opt, STEPS, losses, clipping=None),
           "private": lambda: train_steps(model, opt, STEPS, losses, clipping=clip,
                                          generator=gen),
           "opacus_ghost": ghost_steps}
    best = interleaved(fns, repeat, STEPS)
    best["opacus_hooks"] = interleaved({"o": opacus_step}, max(2, repeat // 2))["o"]
    return {"batch": batch, "padded_size": int(b.x.shape[1]), "build_batch_s": build_s,
            **{f"{k}_s": v for k, v in best.items()},
            "ratio_private_vs_non_private": best["private"] / best["non_private"],
            "ratio_private_vs_opacus_hooks": best["private"] / best["opacus_hooks"],
            "ratio_private_vs_opacus_ghost": best["private"] / best["opacus_ghost"],
            "ratio_opacus_ghost_vs_non_private": best["opacus_ghost"] / best["non_private"]}


def gcn_peak_memory(batch: int) -> dict:  # type: ignore[type-arg]
    """Peak RSS of a fresh process that builds the batch and runs one private step, and of
    one that builds it and runs one non-private step (the same baseline of torch + data).
    On CUDA: the allocator's peak of each mode's steps in this process instead."""
    import tempfile

    b, y, _ = gcn_batch(batch)
    if DEVICE.type == "cuda":
        return gcn_peak_memory_cuda(b.x, b.adj, b.mask, y)
    out = {}
    with tempfile.TemporaryDirectory() as d:
        path = str(Path(d) / "batch.pt")
        torch.save({"x": b.x, "adj": b.adj, "mask": b.mask, "y": y}, path)
        for mode in ("private", "opacus_ghost", "non_private", "load_only"):
            r = subprocess.run([sys.executable, __file__, "--memory-child", mode,
                                "--batch-file", path], capture_output=True, text=True,
                               check=True)
            out[f"peak_rss_gib_{mode}"] = float(r.stdout.strip().splitlines()[-1])
    return out


def mode_steps(mode: str, x: torch.Tensor, adj: torch.Tensor, mask: torch.Tensor,
               y: torch.Tensor) -> None:
    """Two steps of ``mode`` (private, opacus_ghost or non_private) on a fresh model."""
    model = SubgraphGNN("gcn", FEATURES, CLASSES, hidden=256, layers=1).to(x.device)
    if mode == "opacus_ghost":
        g_mod, g_opt, g_crit = opacus_ghost(model, (x, adj, mask), y, 3.0, 1.0)
        for _ in range(2):
            g_opt.zero_grad(set_to_none=True)
            g_crit(g_mod(x, adj, mask), y).backward()
            g_opt.step()
        return
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def losses():  # type: ignore[no-untyped-def]
        return torch.nn.functional.cross_entropy(model(x, adj, mask), y,
                                                 reduction="none"), 0.0

    clip = Clipping((1.0,), (3.0,), float(x.shape[0])) if mode == "private" else None
    train_steps(model, opt, 2, losses, clipping=clip,
                generator=torch.Generator(device=x.device))


def gcn_peak_memory_cuda(x: torch.Tensor, adj: torch.Tensor, mask: torch.Tensor,
                         y: torch.Tensor) -> dict:  # type: ignore[type-arg]
    """CUDA memory (GiB) of each mode's two steps on a fresh model: ``peak_cuda_gib_<mode>``
    is the allocator's peak during them, ``step_cuda_gib_<mode>`` that peak less what was
    allocated just before (the batch, and anything the timing runs left), so the modes
    compare on the same footing; ``load_only`` is what was allocated before the first."""
    import gc

    out: dict[str, float] = {}
    for mode in ("private", "opacus_ghost", "non_private"):
        gc.collect()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        out.setdefault("peak_cuda_gib_load_only", before / 2**30)
        mode_steps(mode, x, adj, mask, y)
        torch.cuda.synchronize()
        out[f"peak_cuda_gib_{mode}"] = torch.cuda.max_memory_allocated() / 2**30
        out[f"step_cuda_gib_{mode}"] = (torch.cuda.max_memory_allocated() - before) / 2**30
    return out


def memory_child(mode: str, path: str) -> None:
    blob = torch.load(path)
    if mode != "load_only":
        mode_steps(mode, blob["x"], blob["adj"], blob["mask"], blob["y"])
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
    x, y = x.to(DEVICE), y.to(DEVICE)
    ours = MLP(FEATURES, 256, CLASSES, 2, dropout=0.0).to(DEVICE)
    theirs = MLP(FEATURES, 256, CLASSES, 2, dropout=0.0).to(DEVICE)
    theirs.load_state_dict(ours.state_dict())
    opt = torch.optim.Adam(ours.parameters(), lr=1e-3)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y),
                                         batch_size=batch)
    engine = PrivacyEngine(accountant="rdp")
    model_o, opt_o, _ = engine.make_private(
        module=theirs, optimizer=torch.optim.Adam(theirs.parameters(), lr=1e-3),
        data_loader=loader, noise_multiplier=1.0, max_grad_norm=1.0, poisson_sampling=False)
    clip = Clipping((1.0,), (1.0,), float(batch))
    gen = torch.Generator(device=DEVICE).manual_seed(0)

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

    ghost = MLP(FEATURES, 256, CLASSES, 2, dropout=0.0).to(DEVICE)
    ghost.load_state_dict(ours.state_dict())
    g_mod, g_opt, g_crit = opacus_ghost(ghost, (x,), y, 1.0, 1.0)

    def ghost_steps() -> None:
        for _ in range(STEPS):
            g_opt.zero_grad(set_to_none=True)
            g_crit(g_mod(x), y).backward()
            g_opt.step()

    best = interleaved({"dp_mlp": ours_steps, "opacus_make_private": opacus_steps,
                        "opacus_ghost": ghost_steps}, repeat, STEPS)
    return {"batch": batch, **{f"{k}_s": v for k, v in best.items()},
            "ratio_dp_mlp_vs_opacus": best["dp_mlp"] / best["opacus_make_private"],
            "ratio_dp_mlp_vs_opacus_ghost": best["dp_mlp"] / best["opacus_ghost"]}


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--no-memory", action="store_true",
                    help="skip the peak-memory child processes")
    ap.add_argument("--out", help="append the result as one JSON line to this file")
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"),
                    help="where the models, batches and noise live (default cpu)")
    ap.add_argument("--memory-child")
    ap.add_argument("--batch-file")
    a = ap.parse_args()
    if a.memory_child:
        memory_child(a.memory_child, a.batch_file)
        sys.exit(0)
    import opacus

    if a.device == "cuda" and not torch.cuda.is_available():
        sys.exit("bench_dp_step.py: --device cuda, but torch sees no CUDA device")
    DEVICE = torch.device(a.device)
    res = {"machine": machine(), "device": device_name(DEVICE), "torch": torch.__version__,
           "opacus": opacus.__version__,
           "torch_threads": torch.get_num_threads(), "load_avg_start": os.getloadavg(),
           "argv": sys.argv[1:], "ghost_vs_dpgnn_max_abs_diff": check_same_update(),
           "dp_gcn_step": {**gcn_steps(a.batch, a.repeat),
                           **({} if a.no_memory else gcn_peak_memory(a.batch))},
           "dp_mlp_step": mlp_steps(a.batch, a.repeat), "load_avg_end": os.getloadavg()}
    print(json.dumps(res, indent=1))
    if a.out:
        with open(a.out, "a") as f:
            f.write(json.dumps(res) + "\n")
