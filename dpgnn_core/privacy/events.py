"""Privacy events and the ledger that composes them.

An event is a frozen description of one private release (a DP-SGD phase, a PMA release,
...): the mechanism, its noise, its sampling, how often it ran, and the neighbouring
relation under which its sensitivity is stated. Functions that release something return
``(result, event)``; the flow adds events to a :class:`Ledger`; accountants only read
ledgers. Modelled on dp-accounting's ``DpEvent`` classes (which accountants here translate
to where dp-accounting already models the mechanism).

Sensitivity conventions (the known traps):

* ``noise_multiplier`` is always the noise standard deviation divided by the L2
  sensitivity *under the event's relation*, as dp-accounting defines it.
* For clipped-gradient sums with clipping norm ``C``, the sensitivity is ``C`` under
  add/remove and ``2C`` under replace-one. Opacus states its noise multiplier relative to
  ``C`` in both cases; :func:`dp_sgd_noise_multiplier` converts.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

from dpgnn_core import errors as _errors
from dpgnn_core.io import write_json_atomic

Relation = Literal["add_remove", "replace"]
Level = Literal["edge", "node", "node_feature", "k_neighbor", "graph", "record"]
Sampling = Literal["none", "poisson", "fixed_size_without_replacement", "with_replacement",
                   "disjoint_partition"]
SAMPLING_SCHEMES: tuple[str, ...] = ("none", "poisson", "fixed_size_without_replacement",
                                     "with_replacement", "disjoint_partition")


#: Defined in :mod:`dpgnn_core.errors` (light to import); the same class, exported here too.
PrivacyError = _errors.PrivacyError


def _positive(name: str, value: float) -> None:
    if not value > 0:
        raise PrivacyError(f"{name} must be > 0, got {value!r}")


def _rate(name: str, value: float) -> None:
    if not 0 < value <= 1:
        raise PrivacyError(f"{name} must lie in (0, 1], got {value!r}")


def _count(name: str, value: int, minimum: int = 1) -> None:
    if int(value) != value or value < minimum:
        raise PrivacyError(f"{name} must be an integer >= {minimum}, got {value!r}")


def dp_sgd_noise_multiplier(noise_multiplier: float, relation: Relation) -> float:
    """Convert an Opacus-style multiplier (std / C) to std / sensitivity of ``relation``.

    .. math::
        z_{\\text{event}} = z_{\\text{Opacus}} \\cdot C / \\Delta, \\quad
        \\Delta = C \\text{ (add/remove)}, \\; 2C \\text{ (replace)}
    """
    _positive("noise_multiplier", noise_multiplier)
    return noise_multiplier if relation == "add_remove" else noise_multiplier / 2.0


def neighbourhood_size(max_degree: int, layers: int) -> int:
    """DP-GNN's occurrence bound :math:`N(K, r) = \\sum_{i=0}^{r} K^i`."""
    _count("max_degree K", max_degree, 1)
    _count("layers r", layers, 0)
    return sum(int(max_degree) ** i for i in range(int(layers) + 1))


