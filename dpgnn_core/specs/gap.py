"""The specs of GAP (:mod:`dpgnn_core.methods.gap`) and ProGAP
(:mod:`dpgnn_core.methods.progap`), and what they share: a ``level`` that names the method,
defaults that depend on the level, the unset mini-batch of their non-private modules
(:func:`edge_batch_for`) and the refusals of node-level training
(:func:`check_node_training`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from dpgnn_core.specs.base import (
    LargeBatchDefaults,
    PrivateSpec,
    degree_within_bound,
    link_level,
)
from dpgnn_core.specs.entry import Entry, levelled


class GapSpec(LargeBatchDefaults, PrivateSpec):
    """GAP (Sajadmanesh et al.): encoder module, private multi-hop aggregation (PMA),
    classification module.

    Args:
        level (str): ``edge`` (GAP-EDP), ``node`` (GAP-NDP) or ``none`` (GAP-∞, no
            privacy). (default: ``edge``)
        hops (int): PMA hops K >= 1. (default: 2)
        max_degree (int, optional): degree bound D, required at node level: the graph's
            degrees must already be within D (undirected degree, or in + out degree on a
            graph flagged directed); a graph beyond it is refused, no edge is dropped.
        row_clip (float, optional): clip every aggregated row of PMA to this L2 norm c
            before the noise; node-level sensitivity then √(min(c, D)² + D) instead of
            √(D² + D) (undirected). :obj:`None` does not clip. (default: :obj:`None`)
        encoder_layers (int): Linear → norm → SELU blocks of the encoder, the last one to
            ``encoder_dim``. (default: 2)
        encoder_dim (int): width of the encoding X(0). (default: 64 at edge level and ∞,
            16 at node level)
        hidden (int): width of the encoder's and classifier's hidden layers. (default: 64)
        combine (str): how the classifier joins hops: ``cat``, ``sum`` or ``attn``.
            (default: ``cat``)
        dropout (float): dropout probability on the hidden representations of the encoder
            and the classifier (training only; per row, so DP-Adam allows it). (default:
            0.5 at edge level and ∞, 0 at node level)
        norm (str): normalisation after every hidden Linear layer: ``batch`` (batch norm,
            edge level and ∞ only: it mixes the rows of a batch, which DP-Adam's per-row
            clipping cannot allow), ``layer`` (per row) or ``none``. (default: ``batch``
            at edge level and ∞, ``none`` at node level)
        epochs (int): Adam epochs of the classifier over mini-batches of ``batch_size``
            training rows (EDP, ∞). (default: 100)
        encoder_epochs (int, optional): the same for the encoder (EDP, ∞); unset, the
            encoder trains for ``epochs`` too. (default: unset; 20 gave the same encoder
            on Cora but a lower validation accuracy on two Facebook100 schools:
            benchmarks/RESULTS.md, "A small run's fixed cost, fourth pass")
        batch_size (int): EDP / ∞: rows per Adam mini-batch (each epoch visits every
            training row once, in ceil(N / batch_size) near-equal batches); NDP: expected
            rows per DP-Adam step (Poisson rate m/N). (default: min(N, max(64,
            ceil(N / 32))) at edge level and ∞, i.e. 64 rows but at most 32 batches per
            epoch; min(16384, N) at node level: every row on all but very large graphs)
        steps (int): DP-Adam steps of the encoder and of the classifier (NDP). (default: 60)
        lr (float): learning rate. (default: 1e-3 at edge level and ∞, 1e-2 at node level)
        selection (str): ``best-val`` keeps each module's weights of the epoch with the
            best validation accuracy (edge level and ∞ only: it reads validation labels,
            which edge-level privacy does not protect, and the private release, as
            post-processing); ``last`` keeps the last step's. (default: ``best-val`` at
            edge level and ∞, ``last`` at node level)
        budget_split (tuple): noise multipliers of encoder, PMA and classifier relative to
            the common scale z that the accountant solves for; node level only (at edge
            level PMA is the one private release). (default: (1, 1, 1))
        epsilon (float, optional): target ε (needed unless ``level='none'``).

    The other fields are :class:`PrivateSpec`'s. The node-level defaults (full batches,
    60 steps: :class:`LargeBatchDefaults`) and K = 2 are the search's choice on Cora and
    Cornell5 (benchmarks/RESULTS.md, "Defaults that work"); the edge-level and ∞ training
    recipe (mini-batches of 64, dropout, batch norm, encoding 64, lr 1e-3, the best
    validation epoch) is GAP's own, chosen on Cora's validation split (RESULTS.md, "GAP and
    ProGAP modules trained properly (issue 28)").
    """

    implied: ClassVar[tuple[str, ...]] = ("level",)
    #: DP-Adam (steps, clip) and the degree bound at node level only; epochs at edge level
    #: and ∞; row clipping changes nothing at ∞ (no noise: a clipped row normalises alike).
    applies_when: ClassVar[dict[str, dict[str, tuple[str, ...]]]] = {
        "max_degree": {"level": ("node",)}, "steps": {"level": ("node",)},
        "clip": {"level": ("node",)}, "budget_split": {"level": ("node",)},
        "row_clip": {"level": ("edge", "node")}, "epochs": {"level": ("edge", "none")},
        "encoder_epochs": {"level": ("edge", "none")},
        "noise_multiplier": {"level": ()}}  # refused: one noise scale calibrated to ε
    #: Defaults that depend on the level: filled in where the input leaves them out.
    level_defaults: ClassVar[dict[str, dict[str, Any]]] = {
        "edge": {"encoder_dim": 64, "dropout": 0.5, "norm": "batch", "lr": 1e-3,
                 "selection": "best-val"},
        "node": {"encoder_dim": 16, "dropout": 0.0, "norm": "none", "lr": 1e-2,
                 "selection": "last"}}
    level_names: ClassVar[Mapping[str, str]] = {
        "edge": "gap-edp", "node": "gap-ndp", "none": "gap-inf"}
    method: Literal["gap-edp", "gap-ndp", "gap-inf"]
    level: Literal["edge", "node", "none"] = "edge"
    hops: int = Field(2, ge=1, le=10)
    max_degree: int | None = Field(None, ge=1)
    row_clip: float | None = Field(None, gt=0)
    encoder_layers: int = Field(2, ge=1, le=4)
    encoder_dim: int = Field(64, ge=1)
    hidden: int = Field(64, ge=1)
    combine: Literal["cat", "sum", "attn"] = "cat"
    dropout: float = Field(0.5, ge=0, lt=1)
    norm: Literal["batch", "layer", "none"] = "batch"
    epochs: int = Field(100, ge=1)
    encoder_epochs: int | None = Field(None, ge=1)
    steps: int = Field(60, ge=1)
    lr: float = Field(1e-3, gt=0)
    selection: Literal["best-val", "last"] = "best-val"
    budget_split: tuple[float, float, float] = (1.0, 1.0, 1.0)

    @classmethod
    def filled_in(cls, data: Any) -> Any:
        return link_level(data, cls.level_names, cls.level_defaults)

    @model_validator(mode="before")
    @classmethod
    def _name(cls, data: Any) -> Any:
        return cls.filled_in(data)

    @model_validator(mode="after")
    def _gap(self) -> GapSpec:
        if self.level == "node" and self.max_degree is None:
            raise ValueError("node-level GAP needs a degree bound max_degree (--max-degree)")
        if self.level == "none" and self.epsilon is not None:
            raise ValueError("level 'none' (GAP-inf) is not private: drop epsilon")
        if self.level != "none" and self.epsilon is None:
            raise ValueError(f"GAP at {self.level} level needs a target epsilon")
        if self.noise_multiplier is not None:
            raise ValueError("GAP calibrates one noise scale to the budget; set steps, not "
                             "noise_multiplier")
        if any(w <= 0 for w in self.budget_split):
            raise ValueError(f"budget_split weights must be > 0, got {self.budget_split}")
        check_node_training(self, "GAP")
        return self

    def with_batch_size(self, records: int) -> Any:
        """This spec with ``batch_size`` set: as given; else :func:`edge_batch_for` N at
        edge level and ∞, :class:`LargeBatchDefaults`' at node level."""
        if self.batch_size is not None or self.level == "node":
            return super().with_batch_size(records)
        return self.model_copy(update={"batch_size": edge_batch_for(records)})


class ProgapSpec(PrivateSpec):
    """ProGAP (Sajadmanesh and Gatica-Perez, WSDM 2024): progressive training in stages.
    Stage 0 trains an MLP on node features; stage k = 1..K aggregates the (row-normalised)
    embeddings of stage k - 1 with the Gaussian mechanism, once, and trains a new base
    layer and head on them with the earlier stages frozen; the last stage predicts.

    Args:
        level (str): ``edge`` (ProGAP-EDP), ``node`` (ProGAP-NDP) or ``none`` (ProGAP-∞,
            no privacy). (default: ``edge``)
        stages (int): private aggregation stages K >= 1 (the paper's depth; K + 1 trained
            modules). (default: 2)
        max_degree (int, optional): degree bound D, required at node level: every degree
            must already be within D (undirected degree, or in + out degree on a graph
            flagged directed); a graph beyond it is refused, no edge is dropped.
        row_clip (float, optional): clip every aggregated row to this L2 norm c before the
            noise (as GAP's ``row_clip``). (default: :obj:`None`)
        hidden (int): width of every stage's embedding. (default: 64 at edge level and ∞,
            16 at node level)
        base_layers (int): layers of each stage's base MLP (Linear + SELU). (default: 1)
        dropout (float): dropout probability on each stage's embedding before its head
            and between base layers (training only; per row, so DP-Adam allows it).
            (default: 0.5 at edge level and ∞, 0 at node level)
        norm (str): normalisation after every Linear layer of a base: ``batch`` (edge
            level and ∞ only: it mixes the rows of a batch, which DP-Adam's per-row
            clipping cannot allow), ``layer`` (per row) or ``none``. (default: ``batch``
            at edge level and ∞, ``none`` at node level)
        epochs (int): Adam epochs per stage over mini-batches of ``batch_size`` rows (EDP,
            ∞). (default: 100)
        batch_size (int): EDP / ∞: rows per Adam mini-batch (each epoch visits every
            training row once); NDP: expected rows per DP-Adam step (Poisson rate m / N).
            (default: min(N, max(64, ceil(N / 32))) at edge level and ∞, min(256, N / 4)
            at node level)
        steps (int): DP-Adam steps per stage (NDP). (default: 500)
        lr (float): learning rate. (default: 1e-3 at edge level and ∞, 1e-2 at node level)
        selection (str): ``best-val`` keeps each stage's weights of the epoch with the best
            validation accuracy (edge level and ∞ only: validation labels are not
            protected there, and the releases are read as post-processing); ``last``
            keeps the last step's. (default: ``best-val`` at edge level and ∞, ``last`` at
            node level)
        epsilon (float, optional): target ε (needed unless ``level='none'``).

    The other fields are :class:`PrivateSpec`'s. The edge-level and ∞ training recipe was
    chosen on Cora's validation split (benchmarks/RESULTS.md, "GAP and ProGAP modules
    trained properly (issue 28)").
    """

    implied: ClassVar[tuple[str, ...]] = ("level",)
    #: As GAP's (ProGAP has no budget split).
    applies_when: ClassVar[dict[str, dict[str, tuple[str, ...]]]] = {
        "max_degree": {"level": ("node",)}, "steps": {"level": ("node",)},
        "clip": {"level": ("node",)}, "row_clip": {"level": ("edge", "node")},
        "epochs": {"level": ("edge", "none")}, "noise_multiplier": {"level": ()}}
    #: Defaults that depend on the level: filled in where the input leaves them out.
    level_defaults: ClassVar[dict[str, dict[str, Any]]] = {
        "edge": {"hidden": 64, "dropout": 0.5, "norm": "batch", "lr": 1e-3,
                 "selection": "best-val"},
        "node": {"hidden": 16, "dropout": 0.0, "norm": "none", "lr": 1e-2,
                 "selection": "last"}}
    level_names: ClassVar[Mapping[str, str]] = {
        "edge": "progap-edp", "node": "progap-ndp", "none": "progap-inf"}
    method: Literal["progap-edp", "progap-ndp", "progap-inf"]
    level: Literal["edge", "node", "none"] = "edge"
    stages: int = Field(2, ge=1, le=10)
    max_degree: int | None = Field(None, ge=1)
    row_clip: float | None = Field(None, gt=0)
    hidden: int = Field(64, ge=1)
    base_layers: int = Field(1, ge=1, le=4)
    dropout: float = Field(0.5, ge=0, lt=1)
    norm: Literal["batch", "layer", "none"] = "batch"
    epochs: int = Field(100, ge=1)
    lr: float = Field(1e-3, gt=0)
    selection: Literal["best-val", "last"] = "best-val"

    @classmethod
    def filled_in(cls, data: Any) -> Any:
        return link_level(data, cls.level_names, cls.level_defaults)

    @model_validator(mode="before")
    @classmethod
    def _name(cls, data: Any) -> Any:
        return cls.filled_in(data)

    @model_validator(mode="after")
    def _progap(self) -> ProgapSpec:
        if self.level == "node" and self.max_degree is None:
            raise ValueError("node-level ProGAP needs a degree bound max_degree "
                             "(--max-degree)")
        if self.level == "none" and self.epsilon is not None:
            raise ValueError("level 'none' (ProGAP-inf) is not private: drop epsilon")
        if self.level != "none" and self.epsilon is None:
            raise ValueError(f"ProGAP at {self.level} level needs a target epsilon")
        if self.noise_multiplier is not None:
            raise ValueError("ProGAP calibrates one noise scale to the budget; set steps, "
                             "not noise_multiplier")
        check_node_training(self, "ProGAP")
        return self

    def with_batch_size(self, records: int) -> Any:
        """This spec with ``batch_size`` set: as given; else :func:`edge_batch_for` N at
        edge level and ∞, :meth:`PrivateSpec.default_batch_for` at node level."""
        if self.batch_size is not None or self.level == "node":
            return super().with_batch_size(records)
        return self.model_copy(update={"batch_size": edge_batch_for(records)})


#: GAP's and ProGAP's unset EDP / ∞ mini-batch: this many rows ...
EDGE_BATCH = 64
#: ... but at most this many mini-batches per epoch (large graphs).
EDGE_BATCHES_PER_EPOCH = 32


def edge_batch_for(records: int) -> int:
    """The unset mini-batch of GAP's and ProGAP's non-private modules (EDP, ∞) on
    ``records`` training rows: :data:`EDGE_BATCH` rows (GAP's recipe), or more where that
    would make more than :data:`EDGE_BATCHES_PER_EPOCH` batches per epoch, never more than
    every row."""
    records = max(1, int(records))
    return min(records, max(EDGE_BATCH, -(-records // EDGE_BATCHES_PER_EPOCH)))


def check_node_training(spec: Any, name: str) -> None:
    """Refuse what DP-Adam's per-row clipping cannot allow at node level: batch norm
    (its statistics mix the rows of a batch) and selecting weights on validation labels
    (read without noise)."""
    if spec.level != "node":
        return
    if spec.norm == "batch":
        raise ValueError(f"node-level {name} cannot use norm='batch': batch norm mixes the "
                         "rows of a batch, which DP-Adam's per-row clipping cannot allow; "
                         "use norm='layer' or 'none'")
    if spec.selection != "last":
        raise ValueError(f"node-level {name} cannot use selection={spec.selection!r}: it "
                         "reads validation labels without noise; use selection='last'")


_PROTECTS = {"edge": "edge; add/remove",
             "node": "node with its edges, every degree <= D; add/remove",
             "none": "nothing (non-private)"}
# GAP and ProGAP calibrate their own composition (no noise multiplier to tune), run as
# cached stages, and predict from their private aggregations; the node level checks the
# degree bound before a run.
_GAP = Entry(name="gap-edp", family="gap", spec_type=GapSpec, module="dpgnn_core.methods.gap",
             task="node", private=True, protection="",  # each level's: _PROTECTS
             staged=True, run_tags=("hops",),
             canary=("edge", "add/remove"), canary_by_level={"node": ("star", "add/remove")},
             checks=(degree_within_bound,), releases=(None, "add_remove"))
#: The catalogue's "gap" family: gap-edp, gap-ndp, gap-inf.
GAP_ENTRIES = levelled(_GAP, _PROTECTS)
#: The catalogue's "progap" family: progap-edp, progap-ndp, progap-inf.
PROGAP_ENTRIES = levelled(replace(_GAP, name="progap-edp", family="progap",
                                  spec_type=ProgapSpec, module="dpgnn_core.methods.progap",
                                  run_tags=("stages",)), _PROTECTS)
