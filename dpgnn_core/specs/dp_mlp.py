"""The spec of DP-MLP (:mod:`dpgnn_core.methods.dp_mlp`)."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from dpgnn_core.specs.base import LargeBatchDefaults, PrivateSpec
from dpgnn_core.specs.entry import Entry


class DpMlpSpec(LargeBatchDefaults, PrivateSpec):
    """DP-MLP: an MLP on node features only, DP-Adam over Poisson-sampled training rows.

    One node is one row, so the guarantee is node-level under add/remove of a node.

    Args:
        hidden (int): hidden width. (default: 64)
        layers (int): linear layers. (default: 2)
        batch_size (int): expected rows per step; the Poisson rate is batch_size / N.
            (default: min(16384, N): every row on all but very large
            graphs)
        steps (int): training steps T. (default: 60)
        lr (float): learning rate. (default: 2e-2)
        clip (float): per-row clipping norm C. (default: 1.0)
        epsilon (float, optional): target ε; :obj:`None` trains without privacy.
        delta (float, optional): δ; 1 / (10 N) by default.
        accountant (str): ``rdp`` or ``pld`` (tighter). (default: ``pld``)
        seed (int): seeds initialisation only (noise and sampling are secret). (default: 0)
        device (str): ``auto``, ``cpu`` or ``cuda``. (default: ``auto``)
    """

    has_non_private_mode: ClassVar[bool] = True
    method: Literal["dp-mlp"] = "dp-mlp"
    hidden: int = Field(64, ge=1)
    layers: int = Field(2, ge=1, le=8)
    steps: int = Field(60, ge=1)
    lr: float = Field(2e-2, gt=0)


#: The catalogue's "dp-mlp" family. DP-MLP predicts a node from its own row only: one row
#: changes the count of correct validation predictions by <= 1 (``score_sensitivity``).
ENTRIES = (Entry(name="dp-mlp", family="dp-mlp", spec_type=DpMlpSpec,
                 module="dpgnn_core.methods.dp_mlp", task="node", private=True,
                 protection="node (a row: features and label); add/remove",
                 private_selection=True, score_sensitivity=1.0, canary=("node", "add/remove"),
                 releases=("node", "add_remove")),)