@dataclass(frozen=True)
class PrivacyEvent:
    """Base class: what every event states.

    Attributes:
        level (str): what one neighbouring change touches: ``edge``, ``node``,
            ``node_feature``, ``k_neighbor`` (one node's features and label and / or up
            to k of its edges: DPDGC-kNDP; k is in the description), ``graph`` (one graph
            per record) or ``record`` (a row).
        relation (str): ``add_remove`` or ``replace``.
        description (str): free text for the privacy report.
    """

    kind: ClassVar[str] = "base"
    sampling: ClassVar[str] = "none"
    #: Whether the release is a sum of per-record clipped gradients (DP-SGD / DP-Adam): its
    #: clipping norm is then part of what the run used (MLflow's ``privacy.clip``).
    clips_gradients: ClassVar[bool] = False
    #: What one repetition of the event is called in summaries ("steps" or "releases").
    repetition: ClassVar[str] = "steps"
    level: Level = "record"
    relation: Relation = "add_remove"
    description: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "sampling": self.sampling, **dataclasses.asdict(self)}

    @property
    def repetitions(self) -> int | None:
        """How many times the mechanism ran (``steps`` or ``count``); None when the event
        states no count."""
        n = getattr(self, "steps", getattr(self, "count", None))
        return int(n) if n is not None else None

    @property
    def rate(self) -> float | None:
        """The batch sampling rate (Poisson or fixed size of n); None without sampling."""
        r = getattr(self, "sampling_rate", None)
        return float(r) if r is not None else None

    def summary(self) -> dict[str, Any]:
        """The event as a run's parameters show it: description, kind, noise multiplier,
        sampling scheme and rate, repetitions, level and relation (None entries left
        out)."""
        out = {"description": self.description, "kind": self.kind,
               "noise_multiplier": getattr(self, "noise_multiplier", None),
               "sampling": self.sampling, "sampling_rate": self.rate,
               "steps": self.repetitions, "level": self.level, "relation": self.relation}
        return {k: v for k, v in out.items() if v is not None}


@dataclass(frozen=True)
class GaussianEvent(PrivacyEvent):
    """``count`` releases of ``f(D) + N(0, (z·Δ)² I)``, e.g. GAP's PMA over ``count`` hops.

    Edge-level PMA on row-normalised features: Δ = 1 per hop (√2 on undirected graphs);
    node level on graphs with every degree <= D: Δ = sqrt(D² + D), or sqrt(min(c, D)² + D)
    with rows clipped to c (docs/privacy.md). ``noise_multiplier`` is σ/Δ.

    .. math::
        \\mathrm{RDP}(\\alpha) = \\text{count} \\cdot \\frac{\\alpha}{2 z^2}
    """

    kind: ClassVar[str] = "gaussian"
    repetition: ClassVar[str] = "releases"
    noise_multiplier: float = 1.0
    count: int = 1

    def __post_init__(self) -> None:
        _positive("noise_multiplier", self.noise_multiplier)
        _count("count", self.count)


@dataclass(frozen=True)
class PoissonGaussianEvent(PrivacyEvent):
    """``steps`` Gaussian releases on Poisson-sampled rows (each row kept independently
    with probability ``sampling_rate``): DP-SGD / DP-Adam over independent records
    (DP-MLP, GAP's encoder and classifier, graph classification). Add/remove relation;
    ``noise_multiplier`` = σ / C."""

    kind: ClassVar[str] = "poisson_gaussian"
    sampling: ClassVar[str] = "poisson"
    clips_gradients: ClassVar[bool] = True
    noise_multiplier: float = 1.0
    sampling_rate: float = 0.01
    steps: int = 1

    def __post_init__(self) -> None:
        _positive("noise_multiplier", self.noise_multiplier)
        _rate("sampling_rate", self.sampling_rate)
        _count("steps", self.steps)
        if self.relation != "add_remove":
            raise PrivacyError("Poisson-sampled Gaussian is analysed under add/remove")


@dataclass(frozen=True)
class UniformGaussianEvent(PrivacyEvent):
    """``steps`` Gaussian releases on batches of fixed size ``m`` drawn uniformly without
    replacement from ``n`` items (``sampling_rate = m / n``), Wang-Balle-Kasiviswanathan
    (2019) Thm. 27. Replace-one relation; ``noise_multiplier`` = σ / Δ with Δ = 2C for
    clipped sums (use :func:`dp_sgd_noise_multiplier`). For DRW, n is the number of
    disjoint subgraphs, at least ceil(N / (L+1)) (DRW-R: ceil(N / (R·L+1))); see
    :func:`drw_sampling_rate`."""

    kind: ClassVar[str] = "uniform_gaussian"
    sampling: ClassVar[str] = "fixed_size_without_replacement"
    clips_gradients: ClassVar[bool] = True
    noise_multiplier: float = 1.0
    sampling_rate: float = 0.01
    steps: int = 1
    relation: Relation = "replace"

    def __post_init__(self) -> None:
        _positive("noise_multiplier", self.noise_multiplier)
        _rate("sampling_rate", self.sampling_rate)
        _count("steps", self.steps)
        if self.relation != "replace":
            raise PrivacyError("fixed-size sampling without replacement is analysed under "
                               "the replace-one relation (n is public)")


