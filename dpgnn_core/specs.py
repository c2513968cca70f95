"""Frozen specifications passed between the CLI, flows, tasks and the core library.

Specs are pydantic models (validated, hashable through ``cache_key()``), so a flow can take
them as parameters, Prefect can validate them and cache keys can hash them.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    TypeAdapter,
    model_serializer,
    model_validator,
)

from dpgnn_core.io import sha256_json

IngestFormat = Literal["planetoid", "facebook100", "tu", "ogb", "dgl", "csv", "parquet",
                       "synthetic"]
Method = Literal["mlp", "gcn", "sage"]


class Spec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    #: Fields a method's name implies (``conv`` for ``dp-gcn``): not options of its own.
    implied: ClassVar[tuple[str, ...]] = ()
    #: Whether the private method's own path also runs without privacy (``--non-private``:
    #: epsilon None); GAP and graph classification have separate non-private names.
    has_non_private_mode: ClassVar[bool] = False
    #: Whether a private run also explains test graphs (GNNExplainer, graph methods).
    explains: ClassVar[bool] = False
    #: Fields that only some of the spec's names use: ``field -> {implied field: values}``
    #: (GAP's ``max_degree`` only where ``level`` is ``node``). A field applies to a name
    #: whose implied fields take one of the values; a field not listed, to every name. The
    #: CLI offers a name only the fields that apply to it (``dpgnn run NAME --help``).
    applies_when: ClassVar[dict[str, dict[str, tuple[str, ...]]]] = {}

    def cache_key(self) -> str:
        """sha256 of the spec's JSON form (sorted keys)."""
        return sha256_json(self.model_dump(mode="json"))


