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

A new method is one module that builds its :class:`Method` and calls :func:`register`
(see docs/adding-a-method.md).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import torch

from dpgnn_core.data.graph import GraphData
from dpgnn_core.errors import DpgnnError
from dpgnn_core.privacy import Ledger
from dpgnn_core.privacy.report import PrivacyReport, with_loss_note
from dpgnn_core.specs import (
    DpgnnSpec,
    DpMlpSpec,
    DrwSpec,
    GapSpec,
    GraphClsSpec,
    ProgapSpec,
    Spec,
    TrainSpec,
)

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
        report (Mapping): the privacy report: after :meth:`Method.fit`, a frozen
            :class:`~dpgnn_core.privacy.report.PrivacyReport`.
        history (list of dict): one record per step or epoch.
        extra (dict): what evaluation needs beside the model (GAP: the private
            aggregations ``aggregations``).
    """

    model: torch.nn.Module
    ledger: Ledger
    report: Mapping[str, Any]
    history: list[dict[str, Any]]
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Method:
    """One registered method.

    Attributes:
        name (str): the CLI name, e.g. ``dp-gcn``.
        family (str): ``baseline``, ``dp-gnn``, ``drw``, ``dp-mlp``, ``gap``, ``progap``
            or ``graph-cls``.
        spec_type (type): the spec class; its fields are the method's options.
        fixed (Mapping): spec fields implied by the name (``{"conv": "gcn"}`` for
            ``dp-gcn``); giving another value is an error.
        task (str): ``node`` or ``graph`` classification.
        private (bool): whether the method trains with a privacy budget.
        protection (str): one line: the protected unit and relation.
        score_sensitivity (float, optional): the L2 sensitivity, under the method's unit
            and relation and for a fixed model, of the number of validation records its
            model predicts correctly (what private selection releases with noise); None
            where no bound is claimed (docs/privacy.md, "The selection score's
            sensitivity"). (default: :obj:`None`)
    """

    name: str
    family: str
    spec_type: type[Spec]
    fixed: Mapping[str, Any]
    task: str
    private: bool
    protection: str
    _fit: Callable[[GraphData, Any, OnStep], Fitted]
    _ledger_for: Callable[[Any, int], Callable[[float], Ledger]]
    _save: Callable[[str, Fitted, Any, GraphData], None]
    _load: Callable[[dict[str, Any]], tuple[torch.nn.Module, Any]]
    _evaluate: Callable[[torch.nn.Module, GraphData, Any, Mapping[str, Any]], Metrics]
    score_sensitivity: float | None = None

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

    def preflight(self, spec: Any, manifest: Mapping[str, Any]) -> None:
        """Checks that need only the spec and the dataset's manifest (cheap: run before any
        orchestration starts, so a bad run fails in a second, not after Prefect starts).

        Every method: the dataset's task is the method's, it has training records (nodes,
        or graphs for graph classification), a set ``batch_size`` fits in them, a private
        method's data is single-label, and the requested device exists. Then the method's
        family's checks (DP-GNN's level, GAP-NDP's degree bound): all in
        :mod:`dpgnn_core.methods.preflight`, which the CLI runs before Prefect starts. A
        ``path`` key in ``manifest`` (the dataset folder) is named in the errors.

        Raises:
            DataError: the data does not suit the method or the spec.
            DeviceError: ``device='cuda'`` without a CUDA device.
            PrivacyError: the method's own privacy checks.
        """
        from dpgnn_core.methods import preflight

        self._check_spec(spec)
        preflight.check(spec, manifest)

    def fit(self, data: GraphData, spec: Any, on_step: OnStep = None) -> Fitted:
        """Train ``spec`` on ``data``. The result's report is a frozen
        :class:`~dpgnn_core.privacy.report.PrivacyReport` with the ε-by-step curve, and a
        private run's history has ``epsilon_spent`` at the steps of that curve."""
        self._check_spec(spec)
        fitted = self._fit(data, spec, on_step)
        report = dict(fitted.report)
        history = [dict(r) for r in fitted.history]
        if report.get("private") and "epsilon_by_step" not in report:
            curve = self._curve(spec, data, report)
            report["epsilon_by_step"] = curve
            for t, eps in curve:
                history[t - 1]["epsilon_spent"] = eps
        report, fitted.ledger = with_loss_note(report, fitted.ledger,
                                               bool(getattr(spec, "log_raw_loss", False)))
        report["ledger"] = fitted.ledger
        fitted.report = PrivacyReport.from_dict(report)
        fitted.history = history
        return fitted

    def _curve(self, spec: Any, data: GraphData, report: dict[str, Any]
               ) -> list[tuple[int, float]]:
        """ε after step t from the run's own plan (its steps; the same noise)."""
        from dpgnn_core.privacy import make_accountant
        from dpgnn_core.privacy.calibrate import epsilon_curve

        n_train = int(report.get("num_train") or data.mask("train").sum())
        lam = report["noise_multiplier"]

        def ledger_after(t: int) -> Ledger:
            return self.ledger_for(spec.model_copy(update={"steps": t}), n_train)(lam)

        return epsilon_curve(ledger_after, report["steps"], report["delta"],
                             make_accountant(report["accountant"]))

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
#: Read-only view of the registry: CLI name -> method.
METHODS: Mapping[str, Method] = MappingProxyType(_REGISTRY)


