"""What every spec shares: the frozen, hashable :class:`Spec`; :class:`PrivateSpec`, the
fields of every private training method; :class:`LargeBatchDefaults`, the recipe of the
methods whose defaults were swept; :func:`link`, which keeps a spec's ``method`` and the
fields its name implies in step (each family's name validator calls it); and the record of
every spec class and the names it takes (:func:`spec_classes`, which
:func:`~dpgnn_core.specs.parse_spec` reads). Specs import nothing of ``dpgnn_core.methods``;
each family's catalogue entries are written beside its spec (:mod:`dpgnn_core.specs.entry`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Annotated, Any, ClassVar, Literal, get_args, get_origin

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)

from dpgnn_core.io import sha256_json

#: A seed of initialisation (and dropout): 0 to 2^32 - 1, what every seeded library dpgnn
#: calls accepts (numpy's legacy generator takes 32 bits; torch takes 64, and a run adds
#: small offsets to its seed). A larger one is refused with the spec, in one line, instead
#: of torch's ``ValueError: Overflow when unpacking long long`` inside the flow.
Seed = Annotated[int, Field(ge=0, lt=2**32)]

# --- the record of spec classes, read by parse_spec ----------------------------------------

#: Spec classes by the names they take (``method``), in the order they were defined.
_BY_NAME: dict[str, type[Spec]] = {}


def method_names(cls: type) -> tuple[str, ...]:
    """The names a spec class's ``method`` field takes (its ``Literal``); ``()`` for a spec
    without one (:class:`PrivateSpec`, ``IngestSpec``)."""
    f = getattr(cls, "model_fields", {}).get("method")
    if f is None or get_origin(f.annotation) is not Literal:
        return ()
    return tuple(str(a) for a in get_args(f.annotation))


def _declare(cls: type[Spec]) -> None:
    taken = sorted(n for n in method_names(cls) if n in _BY_NAME)
    if taken:
        raise ValueError(f"{cls.__name__}: method names {taken} belong to "
                         f"{_BY_NAME[taken[0]].__name__} already")
    for name in method_names(cls):
        _BY_NAME[name] = cls


def spec_classes() -> list[type[Spec]]:
    """Every spec class that takes ``method`` names, each once, in definition order."""
    return list(dict.fromkeys(_BY_NAME.values()))


class Spec(BaseModel):
    # No float field takes inf or NaN (issue 48 fault trial: --lr inf trained, was charged,
    # then failed): every option is a finite number or refused before anything runs.
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

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
    #: A levelled family's names (GAP, ProGAP, DPDGC): ``level`` -> the name that implies
    #: it (``{"edge": "gap-edp", ...}``); the spec's name validator and the catalogue read it.
    level_names: ClassVar[Mapping[str, str]] = {}
    #: Inputs besides the name that change the defaults a levelled family's name fills in
    #: (DPDGC's ``messages="adjacency"``): :meth:`default_note` states them too.
    default_variants: ClassVar[tuple[Mapping[str, Any], ...]] = ()

    @classmethod
    def filled_in(cls, data: Any) -> Any:
        """``data`` (a spec's input) with what its method name implies and the defaults
        of its level filled in where it leaves them out: a levelled family's name
        validator (GAP, ProGAP, DPDGC). Unchanged here."""
        return data

    @classmethod
    def default_note(cls, name: str, field: str) -> str | None:
        """The default of ``field`` for method ``name`` where the name's level decides it,
        in words for ``dpgnn run NAME --help`` (``3``; ``"1 with messages = adjacency"``
        for each :attr:`default_variants` input that changes it): derived from
        :meth:`filled_in`, the same code that fills the default into a run's spec, so the
        help cannot drift from the runs. None for a field no level decides."""
        if name not in cls.level_names.values():
            return None
        variants = [dict(v) for v in cls.default_variants]
        decided = {k for n in cls.level_names.values() for v in [{}, *variants]
                   for k in cls.filled_in({"method": n, **v})
                   if k not in ("method", *cls.implied, *v)}
        if field not in decided:
            return None

        def value(given: Mapping[str, Any]) -> Any:
            filled = cls.filled_in({"method": name, **given})
            return filled.get(field, cls.model_fields[field].get_default(
                call_default_factory=True))

        main = value({})
        text = f"{_words(main)} for {name}"
        for v in variants:
            if field not in v and value(v) != main:
                text += f"; {_words(value(v))} with " + ", ".join(
                    f"{k} = {_words(x)}" for k, x in v.items())
        return text

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        """Record a spec class that declares its own ``method`` names
        (:func:`spec_classes`)."""
        super().__pydantic_init_subclass__(**kwargs)
        if method_names(cls) and not any(method_names(b) == method_names(cls)
                                         for b in cls.__mro__[1:]):
            _declare(cls)

    def cache_key(self) -> str:
        """sha256 of the spec's JSON form (sorted keys)."""
        return sha256_json(self.model_dump(mode="json"))


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
    # Upper limits: beyond them the training's float32 arithmetic overflows (--clip 1e308
    # trained, was charged, then failed at evaluation on NaN), so they are refused first.
    lr: float = Field(3e-3, gt=0, le=1e3)
    clip: float = Field(1.0, gt=0, le=1e12, allow_inf_nan=False)  # ∞: no clipping, no bound
    # Below 1e-3 a target is finer than the PLD accountant's loss grid (1e-4): ε = 1e-9 was
    # "met" at a reported ε of 0, a claim of perfect privacy no accountant supports.
    epsilon: float | None = Field(None, ge=1e-3, allow_inf_nan=False)
    delta: float | None = Field(None, gt=0, lt=1)
    accountant: Literal["rdp", "pld"] = "pld"
    noise_multiplier: float | None = Field(None, gt=0)
    seed: Seed = 0
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


def link(data: Any, name_of: Any, fields_of: Any) -> Any:
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


def _words(value: Any) -> str:
    """A default as the command line takes it (a tuple as numbers separated by commas)."""
    if isinstance(value, tuple | list):
        return ", ".join(_words(v) for v in value)
    return f"{value:g}" if isinstance(value, float) else str(value)


def fill_level_defaults(data: Any, table: dict[str, dict[str, Any]],
                        key: Callable[[str], str] | None = None) -> Any:
    """``data`` with the defaults of its level filled in where it leaves a field out (a
    field given as ``None`` counts as left out). The level's entry of ``table`` is
    ``key(level)``; by default ``table["node"]`` at node level and ``table["edge"]``
    otherwise (edge level and ∞ share their module recipe). A level with no entry gets
    no defaults.

    Args:
        data: the spec's input (anything but a dict passes through).
        table (dict): level key -> field -> default.
        key (callable, optional): level (``"edge"`` when absent) -> its key in ``table``.
    """
    if not isinstance(data, dict):
        return data
    level = str(data.get("level") or "edge")
    name = key(level) if key is not None else ("node" if level == "node" else "edge")
    defaults = table.get(name, {})
    return {**{k: v for k, v in defaults.items() if data.get(k) is None}, **{
        k: v for k, v in data.items() if not (k in defaults and v is None)}}


def link_level(data: Any, names: Mapping[str, str], defaults: dict[str, dict[str, Any]],
               key: Callable[[str], str] | None = None) -> Any:
    """A levelled family's input (GAP, ProGAP, DPDGC): the method name and ``level`` made
    to agree (``gap-ndp`` <-> ``level="node"``; ``names`` is the spec's
    :attr:`Spec.level_names`), then the level's defaults filled in
    (:func:`fill_level_defaults` with ``defaults`` and ``key``)."""
    data = link(data, lambda d: names[d.get("level", "edge")],
                lambda m: {"level": {v: k for k, v in names.items()}[m]})
    return fill_level_defaults(data, defaults, key)


# --- pre-flight checks shared by the node-level families (GAP, ProGAP, DPDGC) --------------


def degree_alternatives(spec: Any) -> str:
    """The names of ``spec``'s family that bound no degree (``gap-edp``; DPDGC's k-neighbour,
    edge and node_feature levels), which a degree refusal offers instead."""
    names = [n for lvl, n in spec.level_names.items() if lvl not in ("node", "none")]
    return " / ".join(names) or "a level without a degree bound"


def degree_within_bound(spec: Any, manifest: Mapping[str, Any]) -> None:
    """The pre-flight degree check of a node-level spec (GAP-NDP, ProGAP-NDP, DPDGC-NDP):
    every degree within ``max_degree``, read from the dataset's edge list (without the rest
    of the dataset), the refusal training would make
    (:func:`~dpgnn_core.graph.gap_degree.check_degree_bound`), before anything starts.
    Nothing to check at another level or without the dataset folder (``path``); a
    partitioned dataset's degrees are checked by its workers, before anything trains
    (:func:`dpgnn_core.distributed.gap.train_gap_partitioned`).

    Raises:
        DataError: a degree above ``max_degree`` (naming D, never the observed degrees).
    """
    if getattr(spec, "level", None) != "node" or not manifest.get("path") or \
            manifest.get("layout") == "partitioned":
        return
    from dpgnn_core.data.store import read_edges
    from dpgnn_core.graph.gap_degree import check_degree_bound

    ei, _ = read_edges(manifest["path"])
    check_degree_bound(ei, int(manifest["num_nodes"]), int(spec.max_degree),
                       directed=bool(manifest.get("directed", False)), method=spec.method,
                       instead=degree_alternatives(spec))
