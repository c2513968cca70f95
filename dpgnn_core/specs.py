"""Frozen specifications passed between the CLI, flows, tasks and the core library.

Specs are pydantic models (validated, hashable through ``cache_key()``), so a flow can take
them as parameters, Prefect can validate them and cache keys can hash them.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from dpgnn_core.io import sha256_json

IngestFormat = Literal["planetoid", "facebook100", "tu", "ogb", "csv", "parquet", "synthetic"]
Method = Literal["mlp", "gcn", "sage"]


class Spec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    def cache_key(self) -> str:
        """sha256 of the spec's JSON form (sorted keys)."""
        return sha256_json(self.model_dump(mode="json"))


class IngestSpec(Spec):
    """What to ingest and how.

    Args:
        format (str): one of ``planetoid, facebook100, tu, ogb, csv, parquet, synthetic``.
        source (str, optional): raw folder or file (not used by ``synthetic``).
        name (str, optional): dataset name; inferred from the files when omitted.
        options (dict, optional): loader keyword arguments (see each loader's docstring).
    """

    format: IngestFormat
    source: str | None = None
    name: str | None = None
    options: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _need_source(self) -> IngestSpec:
        if self.format != "synthetic" and not self.source:
            raise ValueError(f"ingest format {self.format!r} needs a source path")
        return self


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
    seed: int = 0
    device: Literal["auto", "cpu", "cuda"] = "auto"


Sampler = Literal["degree-bounded", "drw", "drw-r", "gap-degree"]


class SamplerSpec(Spec):
    """How to materialise training subgraphs (or GAP's degree-bounded graph).

    Args:
        sampler (str): ``degree-bounded`` (DP-GNN), ``drw``, ``drw-r`` (Ayle et al.) or
            ``gap-degree`` (GAP's degree bound).
        max_degree (int, optional): K for ``degree-bounded``, D for ``gap-degree``.
        layers (int, optional): r for ``degree-bounded``. (default: :obj:`1`)
        walk_length (int, optional): L for ``drw`` / ``drw-r``.
        restarts (int, optional): R for ``drw-r``. (default: :obj:`1`)
        seed (int, optional): sampler seed. (default: :obj:`0`)
    """

    sampler: Sampler
    max_degree: int | None = Field(None, ge=1)
    layers: int = Field(1, ge=0)
    walk_length: int | None = Field(None, ge=1)
    restarts: int = Field(1, ge=1)
    seed: int = 0

    @model_validator(mode="after")
    def _needs(self) -> SamplerSpec:
        if self.sampler in ("degree-bounded", "gap-degree") and self.max_degree is None:
            raise ValueError(f"sampler {self.sampler!r} needs max_degree (--max-degree)")
        if self.sampler in ("drw", "drw-r") and self.walk_length is None:
            raise ValueError(f"sampler {self.sampler!r} needs walk_length (--walk-length)")
        if self.sampler == "drw" and self.restarts != 1:
            raise ValueError("drw walks once from each root; use drw-r for restarts")
        return self


class PrivateSpec(Spec):
    """Fields every private training method shares (see each method's spec for meaning):
    batch size, steps, learning rate, clipping norm C, target epsilon (None: non-private),
    delta (1/(10 N) by default), accountant, seed and device."""

    batch_size: int = Field(256, ge=1)
    steps: int = Field(500, ge=1)
    lr: float = Field(3e-3, gt=0)
    clip: float = Field(1.0, gt=0)
    epsilon: float | None = Field(None, gt=0)
    delta: float | None = Field(None, gt=0, lt=1)
    accountant: Literal["rdp", "pld"] = "rdp"
    seed: int = 0
    device: Literal["auto", "cpu", "cuda"] = "auto"


class DpgnnSpec(PrivateSpec):
    """DP-GNN training (Daigavane et al.): degree-bounded subgraphs, DP-Adam / DP-SGD over
    fixed-size batches of them, privacy by the hypergeometric amplification theorem.

    Args:
        conv (str): ``gcn``, ``sage`` or ``gin``. (default: ``gcn``)
        layers (int): message-passing layers r. (default: 1)
        max_degree (int): in-degree bound K. (default: 7)
        hidden (int): latent size. (default: 256)
        activation (str): ``tanh``, ``relu`` or ``elu``. (default: ``tanh``)
        batch_size (int): subgraphs per step m. (default: 256)
        steps (int): training steps T. (default: 500)
        lr (float): learning rate. (default: 3e-3)
        optimizer (str): ``adam`` or ``sgd``. (default: ``adam``)
        clip (float): per-subgraph gradient clipping norm C, fixed (no data-dependent
            threshold, so nothing unaccounted). (default: 1.0)
        epsilon (float, optional): target ε; :obj:`None` trains without privacy (no noise,
            no clipping), through the same code path.
        delta (float, optional): δ; 1 / (10 N) by default.
        accountant (str): ``rdp`` or ``pld``. (default: ``rdp``)
        seed (int): seeds sampling, initialisation, batches and noise. (default: 0)
        device (str): ``auto``, ``cpu`` or ``cuda``. (default: ``auto``)
    """

    conv: Literal["gcn", "sage", "gin"] = "gcn"
    layers: int = Field(1, ge=1, le=4)
    max_degree: int = Field(7, ge=1)
    hidden: int = Field(256, ge=1)
    activation: Literal["tanh", "relu", "elu"] = "tanh"
    optimizer: Literal["adam", "sgd"] = "adam"


class DpMlpSpec(PrivateSpec):
    """DP-MLP: an MLP on node features only, DP-Adam over Poisson-sampled training rows.

    One node is one row, so the guarantee is node-level under add/remove of a node.

    Args:
        hidden (int): hidden width. (default: 256)
        layers (int): linear layers. (default: 2)
        batch_size (int): expected rows per step; the Poisson rate is batch_size / N.
            (default: 256)
        steps (int): training steps T. (default: 500)
        lr (float): learning rate. (default: 3e-3)
        clip (float): per-row clipping norm C. (default: 1.0)
        epsilon (float, optional): target ε; :obj:`None` trains without privacy.
        delta (float, optional): δ; 1 / (10 N) by default.
        accountant (str): ``rdp`` or ``pld``. (default: ``rdp``)
        seed (int): seeds sampling, initialisation and noise. (default: 0)
        device (str): ``auto``, ``cpu`` or ``cuda``. (default: ``auto``)
    """

    hidden: int = Field(256, ge=1)
    layers: int = Field(2, ge=1, le=8)
