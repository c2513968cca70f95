"""The method catalogue: every method's name and what callers need to know about it, in one
place, without importing torch.

The CLI (``--help`` answers in a fraction of a second), sweeps, specs and the flows read
this table; :mod:`dpgnn_core.methods.registry` builds the trainable
:class:`~dpgnn_core.methods.registry.Method` of each entry from the implementation its
``module`` registers (by reference, at the bottom of that module). Adding a method is one
module plus its spec and one :func:`_family` call here (docs/adding-a-method.md).

What an entry says (and so what no caller derives from a family string or a spec type):

* how the method is named, trained and reported: ``family``, ``spec`` (the spec class in
  :mod:`dpgnn_core.specs`), ``module``, ``task``, ``private``, ``protection``, ``fixed``;
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
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

#: A canary kind and the neighbouring relation it realises (``dpgnn_core.audit``).
Canary = tuple[str, str]


@dataclass(frozen=True)
class Entry:
    """One method of the catalogue.

    Args:
        name (str): the CLI name, e.g. ``dp-gcn``.
        family (str): the implementation family (``baseline``, ``dp-gnn``, ``drw``,
            ``dp-mlp``, ``gap``, ``progap``, ``graph-cls``); names of one family share a
            module and a spec class.
        spec (str): the spec class's name in :mod:`dpgnn_core.specs`.
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

    @property
    def spec_type(self) -> Any:
        """The spec class (imported on first use: the catalogue stays light)."""
        return getattr(importlib.import_module("dpgnn_core.specs"), self.spec)

    def preflight(self, spec: Any, manifest: Mapping[str, Any]) -> list[str]:
        """The checks that need only the spec and the dataset's manifest (and, for
        GAP-NDP, its edge list): :func:`dpgnn_core.methods.preflight.check`. The CLI and
        the pipeline flow both call this (through
        :meth:`~dpgnn_core.methods.registry.Method.preflight` where the registry is
        loaded); it imports no torch, so a bad run is refused in a second.

        Returns:
            list of str: warnings that do not stop the run.

        Raises:
            DataError, DeviceError, PrivacyError: one line naming what is wrong.
        """
        from dpgnn_core.methods import preflight

        if getattr(spec, "method", None) != self.name:
            raise ValueError(f"a spec of {getattr(spec, 'method', None)!r} given to "
                             f"{self.name}")
        return preflight.check(spec, manifest)

    def canary_for(self, level: str | None) -> Canary | None:
        """The audit's canary kind and relation for a spec at ``level``."""
        if level is not None and level in self.canary_by_level:
            return self.canary_by_level[level]
        return self.canary


_CATALOG: dict[str, Entry] = {}
#: Read-only view: CLI name -> entry.
CATALOG: Mapping[str, Entry] = MappingProxyType(_CATALOG)


def _family(names: Mapping[str, Mapping[str, Any]], **common: Any) -> None:
    """Add one family's names: ``names`` maps each name to its own fields (``fixed``,
    ``private``, ...); ``common`` holds the fields every name shares."""
    for name, own in names.items():
        if name in _CATALOG:
            raise ValueError(f"method {name!r} is in the catalogue already")
        fields = {**common, **own}
        fields["fixed"] = MappingProxyType({"method": name, **fields.get("fixed", {})})
        _CATALOG[name] = Entry(name=name, **fields)


_family({n: {} for n in ("mlp", "gcn", "sage")},
        family="baseline", spec="TrainSpec", module="dpgnn_core.methods.baseline",
        task="node", private=False, protection="nothing (non-private)",
        progress_unit="epoch", private_path=False)
_family({f"dp-{c}": {"fixed": {"conv": c}} for c in ("gcn", "sage", "gin", "gat")},
        family="dp-gnn", spec="DpgnnSpec", module="dpgnn_core.methods.dp_gnn", task="node",
        private=True,
        protection="node_feature (default) or node on directed datasets; replace-one",
        private_selection=True, canary=("node", "replace-one"),
        # DP-GNN's row model on directed graphs: a node's features, label and out-edge row
        canary_by_level={"node": ("node-edges", "replace-one")})
_family({f"{v}-{c}": {"fixed": {"variant": v, "conv": c}}
         for v in ("drw", "drw-r", "drw-d") for c in ("gcn", "sage")},
        family="drw", spec="DrwSpec", module="dpgnn_core.methods.drw", task="node",
        private=True,
        protection="node_feature (features and labels, structure public); replace-one",
        private_selection=True, canary=("node", "replace-one"))
