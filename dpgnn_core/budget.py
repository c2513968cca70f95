"""The privacy budget across runs: a per-dataset odometer (SQLite, transactional).

Every private release of a dataset is recorded with its ledger; what a dataset has spent is
the composition of all of them, per protection unit; a budget, once set, is enforced by
:meth:`BudgetStore.reserve`, whose check and reservation are one ``BEGIN IMMEDIATE``
transaction, so two processes (runs, Dask workers) cannot both pass when only one fits.

Composition (derivations in docs/privacy.md, "Privacy budget across runs"):

* **Per unit.** Events are grouped by their ``level`` (edge, node, node_feature, graph,
  record): guarantees for different units protect different things and are never summed
  into one number. A budget bounds *each* unit's cumulative ε.
* **Within a unit and relation**, the events of every recorded ledger are composed with the
  RDP accountant (sum of RDP curves, tight conversion) and, for a few events where every
  one has a PLD, the PLD accountant; the smaller ε is reported (both are upper bounds).
* **Mixed relations in one unit** (e.g. DP-MLP's add/remove and DP-GCN's replace-one on
  the same nodes): δ is split between the two groups; the add/remove group's (ε_a, δ_a)
  becomes (2ε_a, (1 + e^{ε_a}) δ_a) under replace-one (group privacy: a replacement is a
  removal and an addition), and the groups compose by basic composition. Conservative.
* **Fixed (ε, δ) charges** (a private-selection sweep's tuning total, which has no ledger of
  events) compose with the rest by basic composition: their ε adds and their δ is taken
  out of the δ the ledgers are converted at.
* **No parallel composition** across disjoint splits: no code here proves a disjointness,
  so none is assumed (claims less; docs/privacy.md).
* **Versions of a dataset share its budget**: a dataset re-ingested into the same folder
  (the source changed) gets a new content sha256 but keeps the folder's budget, because an
  updated graph holds mostly the same people.

A reservation that is still ``reserved`` counts as spent, so an in-flight run is never
forgotten; a run that fails before its first release gives it back (``released-unused``).

Imports only the standard library, numpy and :mod:`dpgnn_core.privacy` (no Prefect).
"""

from __future__ import annotations

import json
import math
import os
import socket
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from dpgnn_core.errors import PrivacyError
from dpgnn_core.privacy.events import Ledger, LedgerEntry
from dpgnn_core.privacy.rdp import DEFAULT_ORDERS

#: Record states: what counts against the budget is ``reserved`` and ``spent``;
#: ``non-private`` is a release without privacy the user allowed on a budgeted dataset
#: (recorded, outside every finite guarantee: tasks.budget.admit_non_private).
STATUSES = ("reserved", "spent", "released-unused", "reuse", "non-private")
COUNTED = ("reserved", "spent")
#: Protection units in the order they are shown.
UNITS = ("edge", "node", "node_feature", "graph", "record")
UNIT_WORDS = {"edge": "edge", "node": "node with its edges",
              "node_feature": "node features and labels", "graph": "graph",
              "record": "record"}
#: Relative slack of the budget check (the accountants' own rounding).
TOLERANCE = 1e-9
#: PLD (tighter, ~0.5 s per DP-SGD event) is tried on at most this many events of one unit
#: and relation; beyond, RDP alone (fast vector sums; composition of many runs is where
#: RDP is tight anyway). Both are upper bounds, so either is sound.
PLD_MAX_EVENTS = 4


