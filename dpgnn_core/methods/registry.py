"""The method contract and its registry: the one place that maps a method's name (the CLI
name, e.g. ``dp-gcn``) or a spec to the code that trains, accounts, saves, loads and
evaluates it.

Every catalogue name, the non-private baselines included, has a :class:`Method` under its CLI
name. Callers (tasks, flows, the CLI, sweeps) ask the registry instead of dispatching on
names or spec types themselves::

    from dpgnn_core.methods.registry import get, method_for

    m = get("dp-gcn")
    spec = m.spec(epsilon=4.0, steps=500)       # conv="gcn" is implied by the name
    fitted = m.fit(data, spec)                  # model, ledger, report, history
    m.save("model.pt", fitted, spec, data)
    model = m.load(torch.load("model.pt", weights_only=True))
    metrics = m.evaluate(model, data, spec, fitted.extra)
    assert method_for(spec) is m

What a method *is* (its name, family, spec, task, privacy, audit canaries, how it runs
and is shown) is its typed catalogue entry (:mod:`dpgnn_core.methods.catalog`, light: no
torch), written beside its spec; how it trains is the ``IMPLEMENTATION`` of the module the
entry names (a :class:`~dpgnn_core.methods.contract.Implementation`: fit, plan, ``build``,
evaluate, sensitivity checks, stages), which this module imports by that name when one of the
family's names is first asked for (:func:`get`, :func:`method_for`). So a ``dpgnn run
dp-mlp`` process never imports PyTorch Geometric (about 5 s of CPU: the GNN families'
layers); :data:`METHODS` imports them all. Nothing registers itself on import, and no method
module imports this one. Saving and loading are this module's: every method's ``model.pt``
is its weights, its spec and dims, and is rebuilt by its ``build(spec, in_dim,
num_classes)``. A new method is one module plus its spec and catalogue entry (see
docs/adding-a-method.md).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import torch

from dpgnn_core.data.graph import GraphData
from dpgnn_core.methods import preflight
from dpgnn_core.methods._private import StageProgress
from dpgnn_core.methods._staged import Staged
from dpgnn_core.methods.catalog import CATALOG, Entry
from dpgnn_core.methods.contract import (
    Build,
    Fitted,
    Implementation,
    Metrics,
    OnStep,
    UnknownMethodError,
    read_model,
    write_model,
)
from dpgnn_core.methods.private_run import PrivateRun, typed_report
from dpgnn_core.privacy import Ledger, PrivacyError
from dpgnn_core.privacy.gate import ReleaseGate
from dpgnn_core.privacy.sensitivity import Case, SensitivityCheck, verify
from dpgnn_core.specs import Spec


@dataclass(frozen=True)
class Method:
    """One method: its catalogue entry and the implementation of its family (the
    ``IMPLEMENTATION`` of the module the entry names).

    Attributes:
        entry (Entry): the method's :class:`~dpgnn_core.methods.catalog.Entry`; its fields
            are read through properties of the same names (``name``, ``family``,
            ``task``, ``private``, ``protection``, ``fixed``, ``progress_unit``,
            ``staged``, ``explains``, ``extra_metrics``, ``private_path``,
            ``private_selection``, ``score_sensitivity``).
        spec_type (type): the spec class; its fields are the method's options.
        sensitivity (tuple): the family's :class:`~dpgnn_core.privacy.sensitivity.
            SensitivityCheck` of each noisy quantity it releases (empty: none declared,
            which :func:`check_sensitivity` refuses for a private method).
        stages (Staged, optional): the stages a ``staged`` entry runs as.
    """

    entry: Entry
    spec_type: type[Spec]
    _fit: Callable[[GraphData, Any, PrivateRun], Fitted]
    _ledger_for: Callable[[Any, int], Callable[[float], Ledger]]
    _build: Build
    _evaluate: Callable[[torch.nn.Module, GraphData, Any, Mapping[str, Any]], Metrics]
    sensitivity: tuple[SensitivityCheck, ...] = ()
    stages: Staged | None = None

    @classmethod
    def of(cls, entry: Entry, impl: Implementation) -> Method:
        """The method of catalogue ``entry`` trained by ``impl``."""
        return cls(entry=entry, spec_type=entry.spec_type, _fit=impl.fit,
                   _ledger_for=impl.ledger_for, _build=impl.build, _evaluate=impl.evaluate,
                   sensitivity=impl.sensitivity, stages=impl.staged)

    @property
    def name(self) -> str:
        return self.entry.name

    @property
    def family(self) -> str:
        return self.entry.family

    @property
    def task(self) -> str:
        return self.entry.task

    @property
    def private(self) -> bool:
        return self.entry.private

    @property
    def protection(self) -> str:
        return self.entry.protection

    @property
    def fixed(self) -> Mapping[str, Any]:
        return self.entry.fixed

    @property
    def progress_unit(self) -> str:
        return self.entry.progress_unit

    @property
    def staged(self) -> bool:
        return self.entry.staged

    @property
    def explains(self) -> bool:
        return self.entry.explains

    @property
    def extra_metrics(self) -> tuple[str, ...]:
        return self.entry.extra_metrics

    @property
    def private_path(self) -> bool:
        return self.entry.private_path

    @property
    def private_selection(self) -> bool:
        return self.entry.private_selection

    @property
    def score_sensitivity(self) -> float | None:
        return self.entry.score_sensitivity

    def run_tags(self, spec: Any) -> dict[str, str]:
        """The spec fields this method logs as ``dpgnn.<field>`` MLflow tags."""
        return {f"dpgnn.{f}": str(getattr(spec, f)) for f in self.entry.run_tags}

    def canary_for(self, spec: Any) -> tuple[str, str] | None:
        """The audit's (canary kind, relation) for ``spec`` (None: no audit)."""
        return self.entry.canary_for(getattr(spec, "level", None))

    def options(self) -> list[str]:
        """The spec fields a user may set (the fixed ones excluded)."""
        return [f for f in self.spec_type.model_fields if f not in self.fixed]

    def spec(self, **options: Any) -> Any:
        """Build and validate this method's spec; refuse options it does not take.

        Raises:
            UnknownMethodError: an option is not one of :meth:`options`.
            pydantic.ValidationError: a value is invalid.
        """
        wrong = sorted(set(options) - set(self.options()))
        if wrong:
            raise UnknownMethodError(
                f"{self.name} does not take {', '.join(wrong)}; its options are "
                f"{', '.join(self.options())}")
        return self.spec_type(**{**options, **self.fixed})

    def preflight(self, spec: Any, manifest: Mapping[str, Any]) -> list[str]:
        """Checks that need only the spec and the dataset's manifest (cheap: run before any
        orchestration starts, so a bad run fails in a second, not after Prefect starts).

        Every method: the dataset's task is the method's, it has training records (nodes,
        or graphs for graph classification), a set ``batch_size`` fits in them, a private
        method's data is single-label, and the requested device exists. Then the method's
        family's checks its catalogue entry names (DP-GNN's level, the node levels' degree
        bound): :func:`dpgnn_core.methods.preflight.check`, which the CLI runs before
        Prefect starts. A
        ``path`` key in ``manifest`` (the dataset folder) is named in the errors.

        Returns:
            list of str: warnings that do not stop the run.

        Raises:
            DataError: the data does not suit the method or the spec.
            DeviceError: ``device='cuda'`` without a CUDA device.
            PrivacyError: the method's own privacy checks.
        """
        self._check_spec(spec)
        return preflight.check(spec, manifest)

    def fit(self, data: GraphData, spec: Any, on_step: OnStep = None, *,
            progress: StageProgress | None = None, gate: ReleaseGate | None = None) -> Fitted:
        """Train ``spec`` on ``data``.

        The method's fit gets one engine, a :class:`~dpgnn_core.methods.private_run.
        PrivateRun` holding ``on_step``, ``progress`` and the budget keeper's ``gate``:
        through it the fit calibrates and reserves its plan (the gate may refuse before
        anything private is computed), tells the gate of every release (each trained step),
        and reports its steps, each ``on_step`` record with ``epsilon`` (ε spent so far, an
        upper bound, from the registered ``ledger_for`` of the calibrated spec, or a staged
        method's own stage values) and ``total_steps``. The result's report is a frozen
        :class:`~dpgnn_core.privacy.report.PrivacyReport` with the ε-by-step curve, and a
        private run's history has ``epsilon_spent`` at the steps of that curve
        (:func:`~dpgnn_core.methods.private_run.typed_report`, the same for every method).

        Raises:
            PrivacyError: a private fit declared no plan and gave no curve.
        """
        return self.fit_with(self._fit, data, spec, on_step, progress=progress, gate=gate)

    def fit_with(self, fit: Callable[[Any, Any, PrivateRun], Any], data: Any, spec: Any,
                 on_step: OnStep = None, *, progress: StageProgress | None = None,
                 gate: ReleaseGate | None = None) -> Fitted:
        """:meth:`fit` by another fit of this method: its partitioned one (issue 51;
        :func:`dpgnn_core.distributed.fits.fit_for`, ``data`` a
        :class:`~dpgnn_core.distributed.fits.Partitions`), with the same engine, ε curve,
        report and ledger form."""
        self._check_spec(spec)
        run = PrivateRun(on_step, progress=progress, gate=gate, ledger_for=self._ledger_for)
        fitted: Fitted = fit(data, spec, run)
        fitted.report, fitted.ledger, fitted.history = typed_report(
            fitted.report.to_dict(), fitted.ledger, fitted.history, spec, run.points(),
            who=self.name)
        return fitted

    def ledger_for(self, spec: Any, n_train: int) -> Callable[[float], Ledger]:
        """The plan: noise multiplier -> the ledger of the whole run (empty ledgers for
        non-private runs)."""
        self._check_spec(spec)
        if not self.private:
            return lambda z: Ledger()
        return self._ledger_for(spec, n_train)

    def save(self, path: str, fitted: Fitted, spec: Any, data: GraphData) -> None:
        """Write ``model.pt`` (weights, spec, dims), atomically."""
        self._check_spec(spec)
        write_model(path, fitted.model, spec, data.num_features, data.num_classes)

    def build(self, spec: Any, in_dim: int, num_classes: int) -> torch.nn.Module:
        """The untrained model ``spec`` describes (what :meth:`load` fills with weights)."""
        self._check_spec(spec)
        return self._build(spec, in_dim, num_classes)

    def load(self, blob: dict[str, Any]) -> tuple[torch.nn.Module, Any]:
        """Rebuild (model, spec) from a loaded ``model.pt``."""
        return read_model(blob, self.spec_type, self._build)

    def evaluate(self, model: torch.nn.Module, data: GraphData, spec: Any,
                 extra: Mapping[str, Any] | None = None) -> Metrics:
        """Metrics per split (train, val, test)."""
        return self._evaluate(model, data, spec, extra or {})

    def _check_spec(self, spec: Any) -> None:
        if method_for(spec) is not self:
            raise UnknownMethodError(f"a spec of {method_for(spec).name} given to {self.name}")


_REGISTRY: dict[str, Method] = {}


def implementation(entry: Entry) -> Implementation:
    """The ``IMPLEMENTATION`` of the module ``entry`` names, imported by that name.

    Raises:
        UnknownMethodError: the module has no :class:`Implementation`.
    """
    impl = getattr(importlib.import_module(entry.module), "IMPLEMENTATION", None)
    if not isinstance(impl, Implementation):
        raise UnknownMethodError(f"method {entry.name!r}: {entry.module} defines no "
                                 "IMPLEMENTATION (a dpgnn_core.methods.contract."
                                 "Implementation)")
    return impl


def _registered(name: str) -> Method | None:
    """The method of ``name`` (made from its catalogue entry and its family's
    implementation on first use); None for a name the catalogue does not have."""
    if name not in _REGISTRY and name in CATALOG:
        e = CATALOG[name]
        _REGISTRY[name] = Method.of(e, implementation(e))
    return _REGISTRY.get(name)


class _AllMethods(Mapping[str, Method]):
    """Read-only view of every catalogue entry's method, CLI name -> method: the first look
    imports every implementing module."""

    def _all(self) -> Mapping[str, Method]:
        for name in CATALOG:
            _registered(name)
        return MappingProxyType(_REGISTRY)

    def __getitem__(self, name: str) -> Method:
        return self._all()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._all())

    def __len__(self) -> int:
        return len(self._all())


#: Every catalogue entry's method (importing every implementing module on first use).
METHODS: Mapping[str, Method] = _AllMethods()


def check_sensitivity(method: Method) -> dict[str, list[tuple[Case, float]]]:
    """Run the brute force of every sensitivity ``method``'s family declares
    (:func:`~dpgnn_core.privacy.sensitivity.verify`): each check's ``released`` -> its
    cases, each with the declared bound.

    Raises:
        PrivacyError: a private method that declares no sensitivity check, or a declared
            sensitivity below a change its brute force saw (or looser than a known worst
            case).
    """
    if method.private and not method.sensitivity:
        raise PrivacyError(f"private method {method.name!r} (family {method.family!r}) "
                           "declares no sensitivity check: give its Implementation one "
                           "SensitivityCheck per noisy quantity it releases "
                           "(docs/adding-a-method.md)")
    return {c.released: verify(c) for c in method.sensitivity}


def get(name: str) -> Method:
    """The method registered as ``name``."""
    m = _registered(name)
    if m is None:
        raise UnknownMethodError(f"unknown method {name!r}; choose one of "
                                 f"{', '.join(sorted(CATALOG))}")
    return m


def declared(family: str) -> Staged:
    """The stages ``family`` runs as (its implementation's ``staged``), importing its
    module by name: the answer never depends on what was imported before.

    Raises:
        KeyError: ``family`` is not in the catalogue, or declares no stages.
    """
    entries = [e for e in CATALOG.values() if e.family == family]
    if not entries:
        raise KeyError(f"unknown method family {family!r}; choose one of "
                       f"{', '.join(sorted({e.family for e in CATALOG.values()}))}")
    staged = get(entries[0].name).stages
    if staged is None:
        raise KeyError(f"method family {family!r} declares no stages (not a staged method)")
    return staged


def name_of(spec: Any) -> str:
    """The registered name a spec belongs to: its ``method`` field (every spec class in
    :mod:`dpgnn_core.specs` carries its registered name there)."""
    name = getattr(spec, "method", None)
    m = _registered(name) if isinstance(name, str) else None
    if m is None or type(spec) is not m.spec_type:
        raise UnknownMethodError(f"no registered method takes this {type(spec).__name__} "
                                 f"(method={name!r})")
    return m.name


def method_for(spec: Any) -> Method:
    """The registered method of ``spec``."""
    return _REGISTRY[name_of(spec)]


def load_blob(blob: dict[str, Any]) -> tuple[Method, torch.nn.Module, Any]:
    """(method, model, spec) from a loaded ``model.pt`` of any registered method: the
    stored spec names its method."""
    name = blob.get("spec", {}).get("method")
    if not isinstance(name, str):
        raise UnknownMethodError("model.pt holds no spec with a method name (written by an "
                                 "older dpgnn?); retrain it")
    method = get(name)
    model, spec = method.load(blob)
    return method, model, spec


__all__ = ["METHODS", "Fitted", "Method", "UnknownMethodError", "check_sensitivity",
           "declared", "get", "implementation", "load_blob", "method_for", "name_of"]
