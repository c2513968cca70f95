"""The epoch whose weights GAP-EDP's encoder keeps (``selection="best-val"``) on a dataset,
per seed: the evidence behind ``encoder_epochs``' default (benchmarks/RESULTS.md, "A small
run's fixed cost, fourth pass"). Trains the encoder alone with the default recipe (noise
reproducible from the seed: a benchmark only; the encoder reads no noise at edge level),
its 100 epochs, and prints for each seed the best validation epoch and that accuracy
against the best within the first 20 epochs.

    PYTHONPATH=. python benchmarks/gap_best_epochs.py DATASET_FOLDER 1,2,3 [EPOCHS]
"""

from __future__ import annotations

import json
import sys
from typing import Any

import torch

import dpgnn_core.methods._row_training as row_training
from dpgnn_core.data.store import read_dataset
from dpgnn_core.methods import gap
from dpgnn_core.methods.registry import get


def main() -> None:
    torch.set_num_threads(1)  # as the CLI
    data = read_dataset(sys.argv[1])
    epochs = int(sys.argv[3]) if len(sys.argv) > 3 else 100
    captured: list[tuple[int, list[dict[str, float]]]] = []
    train_steps = row_training.train_steps

    def recording(*args: Any, **kwargs: Any) -> list[dict[str, float]]:
        hist = train_steps(*args, **kwargs)
        captured.append((int(kwargs["select_every"]), hist))
        return hist

    row_training.train_steps = recording  # type: ignore[assignment]
    for seed in (int(s) for s in sys.argv[2].split(",")):
        captured.clear()
        spec = get("gap-edp").spec(epsilon=1.0, seed=seed, encoder_epochs=epochs,
                                   insecure_reproducible_noise=True)
        gap.fit_encoder(data, spec, 1.0)
        every, hist = captured[0]
        scores = [(int(r["step"]) // every, r["selection_score"]) for r in hist
                  if "selection_score" in r]
        top = max(s for _, s in scores)
        print(json.dumps({"seed": seed, "best_epoch": next(e for e, s in scores if s == top),
                          "best_val": round(top, 4),
                          "best_val_first_20": round(max(s for e, s in scores if e <= 20),
                                                     4)}), flush=True)


if __name__ == "__main__":
    main()
