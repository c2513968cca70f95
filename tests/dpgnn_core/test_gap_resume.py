"""GAP in memory (the library's fit, one process): a rerun redraws PMA's noise, so the
classifier trained on the earlier release must never be resumed from a checkpoint (two
releases, one counted)."""

from __future__ import annotations

import torch

from dpgnn_core.data.synthetic import csbm
from dpgnn_core.methods.gap import train_gap
from dpgnn_core.specs import GapSpec
from dpgnn_core.training.checkpoint import checkpointing


def test_one_task_gap_never_checkpoints_the_classifier(tmp_path):
    data = csbm(num_nodes=120, avg_degree=4, seed=3)
    spec = GapSpec(level="node", epsilon=8.0, hops=1, steps=4, batch_size=32, encoder_dim=4,
                   hidden=8, max_degree=40, device="cpu")
    with checkpointing(tmp_path, every_seconds=0.0) as ckpt:  # save after every step
        result = train_gap(data, spec)
    saved = torch.load(ckpt.path, map_location="cpu", weights_only=True)
    names = {n for n, _ in saved["signature"]["params"]}
    encoder = {n for n, _ in result.encoder.named_parameters()}
    assert names == encoder  # the last checkpoint is the encoder's, not the classifier's