@dataclass(frozen=True)
class DpgnnEvent(PrivacyEvent):
    """DP-GNN (Daigavane et al., Thm. 1): ``steps`` noisy gradient sums over ``batch_size``
    of ``num_train`` degree-bounded training subgraphs drawn uniformly without replacement.

    One node occurs in at most :math:`N(K,r)` subgraphs. When the sampled structure does
    not depend on what the relation changes (``level="node_feature"``: features and labels
    replaced, graph structure public), a replaced node changes
    :math:`\\rho \\sim \\mathrm{Hypergeometric}(N, M, m)` sampled gradients with
    :math:`M = N(K,r)` marked subgraphs, each by at most 2C. When the relation also replaces
    the node's own edge row (``level="node"``, directed graphs only), the changed subgraphs
    are those holding the node in either graph, :math:`M = 2N(K,r) - 1` (docs/privacy.md).
    Noise std is :math:`\\lambda \\cdot 2C \\cdot N(K,r)` in both cases;
    ``noise_multiplier`` is :math:`\\lambda`. Replace-one relation.

    Attributes:
        marked (int, optional): M, the most subgraphs one neighbouring change can touch;
            :math:`N(K,r)` when omitted.
    """

    kind: ClassVar[str] = "dpgnn"
    sampling: ClassVar[str] = "fixed_size_without_replacement"
    clips_gradients: ClassVar[bool] = True
    noise_multiplier: float = 1.0
    num_train: int = 1
    batch_size: int = 1
    max_degree: int = 1
    layers: int = 1
    steps: int = 1
    marked: int | None = None
    level: Level = "node_feature"
    relation: Relation = "replace"

    def __post_init__(self) -> None:
        _positive("noise_multiplier", self.noise_multiplier)
        _count("num_train N", self.num_train)
        _count("batch_size m", self.batch_size)
        _count("steps", self.steps)
        neighbourhood_size(self.max_degree, self.layers)
        if self.batch_size > self.num_train:
            raise PrivacyError(f"batch_size m={self.batch_size} exceeds num_train "
                               f"N={self.num_train}")
        if self.relation != "replace":
            raise PrivacyError("DP-GNN's theorem is stated for the replace-one relation")
        if self.marked is not None:
            _count("marked M", self.marked)
            if self.marked < self.occurrences:
                raise PrivacyError(f"marked M={self.marked} is below the occurrence bound "
                                   f"N(K,r)={self.occurrences}")
        if self.level not in ("node", "node_feature"):
            raise PrivacyError(f"DP-GNN events are node or node_feature level, got "
                               f"{self.level!r}")

    @property
    def occurrences(self) -> int:
        return neighbourhood_size(self.max_degree, self.layers)

    @property
    def rate(self) -> float:
        """m / N: the batch drawn without replacement from the training subgraphs."""
        return self.batch_size / self.num_train

    @property
    def marked_subgraphs(self) -> int:
        """M: the most sampled subgraphs one neighbouring change can touch."""
        return self.marked if self.marked is not None else self.occurrences


EVENT_TYPES: dict[str, type[PrivacyEvent]] = {
    cls.kind: cls for cls in (GaussianEvent, PoissonGaussianEvent, UniformGaussianEvent,
                              DpgnnEvent)
}


def event_from_dict(d: dict[str, Any]) -> PrivacyEvent:
    d = dict(d)
    kind = d.pop("kind", None)
    d.pop("sampling", None)
    if kind not in EVENT_TYPES:
        raise PrivacyError(f"unknown event kind {kind!r}; known: {sorted(EVENT_TYPES)}")
    return EVENT_TYPES[kind](**d)


