"""Budgets of the same graph (issue 48 §3): a budget belongs to a dataset's content (and its
folder), so the same graph re-ingested with another split seed into a new folder starts a
fresh budget, whose releases compose with the first budget's although neither counts the
other's. That limit stays (the content differs: its labels and splits), but it is made
visible: each version the store registers records a fingerprint of its graph, its edges and
features (the ``edges`` and ``features`` files' hashes in its manifest), and ``dpgnn budget
show`` and ``dpgnn datasets`` list the other budgets of the same graph. A mixin of
:class:`dpgnn_core.budget.BudgetStore`; standard library only.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Mapping
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

#: The manifest's files whose content is "the graph": edges and features, not the labels
#: and splits of ``nodes.parquet`` / ``graphs.parquet``.
GRAPH_FILES = ("edges.parquet", "features.parquet")


def graph_fingerprint(manifest: Mapping[str, Any]) -> str | None:
    """The hash of a dataset's edges and features, from its manifest's file hashes (None
    when the manifest lists neither)."""
    files = manifest.get("files") or {}
    parts = {f: (files.get(f) or {}).get("sha256") for f in GRAPH_FILES if f in files}
    if not parts or not all(isinstance(v, str) for v in parts.values()):
        return None
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:32]


def folder_fingerprint(path: str | None, sha256: str | None = None) -> str | None:
    """:func:`graph_fingerprint` of the dataset folder ``path`` (only of the version
    ``sha256`` when given); None when it has no readable manifest."""
    if not path:
        return None
    try:
        manifest = json.loads((Path(path) / "manifest.json").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(manifest, dict) or (
            sha256 is not None and manifest.get("content_sha256") != sha256):
        return None
    return graph_fingerprint(manifest)


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


__all__ = ["GRAPH_FILES", "SameGraphBudgets", "folder_fingerprint", "graph_fingerprint"]
