"""The method contract and its registry: the one place that maps a method's name (the CLI
name, e.g. ``dp-gcn``) or a spec to the code that trains, accounts, saves, loads and
evaluates it.

Every method, the non-private baselines included, registers a :class:`Method` under its CLI
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
and is shown) is its entry in :mod:`dpgnn_core.methods.catalog` (light: no torch); how it
trains is registered by its own module, at its bottom, by reference
(:func:`register_implementation`, as Opacus's ``register_grad_sampler`` does). A family's
module is imported when one of its names is first asked for (:func:`get`,
:func:`method_for`), so a ``dpgnn run dp-mlp`` process never imports PyTorch Geometric
(about 5 s of CPU: the GNN families' layers); :data:`METHODS` imports them all. A new
method is one module plus its spec and catalogue entry (see docs/adding-a-method.md).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import torch

from dpgnn_core.data.graph import GraphData
from dpgnn_core.errors import DpgnnError
from dpgnn_core.methods import preflight
from dpgnn_core.methods._private import StageProgress
from dpgnn_core.methods.catalog import CATALOG, Entry
from dpgnn_core.methods.catalog import modules as catalog_modules
from dpgnn_core.methods.private_run import PrivateRun, typed_report
from dpgnn_core.privacy import Ledger, PrivacyError
from dpgnn_core.privacy.gate import ReleaseGate
from dpgnn_core.privacy.report import PrivacyReport
from dpgnn_core.privacy.sensitivity import Case, SensitivityCheck, verify
from dpgnn_core.specs import Spec

OnStep = Callable[[int, dict[str, float]], None] | None
Metrics = dict[str, dict[str, float]]


class UnknownMethodError(DpgnnError, ValueError):
    """A method name (or spec) no registered method answers to."""


@dataclass
class Fitted:
    """What :meth:`Method.fit` returns, the same for every method.

    Attributes:
        model (torch.nn.Module): the trained model (for GAP, the classifier with its
            encoder attached).
        ledger (Ledger): the privacy events of the run (empty for non-private runs).
        report (PrivacyReport): the privacy report, a frozen
            :class:`~dpgnn_core.privacy.report.PrivacyReport` (a method's fit builds it
            from its report dict with ``PrivacyReport.from_dict``; :meth:`Method.fit`
            finishes it).
        history (list of dict): one record per step or epoch.
        extra (dict): what evaluation needs beside the model (GAP: the private
            aggregations ``aggregations``).
    """

    model: torch.nn.Module
    ledger: Ledger
    report: PrivacyReport
    history: list[dict[str, Any]]
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Method:
    """One registered method: its catalogue entry and the implementation its module
    registered (:func:`register_implementation`).

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
    """

    entry: Entry
    spec_type: type[Spec]
    _fit: Callable[[GraphData, Any, PrivateRun], Fitted]
    _ledger_for: Callable[[Any, int], Callable[[float], Ledger]]
    _save: Callable[[str, Fitted, Any, GraphData], None]
    _load: Callable[[dict[str, Any]], tuple[torch.nn.Module, Any]]
    _evaluate: Callable[[torch.nn.Module, GraphData, Any, Mapping[str, Any]], Metrics]
    sensitivity: tuple[SensitivityCheck, ...] = ()

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
        self._save(path, fitted, spec, data)

    def load(self, blob: dict[str, Any]) -> tuple[torch.nn.Module, Any]:
        """Rebuild (model, spec) from a loaded ``model.pt``."""
        return self._load(blob)

    def evaluate(self, model: torch.nn.Module, data: GraphData, spec: Any,
                 extra: Mapping[str, Any] | None = None) -> Metrics:
        """Metrics per split (train, val, test)."""
        return self._evaluate(model, data, spec, extra or {})

    def _check_spec(self, spec: Any) -> None:
        if method_for(spec) is not self:
            raise UnknownMethodError(f"a spec of {method_for(spec).name} given to {self.name}")


_REGISTRY: dict[str, Method] = {}


class _AllMethods(Mapping[str, Method]):
    """Read-only view of the registry, CLI name -> method, of every catalogue entry: the
    first look imports every implementing module (:func:`_import_implementations`)."""

    def _all(self) -> Mapping[str, Method]:
        _import_implementations()
        return MappingProxyType(_REGISTRY)

    def __getitem__(self, name: str) -> Method:
        return self._all()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._all())

    def __len__(self) -> int:
        return len(self._all())


#: Every catalogue entry's method (importing every implementing module on first use).
METHODS: Mapping[str, Method] = _AllMethods()

Fit = Callable[[GraphData, Any, PrivateRun], Fitted]
LedgerFor = Callable[[Any, int], Callable[[float], Ledger]]
Save = Callable[[str, Fitted, Any, GraphData], None]
Load = Callable[[dict[str, Any]], tuple[torch.nn.Module, Any]]
Evaluate = Callable[[torch.nn.Module, GraphData, Any, Mapping[str, Any]], Metrics]
Sensitivity = Sequence[SensitivityCheck]


def register_implementation(family: str, *, fit: Fit, ledger_for: LedgerFor, save: Save,
                            load: Load, evaluate: Evaluate,
                            sensitivity: Sensitivity = ()) -> list[Method]:
    """Register the implementation of every catalogue name of ``family`` (called by the
    family's module, at its bottom, with references to its functions).

    ``sensitivity``: a private family's :class:`~dpgnn_core.privacy.sensitivity.
    SensitivityCheck` of each noisy quantity it releases (the declared L2 sensitivity and
    its brute force over neighbouring datasets); the contract test runs them
    (:func:`check_sensitivity`) and fails a private family that declares none.

    Raises:
        UnknownMethodError: the catalogue has no such family, or a name is registered
            already.
    """
    entries = [e for e in CATALOG.values() if e.family == family]
    if not entries:
        raise UnknownMethodError(f"the method catalogue has no family {family!r}")
    out = []
    for e in entries:
        if e.name in _REGISTRY:
            raise UnknownMethodError(f"method {e.name!r} is registered already")
        m = Method(entry=e, spec_type=e.spec_type, _fit=fit, _ledger_for=ledger_for,
                   _save=save, _load=load, _evaluate=evaluate,
                   sensitivity=tuple(sensitivity))
        _REGISTRY[e.name] = m
        out.append(m)
    return out


def register_node_private(family: str, *, train: Callable[..., Any], ledger_for: LedgerFor,
                          save: Callable[..., None], load: Load, evaluate: Callable[..., Metrics],
                          eval_options: Callable[[Any], dict[str, Any]] = lambda spec: {},
                          sensitivity: Sensitivity = ()) -> list[Method]:
    """:func:`register_implementation` for a node-level family trained by one function
    (``train(data, spec, run)``, ``run`` the fit's :class:`~dpgnn_core.methods.
    private_run.PrivateRun`, with ``model``, ``ledger``, ``report`` and
    ``history``), saved by ``save(path, model, spec, in_dim, num_classes)`` and evaluated
    by ``evaluate(model, data, device, **eval_options(spec))``; ``sensitivity`` as for
    :func:`register_implementation`."""

    def fit(data: GraphData, spec: Any, run: PrivateRun) -> Fitted:
        r = train(data, spec, run)
        return Fitted(r.model, r.ledger, PrivacyReport.from_dict(r.report), r.history)

    def save_(path: str, fitted: Fitted, spec: Any, data: GraphData) -> None:
        save(path, fitted.model, spec, data.num_features, data.num_classes)

    def evaluate_(model: torch.nn.Module, data: GraphData, spec: Any,
                  extra: Mapping[str, Any]) -> Metrics:
        out: Metrics = evaluate(model, data, spec.device, **eval_options(spec))
        return out

    return register_implementation(family, fit=fit, ledger_for=ledger_for, save=save_,
                                   load=load, evaluate=evaluate_, sensitivity=sensitivity)


def register_aggregating(family: str, title: str, *, fit: Fit, ledger_for: LedgerFor,
                         save: Callable[..., None], load: Load,
                         evaluate: Callable[..., Metrics],
                         sensitivity: Sensitivity = ()) -> list[Method]:
    """:func:`register_implementation` for GAP's or ProGAP's names: each predicts from its
    cached private aggregations (``extra["aggregations"]``)."""

    def save_(path: str, fitted: Fitted, spec: Any, data: GraphData) -> None:
        save(path, fitted.model, spec, data.num_features, data.num_classes)

    def evaluate_(model: torch.nn.Module, data: GraphData, spec: Any,
                  extra: Mapping[str, Any]) -> Metrics:
        if "aggregations" not in extra:
            raise UnknownMethodError(f"{title} evaluates from its private aggregations: pass "
                                     "extra={'aggregations': ...}")
        out: Metrics = evaluate(model, extra["aggregations"], data, spec.device)
        return out

    return register_implementation(family, fit=fit, ledger_for=ledger_for, save=save_,
                                   load=load, evaluate=evaluate_, sensitivity=sensitivity)


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
                           "declares no sensitivity check: register one SensitivityCheck "
                           "per noisy quantity it releases (docs/adding-a-method.md)")
    return {c.released: verify(c) for c in method.sensitivity}


def _registered(name: str) -> Method | None:
    """The method of ``name``, importing its family's module first if the catalogue names
    it and it has not registered yet; None for a name the catalogue does not have."""
    if name not in _REGISTRY and name in CATALOG:
        import importlib

        importlib.import_module(CATALOG[name].module)
        if name not in _REGISTRY:
            raise UnknownMethodError(f"catalogue name {name!r} has no implementation in "
                                     f"{CATALOG[name].module}")
    return _REGISTRY.get(name)


def get(name: str) -> Method:
    """The method registered as ``name``."""
    m = _registered(name)
    if m is None:
        raise UnknownMethodError(f"unknown method {name!r}; choose one of "
                                 f"{', '.join(sorted(CATALOG))}")
    return m


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


def _import_implementations() -> None:
    """Import every module the catalogue names: each registers its family at its bottom.
    A catalogue name that no module registered is an error (the method contract test
    reads :data:`METHODS`, so a missing implementation fails there, not at first use)."""
    import importlib

    if len(_REGISTRY) == len(CATALOG):
        return
    loading = set()
    for module in catalog_modules():
        mod = importlib.import_module(module)
        # a module whose import started this one registers when its import finishes
        if getattr(getattr(mod, "__spec__", None), "_initializing", False):
            loading.add(module)
    missing = sorted(n for n, e in CATALOG.items()
                     if n not in _REGISTRY and e.module not in loading)
    if missing:
        raise UnknownMethodError(f"catalogue names without an implementation: {missing}")


__all__ = ["METHODS", "Fitted", "Method", "UnknownMethodError", "check_sensitivity", "get",
           "load_blob", "method_for", "name_of", "register_aggregating", "register_implementation",
           "register_node_private"]
