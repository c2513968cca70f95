"""The method catalogue: every method's name and what callers need to know about it, in one
place, without importing torch.

The CLI (``--help`` answers in a fraction of a second), sweeps, the pre-flight and the flows
read this table; :mod:`dpgnn_core.methods.registry` builds the trainable
:class:`~dpgnn_core.methods.registry.Method` of each entry from the implementation its
``module`` registers (by reference, at the bottom of that module).

The catalogue reads the specs, never the other way round: each spec class declares its
names (the ``Literal`` of its ``method`` field) and, for a levelled family, its
``level_names``; the families below are written from them, and a new family declares its
entries beside its spec (:class:`~dpgnn_core.specs.base.Family`), which this module adds
when the spec class is defined. Adding a method is its spec module and its method module
(docs/adding-a-method.md).

What an entry says (and so what no caller derives from a family string or a spec type):

* how the method is named, trained and reported: ``family``, ``spec`` (the spec class in
  :mod:`dpgnn_core.specs`), ``module``, ``task``, ``private``, ``protection``, ``fixed``;
* what the pre-flight checks (:mod:`dpgnn_core.methods.preflight`): ``multi_label`` (the
  method takes multi-label data), ``checks`` (the family's own checks, functions of the
  spec and the manifest that import no torch), ``releases`` (the level and relation of
  the privacy events its plan holds, for the budget's protected units);
* how a run is shown and tracked: ``progress_unit`` (``step`` or ``epoch``),
  ``run_tags`` (spec fields logged as ``dpgnn.<field>`` MLflow tags), ``extra_metrics``
  (test metrics beside accuracy in the run summary);
* how it runs in the pipeline: ``staged`` (as the cached stages its module declares, or
  as one ``train`` task), ``explains``
  (a private run also explains test graphs);
* what the privacy tooling may do with it: ``private_path`` (the method's path writes a
  ledger and report, also when run without privacy), ``private_selection`` (private
  hyperparameter selection applies), ``score_sensitivity``, ``canary`` and
  ``canary_by_level`` (the audit's canary kind and neighbouring relation).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from dpgnn_core.specs import DpdgcSpec, GapSpec, ProgapSpec
from dpgnn_core.specs.base import Family, degree_within_bound, method_names, on_spec_class
from dpgnn_core.specs.subgraph import dpgnn_level

#: A canary kind and the neighbouring relation it realises (``dpgnn_core.audit``).
Canary = tuple[str, str]
#: A family's own pre-flight check: (spec, manifest) -> None, raising a one-line error.
Check = Callable[[Any, Mapping[str, Any]], None]


@dataclass(frozen=True)
class Entry:
    """One method of the catalogue.

    Args:
        name (str): the CLI name, e.g. ``dp-gcn``.
        family (str): the implementation family (``baseline``, ``dp-gnn``, ``drw``,
            ``dp-mlp``, ``gap``, ``progap``, ``graph-cls``); names of one family share a
            module and a spec class.
        spec (str): the spec class's name in ``spec_module``.
        module (str): the module that implements and registers the family.
        task (str): ``node`` or ``graph`` classification.
        private (bool): whether the method trains with a privacy budget.
        protection (str): one line: the protected unit and relation.
        fixed (Mapping): spec fields implied by the name (``{"conv": "gcn"}``).
        progress_unit (str, optional): ``step`` or ``epoch``; the spec field
            ``<unit>s`` is the length of a run. (default: ``"step"``)
        staged (bool, optional): the pipeline runs the method as the stages its module
            declares (GAP, ProGAP: :class:`~dpgnn_core.methods._staged.Staged`), each a
            cached task (``tasks/staged.py``); else as one ``train`` task.
            (default: :obj:`False`)
        explains (bool, optional): a private run also explains test graphs with
            GNNExplainer beside a non-private twin. (default: :obj:`False`)
        extra_metrics (tuple, optional): test metrics the run summary reports beside
            accuracy, F1 and ROC AUC. (default: ``()``)
        run_tags (tuple, optional): spec fields logged as ``dpgnn.<field>`` tags.
            (default: ``()``)
        private_path (bool, optional): the method's training path writes a ledger and a
            privacy report, also when run without privacy. (default: :obj:`True`)
        private_selection (bool, optional): private hyperparameter selection (Papernot &
            Steinke) can train its candidates at a calibrated noise multiplier.
            (default: :obj:`False`)
        score_sensitivity (float, optional): the L2 sensitivity of the number of validation
            records the model predicts correctly (what private selection releases with
            noise); None where no bound is claimed. (default: :obj:`None`)
        canary (tuple, optional): the audit's (canary kind, relation); None: no audit.
            (default: :obj:`None`)
        canary_by_level (Mapping, optional): the canary at a spec ``level`` that protects
            another unit (GAP-NDP: star canaries). (default: ``{}``)
        spec_module (str, optional): the module that defines the spec class.
            (default: ``"dpgnn_core.specs"``)
        multi_label (bool, optional): the method trains on multi-label data (the
            non-private full-batch baselines); the pre-flight refuses such data for the
            others. (default: :obj:`False`)
        checks (tuple, optional): the family's own pre-flight checks, each
            ``check(spec, manifest)`` raising a one-line error (DP-GNN's level, the node
            levels' degree bound); light: no torch. (default: ``()``)
        releases (tuple, optional): ``(level, relation)`` of the privacy events of a
            private run's plan, ``level`` None for the spec's own ``level`` field; None:
            the method releases nothing private. (default: :obj:`None`)
    """

    name: str
    family: str
    spec: str
    module: str
    task: str
    private: bool
    protection: str
    fixed: Mapping[str, Any] = field(default_factory=dict)
    progress_unit: str = "step"
    staged: bool = False
    explains: bool = False
    extra_metrics: tuple[str, ...] = ()
    run_tags: tuple[str, ...] = ()
    private_path: bool = True
    private_selection: bool = False
    score_sensitivity: float | None = None
    canary: Canary | None = None
    canary_by_level: Mapping[str, Canary] = field(default_factory=dict)
    spec_module: str = "dpgnn_core.specs"
    multi_label: bool = False
    checks: tuple[Check, ...] = ()
    releases: tuple[str | None, str] | None = None

    @property
    def spec_type(self) -> Any:
        """The spec class."""
        return getattr(importlib.import_module(self.spec_module), self.spec)

    def release_levels(self, spec: Any) -> tuple[tuple[str, str], ...]:
        """The (level, relation) pairs of the privacy events ``spec``'s run releases,
        known before anything is calibrated or trained; empty for a non-private run."""
        if self.releases is None or getattr(spec, "epsilon", None) is None:
            return ()
        level = self.releases[0] or str(getattr(spec, "level", "none"))
        return () if level == "none" else ((level, self.releases[1]),)

    def canary_for(self, level: str | None) -> Canary | None:
        """The audit's canary kind and relation for a spec at ``level``."""
        if level is not None and level in self.canary_by_level:
            return self.canary_by_level[level]
        return self.canary


_CATALOG: dict[str, Entry] = {}
#: Read-only view: CLI name -> entry.
CATALOG: Mapping[str, Entry] = MappingProxyType(_CATALOG)


def _family(names: Mapping[str, Mapping[str, Any]], spec_type: Any = None,
            **common: Any) -> None:
    """Add one family's names: ``names`` maps each name to its own fields (``fixed``,
    ``private``, ...); ``common`` holds the fields every name shares; ``spec_type`` is the
    spec class (by default the one ``common["spec"]`` names).

    Raises:
        ValueError: a name is in the catalogue already, or its spec class does not take it.
    """
    spec = spec_type or getattr(importlib.import_module(
        common.get("spec_module", "dpgnn_core.specs")), common["spec"])
    for name, own in names.items():
        if name in _CATALOG:
            raise ValueError(f"method {name!r} is in the catalogue already")
        if name not in method_names(spec):
            raise ValueError(f"method {name!r}: its spec {spec.__name__} takes "
                             f"{', '.join(method_names(spec))}")
        fields = {**common, **own}
        fields["fixed"] = MappingProxyType({"method": name, **fields.get("fixed", {})})
        _CATALOG[name] = Entry(name=name, **fields)


def _levelled(spec: Any, protects: Mapping[str, str], **own: Mapping[str, Any]
              ) -> dict[str, dict[str, Any]]:
    """A levelled family's names from its spec's ``level_names``: each fixes its ``level``,
    is private unless the level is ``none`` and protects ``protects[level]``; ``own``:
    more fields of each level's name."""
    return {name: {"fixed": {"level": lvl}, "private": lvl != "none",
                   "protection": protects[lvl], **own.get(lvl, {})}
            for lvl, name in spec.level_names.items()}


#: What the node-level families check before a run and release (GAP, ProGAP, DPDGC).
_NODE_LEVELS: dict[str, Any] = {"checks": (degree_within_bound,),
                                "releases": (None, "add_remove")}

_family({n: {} for n in ("mlp", "gcn", "sage")},
        family="baseline", spec="TrainSpec", module="dpgnn_core.methods.baseline",
        task="node", private=False, protection="nothing (non-private)",
        progress_unit="epoch", private_path=False, multi_label=True)
_family({f"dp-{c}": {"fixed": {"conv": c}} for c in ("gcn", "sage", "gin", "gat")},
        family="dp-gnn", spec="DpgnnSpec", module="dpgnn_core.methods.dp_gnn", task="node",
        private=True,
        protection="node_feature (default) or node on directed datasets; replace-one",
        private_selection=True, canary=("node", "replace-one"), checks=(dpgnn_level,),
        releases=(None, "replace"),
        # DP-GNN's row model on directed graphs: a node's features, label and out-edge row
        canary_by_level={"node": ("node-edges", "replace-one")})
_family({f"{v}-{c}": {"fixed": {"variant": v, "conv": c}}
         for v in ("drw", "drw-r", "drw-d") for c in ("gcn", "sage")},
        family="drw", spec="DrwSpec", module="dpgnn_core.methods.drw", task="node",
        private=True,
        protection="node_feature (features and labels, structure public); replace-one",
        private_selection=True, canary=("node", "replace-one"),
        releases=("node_feature", "replace"))
# DP-GNN and DRW predict on the full private graph: one node's features reach the
# predictions of every node within r hops, so no score sensitivity is claimed (None).
# DP-MLP predicts a node from its own row only: one row changes the count by <= 1.
_family({"dp-mlp": {}},
        family="dp-mlp", spec="DpMlpSpec", module="dpgnn_core.methods.dp_mlp", task="node",
        private=True, protection="node (a row: features and label); add/remove",
        private_selection=True, score_sensitivity=1.0, canary=("node", "add/remove"),
        releases=("node", "add_remove"))
_GAP_PROTECTS = {"edge": "edge; add/remove",
                 "node": "node with its edges, every degree <= D; add/remove",
                 "none": "nothing (non-private)"}
for _fam, _tags in (("gap", ("hops",)), ("progap", ("stages",))):
    # GAP and ProGAP calibrate their own composition (no noise multiplier to tune), run as
    # cached stages, and predict from their private aggregations.
    _spec = GapSpec if _fam == "gap" else ProgapSpec
    _family(_levelled(_spec, _GAP_PROTECTS),
            family=_fam, spec=_spec.__name__,
            module=f"dpgnn_core.methods.{_fam}", task="node", staged=True,
            run_tags=_tags, canary=("edge", "add/remove"),
            canary_by_level={"node": ("star", "add/remove")}, **_NODE_LEVELS)
for _conv in ("gcn", "sage", "gat"):
    # a graph's prediction reads that graph only: one graph changes the count by <= 1
    _family({f"dp-graph-{_conv}": {"private": True, "protection": "graph; add/remove",
                                   "explains": True, "score_sensitivity": 1.0,
                                   "private_selection": True},
             f"graph-{_conv}": {"private": False, "protection": "nothing (non-private)"}},
            family="graph-cls", spec="GraphClsSpec", module="dpgnn_core.methods.graph_cls",
            task="graph", fixed={"conv": _conv}, extra_metrics=("sensitivity", "specificity"),
            canary=("graph", "add/remove"), releases=("graph", "add_remove"))

_DPDGC_PROTECTS = {
    "edge": "edge; add/remove",
    "node": "node with its features, label and edges, every degree <= D; add/remove",
    "k_neighbor": "k-neighbour: a node's features and label with up to k of its edges; "
                  "add/remove",
    "node_feature": "node_feature (a node's features and label, structure public); "
                    "add/remove",
    "none": "nothing (non-private)"}
# DPDGC: one private aggregation of learned node embeddings W; predictions from it. Edge
# canaries score the released aggregation against the released W; a node-level change is a
# star (the hub with its edges); a k-neighbour change with k = 1 is one edge plus the
# node's record: edge canaries realise its edge part (docs/privacy.md, "DPDGC").
# At node_feature level the edges are public (edge canaries would test nothing claimed):
# node canaries, isolated training nodes scored by the classifier on zero aggregations.
# The classifier trains `epochs` full-batch epochs at edge level and ∞, `steps` DP-Adam
# steps at node, k-neighbour and node_feature level: the progress line counts those.
_family(_levelled(DpdgcSpec, _DPDGC_PROTECTS,
                  **{lvl: {"progress_unit": "epoch" if lvl in ("edge", "none") else "step"}
                     for lvl in DpdgcSpec.level_names}),
        family="dpdgc", spec="DpdgcSpec", module="dpgnn_core.methods.dpdgc", task="node",
        run_tags=("adj_dim", "messages", "hops"), canary=("edge", "add/remove"),
        canary_by_level={"node": ("star", "add/remove"),
                         "node_feature": ("node", "add/remove")}, **_NODE_LEVELS)


def _declared(spec: Any) -> None:
    """Add the names of a family declared beside its spec (its class's own ``catalogue``,
    a :class:`~dpgnn_core.specs.base.Family`): a spec class defined after this module,
    in a package of its own too, joins the catalogue when it is defined."""
    family: Family | None = spec.__dict__.get("catalogue")
    if family is not None:
        _family(family.names, spec, family=family.family, module=family.module,
                spec=spec.__name__, spec_module=spec.__module__, **family.common)


on_spec_class(_declared)


def entry(name: str) -> Entry:
    """The catalogue's entry of ``name``.

    Raises:
        KeyError: no method of that name (with the names to choose from).
    """
    try:
        return _CATALOG[name]
    except KeyError:
        raise KeyError(f"unknown method {name!r}; choose one of "
                       f"{', '.join(sorted(_CATALOG))}") from None


def is_private(name: str) -> bool:
    """Whether method ``name`` trains with a privacy budget."""
    return entry(name).private


def spec_types() -> dict[str, Any]:
    """Every method's name and its spec class."""
    return {name: e.spec_type for name, e in _CATALOG.items()}


def modules() -> list[str]:
    """The implementing modules, each once, in catalogue order."""
    return list(dict.fromkeys(e.module for e in _CATALOG.values()))


def load_family(family: str) -> None:
    """Import the module(s) that implement ``family``: each registers its methods (and a
    staged family declares its stages) when it is imported, so a lookup by family calls
    this first instead of relying on an earlier import having happened (a test run alone,
    or in another order, sees the same registry).

    Raises:
        KeyError: no catalogue entry has that family (with the families to choose from).
    """
    found = list(dict.fromkeys(e.module for e in _CATALOG.values() if e.family == family))
    if not found:
        raise KeyError(f"unknown method family {family!r}; choose one of "
                       f"{', '.join(sorted({e.family for e in _CATALOG.values()}))}")
    for module in found:
        importlib.import_module(module)


__all__ = ["CATALOG", "Canary", "Check", "Entry", "entry", "is_private", "load_family",
           "modules", "spec_types"]
