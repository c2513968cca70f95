"""The store of :mod:`dpgnn_core.budget`: :class:`BudgetStore`, one SQLite file per project
(``<home>/budget.sqlite``), whose admission, records and changes the package's docstring
describes."""

from __future__ import annotations

import json
import math
import os
import socket
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import numpy as np

from dpgnn_core.budget.change import admission_state as _state
from dpgnn_core.budget.change import decide, describe
from dpgnn_core.budget.compose_cache import cached_compose
from dpgnn_core.budget.graphs import SameGraphBudgets
from dpgnn_core.budget.records import STATUSES, ReleaseRecords, _now
from dpgnn_core.budget.report import (
    Budget,
    BudgetChangeRefused,
    BudgetExceeded,
    Record,
    Summary,
    timeline,
)
from dpgnn_core.budget.resume import CarriedReservations
from dpgnn_core.data.fingerprint import folder_fingerprint
from dpgnn_core.errors import PrivacyError
from dpgnn_core.privacy.events import Ledger
from dpgnn_core.privacy.odometer import (
    ORDERS,
    RDP_CACHE,
    RDP_NEW,
    UNIT_WORDS,
    UNITS,
    Charge,
    Curve,
    Filter,
    FilterState,
    UnitSpent,
    compose,
    protected_units,
    shown_units,
)

#: Record states: what counts against the budget is ``reserved`` and ``spent``;
#: ``non-private`` is a release without privacy the user allowed on a budgeted dataset
#: (recorded, outside every finite guarantee: tasks.budget.admit_non_private).
COUNTED = ("reserved", "spent")


# --- the store ---------------------------------------------------------------------------


_SCHEMA = """
CREATE TABLE IF NOT EXISTS datasets(
    sha256 TEXT PRIMARY KEY, budget_id TEXT NOT NULL, name TEXT, path TEXT,
    first_seen TEXT, graph TEXT);
CREATE TABLE IF NOT EXISTS budgets(
    budget_id TEXT PRIMARY KEY, name TEXT, epsilon REAL, delta REAL,
    epoch INTEGER NOT NULL DEFAULT 0, updated TEXT, filter TEXT, guarantee TEXT,
    covers_from TEXT);
CREATE TABLE IF NOT EXISTS releases(
    id INTEGER PRIMARY KEY AUTOINCREMENT, budget_id TEXT NOT NULL,
    dataset_sha256 TEXT NOT NULL, epoch INTEGER NOT NULL, created TEXT, updated TEXT,
    status TEXT NOT NULL, method TEXT, run_id TEXT, release_id TEXT, ledger TEXT,
    fixed TEXT, delta REAL, epsilon REAL, owner TEXT, note TEXT, plan_key TEXT,
    covers TEXT, carrier TEXT);
CREATE TABLE IF NOT EXISTS rdp_cache(
    event TEXT PRIMARY KEY, orders INTEGER NOT NULL, rdp TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS compose_cache(key TEXT PRIMARY KEY, spent TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS log(
    id INTEGER PRIMARY KEY AUTOINCREMENT, budget_id TEXT, time TEXT, action TEXT,
    detail TEXT);
CREATE INDEX IF NOT EXISTS releases_budget ON releases(budget_id, epoch, status);
CREATE INDEX IF NOT EXISTS releases_release ON releases(budget_id, release_id);
"""


class _Refused(Exception):
    """The filter's refusal of ``new`` after ``before`` for ``unit`` (``after``: both), as
    :meth:`BudgetStore._admit` decided it inside a transaction; worded as
    :class:`BudgetExceeded` by :meth:`BudgetStore._exceeded` after it."""

    def __init__(self, budget: Budget, unit: str, before: list[Charge], new: list[Charge],
                 after: list[Charge], reason: str) -> None:
        super().__init__(unit)
        self.budget, self.unit, self.reason = budget, unit, reason
        self.before, self.new, self.after = before, new, after


def owner() -> str:
    """``host:pid`` of this process (who holds a reservation)."""
    return f"{socket.gethostname()}:{os.getpid()}"