def drw_sampling_rate(num_nodes: int, batch_size: int, walk_length: int,
                      restarts: int = 1) -> float:
    """Upper bound on DRW's sampling ratio: ``m / ceil(n / (R·L + 1))`` (Ayle et al.)."""
    _count("num_nodes", num_nodes)
    _count("batch_size", batch_size)
    _count("walk_length L", walk_length)
    _count("restarts R", restarts)
    min_subgraphs = -(-num_nodes // (restarts * walk_length + 1))
    if batch_size > min_subgraphs:
        raise PrivacyError(f"batch of {batch_size} subgraphs exceeds the {min_subgraphs} "
                           "subgraphs a DRW partition is guaranteed to have")
    return batch_size / min_subgraphs


@dataclass(frozen=True)
class LedgerEntry:
    """An event as recorded: with the scheme the batch sampler declared it used."""

    event: PrivacyEvent
    sampler_scheme: str

    def to_dict(self) -> dict[str, Any]:
        return {"event": self.event.to_dict(), "sampler_scheme": self.sampler_scheme}


@dataclass(frozen=True)
class Ledger:
    """An immutable sequence of privacy events, composed by an accountant.

    ``unaccounted`` lists uses of private data that no event covers (for example a clipping
    threshold taken from private gradient norms, or model selection on validation); they
    appear in every privacy report.
    """

    entries: tuple[LedgerEntry, ...] = ()
    unaccounted: tuple[str, ...] = field(default_factory=tuple)

    def add(self, event: PrivacyEvent, *, sampler_scheme: str | None = None) -> Ledger:
        """A new ledger with ``event`` appended.

        Args:
            event (PrivacyEvent): the release.
            sampler_scheme (str, optional): the scheme the batch sampler declares it
                implemented; must equal the scheme the event's analysis assumes. Omit only
                for events without sampling.
        """
        scheme = sampler_scheme if sampler_scheme is not None else "none"
        if scheme not in SAMPLING_SCHEMES:
            raise PrivacyError(f"unknown sampling scheme {scheme!r}; known: {SAMPLING_SCHEMES}")
        check_scheme(event, scheme)
        return dataclasses.replace(self, entries=(*self.entries, LedgerEntry(event, scheme)))

    def flag(self, note: str) -> Ledger:
        """A new ledger that records an unaccounted use of private data."""
        return dataclasses.replace(self, unaccounted=(*self.unaccounted, note))

    def __add__(self, other: Ledger) -> Ledger:
        return Ledger(self.entries + other.entries, self.unaccounted + other.unaccounted)

    @property
    def events(self) -> tuple[PrivacyEvent, ...]:
        return tuple(e.event for e in self.entries)

    @property
    def clips_gradients(self) -> bool:
        """Whether any event is a clipped-gradient phase (its clip norm was used)."""
        return any(e.clips_gradients for e in self.events)

    def to_dict(self) -> dict[str, Any]:
        return {"entries": [e.to_dict() for e in self.entries],
                "unaccounted": list(self.unaccounted)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Ledger:
        entries = tuple(LedgerEntry(event_from_dict(e["event"]), e["sampler_scheme"])
                        for e in d.get("entries", []))
        return cls(entries, tuple(d.get("unaccounted", [])))

    def save(self, path: str | Path) -> None:
        write_json_atomic(path, self.to_dict())

    @classmethod
    def load(cls, path: str | Path) -> Ledger:
        return cls.from_dict(json.loads(Path(path).read_text()))


def check_scheme(event: PrivacyEvent, sampler_scheme: str) -> None:
    """Refuse an event whose analysis assumes another batch-sampling scheme than the one
    the sampler declared (e.g. batches drawn with replacement but accounted without, as in
    DP-GNN's reference code; shuffled batches accounted as Poisson, as in Mueller et al.'s)."""
    if event.sampling != sampler_scheme:
        raise PrivacyError(
            f"{event.kind} event assumes '{event.sampling}' batch sampling but the sampler "
            f"declared '{sampler_scheme}': the accountant's analysis would not hold")
