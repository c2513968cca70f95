"""The privacy budget across runs: a per-dataset odometer (SQLite, transactional).

Every private release of a dataset is recorded with its ledger (or, for a private
selection, its RDP curve); a budget, once set, is enforced by :meth:`BudgetStore.reserve`,
whose check and reservation are one ``BEGIN IMMEDIATE`` transaction, so two processes
(runs, Dask workers) cannot both pass when only one fits.

The composition math is pure and lives in :mod:`dpgnn_core.privacy.odometer` (names
re-exported here):

* **Admission is a privacy filter** (:class:`~dpgnn_core.privacy.odometer.Filter`),
  registered when the budget is set and stored with it: Rényi filters at a few fixed
  orders and a Gaussian-DP filter, δ split between them. It holds when each run is chosen
  after seeing the earlier ones (fully adaptive composition).
* **One guarantee per unit**: every release counts in every protected unit it bears on,
  through the conversions between units (group privacy); a release that bounds nothing
  about a protected unit is refused under a budget.
* ``budget show`` also reports the tightest sound *post hoc* ε of the fixed sequence
  recorded (:func:`~dpgnn_core.privacy.odometer.compose`), labelled as such.
* **No parallel composition** across disjoint splits; **versions of a dataset share its
  budget** (a re-ingested folder keeps it).

A reservation that is still ``reserved`` counts as spent, so an in-flight run is never
forgotten; a run that fails before its first release gives it back (``released-unused``).
Derivations: docs/privacy.md, "Privacy budget across runs".

The records the store hands back and their reporting (:class:`Budget`, :class:`Record`,
:class:`Summary`, :class:`BudgetExceeded`) live in :mod:`dpgnn_core.budget.report`.
Imports only the standard library, numpy and :mod:`dpgnn_core.privacy`
(no Prefect).

The package, its modules and what each holds (its public face is re-exported here):

* :mod:`~dpgnn_core.budget.store`: :class:`BudgetStore`, :func:`default_store_path`,
  :func:`owner`;
* :mod:`~dpgnn_core.budget.report`: the records it hands back and their reporting
  (:class:`Budget`, :class:`Record`, :class:`Summary`, :class:`BudgetExceeded`);
* :mod:`~dpgnn_core.budget.records`: releases and their statuses;
* :mod:`~dpgnn_core.budget.change`: what setting a budget again may do;
* :mod:`~dpgnn_core.budget.resume`: a resumed run's carried reservation;
* :mod:`~dpgnn_core.budget.graphs`: the other budgets of the same graph.

The pure privacy mathematics it uses (the filter, post hoc composition, units) stays in
:mod:`dpgnn_core.privacy`.
"""

from dpgnn_core.budget.change import admission_state, decide, describe
from dpgnn_core.budget.store import (
    COUNTED,
    STATUSES,
    UNIT_WORDS,
    UNITS,
    Budget,
    BudgetChangeRefused,
    BudgetExceeded,
    BudgetStore,
    Charge,
    Curve,
    Filter,
    FilterState,
    Record,
    Summary,
    UnitSpent,
    compose,
    default_store_path,
    owner,
)

__all__ = ["COUNTED", "STATUSES", "UNITS", "UNIT_WORDS", "Budget", "BudgetChangeRefused",
           "BudgetExceeded", "BudgetStore", "Charge", "Curve", "Filter", "FilterState",
           "Record", "Summary", "UnitSpent", "admission_state", "compose", "decide",
           "default_store_path", "describe", "owner"]