class BudgetExceeded(PrivacyError):
    """A run's release would take a dataset's cumulative ε past its budget.

    Attributes:
        dataset (str): the dataset (name and sha256 prefix).
        unit (str): the protection unit whose budget it would exceed.
        spent (float), requested (float), cumulative (float), budget (float),
        delta (float): ε spent so far, this release's own ε, ε after it, the budget's ε,
        all at the budget's ``delta``.
    """

    def __init__(self, dataset: str, unit: str, spent: float, requested: float,
                 cumulative: float, budget: float, delta: float) -> None:
        self.dataset, self.unit = dataset, unit
        self.spent, self.requested, self.cumulative = spent, requested, cumulative
        self.budget, self.delta = budget, delta
        super().__init__(
            f"privacy budget of dataset {dataset} exceeded for unit {unit} "
            f"({UNIT_WORDS.get(unit, unit)}): spent ε = {spent:.4g}, this run requests "
            f"ε = {requested:.4g} (cumulative {cumulative:.4g} > budget {budget:.4g} at "
            f"δ = {delta:.3g}); remaining ε = {max(budget - spent, 0.0):.4g}. Nothing was "
            "trained. See `dpgnn budget show`.")

    def __reduce__(self) -> tuple[Any, ...]:  # picklable: Dask sends it back from workers
        return (type(self), (self.dataset, self.unit, self.spent, self.requested,
                             self.cumulative, self.budget, self.delta))


# --- composition (pure) ------------------------------------------------------------------


@dataclass(frozen=True)
class Charge:
    """One recorded release: its ledger, or a fixed (ε, δ) for one unit and relation."""

    ledger: Ledger | None = None
    fixed: tuple[float, float, str, str] | None = None  # (ε, δ, unit, relation)

    def units(self) -> set[str]:
        if self.fixed is not None:
            return {self.fixed[2]}
        return {e.level for e in (self.ledger or Ledger()).events}


@dataclass(frozen=True)
class UnitSpent:
    """ε spent on one protection unit, at ``delta``."""

    unit: str
    epsilon: float
    delta: float
    relations: tuple[str, ...]
    method: str  # how it was composed, in words


def _group_privacy_delta(rdp: np.ndarray, orders: np.ndarray, x: float) -> float:
    from dpgnn_core.privacy.rdp import delta_from_rdp

    return delta_from_rdp(orders, rdp, x)[0] * (1.0 + math.exp(x))


_ORDERS = DEFAULT_ORDERS


#: RDP curves of recorded events by the event's JSON: filled from and written back to the
#: store's ``rdp_cache`` table, so a new process does not recompute every past release's
#: curve (seconds each for long DP-SGD runs at fractional orders).
_RDP: dict[str, np.ndarray] = {}
_RDP_NEW: set[str] = set()


def _event_key(event: Any) -> str:
    return json.dumps(event.to_dict(), sort_keys=True)


def _event_rdp(event: Any) -> np.ndarray:
    """The RDP curve of one event at :data:`DEFAULT_ORDERS`, cached (see :data:`_RDP`)."""
    from dpgnn_core.privacy.accountants import RdpAccountant

    key = _event_key(event)
    out = _RDP.get(key)
    if out is None:
        out = RdpAccountant(_ORDERS).event_rdp(event)
        out.setflags(write=False)
        _RDP[key] = out
        _RDP_NEW.add(key)
    return out


def _compose_relation(entries: Sequence[LedgerEntry], delta: float) -> tuple[float, str]:
    """ε of the composition of ``entries`` (one unit, one relation) at ``delta``: the
    smaller of RDP's and (where every event has one) PLD's; both are upper bounds."""
    from dpgnn_core.privacy.accountants import PldAccountant, RdpAccountant
    from dpgnn_core.privacy.rdp import epsilon_from_rdp

    ledger = Ledger(tuple(entries))
    RdpAccountant().validate(ledger)
    rdp = np.sum([_event_rdp(e.event) for e in entries], axis=0)
    eps = epsilon_from_rdp(_ORDERS, rdp, delta)[0]
    how = "RDP"
    pld = math.inf
    if len(entries) <= PLD_MAX_EVENTS:  # PLD convolutions grow with every event
        try:
            pld = PldAccountant().epsilon(ledger, delta)
        except PrivacyError:  # an event without a PLD (sampling without replacement)
            pass
    if pld < eps:
        eps, how = pld, "PLD"
    return eps, how