def register(method: Method) -> Method:
    """Add ``method`` under its name (a second registration of a name is an error)."""
    if method.name in _REGISTRY:
        raise UnknownMethodError(f"method {method.name!r} is registered already")
    _REGISTRY[method.name] = method
    return method


def get(name: str) -> Method:
    """The method registered as ``name``."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise UnknownMethodError(f"unknown method {name!r}; choose one of "
                                 f"{', '.join(sorted(_REGISTRY))}") from None


def name_of(spec: Any) -> str:
    """The registered name a spec belongs to: its ``method`` field (every spec class in
    :mod:`dpgnn_core.specs` carries its registered name there)."""
    name = getattr(spec, "method", None)
    m = _REGISTRY.get(name) if isinstance(name, str) else None
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


# --- the methods -----------------------------------------------------------------------
# Each family is wired here once; the recipes live in their own modules.


def _node_private_family(family: str, spec_type: type[Spec], module: str, train: str,
                         save: str, load: str, evaluate: str, names: dict[str, dict[str, Any]],
                         protection: str, score_sensitivity: float | None = None,
                         eval_options: Callable[[Any], dict[str, Any]] = lambda spec: {}
                         ) -> None:
    """``eval_options(spec)``: keyword arguments of the family's evaluate beside the device
    (the subgraph families' inference ``backend``)."""
    import importlib

    mod = importlib.import_module(f"dpgnn_core.methods.{module}")

    def fit(data: GraphData, spec: Any, on_step: OnStep) -> Fitted:
        r = getattr(mod, train)(data, spec, on_step=on_step)
        return Fitted(r.model, r.ledger, r.report, r.history)

    def save_(path: str, fitted: Fitted, spec: Any, data: GraphData) -> None:
        getattr(mod, save)(path, fitted.model, spec, data.num_features, data.num_classes)

    def evaluate_(model: torch.nn.Module, data: GraphData, spec: Any,
                  extra: Mapping[str, Any]) -> Metrics:
        out: Metrics = getattr(mod, evaluate)(model, data, spec.device, **eval_options(spec))
        return out

    for name, fixed in names.items():
        register(Method(name=name, family=family, spec_type=spec_type,
                        fixed=MappingProxyType({"method": name, **fixed}), task="node",
                        private=True,
                        protection=protection, _fit=fit, _ledger_for=mod.ledger_for,
                        _save=save_, _load=getattr(mod, load), _evaluate=evaluate_,
                        score_sensitivity=score_sensitivity))


def _aggregating_family(family: str, title: str, spec_type: type[Spec],
                        fit: Callable[[GraphData, Any, OnStep], Fitted],
                        ledger_for: Callable[[Any, int], Callable[[float], Ledger]],
                        save: Callable[..., None], load: Callable[..., Any],
                        evaluate: Callable[..., Metrics]) -> None:
    """GAP's or ProGAP's three names (``-edp``, ``-ndp``, ``-inf``, the level they fix):
    each predicts from its cached private aggregations (``extra["aggregations"]``)."""

    def save_(path: str, fitted: Fitted, spec: Any, data: GraphData) -> None:
        save(path, fitted.model, spec, data.num_features, data.num_classes)

    def evaluate_(model: torch.nn.Module, data: GraphData, spec: Any,
                  extra: Mapping[str, Any]) -> Metrics:
        if "aggregations" not in extra:
            raise UnknownMethodError(f"{title} evaluates from its private aggregations: pass "
                                     "extra={'aggregations': ...}")
        return evaluate(model, extra["aggregations"], data, spec.device)

    for suffix, level, desc in (("edp", "edge", "edge; add/remove"),
                                ("ndp", "node", "node with its edges, every degree <= D; "
                                 "add/remove"),
                                ("inf", "none", "nothing (non-private)")):
        name = f"{family}-{suffix}"
        register(Method(name=name, family=family, spec_type=spec_type,
                        fixed=MappingProxyType({"method": name, "level": level}), task="node",
                        private=level != "none", protection=desc, _fit=fit,
                        _ledger_for=ledger_for, _save=save_, _load=load, _evaluate=evaluate_))


def _register_all() -> None:
    from dpgnn_core.methods import baseline, gap, graph_cls, progap

    # Non-private node baselines (full batch): an empty ledger, ε = inf.
    def base_fit(data: GraphData, spec: Any, on_step: OnStep) -> Fitted:
        r = baseline.fit(data, spec, on_epoch=on_step)
        return Fitted(r.model, Ledger(), {"method": spec.method, "private": False,
                                          "epsilon": None, "protects": "nothing"}, r.history)

    def base_save(path: str, fitted: Fitted, spec: Any, data: GraphData) -> None:
        baseline.save_model(path, fitted.model, spec, data.num_features, data.num_classes)

    def base_load(blob: dict[str, Any]) -> tuple[torch.nn.Module, Any]:
        from dpgnn_core.models import build_model

        spec = TrainSpec(**blob["spec"])
        model = build_model(spec.method, blob["in_dim"], spec.hidden,
                                     blob["num_classes"], spec.layers, spec.dropout)
        model.load_state_dict(blob["state_dict"])
        return model.eval(), spec

    def base_eval(model: torch.nn.Module, data: GraphData, spec: Any,
                  extra: Mapping[str, Any]) -> Metrics:
        return baseline.evaluate(data, baseline.predict(model, data, spec))

    for name in ("mlp", "gcn", "sage"):
        register(Method(name=name, family="baseline", spec_type=TrainSpec,
                        fixed=MappingProxyType({"method": name}), task="node", private=False,
                        protection="nothing (non-private)", _fit=base_fit,
                        _ledger_for=lambda spec, n: (lambda z: Ledger()), _save=base_save,
                        _load=base_load, _evaluate=base_eval))

    _node_private_family(
        "dp-gnn", DpgnnSpec, "dp_gnn", "train_dpgnn", "save_dpgnn", "load_dpgnn",
        "evaluate_dpgnn", {f"dp-{c}": {"conv": c} for c in ("gcn", "sage", "gin", "gat")},
        "node_feature (default) or node on directed datasets; replace-one",
        eval_options=lambda spec: {"backend": spec.backend})
    _node_private_family(
        "drw", DrwSpec, "drw", "train_drw", "save_drw", "load_drw", "evaluate_drw",
        {f"{v}-{c}": {"variant": v, "conv": c} for v in ("drw", "drw-r", "drw-d")
         for c in ("gcn", "sage")},
        "node_feature (features and labels, structure public); replace-one",
        eval_options=lambda spec: {"backend": spec.backend})
    # DP-GNN and DRW predict on the full private graph: one node's features reach the
    # predictions of every node within r hops, so no score sensitivity is claimed (None).
    # DP-MLP predicts a node from its own row only: one row changes the count by <= 1.
    _node_private_family(
        "dp-mlp", DpMlpSpec, "dp_mlp", "train_dp_mlp", "save_dp_mlp", "load_dp_mlp",
        "evaluate_dp_mlp", {"dp-mlp": {}}, "node (a row: features and label); add/remove",
        score_sensitivity=1.0)

    # GAP and ProGAP: the whole chain in one call here; the pipeline runs their cached
    # stages. Both predict from their private aggregations, passed as ``extra``.
    def gap_fit(data: GraphData, spec: Any, on_step: OnStep) -> Fitted:
        r = gap.train_gap(data, spec, on_step)  # its report has the ε-by-step curve
        return Fitted(r.classifier, r.ledger, r.report, r.history,
                      {"aggregations": r.aggregations})

    def progap_fit(data: GraphData, spec: Any, on_step: OnStep) -> Fitted:
        r = progap.train_progap(data, spec, on_step)  # its report has the ε-by-step curve
        return Fitted(r.model, r.ledger, r.report, r.history,
                      {"aggregations": r.aggregations})

    _aggregating_family("gap", "GAP", GapSpec, gap_fit, gap.ledger_for, gap.save_gap,
                        gap.load_gap, gap.evaluate_gap)
    _aggregating_family("progap", "ProGAP", ProgapSpec, progap_fit, progap.ledger_for,
                        progap.save_progap, progap.load_progap, progap.evaluate_progap)

    def cls_fit(data: GraphData, spec: Any, on_step: OnStep) -> Fitted:
        r = graph_cls.train_graph_classifier(data, spec, on_step)
        return Fitted(r.model, r.ledger, r.report, r.history)

    def cls_save(path: str, fitted: Fitted, spec: Any, data: GraphData) -> None:
        graph_cls.save_graph_classifier(path, fitted.model, spec, data.num_features,  # type: ignore[arg-type]
                                        data.num_classes)

    def cls_eval(model: torch.nn.Module, data: GraphData, spec: Any,
                 extra: Mapping[str, Any]) -> Metrics:
        return graph_cls.evaluate_graphs(model, data, spec.device)  # type: ignore[arg-type]

    for conv in ("gcn", "sage", "gat"):
        for private in (True, False):
            name = f"dp-graph-{conv}" if private else f"graph-{conv}"
            register(Method(name=name, family="graph-cls", spec_type=GraphClsSpec,
                            fixed=MappingProxyType({"method": name, "conv": conv}),
                            task="graph",
                            private=private,
                            protection="graph; add/remove" if private else
                            "nothing (non-private)",
                            _fit=cls_fit, _ledger_for=graph_cls.ledger_for, _save=cls_save,
                            _load=graph_cls.load_graph_classifier, _evaluate=cls_eval,
                            # a graph's prediction reads that graph only
                            score_sensitivity=1.0 if private else None))


_register_all()

__all__ = ["METHODS", "Fitted", "Method", "UnknownMethodError", "get", "load_blob",
           "method_for", "name_of", "register"]
