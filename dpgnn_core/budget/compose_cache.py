"""The budget store's cache of post hoc compositions (issue 52 §7): ε per unit of a fixed
sequence of releases (:func:`dpgnn_core.privacy.odometer.compose`) is a function of the
releases, δ and the units alone, so :meth:`BudgetStore.summary` keeps each result in the
store's ``compose_cache`` table (created with the store), keyed on them and on the
accounting code. A rerun whose odometer reading has not changed (a cached run, ``budget
show`` twice) reads it back instead of composing again, which would import dp-accounting
and scipy.stats (about 1 s of CPU) and run PLD. A key names the source of dpgnn's
accounting modules and the installed dp-accounting, so any change to either composes
afresh. A budget refusal's figures (ε spent, requested, cumulative:
:meth:`BudgetStore._exceeded`) are read and kept here too, so the same refused command
again composes nothing. Admission (the privacy filter) never reads this cache."""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dpgnn_core.privacy.odometer import Charge, UnitSpent, compose

#: dpgnn's modules whose code the composition runs.
ACCOUNTING_MODULES = ("odometer", "rdp", "pld", "pld_library", "accountants", "events",
                      "units")


@functools.cache
def accounting_version() -> str:
    """sha256 over the accounting modules' source and the installed dp-accounting's
    distribution name (its version), without importing it."""
    h = hashlib.sha256()
    here = Path(__file__).resolve().parent.parent / "privacy"
    for name in ACCOUNTING_MODULES:
        h.update(name.encode())
        h.update((here / f"{name}.py").read_bytes())
    spec = importlib.util.find_spec("dp_accounting")
    if spec is not None and spec.origin is not None:
        site = Path(spec.origin).resolve().parent.parent
        h.update(" ".join(sorted(p.name for p in site.glob("dp_accounting-*"))).encode())
    return h.hexdigest()


def _charge_key(c: Charge) -> Any:
    return [c.ledger.to_dict() if c.ledger is not None else None,
            list(c.fixed) if c.fixed is not None else None,
            c.curve.to_dict() if c.curve is not None else None]


def cache_key(charges: Sequence[Charge], delta: float, units: Sequence[str]) -> str:
    """The key of one composition."""
    material = [accounting_version(), [_charge_key(c) for c in charges], float(delta),
                list(units)]
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()


def _to_json(spent: dict[str, UnitSpent]) -> str:
    return json.dumps({u: [s.unit, s.epsilon, s.delta, list(s.relations), s.method,
                           list(s.unbounded)] for u, s in spent.items()})


def _from_json(text: str) -> dict[str, UnitSpent]:
    return {u: UnitSpent(v[0], float(v[1]), float(v[2]), tuple(v[3]), v[4], tuple(v[5]))
            for u, v in json.loads(text).items()}


def cached_compose(path: Path, timeout: float, charges: Sequence[Charge], delta: float,
                   units: Sequence[str]) -> dict[str, UnitSpent]:
    """:func:`compose` of ``charges`` at ``delta`` for ``units``, read from the store at
    ``path`` when it holds this composition, else composed and written there (a failed
    read or write composes, and loses nothing but the time)."""
    key = cache_key(charges, delta, units)
    try:
        db = sqlite3.connect(path, timeout=timeout)
        try:
            row = db.execute("SELECT spent FROM compose_cache WHERE key=?", (key,)).fetchone()
        finally:
            db.close()
        if row is not None:
            return _from_json(row[0])
    except (sqlite3.Error, ValueError, KeyError, IndexError, TypeError):
        pass
    spent = compose(charges, delta, units)
    try:
        db = sqlite3.connect(path, timeout=timeout)
        try:
            with db:
                db.execute("INSERT OR IGNORE INTO compose_cache VALUES (?,?)",
                           (key, _to_json(spent)))
        finally:
            db.close()
    except sqlite3.Error:
        pass
    return spent