def _add_remove_as_replace(entries: Sequence[LedgerEntry], delta: float) -> float:
    """ε' such that the add/remove ledger is (ε', ``delta``)-DP under replace-one: the
    smallest x on a bisection with δ_a(x)(1 + e^x) <= ``delta``, then ε' = 2x (group
    privacy of two add/remove steps). The returned value is checked, so it is sound even
    where δ_a(x)(1 + e^x) is not monotone."""
    from dpgnn_core.privacy.accountants import RdpAccountant

    acct = RdpAccountant()
    rdp = acct.rdp(Ledger(tuple(entries)))
    lo, hi = 0.0, 1.0
    while _group_privacy_delta(rdp, acct.orders, hi) > delta:
        hi *= 2.0
        if hi > 1e6:
            return math.inf
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        if _group_privacy_delta(rdp, acct.orders, mid) <= delta:
            hi = mid
        else:
            lo = mid
    assert _group_privacy_delta(rdp, acct.orders, hi) <= delta
    return 2.0 * hi


def compose(charges: Sequence[Charge], delta: float) -> dict[str, UnitSpent]:
    """Cumulative ε per protection unit of ``charges`` at ``delta`` (see the module
    docstring for the rules).

    Args:
        charges (sequence of Charge): the recorded releases.
        delta (float): δ of the cumulative guarantee of each unit.

    Returns:
        dict: unit -> :class:`UnitSpent` (units with no event are absent).
    """
    if not 0 < delta < 1:
        raise PrivacyError(f"delta must lie in (0, 1), got {delta!r}")
    by_unit: dict[str, dict[str, list[LedgerEntry]]] = {}
    fixed: dict[str, list[tuple[float, float, str]]] = {}
    for c in charges:
        if c.fixed is not None:
            eps, d, unit, rel = c.fixed
            fixed.setdefault(unit, []).append((eps, d, rel))
            by_unit.setdefault(unit, {})
            continue
        for entry in (c.ledger or Ledger()).entries:
            ev = entry.event
            by_unit.setdefault(ev.level, {}).setdefault(ev.relation, []).append(entry)
    out: dict[str, UnitSpent] = {}
    for unit in sorted(by_unit, key=lambda u: UNITS.index(u) if u in UNITS else 99):
        groups = by_unit[unit]
        rels = set(groups) | {r for _, _, r in fixed.get(unit, [])}
        mixed = len(rels) > 1
        f_eps = f_delta = 0.0
        for eps, d, rel in fixed.get(unit, []):
            if mixed and rel == "add_remove" and math.isfinite(eps):  # group privacy:
                # replace = remove + add (an infinite charge stays infinite)
                eps, d = 2.0 * eps, (1.0 + math.exp(eps)) * d
            f_eps, f_delta = f_eps + eps, f_delta + d
        left = delta - f_delta
        if groups and left <= 0:
            out[unit] = UnitSpent(unit, math.inf, delta, tuple(sorted(rels)),
                                  "fixed charges use up δ")
            continue
        eps_total, hows = f_eps, []
        if fixed.get(unit):
            hows.append(f"{len(fixed[unit])} fixed (ε, δ) charge(s) by basic composition")
        if len(groups) == 1:
            ((rel, entries),) = groups.items()
            e, how = _compose_relation(entries, left)
            eps_total += e
            hows.append(f"{how} composition of {len(entries)} event(s)")
        elif groups:
            share = left / len(groups)
            for rel, entries in sorted(groups.items()):
                if rel == "add_remove":
                    eps_total += _add_remove_as_replace(entries, share)
                    hows.append("add/remove events as replace-one by group privacy")
                else:
                    e, how = _compose_relation(entries, share)
                    eps_total += e
                    hows.append(f"{how} composition of the replace-one events")
            hows.append("relations mixed: δ split, basic composition")
        out[unit] = UnitSpent(unit, eps_total, delta, tuple(sorted(rels)), "; ".join(hows))
    return out


# --- the store ---------------------------------------------------------------------------


