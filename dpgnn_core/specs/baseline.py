"""The spec of the non-private full-batch baselines (:mod:`dpgnn_core.methods.baseline`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from dpgnn_core.specs.base import Seed, Spec
from dpgnn_core.specs.entry import Entry

Method = Literal["mlp", "gcn", "sage"]


class TrainSpec(Spec):
    """A non-private baseline training run (full-batch).

    Args:
        method (str): ``mlp``, ``gcn`` or ``sage``.
        epochs (int, optional): training epochs. (default: :obj:`200`)
        lr (float, optional): Adam learning rate. (default: :obj:`0.01`)
        weight_decay (float, optional): L2 penalty. (default: :obj:`5e-4`)
        hidden (int, optional): hidden width. (default: :obj:`64`)
        layers (int, optional): number of layers (message-passing layers for GNNs).
            (default: :obj:`2`)
        dropout (float, optional): dropout probability. (default: :obj:`0.5`)
        feature_norm (str, optional): ``row`` divides each node's features by their sum
            (Planetoid's standard preprocessing; per node, so no privacy cost) or ``none``.
            (default: :obj:`"row"`)
        seed (int, optional): seed of initialisation and dropout. (default: :obj:`0`)
        device (str, optional): ``auto`` (CUDA when present), ``cpu`` or ``cuda``.
            (default: :obj:`"auto"`)
    """

    method: Method
    epochs: int = Field(200, ge=1)
    lr: float = Field(0.01, gt=0)
    weight_decay: float = Field(5e-4, ge=0)
    hidden: int = Field(64, ge=1)
    layers: int = Field(2, ge=1, le=8)
    dropout: float = Field(0.5, ge=0, lt=1)
    feature_norm: Literal["row", "none"] = "row"
    seed: Seed = 0
    device: Literal["auto", "cpu", "cuda"] = "auto"


#: The catalogue's "baseline" family (mlp, gcn, sage): non-private, full-batch, multi-label.
_BASELINE = Entry(name="mlp", family="baseline", spec_type=TrainSpec,
                  module="dpgnn_core.methods.baseline", task="node", private=False,
                  protection="nothing (non-private)", progress_unit="epoch",
                  private_path=False, multi_label=True)
ENTRIES = tuple(_BASELINE.named(n) for n in ("mlp", "gcn", "sage"))
