"""The specs of the subgraph methods: :class:`SubgraphSpec`, what they share (the subgraph
model, its clipping, model selection), and its two families, DP-GNN
(:mod:`dpgnn_core.methods.dp_gnn`) and DRW (:mod:`dpgnn_core.methods.drw`)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from dpgnn_core.errors import PrivacyError
from dpgnn_core.specs.base import LargeBatchDefaults, PrivateSpec, link
from dpgnn_core.specs.entry import Entry


class SubgraphSpec(PrivateSpec):
    """What DP-GNN and DRW share: the subgraph model, its clipping, model selection.

    Args:
        conv (str): ``gcn``, ``sage``, ``gin`` or ``gat`` (10-head dot-product attention).
            (default: ``gcn``)
        layers (int): message-passing layers r. (default: 1)
        hidden (int): latent size. (default: 256)
        activation (str): ``tanh``, ``relu`` or ``elu``. (default: ``tanh``)
        optimizer (str): ``adam`` (DP-Adam) or ``sgd`` (DP-SGD). (default: ``adam``)
        clipping (str): ``global`` (one norm C over all parameters) or ``layerwise``
            (encoder / aggregation / decoder clipped to their own norms, noise per group with
            one common multiplier). (default: ``global``)
        layer_clips (tuple, optional): (encoder, aggregation, decoder) norms for
            ``layerwise``; ``clip`` for each when omitted.
        clip_percentile (float, optional): set the norms to this percentile (the paper: 75)
            of per-sample gradient norms at initialisation, on one batch. That reads private
            data without noise: the run's privacy report and ledger flag it as unaccounted.
        select_on_validation (bool): keep the weights with the best validation accuracy,
            checked every ``select_every`` steps. Reads validation labels: flagged in the
            privacy report. (default: :obj:`False`)
        select_every (int): steps between validation checks. (default: 50)
        backend (str): library of the sparse inference path (evaluation and model
            selection): ``pyg``, ``dgl`` (DGL's GraphConv / SAGEConv / GINConv with the
            trained weights; needs ``pip install 'dpgnn[dgl]'``; CPU only; not for ``gat``)
            or ``auto``: ``dgl`` when it is installed and applies, the faster one
            (benchmarks/RESULTS.md), else ``pyg``. Training is the same dense path either
            way, and the two agree to 1e-5. (default: ``auto``)
    """

    conv: Literal["gcn", "sage", "gin", "gat"] = "gcn"
    layers: int = Field(1, ge=1, le=4)
    hidden: int = Field(256, ge=1)
    activation: Literal["tanh", "relu", "elu"] = "tanh"
    optimizer: Literal["adam", "sgd"] = "adam"
    clipping: Literal["global", "layerwise"] = "global"
    layer_clips: tuple[float, float, float] | None = None
    clip_percentile: float | None = Field(None, gt=0, le=100)
    select_on_validation: bool = False
    select_every: int = Field(50, ge=1)
    backend: Literal["auto", "pyg", "dgl"] = "auto"

    @model_validator(mode="after")
    def _clips(self) -> SubgraphSpec:
        if self.backend == "dgl" and self.conv == "gat":
            raise ValueError("backend 'dgl' runs gcn, sage and gin: DGL has no layer for this "
                             "model's dot-product attention (separate query, key and value "
                             "projections); use backend 'pyg' or 'auto' for gat")
        if self.layer_clips is not None:
            if self.clipping != "layerwise":
                raise ValueError("layer_clips needs clipping='layerwise'")
            if not all(0 < c < math.inf for c in self.layer_clips):  # NaN fails too
                raise ValueError(f"layer_clips must be finite and > 0, got "
                                 f"{self.layer_clips}")
        return self

    def clip_norms(self) -> tuple[float, ...]:
        """Clipping norm per group before any percentile rule."""
        if self.clipping == "global":
            return (self.clip,)
        return self.layer_clips or (self.clip,) * 3


class DpgnnSpec(LargeBatchDefaults, SubgraphSpec):
    """DP-GNN training (Daigavane et al.): degree-bounded subgraphs, DP-Adam / DP-SGD over
    fixed-size batches of them, privacy by the hypergeometric amplification theorem.

    Args:
        max_degree (int, optional): in-degree bound K. Unset, at level ``node_feature``
            (structure public) it is read from the graph: 2 with at least 5000
            training nodes and a median degree of at least 2, else 1
            (benchmarks/RESULTS.md, "Defaults from the public structure"); at level
            ``node`` it is 2. The run summary prints the value used.
            (default: from the structure)
        batch_size (int): subgraphs per step m. (default: min(16384, N): every training
            node's subgraph on all but very large graphs)
        steps (int): training steps T. (default: 60)
        lr (float): learning rate. (default: 2e-2)
        hidden (int): latent size. (default: 64)
        clip (float): per-subgraph clipping norm C. (default: 1.0)
        epsilon (float, optional): target ε; :obj:`None` trains without privacy (no noise,
            no clipping), through the same code path.
        delta (float, optional): δ; 1 / (10 N) by default.
        accountant (str): ``rdp`` or ``pld`` (tighter). (default: ``pld``)
        seed (int): seeds initialisation only (noise and sampling are secret). (default: 0)
        device (str): ``auto``, ``cpu`` or ``cuda``. (default: ``auto``)

    The model and clipping fields are :class:`SubgraphSpec`'s.

    Args:
        level (str): what one neighbouring change may replace.
            ``node_feature`` (the default, sound on any graph): one training node's
            features and label; the graph structure is public. ``node``: also the node's
            own edge list (its outgoing edges, along which its messages travel); directed
            datasets only, accounted with 2N(K,r) - 1 marked subgraphs (docs/privacy.md).
            (default: ``node_feature``)
    """

    implied: ClassVar[tuple[str, ...]] = ("conv",)
    has_non_private_mode: ClassVar[bool] = True
    method: Literal["dp-gcn", "dp-sage", "dp-gin", "dp-gat"]
    max_degree: int | None = Field(None, ge=1)
    steps: int = Field(60, ge=1)
    lr: float = Field(2e-2, gt=0)
    hidden: int = Field(64, ge=1)
    level: Literal["node_feature", "node"] = "node_feature"

    #: K when unset at level ``node``, where the degrees are private (issue 14's default).
    node_level_degree: ClassVar[int] = 2

    @property
    def degree_bound(self) -> int:
        """K: as given; unset, :attr:`node_level_degree` at level ``node``; at level
        ``node_feature`` it must be resolved from the graph first
        (:func:`~dpgnn_core.methods.structure_defaults.resolve`).

        Raises:
            PrivacyError: unset at level ``node_feature`` (a plan would need the graph).
        """
        if self.max_degree is None and self.level == "node":
            return self.node_level_degree
        if self.max_degree is None:
            raise PrivacyError("max_degree is unset: at level node_feature it is chosen from "
                               "the graph's degrees when the run starts; give max_degree to "
                               "plan the run's privacy without the graph (e.g. for private "
                               "selection)")
        return self.max_degree

    @model_validator(mode="before")
    @classmethod
    def _name(cls, data: Any) -> Any:
        return link(data, lambda d: f"dp-{d.get('conv', 'gcn')}",
                     lambda m: {"conv": m[3:]})


class DrwSpec(LargeBatchDefaults, SubgraphSpec):
    """Disjoint random-walk training (Ayle et al.): the training nodes are partitioned into
    disjoint random-walk subgraphs, each one record of DP-SGD / DP-Adam over fixed-size
    batches; a node lies in one subgraph, so one subgraph is the sensitivity.

    Args:
        variant (str): ``drw`` (one walk of length L per root), ``drw-r`` (R walks per root)
            or ``drw-d`` (a fresh partition every ``resample_every`` steps).
            (default: ``drw``)
        walk_length (int): L. (default: 4)
        restarts (int): R for ``drw-r`` (and ``drw-d`` if > 1). (default: 2 for ``drw-r``,
            else 1)
        resample_every (int): k for ``drw-d``. (default: 100)
        conv (str): ``gcn`` or ``sage``. (default: ``gcn``)
        batch_size (int): subgraphs per step. (default: every subgraph of the partition,
            ceil(N / (R·L + 1)), at most 16384)
        steps (int): training steps T. (default: 60)
        lr (float): learning rate. (default: 2e-2)
        hidden (int): latent size. (default: 64)

    The other fields are :class:`SubgraphSpec`'s; ``batch_size`` counts subgraphs. The
    defaults are the large-batch recipe (:class:`LargeBatchDefaults`): the best of the
    search on Cora and Cornell5 (benchmarks/RESULTS.md, "Defaults that work").
    ``accountant`` defaults to ``rdp``: no PLD exists for fixed-size batches drawn without
    replacement, and RDP (Wang, Balle, Kasiviswanathan) is the tightest sound analysis here.
    """

    accountant: Literal["rdp", "pld"] = "rdp"
    implied: ClassVar[tuple[str, ...]] = ("variant", "conv")
    applies_when: ClassVar[dict[str, dict[str, tuple[str, ...]]]] = {
        "restarts": {"variant": ("drw-r", "drw-d")}, "resample_every": {"variant": ("drw-d",)}}
    has_non_private_mode: ClassVar[bool] = True
    method: Literal["drw-gcn", "drw-sage", "drw-r-gcn", "drw-r-sage", "drw-d-gcn",
                    "drw-d-sage"]
    variant: Literal["drw", "drw-r", "drw-d"] = "drw"
    walk_length: int = Field(4, ge=1)
    restarts: int = Field(1, ge=1)
    resample_every: int = Field(100, ge=1)
    conv: Literal["gcn", "sage"] = "gcn"
    steps: int = Field(60, ge=1)
    lr: float = Field(2e-2, gt=0)
    hidden: int = Field(64, ge=1)

    @model_validator(mode="before")
    @classmethod
    def _name(cls, data: Any) -> Any:
        d = link(data, lambda d: f"{d.get('variant', 'drw')}-{d.get('conv', 'gcn')}",
                  lambda m: {"variant": m.rsplit("-", 1)[0], "conv": m.rsplit("-", 1)[1]})
        if isinstance(d, dict) and d.get("variant") == "drw-r" and d.get("restarts") is None:
            d["restarts"] = 2  # DRW-R's default: two walks per root
        return d

    @model_validator(mode="after")
    def _variant(self) -> DrwSpec:
        if self.variant == "drw" and self.restarts != 1:
            raise ValueError("drw walks once from each root; use variant drw-r for restarts")
        return self


def dpgnn_level(spec: DpgnnSpec, manifest: Mapping[str, Any]) -> None:
    """DP-GNN's pre-flight check: refuse level ``node`` (a node with its edges) on an
    undirected dataset: there one node's edges change its neighbours' keep probabilities
    and over-K drops, and so subgraphs that never hold it; no occurrence bound covers that
    (docs/privacy.md). Decided from the dataset's ``directed`` flag (its manifest), never
    from the edges; training runs it too (:mod:`dpgnn_core.methods.dp_gnn`).

    Raises:
        PrivacyError: level ``node`` on an undirected dataset.
    """
    if spec.level == "node" and not manifest.get("directed", False):
        raise PrivacyError(
            "level 'node' (a node with its edges) is only sound on directed datasets; "
            f"{manifest.get('name', 'this dataset')!r} is undirected (manifest.json: "
            "directed = false): one node's edges change the sampled subgraphs of its "
            "neighbours. Use level 'node_feature' (features and labels, structure public)")


# DP-GNN and DRW predict on the full private graph: one node's features reach the
# predictions of every node within r hops, so no score sensitivity is claimed (None).
_DPGNN = Entry(name="dp-gcn", family="dp-gnn", spec_type=DpgnnSpec,
               module="dpgnn_core.methods.dp_gnn", task="node", private=True,
               protection="node_feature (default) or node on directed datasets; replace-one",
               private_selection=True, canary=("node", "replace-one"), checks=(dpgnn_level,),
               releases=(None, "replace"),
               # DP-GNN's row model on directed graphs: a node's features, label, out-edge row
               canary_by_level={"node": ("node-edges", "replace-one")})
#: The catalogue's "dp-gnn" family: dp-gcn, dp-sage, dp-gin, dp-gat.
DPGNN_ENTRIES = tuple(_DPGNN.named(f"dp-{c}", {"conv": c}) for c in ("gcn", "sage", "gin", "gat"))
_DRW = Entry(name="drw-gcn", family="drw", spec_type=DrwSpec, module="dpgnn_core.methods.drw",
             task="node", private=True,
             protection="node_feature (features and labels, structure public); replace-one",
             private_selection=True, canary=("node", "replace-one"),
             releases=("node_feature", "replace"))
#: The catalogue's "drw" family: drw-*, drw-r-*, drw-d-* of gcn and sage.
DRW_ENTRIES = tuple(_DRW.named(f"{v}-{c}", {"variant": v, "conv": c})
                    for v in ("drw", "drw-r", "drw-d") for c in ("gcn", "sage"))