_SCHEMA = """
CREATE TABLE IF NOT EXISTS datasets(
    sha256 TEXT PRIMARY KEY, budget_id TEXT NOT NULL, name TEXT, path TEXT,
    first_seen TEXT);
CREATE TABLE IF NOT EXISTS budgets(
    budget_id TEXT PRIMARY KEY, name TEXT, epsilon REAL, delta REAL,
    epoch INTEGER NOT NULL DEFAULT 0, updated TEXT);
CREATE TABLE IF NOT EXISTS releases(
    id INTEGER PRIMARY KEY AUTOINCREMENT, budget_id TEXT NOT NULL,
    dataset_sha256 TEXT NOT NULL, epoch INTEGER NOT NULL, created TEXT, updated TEXT,
    status TEXT NOT NULL, method TEXT, run_id TEXT, release_id TEXT, ledger TEXT,
    fixed TEXT, delta REAL, epsilon REAL, owner TEXT, note TEXT, plan_key TEXT,
    covers TEXT);
CREATE TABLE IF NOT EXISTS rdp_cache(
    event TEXT PRIMARY KEY, orders INTEGER NOT NULL, rdp TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS log(
    id INTEGER PRIMARY KEY AUTOINCREMENT, budget_id TEXT, time TEXT, action TEXT,
    detail TEXT);
CREATE INDEX IF NOT EXISTS releases_budget ON releases(budget_id, epoch, status);
CREATE INDEX IF NOT EXISTS releases_release ON releases(budget_id, release_id);
"""


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def owner() -> str:
    """``host:pid`` of this process (who holds a reservation)."""
    return f"{socket.gethostname()}:{os.getpid()}"


@dataclass(frozen=True)
class Budget:
    """A dataset's budget (``epsilon`` None: none set; the odometer still records)."""

    budget_id: str
    name: str
    epsilon: float | None
    delta: float | None
    epoch: int


@dataclass(frozen=True)
class Record:
    """One row of the odometer."""

    id: int
    dataset_sha256: str
    created: str
    status: str
    method: str
    run_id: str
    release_id: str | None
    charge: Charge
    delta: float | None
    epsilon: float | None  # the release's own ε as its run reported it
    note: str
    epoch: int

    def to_dict(self) -> dict[str, Any]:
        c = self.charge
        return {"id": self.id, "dataset_sha256": self.dataset_sha256,
                "created": self.created, "status": self.status, "method": self.method,
                "run_id": self.run_id, "release_id": self.release_id,
                "units": sorted(c.units()), "epsilon": self.epsilon, "delta": self.delta,
                "ledger": c.ledger.to_dict() if c.ledger is not None else None,
                "fixed": list(c.fixed) if c.fixed is not None else None,
                "note": self.note, "epoch": self.epoch}


@dataclass
class Summary:
    """What ``dpgnn budget show`` prints for one dataset."""

    budget: Budget
    datasets: list[dict[str, Any]]
    delta: float | None
    spent: dict[str, UnitSpent]
    records: list[Record]
    log: list[dict[str, Any]] = field(default_factory=list)

    def remaining(self, unit: str) -> float | None:
        if self.budget.epsilon is None or unit not in self.spent:
            return self.budget.epsilon
        return max(self.budget.epsilon - self.spent[unit].epsilon, 0.0)

    def to_dict(self) -> dict[str, Any]:
        b = self.budget
        return {"dataset": b.name, "budget_id": b.budget_id,
                "budget": ({"epsilon": b.epsilon, "delta": b.delta}
                           if b.epsilon is not None else None),
                "delta": self.delta, "versions": self.datasets,
                "spent": {u: {"epsilon": s.epsilon, "delta": s.delta,
                              "relations": list(s.relations), "composition": s.method,
                              "remaining": self.remaining(u)}
                          for u, s in self.spent.items()},
                "records": [r.to_dict() for r in self.records], "log": self.log}


