"""A resumed run's reservation: the budget record a training's checkpoint carries, so that
a run stopped (Ctrl-C, a full disk, a kill) and resumed from its checkpoint continues the
same release and is charged its plan once (docs/privacy.md, "Resumed runs").

The record holds a token (``carrier``) that only it and the checkpoints of its training
hold; a rerun resuming from such a checkpoint presents the token and adopts the record
(:meth:`CarriedReservations.adopt_carried`), which replaces the token, so one resumption
adopts it and no other run can. A mixin of :class:`dpgnn_core.budget.BudgetStore`.
"""

from __future__ import annotations

import sqlite3
import uuid
from contextlib import AbstractContextManager
from datetime import UTC, datetime

from dpgnn_core.budget.report import Budget


class CarriedReservations:
    """The odometer's side of a resumed run (mixed into the store)."""

    def _tx(self, write: bool = True) -> AbstractContextManager[sqlite3.Connection]:
        raise NotImplementedError  # pragma: no cover - BudgetStore's

    def _budget(self, db: sqlite3.Connection, budget_id: str) -> Budget:
        raise NotImplementedError  # pragma: no cover - BudgetStore's

    def carrier(self, record_id: int) -> str | None:
        """The token a checkpoint carries for ``record_id`` (made now when it has none);
        None for a private selection's record, which no checkpoint carries."""
        with self._tx() as db:
            r = db.execute("SELECT carrier FROM releases WHERE id=? AND covers IS NULL",
                           (record_id,)).fetchone()
            if r is None or r["carrier"]:
                return str(r["carrier"]) if r else None
            token = uuid.uuid4().hex
            db.execute("UPDATE releases SET carrier=? WHERE id=?", (token, record_id))
            return token

    def adopt_carried(self, sha256: str, record_id: int, token: str, plan_key: str,
                      run_id: str, note: str) -> str | None:
        """A run resuming from a checkpoint adopts the reservation the checkpoint carries
        (charged once): only a counted record of the dataset's current epoch, for the same
        plan, whose release is not yet written, and only with its token. The token is
        replaced (returned; None: refused), so one resumption adopts it; the record moves
        to ``run_id`` (the resumed run's later stages adopt it by their owner token)."""
        new = uuid.uuid4().hex
        with self._tx() as db:
            r = db.execute("SELECT budget_id FROM datasets WHERE sha256=?",
                           (sha256,)).fetchone()
            if r is None:
                return None
            b = self._budget(db, str(r["budget_id"]))
            cur = db.execute(
                "UPDATE releases SET carrier=?, run_id=?, note=TRIM(COALESCE(note, '') || "
                "' ' || ?), updated=? WHERE id=? AND carrier=? AND budget_id=? AND epoch=? "
                "AND plan_key=? AND release_id IS NULL AND covers IS NULL AND status IN "
                "('reserved','spent')",
                (new, run_id, note, datetime.now(UTC).isoformat(timespec="seconds"),
                 record_id, token, b.budget_id, b.epoch, plan_key))
            return new if cur.rowcount == 1 else None


__all__ = ["CarriedReservations"]
