"""Graph classification's DP step against the non-private step at equal batch, in one run.

One batch of 64 synthetic graphs (Mueller et al.'s ER set, seed 0), a 3-layer GCN of width
64 with mean pooling; ``--steps`` optimisation steps without privacy and with per-graph
clipping and noise (the noise from a secret generator, as a private run draws it), best of
``--repeat`` per step. Prints one JSON object: seconds per step of each and their ratio
(benchmarks/RESULTS.md, "DP step overhead").

With ``--device cuda`` the model, batch and noise generator live on the GPU and each timing
synchronises the device before reading the clock.

    python benchmarks/bench_graph_step.py [--repeat 5] [--steps 20] [--device cpu|cuda]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))
from _util import device_name, machine  # noqa: E402


def overhead(repeat: int = 5, steps: int = 20, batch: int = 64,
             device: str = "cpu") -> dict[str, Any]:
    """Private vs non-private step on the same batch of ``batch`` synthetic graphs."""
    import torch

    from dpgnn_core.data.synthetic import er_graphs
    from dpgnn_core.graph.subgraphs import build_batch
    from dpgnn_core.methods.graph_cls import graph_records
    from dpgnn_core.models.graph_gnn import GraphGNN
    from dpgnn_core.privacy.randomness import Randomness
    from dpgnn_core.training.dp_sgd import Clipping, train_steps

    data = er_graphs(seed=0)
    b = build_batch(graph_records(data), np.arange(batch), data.x, normalisation="none")
    x, adj, mask = (t.to(device) for t in (b.x, b.adj, b.mask))
    y = torch.from_numpy(data.graph_y[:batch]).to(device)
    model = GraphGNN("gcn", 9, 2).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    noise = Randomness.secret().torch_generator("noise", device)

    def sync() -> None:  # CUDA runs asynchronously: time finished steps only
        if torch.device(device).type == "cuda":
            torch.cuda.synchronize()

    def losses() -> tuple[torch.Tensor, float]:
        return torch.nn.functional.cross_entropy(model(x, adj, mask), y,
                                                 reduction="none"), 0.0

    best = {"non_private": float("inf"), "private": float("inf")}
    for _ in range(repeat):
        for k, clip in (("non_private", None),
                        ("private", Clipping((1.0,), (1.0,), float(batch)))):
            sync()
            t = time.perf_counter()
            train_steps(model, opt, steps, losses, clipping=clip,
                        generator=noise if clip is not None else None)
            sync()
            best[k] = min(best[k], (time.perf_counter() - t) / steps)
    return {"non_private_s": best["non_private"], "private_s": best["private"],
            "ratio": best["private"] / best["non_private"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=5, help="best of this many (default 5)")
    ap.add_argument("--steps", type=int, default=20, help="steps per timing (default 20)")
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"),
                    help="where the model, batch and noise live (default cpu)")
    a = ap.parse_args()
    import torch

    if a.device == "cuda" and not torch.cuda.is_available():
        sys.exit("bench_graph_step.py: --device cuda, but torch sees no CUDA device")
    out = {"bench": "graph_step", "machine": machine(), "device": device_name(a.device),
           "torch": torch.__version__, "torch_threads": torch.get_num_threads(), "batch": 64,
           "repeat": a.repeat, "steps": a.steps, **overhead(a.repeat, a.steps, 64, a.device)}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
