"""A method's catalogue entry, typed: :class:`Entry`, one per method name, written beside its
family's spec (each spec module's ``ENTRIES``) and listed in ``dpgnn_core.specs.CATALOGUE``,
the explicit list the method catalogue (:mod:`dpgnn_core.methods.catalog`) and the registry
read (no registration by import side effects).

An entry is a frozen dataclass: a misspelt field is a ``TypeError`` where the entry is
written (and a mypy error), not a traceback at ``dpgnn run NAME --help``. A family's names
share most fields: write one entry and derive the others with :func:`dataclasses.replace`
(typed too) or :func:`levelled`.

What an entry says (and so what no caller derives from a family string or a spec type):

* how the method is named, trained and reported: ``family``, ``spec_type``, ``module`` (the
  module whose ``IMPLEMENTATION`` trains it, imported by name on first use, so a
  ``dpgnn run dp-mlp`` never imports PyTorch Geometric), ``task``, ``private``,
  ``protection``, ``fixed``;
* what the pre-flight checks (:mod:`dpgnn_core.methods.preflight`): ``multi_label``,
  ``checks`` (functions of the spec and the manifest that import no torch), ``releases``
  (the level and relation of the privacy events its plan holds, for the budget);
* how a run is shown and tracked: ``progress_unit``, ``run_tags``, ``extra_metrics``;
* how it runs (``dpgnn run``, sweeps, audits): ``staged`` (as the cached stages its module
  declares, or as one ``train`` task), ``explains``;
* what the privacy tooling may do with it: ``private_path``, ``private_selection``,
  ``score_sensitivity``, ``canary`` and ``canary_by_level``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, Literal

from dpgnn_core.specs.base import Spec, method_names

#: A canary kind and the neighbouring relation it realises (``dpgnn_core.audit``).
Canary = tuple[str, str]
#: A family's own pre-flight check: (spec, manifest) -> None, raising a one-line error.
Check = Callable[[Any, Mapping[str, Any]], None]


@dataclass(frozen=True)
class Entry:
    """One method of the catalogue.

    Args:
        name (str): the CLI name, e.g. ``dp-gcn``; one of its spec class's ``method``
            names (checked).
        family (str): the implementation family (``baseline``, ``dp-gnn``, ``drw``,
            ``dp-mlp``, ``gap``, ``progap``, ``graph-cls``, ``dpdgc``); names of one family
            share a module and a spec class.
        spec_type (type): the spec class; its fields are the method's options.
        module (str): the module that implements the family: its ``IMPLEMENTATION`` (a
            :class:`~dpgnn_core.methods.contract.Implementation`), which the registry
            imports by name when the method is first asked for.
        task (str): ``node`` or ``graph`` classification.
        private (bool): whether the method trains with a privacy budget.
        protection (str): one line: the protected unit and relation.
        fixed (Mapping, optional): spec fields implied by the name (``{"conv": "gcn"}``);
            ``method`` is added. (default: ``{}``)
        progress_unit (str, optional): ``step`` or ``epoch``; the spec field ``<unit>s`` is
            the length of a run. (default: ``"step"``)
        staged (bool, optional): every run of the method (``dpgnn run``, a sweep point,
            an audit, a retraining) runs the stages its implementation declares (GAP,
            ProGAP, DPDGC), each a cached task of the one staged runner
            (``tasks/staged.py``); else one ``train`` task. (default: :obj:`False`)
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
        multi_label (bool, optional): the method trains on multi-label data (the
            non-private full-batch baselines); the pre-flight refuses such data for the
            others. (default: :obj:`False`)
        checks (tuple, optional): the family's own pre-flight checks, each
            ``check(spec, manifest)`` raising a one-line error (DP-GNN's level, the node
            levels' degree bound); light: no torch. (default: ``()``)
        releases (tuple, optional): ``(level, relation)`` of the privacy events of a
            private run's plan, ``level`` None for the spec's own ``level`` field; None:
            the method releases nothing private. (default: :obj:`None`)

    Raises:
        ValueError: the spec class does not take ``name``.
    """

    name: str
    family: str
    spec_type: type[Spec]
    module: str
    task: Literal["node", "graph"]
    private: bool
    protection: str
    fixed: Mapping[str, Any] = field(default_factory=dict)
    progress_unit: Literal["step", "epoch"] = "step"
    staged: bool = False
    explains: bool = False
    extra_metrics: tuple[str, ...] = ()
    run_tags: tuple[str, ...] = ()
    private_path: bool = True
    private_selection: bool = False
    score_sensitivity: float | None = None
    canary: Canary | None = None
    canary_by_level: Mapping[str, Canary] = field(default_factory=dict)
    multi_label: bool = False
    checks: tuple[Check, ...] = ()
    releases: tuple[str | None, str] | None = None

    def __post_init__(self) -> None:
        if self.name not in method_names(self.spec_type):
            raise ValueError(f"method {self.name!r}: its spec {self.spec_type.__name__} takes "
                             f"{', '.join(method_names(self.spec_type))}")
        object.__setattr__(self, "fixed", MappingProxyType({**self.fixed, "method": self.name}))
        object.__setattr__(self, "canary_by_level", MappingProxyType(dict(self.canary_by_level)))

    def named(self, name: str, fixed: Mapping[str, Any] | None = None) -> Entry:
        """This entry under another name of its family, with the fields that name fixes
        (``fixed``; by default none but ``method``)."""
        return replace(self, name=name, fixed=fixed or {})

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


def levelled(entry: Entry, protects: Mapping[str, str],
             progress_unit: Mapping[str, Literal["step", "epoch"]] | None = None
             ) -> tuple[Entry, ...]:
    """A levelled family's entries (GAP, ProGAP, DPDGC) from ``entry`` and its spec's
    ``level_names``: each name fixes its ``level``, is private unless the level is
    ``none``, protects ``protects[level]`` and counts progress in
    ``progress_unit[level]`` (the entry's own unit where not given)."""
    units = progress_unit or {}
    return tuple(replace(entry, name=name, fixed={"level": level}, private=level != "none",
                         protection=protects[level],
                         progress_unit=units.get(level, entry.progress_unit))
                 for level, name in entry.spec_type.level_names.items())


__all__ = ["Canary", "Check", "Entry", "levelled"]
