"""What happens to a release's record after its reservation: naming the release it paid for,
marking it spent (with the actual ledger) or giving it back, and looking releases up. A
mixin of :class:`dpgnn_core.budget.BudgetStore` (split out to keep each module readable).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from contextlib import AbstractContextManager
from datetime import UTC, datetime
from typing import Any

from dpgnn_core.errors import PrivacyError
from dpgnn_core.privacy.events import Ledger

#: A record's states: ``reserved`` (a plan admitted, counted as spent), ``spent``,
#: ``released-unused`` (given back: nothing was released), ``reuse`` (a cached release
#: shown again, no cost) and ``non-private`` (a release without privacy, recorded).
STATUSES = ("reserved", "spent", "released-unused", "reuse", "non-private")


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


class ReleaseRecords:
    """The store's side of a release's record once it is reserved (mixed into the store)."""

    def _tx(self, write: bool = True) -> AbstractContextManager[sqlite3.Connection]:
        raise NotImplementedError  # pragma: no cover - BudgetStore's

    def attach_release(self, record_id: int, release_id: str) -> None:
        """Name the release a record paid for (when it has none yet). A private
        selection's record is named by the selection, after it chose
        (:meth:`attach_selected`), never by a candidate."""
        with self._tx() as db:
            db.execute("UPDATE releases SET release_id=?, updated=? WHERE id=? AND "
                       "release_id IS NULL AND covers IS NULL",
                       (release_id, _now(), record_id))

    def attach_selected(self, record_id: int, release_id: str | None,
                        at: str | None = None) -> None:
        """Name the candidate a private selection released on its record (None: nothing
        was released, Poisson's K = 0) and date the record at ``at`` (default now), the
        selection's release moment, ``created`` and ``updated`` alike: the reservation's
        time, taken before the candidates trained, and the release's would together
        span the selection, whose duration grows with its secret number of candidates."""
        when = at or _now()
        with self._tx() as db:
            db.execute("UPDATE releases SET release_id=COALESCE(release_id, ?), created=?, "
                       "updated=? WHERE id=? AND covers IS NOT NULL",
                       (release_id, when, when, record_id))
            # a dataset version the selection's reservation registered is dated now too
            # (BudgetStore._register's ``pending``), and so is its log line
            r = db.execute("SELECT budget_id, dataset_sha256 FROM releases WHERE id=?",
                           (record_id,)).fetchone()
            if r is not None:
                db.execute("UPDATE datasets SET first_seen=? WHERE sha256=? AND "
                           "first_seen IS NULL", (when, r["dataset_sha256"]))
                db.execute("UPDATE budgets SET updated=? WHERE budget_id=? AND updated IS "
                           "NULL", (when, r["budget_id"]))
                db.execute("UPDATE log SET time=? WHERE budget_id=? AND time IS NULL",
                           (when, r["budget_id"]))

    def give_back_selection(self, record_id: int, note: str) -> bool:
        """Give back a private selection's record that named no release: the selection
        was stopped (Ctrl-C) before its release moment, so nothing of it was published
        (its candidates are the curator's only, and a later selection trains its own,
        fresh). The caller gives back only the records its selection has not named yet
        (:meth:`attach_selected`, which a K = 0 selection calls with no release); a
        record named a release is never given back."""
        with self._tx() as db:
            cur = db.execute(
                "UPDATE releases SET status='released-unused', note=TRIM(COALESCE(note, '') "
                "|| ' ' || ?), updated=? WHERE id=? AND covers IS NOT NULL AND release_id IS "
                "NULL AND status IN ('reserved','spent')", (note, _now(), record_id))
            return cur.rowcount == 1

    def recorded_in_run(self, sha256: str, release_id: str, flow_run: str) -> bool:
        """Whether ``release_id`` was paid for by a record of flow run ``flow_run``."""
        if not flow_run:
            return False
        with self._tx(write=False) as db:
            hit = db.execute("SELECT 1 FROM releases WHERE dataset_sha256=? AND "
                             "release_id=? AND run_id LIKE ?",
                             (sha256, release_id, flow_run + ":%")).fetchone()
            return hit is not None

    def _set(self, record_id: int, status: str, *, only_from: Sequence[str] = (),
             **fields: Any) -> bool:
        if status not in STATUSES:
            raise PrivacyError(f"unknown record status {status!r}")
        with self._tx() as db:
            r = db.execute("SELECT status FROM releases WHERE id=?", (record_id,)).fetchone()
            if r is None or (only_from and r["status"] not in only_from):
                return False
            sets = ", ".join(f"{k}=?" for k in ("status", "updated", *fields))
            db.execute(f"UPDATE releases SET {sets} WHERE id=?",
                       (status, _now(), *fields.values(), record_id))
            return True

    def mark_spent(self, record_id: int, *, release_id: str | None = None,
                   ledger: Ledger | None = None, epsilon: float | None = None,
                   note: str | None = None) -> None:
        """Something was released: the record stays counted for good (with the release's
        id and its actual ledger once known)."""
        fields: dict[str, Any] = {}
        if release_id is not None:
            fields["release_id"] = release_id
        if ledger is not None:
            fields["ledger"] = json.dumps(ledger.to_dict())
        if epsilon is not None:
            fields["epsilon"] = epsilon
        if note is not None:
            fields["note"] = note
        self._set(record_id, "spent", **fields)

    def release_unused(self, record_id: int, note: str) -> bool:
        """Give a reservation back: the run failed before releasing anything. Only a
        record still ``reserved`` can be given back."""
        return self._set(record_id, "released-unused", only_from=("reserved",), note=note)

    def released_plan(self, sha256: str, plan_key: str) -> tuple[int, str] | None:
        """(record id, release id) of a counted release of plan ``plan_key`` (a dataset's
        content and a whole spec) in the dataset's current epoch, the latest; None when
        there is none (a private selection's record names its candidates otherwise)."""
        with self._tx(write=False) as db:
            hit = db.execute(
                "SELECT r.id, r.release_id FROM releases r JOIN budgets b ON "
                "b.budget_id=r.budget_id AND b.epoch=r.epoch WHERE r.dataset_sha256=? AND "
                "r.plan_key=? AND r.release_id IS NOT NULL AND r.covers IS NULL AND "
                "r.status IN ('reserved','spent') ORDER BY r.id DESC LIMIT 1",
                (sha256, plan_key)).fetchone()
            return (int(hit["id"]), str(hit["release_id"])) if hit else None

    def known_release(self, sha256: str, release_id: str) -> bool:
        """Whether ``release_id`` is already recorded (counted) for this dataset's budget."""
        with self._tx(write=False) as db:
            r = db.execute("SELECT budget_id FROM datasets WHERE sha256=?",
                           (sha256,)).fetchone()
            if r is None:
                return False
            hit = db.execute("SELECT 1 FROM releases WHERE budget_id=? AND release_id=? AND "
                             "status IN ('reserved','spent')",
                             (r["budget_id"], release_id)).fetchone()
            return hit is not None



__all__ = ["STATUSES", "ReleaseRecords"]