class IngestSpec(Spec):
    """What to ingest and how.

    Args:
        format (str): one of ``planetoid, facebook100, tu, ogb, dgl, csv, parquet,
            synthetic``.
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


class PrivateSpec(Spec):
    """Fields every private training method shares (see each method's spec for meaning):
    batch size, steps, learning rate, clipping norm C, target epsilon (None: non-private),
    delta (1/(10 N) by default), accountant (by default the tightest sound one for the
    method's mechanism: ``pld``; ``rdp`` for DRW, whose sampling has no PLD), seed and
    device.

    ``seed`` seeds initialisation (and dropout) only. The noise and every sampling step the
    privacy proof needs secret are drawn from the operating system's CSPRNG, never from the
    seed, and never stored (:class:`~dpgnn_core.privacy.randomness.Randomness`);
    ``insecure_reproducible_noise=True`` derives them from the seed instead, for research
    reproducibility only: the run's report then says it is not private.

    Two ways to spend a budget: fix ``steps`` T and let the accountant calibrate the noise
    multiplier (the default), or fix ``noise_multiplier`` and train until the budget is
    spent (T = the most steps whose ε stays within the target).

    Args:
        batch_size (int, optional): records per step (subgraphs, rows or graphs); unset, it
            adapts to the data (below). (default: :meth:`default_batch_for` N records)
        noise_multiplier (float, optional): fix the noise multiplier and train until the
            budget is spent, instead of calibrating the noise to ``steps``.
        seed (int): seeds initialisation only (noise and sampling are secret). (default: 0)
        insecure_reproducible_noise (bool): derive noise and sampling from ``seed`` so the
            run reproduces exactly. NOT PRIVATE: the report and MLflow say so.
            (default: False)
        log_raw_loss (bool): record each step's training loss on the private batch,
            computed without noise, in the history (history.json, MLflow ``train_loss``,
            the progress line). No privacy event covers it: the run is marked
            (``unaccounted_release`` in its report, tag ``dpgnn.unaccounted_release``).
            By default a private run records no training loss. (default: False)
        allow_large_delta (bool): accept a δ of at least 1/N_train (N_train protected
            training records), which does not rule out leaking a whole record; refused
            before training otherwise. Recorded with the spec (MLflow, the model file).
            (default: False)
        device (str): ``auto`` (CUDA when present), ``cpu`` or ``cuda``. (default: auto)

    ``batch_size`` left unset adapts to the data, so no default is invalid for a small
    training set (:meth:`with_batch_size`): every record sampled from (training nodes, the
    subgraphs of a DRW partition, training graphs) up to :attr:`default_batch` for the
    methods with swept defaults (:class:`LargeBatchDefaults`), a quarter of them up to
    :attr:`default_batch` for the others.
    """

    #: The batch an unset ``batch_size`` becomes on large data.
    default_batch: ClassVar[int] = 256

    batch_size: int | None = Field(None, ge=1)
    steps: int = Field(500, ge=1)
    lr: float = Field(3e-3, gt=0)
    clip: float = Field(1.0, gt=0)
    epsilon: float | None = Field(None, gt=0, allow_inf_nan=False)
    delta: float | None = Field(None, gt=0, lt=1)
    accountant: Literal["rdp", "pld"] = "pld"
    noise_multiplier: float | None = Field(None, gt=0)
    seed: int = 0
    insecure_reproducible_noise: bool = False
    log_raw_loss: bool = False
    allow_large_delta: bool = False
    device: Literal["auto", "cpu", "cuda"] = "auto"

    @property
    def batch(self) -> int:
        """The batch size once it is set (:meth:`with_batch_size`)."""
        if self.batch_size is None:
            raise ValueError("batch_size is unset: resolve it with with_batch_size(records)")
        return self.batch_size

    @classmethod
    def default_batch_for(cls, records: int) -> int:
        """The batch an unset ``batch_size`` becomes for ``records`` sampling units: a
        quarter of them, at most :attr:`default_batch` (ProGAP's and graph classification's
        rule; the methods whose defaults were swept on node data override it:
        :class:`LargeBatchDefaults`)."""
        return min(cls.default_batch, max(1, int(records) // 4))

    def with_batch_size(self, records: int) -> Any:
        """This spec with ``batch_size`` set: as given, or :meth:`default_batch_for`
        ``records`` sampling units."""
        if self.batch_size is not None:
            return self
        return self.model_copy(update={"batch_size": self.default_batch_for(records)})

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> Any:
        """With ``noise_multiplier`` set, ``steps`` is resolved by the fit (train until the
        budget is spent), never an input: it is left out of the dump, so a stored spec
        (model.pt, cache keys, Prefect parameters) validates again. ``log_raw_loss`` and
        ``allow_large_delta`` are left out when unset (only an override is recorded), so
        the specs (and cache keys) of runs that do not ask for them are those written
        before they existed."""
        data = handler(self)
        if self.noise_multiplier is not None and isinstance(data, dict):
            data.pop("steps", None)
        if isinstance(data, dict):
            for flag in ("log_raw_loss", "allow_large_delta"):
                if not getattr(self, flag):
                    data.pop(flag, None)
        return data

    @model_validator(mode="after")
    def _until_spent(self) -> PrivateSpec:
        if self.noise_multiplier is not None:
            if self.epsilon is None:
                raise ValueError("noise_multiplier (train until the budget is spent) needs "
                                 "a target epsilon")
            if "steps" in self.model_fields_set:
                raise ValueError("give steps (noise calibrated to the budget) or "
                                 "noise_multiplier (steps until the budget is spent), not "
                                 "both")
        return self


class LargeBatchDefaults:
    """The default recipe of DP-SGD methods whose hyperparameters were swept on the shared
    datasets (benchmarks/RESULTS.md, "Defaults that work"): an unset batch is every record,
    up to :attr:`default_batch` (then a Poisson / sampling rate default_batch / N), with few
    steps and a high learning rate.

    Why: at a fixed ε the noise added to one step's *sum* of clipped gradients hardly
    depends on the batch once sampling no longer amplifies much, while the signal grows with
    the batch; and the noise multiplier grows with the number of steps. On Cora and Cornell5
    the best validation accuracy came with full batches and tens of steps, not hundreds of
    steps on small batches. Reads nothing but the number of training records (public, like
    δ = 1 / (10 N)). Not swept above 11,510 records: past :attr:`default_batch` the sampling
    rate falls and 60 steps see fewer epochs; give ``steps`` for very large graphs.
    """

    default_batch: ClassVar[int] = 16384

    @classmethod
    def default_batch_for(cls, records: int) -> int:
        return min(cls.default_batch, max(1, int(records)))


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
            if any(c <= 0 for c in self.layer_clips):
                raise ValueError(f"layer_clips must be > 0, got {self.layer_clips}")
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
            from dpgnn_core.errors import PrivacyError

            raise PrivacyError("max_degree is unset: at level node_feature it is chosen from "
                               "the graph's degrees when the run starts; give max_degree to "
                               "plan the run's privacy without the graph (e.g. for private "
                               "selection)")
        return self.max_degree

    @model_validator(mode="before")
    @classmethod
    def _name(cls, data: Any) -> Any:
        return _link(data, lambda d: f"dp-{d.get('conv', 'gcn')}",
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
        d = _link(data, lambda d: f"{d.get('variant', 'drw')}-{d.get('conv', 'gcn')}",
                  lambda m: {"variant": m.rsplit("-", 1)[0], "conv": m.rsplit("-", 1)[1]})
        if isinstance(d, dict) and d.get("variant") == "drw-r" and d.get("restarts") is None:
            d["restarts"] = 2  # DRW-R's default: two walks per root
        return d

    @model_validator(mode="after")
    def _variant(self) -> DrwSpec:
        if self.variant == "drw" and self.restarts != 1:
            raise ValueError("drw walks once from each root; use variant drw-r for restarts")
        return self


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
        epochs (int): Adam epochs over mini-batches of ``batch_size`` training rows, for
            the encoder and for the classifier (EDP, ∞). (default: 100)
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
            the common scale z that the accountant solves for. (default: (1, 1, 1))
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
        "noise_multiplier": {"level": ()}}  # refused: one noise scale calibrated to ε
    #: Defaults that depend on the level: filled in where the input leaves them out.
    level_defaults: ClassVar[dict[str, dict[str, Any]]] = {
        "edge": {"encoder_dim": 64, "dropout": 0.5, "norm": "batch", "lr": 1e-3,
                 "selection": "best-val"},
        "node": {"encoder_dim": 16, "dropout": 0.0, "norm": "none", "lr": 1e-2,
                 "selection": "last"}}
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
    steps: int = Field(60, ge=1)
    lr: float = Field(1e-3, gt=0)
    selection: Literal["best-val", "last"] = "best-val"
    budget_split: tuple[float, float, float] = (1.0, 1.0, 1.0)

    @model_validator(mode="before")
    @classmethod
    def _name(cls, data: Any) -> Any:
        names = _level_names("gap")
        data = _link(data, lambda d: names[d.get("level", "edge")],
                     lambda m: {"level": {v: k for k, v in names.items()}[m]})
        return _fill_level_defaults(data, cls.level_defaults)

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
        _check_node_training(self, "GAP")
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

    @model_validator(mode="before")
    @classmethod
    def _name(cls, data: Any) -> Any:
        names = _level_names("progap")
        data = _link(data, lambda d: names[d.get("level", "edge")],
                     lambda m: {"level": {v: k for k, v in names.items()}[m]})
        return _fill_level_defaults(data, cls.level_defaults)

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
        _check_node_training(self, "ProGAP")
        return self

    def with_batch_size(self, records: int) -> Any:
        """This spec with ``batch_size`` set: as given; else :func:`edge_batch_for` N at
        edge level and ∞, :meth:`PrivateSpec.default_batch_for` at node level."""
        if self.batch_size is not None or self.level == "node":
            return super().with_batch_size(records)
        return self.model_copy(update={"batch_size": edge_batch_for(records)})


class GraphClsSpec(PrivateSpec):
    """Private graph classification (Mueller et al.): one graph is one record; DP-SGD /
    DP-Adam over Poisson-sampled graphs with per-graph clipping.

    Args:
        conv (str): ``gcn``, ``sage`` or ``gat``. (default: ``gcn``)
        layers (int): message-passing layers, 2-4. (default: 3)
        hidden (int): width. (default: 64)
        pool (str): ``mean`` or ``max``. (default: ``mean``)
        norm (str): ``none``, ``instance`` or ``batch`` (refused under DP).
            (default: ``none``)
        optimizer (str): ``adam`` or ``sgd``. (default: ``adam``)
        batch_size (int): expected graphs per step; the Poisson rate is m / N.
            (default: min(64, N/4))
        steps (int): steps T. (default: 150)
        lr (float): learning rate. (default: 3e-2)
        clip (float): per-graph clipping norm C. (default: 1.0)

    The defaults were swept on MUTAG and PROTEINS at ε = 10 (benchmarks/RESULTS.md,
    "Defaults that work"): a higher learning rate was what lifted MUTAG off the majority
    class; full batches did as well as a quarter on MUTAG but cost ~14 s a step on
    PROTEINS (890 graphs) on CPU, so the batch stays a quarter of the training graphs, at
    most 64.
        epsilon (float, optional): target ε; :obj:`None` trains without privacy.
        delta (float, optional): δ; 1 / (10 N) (N training graphs) by default, like the
            node methods (the paper's 1 / N allows leaking a whole graph).
        eval_every (int): steps between val / test evaluations logged per "epoch";
            N / m (one expected pass) when omitted.
    """

    implied: ClassVar[tuple[str, ...]] = ("conv",)
    explains: ClassVar[bool] = True
    method: Literal["graph-gcn", "graph-sage", "graph-gat", "dp-graph-gcn", "dp-graph-sage",
                    "dp-graph-gat"]
    conv: Literal["gcn", "sage", "gat"] = "gcn"
    layers: int = Field(3, ge=2, le=4)
    hidden: int = Field(64, ge=1)
    pool: Literal["mean", "max"] = "mean"
    norm: Literal["none", "instance", "batch"] = "none"
    optimizer: Literal["adam", "sgd"] = "adam"
    default_batch: ClassVar[int] = 64
    batch_size: int | None = Field(None, ge=1)
    steps: int = Field(150, ge=1)
    lr: float = Field(3e-2, gt=0)
    eval_every: int | None = Field(None, ge=1)

    @model_validator(mode="before")
    @classmethod
    def _name(cls, data: Any) -> Any:
        def name(d: dict[str, Any]) -> str:
            prefix = "dp-graph" if d.get("epsilon") is not None else "graph"
            return f"{prefix}-{d.get('conv', 'gcn')}"
        return _link(data, name, lambda m: {"conv": m.rsplit("-", 1)[1]})

    @model_validator(mode="after")
    def _budget_matches_name(self) -> GraphClsSpec:
        if self.method.startswith("dp-") and self.epsilon is None:
            raise ValueError(f"{self.method} trains privately: give epsilon (or use "
                             f"graph-{self.conv} for the non-private model)")
        if not self.method.startswith("dp-") and self.epsilon is not None:
            raise ValueError(f"{self.method} is not private: drop epsilon (or use "
                             f"dp-graph-{self.conv})")
        return self


class DpdgcSpec(LargeBatchDefaults, PrivateSpec):
    """DPDGC (Chien et al., 2023): adjacency encoder W on rows of A, one private one-hop
    aggregation A W, classifier on each node's features and its aggregation row
    (:mod:`dpgnn_core.methods.dpdgc`; derivations in docs/privacy.md, "DPDGC").

    Args:
        level (str): ``edge`` (DPDGC-EDP), ``node`` (DPDGC-NDP), ``k_neighbor``
            (DPDGC-kNDP: a node's features and label with up to ``k`` of its edges) or
            ``none`` (DPDGC-∞). (default: ``edge``)
        max_degree (int, optional): degree bound D, required at node level: the graph's
            degrees must already be within D (undirected degree, or in + out degree on a
            graph flagged directed); a graph beyond it is refused, no edge is dropped.
        k (int): edges of the node one k-neighbour change may touch. (default: 1)
        row_clip (float, optional): clip every row of A W to this L2 norm c before the
            noise. (default: :obj:`None`)
        adj_dim (int): width h of the adjacency embeddings. (default: 16)
        adj_steps (int): noisy full-batch gradient steps of the adjacency encoder at a
            private level; 0 keeps W = 0 and releases only noise. (default: 1)
        adj_epochs (int): its (exact) steps at level ``none``. (default: 100)
        adj_lr (float): its Adam learning rate. (default: 0.1)
        hidden (int): the classifier's hidden width. (default: 64)
        dropout (float): the classifier's dropout. (default: 0.5)
        weight_decay (float): the classifier's Adam weight decay. (default: 5e-4)
        epochs (int): full-batch Adam epochs of the classifier at edge level and ∞.
            (default: 200)
        steps (int): DP-Adam steps of the classifier (node, k-neighbour). (default: 60)
        batch_size (int): expected rows per DP-Adam step (Poisson rate m/N). (default:
            min(16384, N): every row on all but very large graphs)
        lr (float): the classifier's learning rate. (default: 1e-2)
        budget_split (tuple): noise multipliers of adjacency encoder, aggregation and
            classifier relative to the common scale z the accountant solves for.
            (default: (1, 1, 1))
        epsilon (float, optional): target ε (needed unless ``level='none'``).

    The other fields are :class:`PrivateSpec`'s.
    """

    implied: ClassVar[tuple[str, ...]] = ("level",)
    #: The classifier's DP-Adam (steps, batch_size, clip) at node and k-neighbour level,
    #: full-batch epochs at edge level and ∞; the noisy encoder steps (adj_steps, the
    #: clipping norm, budget_split) and row clipping at the private levels (at ∞ the
    #: classifier reads the rows normalised), adj_epochs at ∞.
    applies_when: ClassVar[dict[str, dict[str, tuple[str, ...]]]] = {
        "max_degree": {"level": ("node",)}, "k": {"level": ("k_neighbor",)},
        "steps": {"level": ("node", "k_neighbor")},
        "batch_size": {"level": ("node", "k_neighbor")},
        "epochs": {"level": ("edge", "none")}, "adj_epochs": {"level": ("none",)},
        "adj_steps": {"level": ("edge", "node", "k_neighbor")},
        "clip": {"level": ("edge", "node", "k_neighbor")},
        "row_clip": {"level": ("edge", "node", "k_neighbor")},
        "budget_split": {"level": ("edge", "node", "k_neighbor")},
        "noise_multiplier": {"level": ()}}
    method: Literal["dpdgc-edp", "dpdgc-ndp", "dpdgc-kndp", "dpdgc-inf"]
    level: Literal["edge", "node", "k_neighbor", "none"] = "edge"
    max_degree: int | None = Field(None, ge=1)
    k: int = Field(1, ge=1)
    row_clip: float | None = Field(None, gt=0)
    adj_dim: int = Field(16, ge=1)
    adj_steps: int = Field(1, ge=0)
    adj_epochs: int = Field(100, ge=0)
    adj_lr: float = Field(0.1, gt=0)
    hidden: int = Field(64, ge=1)
    dropout: float = Field(0.5, ge=0, lt=1)
    weight_decay: float = Field(5e-4, ge=0)
    epochs: int = Field(200, ge=1)
    steps: int = Field(60, ge=1)
    lr: float = Field(1e-2, gt=0)
    budget_split: tuple[float, float, float] = (1.0, 1.0, 1.0)

    @model_validator(mode="before")
    @classmethod
    def _name(cls, data: Any) -> Any:
        names = _level_names("dpdgc")
        return _link(data, lambda d: names[d.get("level", "edge")],
                     lambda m: {"level": {v: k for k, v in names.items()}[m]})

    @model_validator(mode="after")
    def _dpdgc(self) -> DpdgcSpec:
        if self.level == "node" and self.max_degree is None:
            raise ValueError("node-level DPDGC needs a degree bound max_degree (--max-degree)")
        if self.level == "none" and self.epsilon is not None:
            raise ValueError("level 'none' (DPDGC-inf) is not private: drop epsilon")
        if self.level != "none" and self.epsilon is None:
            raise ValueError(f"DPDGC at {self.level} level needs a target epsilon")
        if self.noise_multiplier is not None:
            raise ValueError("DPDGC calibrates one noise scale to the budget; set steps, not "
                             "noise_multiplier")
        if any(w <= 0 for w in self.budget_split):
            raise ValueError(f"budget_split weights must be > 0, got {self.budget_split}")
        return self


def _level_names(family: str) -> Any:
    """``level`` -> registered name of GAP's or ProGAP's names (from the catalogue)."""
    from dpgnn_core.methods.catalog import LEVEL_NAMES

    return LEVEL_NAMES[family]

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


def _fill_level_defaults(data: Any, table: dict[str, dict[str, Any]]) -> Any:
    """``data`` with the defaults of its level (``table["edge"]`` for edge level and ∞,
    ``table["node"]`` for node level) filled in where it leaves a field out."""
    if not isinstance(data, dict):
        return data
    defaults = table["node" if data.get("level") == "node" else "edge"]
    return {**{k: v for k, v in defaults.items() if data.get(k) is None}, **{
        k: v for k, v in data.items() if not (k in defaults and v is None)}}


def _check_node_training(spec: Any, name: str) -> None:
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


def _link(data: Any, name_of: Any, fields_of: Any) -> Any:
    """Keep a spec's ``method`` (its registered name) and the fields the name implies in
    step: fill ``method`` from them when it is missing, fill them from ``method`` when they
    are missing, and refuse a pair that disagrees."""
    if not isinstance(data, dict):
        return data
    d = dict(data)
    if "method" not in d or d["method"] is None:
        d["method"] = name_of(d)
        return d
    implied = fields_of(d["method"]) if isinstance(d["method"], str) else {}
    for k, v in implied.items():
        if k in d and d[k] != v:
            raise ValueError(f"method {d['method']!r} implies {k}={v!r}, got {k}={d[k]!r}")
        d[k] = v
    return d


#: Every method's spec, told apart by ``method`` (its registered name): one spec object,
#: from Python, a TOML/YAML/JSON file or CLI options, selects the method.
AnySpec = Annotated[TrainSpec | DpgnnSpec | DrwSpec | DpMlpSpec | GapSpec | ProgapSpec
                    | GraphClsSpec | DpdgcSpec, Field(discriminator="method")]
_ANY = TypeAdapter(AnySpec)


def parse_spec(data: dict[str, Any]) -> Spec:
    """Validate a spec given as a mapping with a ``method`` key (e.g. ``{"method":
    "dp-gcn", "epsilon": 4}``): the discriminated union picks the spec class; fields the
    method does not take are refused."""
    if "method" not in data:
        raise ValueError("a spec needs a 'method' (e.g. dp-gcn, drw-gcn, gap-edp, gcn)")
    spec: Spec = _ANY.validate_python(data)
    return spec


#: The embedded default dataset of ``dpgnn demo`` and the scheduled deployments: a
#: contextual stochastic block model generated from a seed (nothing to download).
DEMO_INGEST = IngestSpec(format="synthetic", name="csbm-demo",
                         options={"num_nodes": 3000, "num_classes": 5, "feature_dim": 32,
                                  "avg_degree": 10, "homophily": 0.8, "feature_signal": 1.0,
                                  "seed": 0})
#: The methods ``dpgnn demo`` runs on it.
DEMO_METHODS = ("gcn", "mlp")


def method_specs() -> dict[str, type[Spec]]:
    """Every registered name and its spec class (from the method catalogue, light: no
    torch), for the CLI's per-method commands."""
    from dpgnn_core.methods.catalog import spec_types

    return spec_types()