class BudgetStore:
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

    # --- the RDP curve cache (see _RDP)

    @staticmethod
    def _load_rdp(db: sqlite3.Connection) -> None:
        for r in db.execute("SELECT event, rdp FROM rdp_cache WHERE orders=?",
                            (len(_ORDERS),)):
            if r["event"] not in _RDP:
                arr = np.asarray(json.loads(r["rdp"]), dtype=float)
                arr.setflags(write=False)
                _RDP[r["event"]] = arr

    @staticmethod
    def _save_rdp(db: sqlite3.Connection) -> None:
        new = [k for k in _RDP_NEW if k in _RDP]
        db.executemany("INSERT OR IGNORE INTO rdp_cache VALUES (?,?,?)",
                       [(k, len(_ORDERS), json.dumps(_RDP[k].tolist())) for k in new])
        _RDP_NEW.difference_update(new)

    def _flush_rdp(self) -> None:
        if _RDP_NEW:
            with self._tx() as db:
                self._save_rdp(db)

    # --- datasets and budgets

    def _register(self, db: sqlite3.Connection, sha256: str, name: str,
                  path: str | None) -> str:
        row = db.execute("SELECT budget_id FROM datasets WHERE sha256=?", (sha256,)).fetchone()
        if row:
            return str(row["budget_id"])
        budget_id = sha256
        if path:  # a new version of a folder already known shares that folder's budget
            prior = db.execute("SELECT budget_id FROM datasets WHERE path=? ORDER BY "
                               "first_seen LIMIT 1", (str(path),)).fetchone()
            if prior:
                budget_id = str(prior["budget_id"])
        db.execute("INSERT INTO datasets VALUES (?,?,?,?,?)",
                   (sha256, budget_id, name, str(path) if path else None, _now()))
        db.execute("INSERT OR IGNORE INTO budgets(budget_id, name, epoch, updated) "
                   "VALUES (?,?,0,?)", (budget_id, name, _now()))
        if budget_id != sha256:
            self._log(db, budget_id, "new-version",
                      f"{name} {sha256[:12]} at {path} shares the budget of this folder")
        return budget_id

    def register(self, sha256: str, name: str, path: str | None = None) -> str:
        """Record a dataset version; returns its budget id."""
        with self._tx() as db:
            return self._register(db, sha256, name, path)

    def _log(self, db: sqlite3.Connection, budget_id: str, action: str, detail: str) -> None:
        db.execute("INSERT INTO log(budget_id, time, action, detail) VALUES (?,?,?,?)",
                   (budget_id, _now(), action, detail))

    def _budget(self, db: sqlite3.Connection, budget_id: str) -> Budget:
        r = db.execute("SELECT * FROM budgets WHERE budget_id=?", (budget_id,)).fetchone()
        if r is None:
            raise PrivacyError(f"no dataset {budget_id[:12]} in the budget store {self.path}")
        return Budget(r["budget_id"], r["name"], r["epsilon"], r["delta"], r["epoch"])

    def budget_id(self, sha256: str) -> str | None:
        with self._tx(write=False) as db:
            r = db.execute("SELECT budget_id FROM datasets WHERE sha256=?",
                           (sha256,)).fetchone()
            return str(r["budget_id"]) if r else None

    def set_budget(self, sha256: str, name: str, path: str | None, epsilon: float,
                   delta: float) -> Budget:
        """Set (or change) a dataset's budget; recorded in its log."""
        if not (epsilon > 0 and math.isfinite(epsilon)):
            raise PrivacyError(f"budget epsilon must be finite and > 0, got {epsilon!r}")
        if not 0 < delta < 1:
            raise PrivacyError(f"budget delta must lie in (0, 1), got {delta!r}")
        with self._tx() as db:
            bid = self._register(db, sha256, name, path)
            old = self._budget(db, bid)
            db.execute("UPDATE budgets SET epsilon=?, delta=?, updated=? WHERE budget_id=?",
                       (epsilon, delta, _now(), bid))
            was = (f" (was ε = {old.epsilon}, δ = {old.delta})" if old.epsilon is not None
                   else "")
            self._log(db, bid, "set", f"ε = {epsilon}, δ = {delta}{was}")
            return self._budget(db, bid)

    def reset(self, budget_id: str, reason: str = "") -> None:
        """Start a new epoch: earlier records stay stored and shown but no longer count.
        Recorded in the log (a reset does not make earlier releases private again: it
        only says the data owner accepted them)."""
        with self._tx() as db:
            b = self._budget(db, budget_id)
            db.execute("UPDATE budgets SET epoch=?, updated=? WHERE budget_id=?",
                       (b.epoch + 1, _now(), budget_id))
            self._log(db, budget_id, "reset", f"epoch {b.epoch} -> {b.epoch + 1}"
                      + (f": {reason}" if reason else ""))

    # --- records

    @staticmethod
    def _record(r: sqlite3.Row) -> Record:
        ledger = Ledger.from_dict(json.loads(r["ledger"])) if r["ledger"] else None
        fixed = tuple(json.loads(r["fixed"])) if r["fixed"] else None
        return Record(r["id"], r["dataset_sha256"], r["created"], r["status"],
                      r["method"] or "", r["run_id"] or "", r["release_id"],
                      Charge(ledger, fixed), r["delta"], r["epsilon"],
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
             json.dumps(list(charge.fixed)) if charge.fixed is not None else None,
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
        with self._tx() as db:
            bid = self._register(db, sha256, name, path)
            b = self._budget(db, bid)
            if b.epsilon is not None and b.delta is not None and charge.units():
                self._load_rdp(db)
                before = [r.charge for r in self._counted(db, bid, b.epoch)]
                spent = compose(before, b.delta)
                after = compose([*before, charge], b.delta)
                alone = compose([charge], b.delta)
                for unit in sorted(charge.units()):
                    cum = after[unit].epsilon
                    if cum > b.epsilon * (1 + TOLERANCE):
                        raise BudgetExceeded(
                            f"{b.name} ({bid[:12]})", unit,
                            spent[unit].epsilon if unit in spent else 0.0,
                            alone[unit].epsilon, cum, b.epsilon, b.delta)
            rid = self._insert(db, bid, sha256, b.epoch, charge, status="reserved",
                               method=method, run_id=run_id, release_id=None, delta=delta,
                               epsilon=epsilon, note=note, plan_key=plan_key, covers=covers)
            self._save_rdp(db)
            return rid

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

    def attach_release(self, record_id: int, release_id: str) -> None:
        """Name the release a record paid for (when it has none yet). A private
        selection's record is named by the selection, after it chose
        (:meth:`attach_selected`), never by a candidate."""
        with self._tx() as db:
            db.execute("UPDATE releases SET release_id=?, updated=? WHERE id=? AND "
                       "release_id IS NULL AND covers IS NULL",
                       (release_id, _now(), record_id))

    def attach_selected(self, record_id: int, release_id: str) -> None:
        """Name the candidate a private selection released on its record. ``updated`` is
        left as it was (when the selection was reserved): the time the selection took
        depends on its secret number of candidates."""
        with self._tx() as db:
            db.execute("UPDATE releases SET release_id=? WHERE id=? AND release_id IS NULL "
                       "AND covers IS NOT NULL", (release_id, record_id))

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
        spent = compose([r.charge for r in counted], delta) if counted and delta else {}
        self._flush_rdp()
        return Summary(b, versions, delta, spent, records, log)

    def timeline(self, budget_id: str) -> dict[str, list[tuple[str, float]]]:
        """Cumulative ε per unit after each counted release of this epoch, in order (the
        odometer over time), at the summary's δ."""
        s = self.summary(budget_id)
        counted = [r for r in s.records if r.status in COUNTED]
        out: dict[str, list[tuple[str, float]]] = {}
        if not s.delta:
            return out
        for i, r in enumerate(counted):
            now = compose([c.charge for c in counted[:i + 1]], s.delta)
            for unit in r.charge.units():
                if unit in now:
                    out.setdefault(unit, []).append((r.created, now[unit].epsilon))
        return out


def default_store_path(home: str | Path) -> Path:
    """``<home>/budget.sqlite``."""
    return Path(home) / "budget.sqlite"


__all__ = ["COUNTED", "STATUSES", "UNITS", "Budget", "BudgetExceeded", "BudgetStore",
           "Charge", "Record", "Summary", "UnitSpent", "compose", "default_store_path",
           "owner"]