class BudgetStore(ReleaseRecords, CarriedReservations, SameGraphBudgets):
    """The odometer of every dataset under a project home.

    Args:
        path (str or Path): the SQLite file (created with its folder when missing).
        timeout (float, optional): seconds to wait for another process's transaction.
            (default: :obj:`60.0`)
    """

    def __init__(self, path: str | Path, timeout: float = 60.0) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.timeout = timeout
        db = sqlite3.connect(self.path, timeout=self.timeout)
        try:  # executescript commits by itself: run it outside _tx
            db.execute("PRAGMA journal_mode=WAL")
            db.executescript(_SCHEMA)
            for table, col in (("budgets", "filter"), ("budgets", "guarantee"),
                               ("budgets", "covers_from"), ("datasets", "graph"),
                               ("releases", "carrier")):  # a store from before them
                if col not in {r[1] for r in db.execute(f"PRAGMA table_info({table})")}:
                    db.execute(f"ALTER TABLE {table} ADD COLUMN {col} TEXT")
                    db.commit()
        finally:
            db.close()

    @contextmanager
    def _tx(self, write: bool = True) -> Iterator[sqlite3.Connection]:
        """One transaction; ``BEGIN IMMEDIATE`` takes the write lock at once, so a
        read-check-insert inside it is atomic across processes."""
        db = sqlite3.connect(self.path, timeout=self.timeout, isolation_level=None)
        db.row_factory = sqlite3.Row
        try:
            db.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            try:
                yield db
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")
        finally:
            db.close()

    # --- the RDP curve cache (dpgnn_core.privacy.odometer.RDP_CACHE)

    @staticmethod
    def _load_rdp(db: sqlite3.Connection) -> None:
        for r in db.execute("SELECT event, rdp FROM rdp_cache WHERE orders=?",
                            (len(ORDERS),)):
            if r["event"] not in RDP_CACHE:
                arr = np.asarray(json.loads(r["rdp"]), dtype=float)
                arr.setflags(write=False)
                RDP_CACHE[r["event"]] = arr

    @staticmethod
    def _save_rdp(db: sqlite3.Connection) -> None:
        new = [k for k in RDP_NEW if k in RDP_CACHE]
        db.executemany("INSERT OR IGNORE INTO rdp_cache VALUES (?,?,?)",
                       [(k, len(ORDERS), json.dumps(RDP_CACHE[k].tolist())) for k in new])
        RDP_NEW.difference_update(new)

    def _flush_rdp(self) -> None:
        if RDP_NEW:
            with self._tx() as db:
                self._save_rdp(db)

    # --- datasets and budgets

    def _register(self, db: sqlite3.Connection, sha256: str, name: str,
                  path: str | None, pending: bool = False) -> str:
        """Record a dataset version (inside the caller's transaction). ``pending``: a
        private selection registers it at its reservation, before any candidate trains;
        the version's ``first_seen`` (and the log line of a new version) are then left
        undated until the selection's release moment (:meth:`attach_selected`): a time
        taken now and the release's would together reveal its number of candidates."""
        row = db.execute("SELECT budget_id FROM datasets WHERE sha256=?", (sha256,)).fetchone()
        if row:
            return str(row["budget_id"])
        when = None if pending else _now()
        budget_id = sha256
        if path:  # a new version of a folder already known shares that folder's budget
            prior = db.execute("SELECT budget_id FROM datasets WHERE path=? ORDER BY "
                               "first_seen LIMIT 1", (str(path),)).fetchone()
            if prior:
                budget_id = str(prior["budget_id"])
        db.execute("INSERT INTO datasets VALUES (?,?,?,?,?,?)",
                   (sha256, budget_id, name, str(path) if path else None, when,
                    folder_fingerprint(str(path) if path else None, sha256)))
        db.execute("INSERT OR IGNORE INTO budgets(budget_id, name, epoch, updated) "
                   "VALUES (?,?,0,?)", (budget_id, name, when))
        if budget_id != sha256:
            self._log(db, budget_id, "new-version",
                      f"{name} {sha256[:12]} at {path} shares the budget of this folder",
                      when=when, dated=not pending)
        return budget_id

    def register(self, sha256: str, name: str, path: str | None = None) -> str:
        """Record a dataset version; returns its budget id."""
        with self._tx() as db:
            return self._register(db, sha256, name, path)

    def _log(self, db: sqlite3.Connection, budget_id: str, action: str, detail: str,
             when: str | None = None, dated: bool = True) -> None:
        db.execute("INSERT INTO log(budget_id, time, action, detail) VALUES (?,?,?,?)",
                   (budget_id, (when or _now()) if dated else None, action, detail))

    def _budget(self, db: sqlite3.Connection, budget_id: str) -> Budget:
        r = db.execute("SELECT * FROM budgets WHERE budget_id=?", (budget_id,)).fetchone()
        if r is None:
            raise PrivacyError(f"no dataset {budget_id[:12]} in the budget store {self.path}")
        flt = Filter.from_dict(json.loads(r["filter"])) if r["filter"] else None
        g = Filter.from_dict(json.loads(r["guarantee"])) if r["guarantee"] else None
        covers = json.loads(r["covers_from"]) if r["covers_from"] else None
        return Budget(r["budget_id"], r["name"], r["epsilon"], r["delta"], r["epoch"], flt,
                      g if g != flt else None, covers)

    def budget_id(self, sha256: str) -> str | None:
        with self._tx(write=False) as db:
            r = db.execute("SELECT budget_id FROM datasets WHERE sha256=?",
                           (sha256,)).fetchone()
            return str(r["budget_id"]) if r else None

    def set_budget(self, sha256: str, name: str, path: str | None, epsilon: float,
                   delta: float, units: Sequence[str] | None = None, *,
                   replace: bool = False, reason: str = "") -> Budget:
        """Set (or change) a dataset's budget and register its privacy filter (the orders
        and bounds that will admit runs are fixed now); recorded in its log. Once the
        epoch has released something, the budget can only be lowered (to a bound its
        releases still fit), unless ``replace`` ends the epoch's guarantee and starts a
        new epoch under the new budget (:mod:`dpgnn_core.budget.change`).

        Args:
            sha256 (str), name (str), path (str, optional): the dataset.
            epsilon (float): budget ε per protected unit.
            delta (float): budget δ.
            units (sequence of str, optional): the protected units; every release must
                bound each of them (default: the units of the epoch's first release).
            replace (bool, optional): the user's override (``--replace --yes``).
                (default: :obj:`False`)
            reason (str, optional): why (recorded). (default: ``""``)

        Raises:
            BudgetChangeRefused: a raise or replacement without ``replace``, or a lowered
                bound the epoch's releases exceed (nothing is changed).
        """
        flt = Filter.register(epsilon, delta, units)
        with self._tx() as db:
            bid = self._register(db, sha256, name, path)
            old = self._budget(db, bid)
            self._load_rdp(db)
            counted = [r.charge for r in self._counted(db, bid, old.epoch)]
            started = bool(counted) or self._void_since(db, bid, old.epoch) is not None
            change = decide(old, self._filter(db, old) if old.epsilon is not None else None,
                            flt, counted, started, replace)
            epoch = old.epoch + (change.kind == "replace")
            covers = (old.covers_from if change.kind == "lower" else
                      self._covers_from(db, bid, old.epoch) if change.kind == "set"
                      and started else None)
            db.execute("UPDATE budgets SET epsilon=?, delta=?, filter=?, guarantee=?, "
                       "epoch=?, updated=?, covers_from=? WHERE budget_id=?",
                       (epsilon, delta, json.dumps(change.admit.to_dict()),
                        json.dumps(change.guarantee.to_dict()), epoch, _now(),
                        json.dumps(covers) if covers else None, bid))
            units_note = (f"protected units {', '.join(change.admit.units)}; "
                          if change.admit.units else "")
            late = (f"; set after {covers['releases']} release(s) of epoch {old.epoch} "
                    f"(the last: release {covers['after_release']}): its guarantee covers "
                    "the releases from now on only; admission still counts the earlier "
                    "ones" if covers and change.kind == "set" else "")
            self._log(db, bid, change.kind, describe(change, old, reason) + late + "; "
                      + units_note + change.admit.describe())
            self._save_rdp(db)
            return self._budget(db, bid)

    @staticmethod
    def _covers_from(db: sqlite3.Connection, budget_id: str, epoch: int) -> dict[str, Any]:
        """A budget set after the epoch's first release covers the releases from now on
        only (issue 48 §3): when it was set, after which release, and how many came
        before (counted or made without privacy)."""
        r = db.execute("SELECT COUNT(*) AS n, MAX(id) AS last FROM releases WHERE "
                       "budget_id=? AND epoch=? AND status IN ('reserved','spent',"
                       "'non-private')", (budget_id, epoch)).fetchone()
        return {"time": _now(), "after_release": int(r["last"] or 0),
                "releases": int(r["n"] or 0)}

    @staticmethod
    def _void_since(db: sqlite3.Connection, budget_id: str, epoch: int) -> int | None:
        """The epoch's first release made without privacy (no finite guarantee since)."""
        r = db.execute("SELECT id FROM releases WHERE budget_id=? AND epoch=? AND "
                       "status='non-private' ORDER BY id LIMIT 1",
                       (budget_id, epoch)).fetchone()
        return int(r["id"]) if r else None

    def _filter(self, db: sqlite3.Connection, b: Budget) -> Filter:
        """The budget's filter; a budget set before filters existed gets one now (logged)."""
        if b.filter is not None:
            return b.filter
        assert b.epsilon is not None and b.delta is not None
        flt = Filter.register(b.epsilon, b.delta)
        db.execute("UPDATE budgets SET filter=? WHERE budget_id=?",
                   (json.dumps(flt.to_dict()), b.budget_id))
        self._log(db, b.budget_id, "filter", "registered for a budget set before filters "
                  "existed: " + flt.describe())
        return flt

    def reset(self, budget_id: str, reason: str = "") -> None:
        """Start a new epoch: earlier records stay stored and shown but no longer count.
        Recorded in the log (a reset does not make earlier releases private again: it
        only says the data owner accepted them)."""
        with self._tx() as db:
            b = self._budget(db, budget_id)
            g = b.stated  # a lowered bound ends too: the new epoch's budget is fixed anew
            db.execute("UPDATE budgets SET epoch=?, guarantee=NULL, covers_from=NULL, "
                       "updated=? WHERE budget_id=?", (b.epoch + 1, _now(), budget_id))
            ended = (f"; the guarantee of epoch {b.epoch} (ε = {g.epsilon:g} at δ = "
                     f"{g.delta:g}) ended here and covers its releases only"
                     if g is not None else "")
            self._log(db, budget_id, "reset", f"epoch {b.epoch} -> {b.epoch + 1}{ended}"
                      + (f": {reason}" if reason else ""))

    # --- records

    @staticmethod
    def _record(r: sqlite3.Row) -> Record:
        ledger = Ledger.from_dict(json.loads(r["ledger"])) if r["ledger"] else None
        raw = json.loads(r["fixed"]) if r["fixed"] else None
        curve = Curve.from_dict(raw) if isinstance(raw, dict) else None
        fixed = tuple(raw) if isinstance(raw, list) else None
        return Record(r["id"], r["dataset_sha256"], r["created"], r["status"],
                      r["method"] or "", r["run_id"] or "", r["release_id"],
                      Charge(ledger, fixed, curve), r["delta"], r["epsilon"],
                      r["note"] or "", r["epoch"])

    def _counted(self, db: sqlite3.Connection, budget_id: str, epoch: int) -> list[Record]:
        rows = db.execute(
            f"SELECT * FROM releases WHERE budget_id=? AND epoch=? AND status IN "
            f"({','.join('?' * len(COUNTED))}) ORDER BY id", (budget_id, epoch, *COUNTED))
        return [self._record(r) for r in rows]

    @staticmethod
    def _insert(db: sqlite3.Connection, budget_id: str, sha256: str, epoch: int,
                charge: Charge, *, status: str, method: str, run_id: str,
                release_id: str | None, delta: float | None, epsilon: float | None,
                note: str, plan_key: str | None = None, covers: Sequence[str] = ()) -> int:
        """One row of ``releases`` (inside the caller's transaction); returns its id."""
        cur = db.execute(
            "INSERT INTO releases(budget_id, dataset_sha256, epoch, created, updated, status, "
            "method, run_id, release_id, ledger, fixed, delta, epsilon, owner, note, "
            "plan_key, covers) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (budget_id, sha256, epoch, _now(), _now(), status, method, run_id, release_id,
             json.dumps(charge.ledger.to_dict()) if charge.ledger is not None else None,
             (json.dumps(list(charge.fixed)) if charge.fixed is not None else
              json.dumps(charge.curve.to_dict()) if charge.curve is not None else None),
             delta, epsilon, owner(), note, plan_key,
             json.dumps(list(covers)) if covers else None))
        return int(cur.lastrowid or 0)

    def reserve(self, sha256: str, name: str, path: str | None, charge: Charge, *,
                method: str, run_id: str, delta: float | None, epsilon: float | None,
                note: str = "", plan_key: str | None = None,
                covers: Sequence[str] = ()) -> int:
        """Check ``charge`` against the dataset's budget and reserve it, in one
        transaction. Returns the record's id.

        Raises:
            BudgetExceeded: the cumulative ε of a unit would exceed the budget (nothing is
                recorded).
        """
        try:
            with self._tx() as db:
                bid = self._register(db, sha256, name, path, pending=bool(covers))
                b = self._budget(db, bid)
                if b.epsilon is not None and b.delta is not None and charge.units():
                    self._load_rdp(db)
                    self._admit(db, b, charge)
                rid = self._insert(db, bid, sha256, b.epoch, charge, status="reserved",
                                   method=method, run_id=run_id, release_id=None,
                                   delta=delta, epsilon=epsilon, note=note,
                                   plan_key=plan_key, covers=covers)
                self._save_rdp(db)
                return rid
        except _Refused as r:  # nothing recorded (rolled back); worded outside the lock
            raise self._exceeded(r) from None

    def _admit(self, db: sqlite3.Connection, b: Budget, charge: Charge | Sequence[Charge]
               ) -> None:
        """Raise :class:`_Refused` unless the budget's filter admits ``charge`` (or every
        charge of a sequence, one after the other) for every protected unit. The caller
        words it (:meth:`_exceeded`) once its transaction is over: the post hoc figures
        only word the refusal, and composing them inside would hold the store's lock."""
        assert b.epsilon is not None and b.delta is not None
        flt = self._filter(db, b)
        before = [r.charge for r in self._counted(db, b.budget_id, b.epoch)]
        new = [charge] if isinstance(charge, Charge) else list(charge)
        after = [*before, *new]
        for unit in flt.protected(after):
            state = _state(b, flt, after, unit)
            if state.admits:
                continue
            if state.note:
                reason = f"for this unit {state.note}"
                if flt.units is None:
                    reason += (" (the budget protects the unit(s) of the epoch's first "
                               "release, as `dpgnn budget set --unit` did not name any)")
            else:
                reason = (f"the privacy filter fixed at `budget set` (valid when each run is "
                          f"chosen after seeing earlier ones) does not admit it: its "
                          f"best component would be at {100 * state.fits:.4g} % of its bound")
            raise _Refused(b, unit, before, new, after, reason)

    def _exceeded(self, r: _Refused) -> BudgetExceeded:
        """The refusal :meth:`_admit` decided, worded with the post hoc ε spent, requested
        and cumulative at the budget's δ: each the exact :func:`compose` of its releases,
        read back from the store's ``compose_cache`` when it holds it
        (:func:`~dpgnn_core.budget.compose_cache.cached_compose`: a refused command run
        again, or the releases so far as ``budget show`` composed them, compose nothing).
        The RDP curves the decision computed are kept too (where the store can be written)."""
        b, unit = r.budget, r.unit
        assert b.epsilon is not None and b.delta is not None
        delta: float = b.delta
        with suppress(sqlite3.Error):  # a cache: a store that cannot be written loses it
            self._flush_rdp()

        def eps(charges: list[Charge]) -> float:
            return cached_compose(self.path, self.timeout, charges, delta, [unit])[unit].epsilon
        return BudgetExceeded(f"{b.name} ({b.budget_id[:12]})", unit,
                              eps(r.before) if r.before else 0.0, eps(r.new), eps(r.after),
                              b.epsilon, delta, r.reason)

    def check(self, sha256: str, charge: Charge | Sequence[Charge]) -> None:
        """Raise :class:`BudgetExceeded` as :meth:`reserve` would, recording nothing (a
        staged run's plan, before a stage that releases nothing private trains); a
        sequence of charges is checked as if reserved one after the other (a sweep's
        points, before the sweep starts)."""
        bid = self.budget_id(sha256)
        units = (charge.units() if isinstance(charge, Charge)
                 else set().union(*(c.units() for c in charge)))
        try:
            with self._tx(write=False) as db:
                b = self._budget(db, bid) if bid is not None else None
                if b is not None and b.epsilon is not None and b.delta is not None and units:
                    self._load_rdp(db)
                    self._admit(db, b, charge)
        except _Refused as r:
            raise self._exceeded(r) from None
        self._flush_rdp()

    def protected(self, sha256: str) -> tuple[Budget, tuple[str, ...]] | None:
        """The dataset's finite budget and the units it protects now (none before its
        epoch's first release unless named), or None; reads no curve (a pre-flight)."""
        bid = self.budget_id(sha256)
        with self._tx(write=False) as db:
            b = self._budget(db, bid) if bid is not None else None
            if b is None or b.epsilon is None or b.delta is None:
                return None
            charges = [r.charge for r in self._counted(db, b.budget_id, b.epoch)]
        return b, protected_units(charges, b.filter.units if b.filter else None)

    def find_reservation(self, sha256: str, run_id: str, plan_key: str,
                         owner: str | None = None) -> int | None:
        """The counted record a task may adopt instead of reserving its own: only with an
        explicit ``owner`` token, which one flow hands to the tasks of one release and to
        nothing else (a task without one is always its own release and is charged).

        * the stages of one staged run (GAP, ProGAP) share the reservation of their first
          stage: same ``run_id`` (``<flow run>:<plan key>:<owner>``), release not yet
          written (a retraining of a finished plan is a new release);
        * the candidates of a private selection adopt the selection's record of the same
          flow run and token (``run_id`` ``<flow run>:tuning:<owner>``) when it covers
          ``plan_key``: a later run of a covered configuration is a new release.

        Two tasks of one flow run with the same plan and no common token (a sweep with
        ``seeds = [0, 0]``) are two releases, each checked and charged."""
        if not owner:
            return None
        flow = run_id.split(":", 1)[0]
        with self._tx(write=False) as db:
            r = db.execute("SELECT budget_id FROM datasets WHERE sha256=?",
                           (sha256,)).fetchone()
            if r is None:
                return None
            b = self._budget(db, str(r["budget_id"]))
            hit = db.execute(
                "SELECT id FROM releases WHERE budget_id=? AND epoch=? AND status IN "
                "('reserved','spent') AND ((run_id=? AND release_id IS NULL AND covers IS "
                "NULL) OR (covers LIKE ? AND run_id=?)) ORDER BY id LIMIT 1",
                (b.budget_id, b.epoch, run_id, f'%"{plan_key}"%',
                 f"{flow}:tuning:{owner}")).fetchone()
            return int(hit["id"]) if hit else None

    def record(self, sha256: str, name: str, path: str | None, charge: Charge, *,
               status: str, method: str, run_id: str, release_id: str | None,
               delta: float | None, epsilon: float | None, note: str = "") -> int:
        """Record a release without a budget check: a re-use (``reuse``, costs nothing) or
        a release that already happened and was not recorded (``spent``)."""
        with self._tx() as db:
            bid = self._register(db, sha256, name, path)
            b = self._budget(db, bid)
            return self._insert(db, bid, sha256, b.epoch, charge, status=status,
                                method=method, run_id=run_id, release_id=release_id,
                                delta=delta, epsilon=epsilon, note=note)

    # --- reading

    def resolve(self, key: str) -> str:
        """The budget id of a dataset named by its sha256 (or a prefix of at least 8 hex
        digits), its folder path or its name."""
        with self._tx(write=False) as db:
            rows = db.execute("SELECT DISTINCT budget_id FROM datasets WHERE sha256 LIKE ? "
                              "OR path=? OR name=?",
                              (key + "%" if len(key) >= 8 else key, key, key)).fetchall()
            rows += db.execute("SELECT budget_id FROM budgets WHERE budget_id LIKE ?",
                               (key + "%" if len(key) >= 8 else key,)).fetchall()
        ids = sorted({str(r["budget_id"]) for r in rows})
        if not ids:
            raise PrivacyError(f"no dataset {key!r} in the budget store {self.path} "
                               "(no private run recorded and no budget set)")
        if len(ids) > 1:
            raise PrivacyError(f"{key!r} names {len(ids)} datasets in {self.path}: give a "
                               "longer sha256 prefix or the folder")
        return ids[0]

    def budget_ids(self) -> list[str]:
        with self._tx(write=False) as db:
            return [str(r["budget_id"]) for r in
                    db.execute("SELECT budget_id FROM budgets ORDER BY updated")]

    def has_reserved(self, budget_id: str) -> bool:
        """Whether a record of the budget's current epoch is ``reserved`` (a release under
        way, or a stopped run's kept reservation): what :meth:`summary`'s records say,
        without composing ε (a pre-flight need not import the accountants)."""
        with self._tx(write=False) as db:
            b = self._budget(db, budget_id)
            return db.execute("SELECT 1 FROM releases WHERE budget_id=? AND epoch=? AND "
                              "status='reserved' LIMIT 1",
                              (budget_id, b.epoch)).fetchone() is not None

    def summary(self, budget_id: str, all_epochs: bool = False) -> Summary:
        """The budget, the versions, ε spent per unit and every record (this epoch's, or
        every epoch's with ``all_epochs``)."""
        with self._tx(write=False) as db:
            b = self._budget(db, budget_id)
            versions = [dict(r) for r in db.execute(
                "SELECT sha256, name, path, first_seen FROM datasets WHERE budget_id=? "
                "ORDER BY first_seen", (budget_id,))]
            q = "SELECT * FROM releases WHERE budget_id=?" + ("" if all_epochs
                                                              else " AND epoch=?")
            rows = db.execute(q + " ORDER BY id", (budget_id,) if all_epochs
                              else (budget_id, b.epoch)).fetchall()
            records = [self._record(r) for r in rows]
            log = [dict(r) for r in db.execute(
                "SELECT time, action, detail FROM log WHERE budget_id=? ORDER BY id",
                (budget_id,))]
            self._load_rdp(db)
        counted = [r for r in records if r.status in COUNTED and r.epoch == b.epoch]
        delta = b.delta if b.delta is not None else max(
            (r.delta for r in counted if r.delta), default=None)
        charges = [r.charge for r in counted]
        units = sorted({*shown_units(charges), *protected_units(
            charges, b.filter.units if b.filter else None)}, key=UNITS.index)
        spent = (cached_compose(self.path, self.timeout, charges, delta, units)
                 if counted and delta else {})
        states: dict[str, FilterState] = {}
        if b.epsilon is not None and b.delta is not None:
            flt = b.filter or Filter.register(b.epsilon, b.delta)  # shown, not stored
            states = {u: _state(b, flt, charges, u) for u in flt.protected(charges)}
        void = next((r.id for r in records if r.status == "non-private"
                     and r.epoch == b.epoch), None)
        if void is not None:  # no finite guarantee since: every unit shown is ∞
            spent = {u: UnitSpent(u, math.inf, delta or 0.0, s.relations,
                                  f"no guarantee since release {void}",
                                  (f"release {void} made without privacy",))
                     for u, s in spent.items()}
        self._flush_rdp()
        return Summary(b, versions, delta, spent, records, log, states, void)

    def timeline(self, budget_id: str) -> dict[str, list[tuple[str, float]]]:
        """Cumulative ε per unit after each counted release of this epoch, in order (the
        odometer over time), at the summary's δ."""
        return timeline(self.summary(budget_id))

def default_store_path(home: str | Path) -> Path:
    """``<home>/budget.sqlite``."""
    return Path(home) / "budget.sqlite"


__all__ = ["COUNTED", "STATUSES", "UNITS", "UNIT_WORDS", "Budget", "BudgetChangeRefused",
           "BudgetExceeded",
           "BudgetStore", "Charge", "Curve", "Filter", "FilterState", "Record", "Summary",
           "UnitSpent", "compose", "default_store_path", "owner"]
