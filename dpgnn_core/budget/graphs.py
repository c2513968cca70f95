"""Budgets of the same graph (issue 48 §3): a budget belongs to a dataset's content (and its
folder), so the same graph re-ingested with another split seed into a new folder starts a
fresh budget, whose releases compose with the first budget's although neither counts the
other's. That limit stays (the content differs: its labels and splits), but it is made
visible: each version the store registers records a fingerprint of its graph, its edges and
features (the ``edges`` and ``features`` files' hashes in its manifest), and ``dpgnn budget
show`` and ``dpgnn datasets`` list the other budgets of the same graph. A mixin of
:class:`dpgnn_core.budget.BudgetStore`; the fingerprint itself is
:mod:`dpgnn_core.data.fingerprint`.
"""

from __future__ import annotations

import sqlite3
from contextlib import AbstractContextManager
from typing import Any

from dpgnn_core.data.fingerprint import folder_fingerprint


class SameGraphBudgets:
    """The store's side: the fingerprint of each registered version (mixed into it)."""

    def _tx(self, write: bool = True) -> AbstractContextManager[sqlite3.Connection]:
        raise NotImplementedError  # pragma: no cover - BudgetStore's

    def _fill_graphs(self, db: sqlite3.Connection) -> None:
        """Fingerprint the versions registered without one whose folder still holds them
        (a store from before fingerprints, a version registered by sha256 alone)."""
        for r in db.execute("SELECT sha256, path FROM datasets WHERE graph IS NULL AND "
                            "path IS NOT NULL").fetchall():
            fp = folder_fingerprint(r["path"], r["sha256"])
            if fp is not None:
                db.execute("UPDATE datasets SET graph=? WHERE sha256=?", (fp, r["sha256"]))

    def same_graph(self, budget_id: str) -> list[dict[str, Any]]:
        """The other budgets holding a version with the same edges and features as one of
        ``budget_id``'s: ``budget_id``, ``name``, ``path`` of each such version."""
        with self._tx() as db:
            self._fill_graphs(db)
            rows = db.execute(
                "SELECT DISTINCT o.budget_id, o.name, o.path FROM datasets d JOIN datasets o "
                "ON o.graph = d.graph WHERE d.budget_id=? AND o.budget_id != ? AND d.graph "
                "IS NOT NULL ORDER BY o.first_seen", (budget_id, budget_id)).fetchall()
        return [dict(r) for r in rows]

    def budgets_of_graph(self, fingerprint: str) -> list[dict[str, Any]]:
        """Every budget holding a version whose graph is ``fingerprint``."""
        with self._tx() as db:
            self._fill_graphs(db)
            rows = db.execute("SELECT DISTINCT budget_id, name, path FROM datasets WHERE "
                              "graph=? ORDER BY first_seen", (fingerprint,)).fetchall()
        return [dict(r) for r in rows]


__all__ = ["SameGraphBudgets"]