# DP-GNN and DRW predict on the full private graph: one node's features reach the
# predictions of every node within r hops, so no score sensitivity is claimed (None).
# DP-MLP predicts a node from its own row only: one row changes the count by <= 1.
_family({"dp-mlp": {}},
        family="dp-mlp", spec="DpMlpSpec", module="dpgnn_core.methods.dp_mlp", task="node",
        private=True, protection="node (a row: features and label); add/remove",
        private_selection=True, score_sensitivity=1.0, canary=("node", "add/remove"))
_LEVELS = {"edp": ("edge", "edge; add/remove"),
           "ndp": ("node", "node with its edges, every degree <= D; add/remove"),
           "inf": ("none", "nothing (non-private)")}
for _fam, _tags in (("gap", ("hops",)), ("progap", ("stages",))):
    # GAP and ProGAP calibrate their own composition (no noise multiplier to tune), run as
    # cached stages, and predict from their private aggregations.
    _family({f"{_fam}-{s}": {"fixed": {"level": lvl}, "private": lvl != "none",
                             "protection": desc} for s, (lvl, desc) in _LEVELS.items()},
            family=_fam, spec="GapSpec" if _fam == "gap" else "ProgapSpec",
            module=f"dpgnn_core.methods.{_fam}", task="node", staged=True,
            run_tags=_tags, canary=("edge", "add/remove"),
            canary_by_level={"node": ("star", "add/remove")})
for _conv in ("gcn", "sage", "gat"):
    # a graph's prediction reads that graph only: one graph changes the count by <= 1
    _family({f"dp-graph-{_conv}": {"private": True, "protection": "graph; add/remove",
                                   "explains": True, "score_sensitivity": 1.0,
                                   "private_selection": True},
             f"graph-{_conv}": {"private": False, "protection": "nothing (non-private)"}},
            family="graph-cls", spec="GraphClsSpec", module="dpgnn_core.methods.graph_cls",
            task="graph", fixed={"conv": _conv}, extra_metrics=("sensitivity", "specificity"),
            canary=("graph", "add/remove"))

_DPDGC_LEVELS = {
    "edp": ("edge", "edge; add/remove"),
    "ndp": ("node", "node with its features, label and edges, every degree <= D; add/remove"),
    "kndp": ("k_neighbor", "k-neighbour: a node's features and label with up to k of its "
                           "edges; add/remove"),
    "fdp": ("node_feature", "node_feature (a node's features and label, structure public); "
                            "add/remove"),
    "inf": ("none", "nothing (non-private)")}
# DPDGC: one private aggregation of learned node embeddings W; predictions from it. Edge
# canaries score the released aggregation against the released W; a node-level change is a
# star (the hub with its edges); a k-neighbour change with k = 1 is one edge plus the
# node's record: edge canaries realise its edge part (docs/privacy.md, "DPDGC").
# At node_feature level the edges are public (edge canaries would test nothing claimed):
# node canaries, isolated training nodes scored by the classifier on zero aggregations.
# The classifier trains `epochs` full-batch epochs at edge level and ∞, `steps` DP-Adam
# steps at node, k-neighbour and node_feature level: the progress line counts those.
_family({f"dpdgc-{s}": {"fixed": {"level": lvl}, "private": lvl != "none",
                        "protection": desc,
                        "progress_unit": "epoch" if lvl in ("edge", "none") else "step"}
         for s, (lvl, desc) in _DPDGC_LEVELS.items()},
        family="dpdgc", spec="DpdgcSpec", module="dpgnn_core.methods.dpdgc", task="node",
        run_tags=("adj_dim", "messages", "hops"), canary=("edge", "add/remove"),
        canary_by_level={"node": ("star", "add/remove"),
                         "node_feature": ("node", "add/remove")})

#: The names of each spec's level (``level`` -> name), for the specs' name validators.
LEVEL_NAMES: Mapping[str, Mapping[str, str]] = MappingProxyType({
    fam: MappingProxyType({lvl: f"{fam}-{s}" for s, (lvl, _) in _LEVELS.items()})
    for fam in ("gap", "progap")} | {
    "dpdgc": MappingProxyType({lvl: f"dpdgc-{s}" for s, (lvl, _) in _DPDGC_LEVELS.items()})})


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


__all__ = ["CATALOG", "LEVEL_NAMES", "Canary", "Entry", "entry", "is_private", "modules",
           "spec_types"]
