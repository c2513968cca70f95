"""The method catalogue: every method's name and what callers need to know about it, in one
place, without importing torch.

The CLI (``--help`` answers in a fraction of a second), sweeps, the pre-flight and the flows
read this table; :mod:`dpgnn_core.methods.registry` builds the trainable
:class:`~dpgnn_core.methods.registry.Method` of each entry from the ``IMPLEMENTATION`` of the
module the entry names.

Each entry is a typed :class:`~dpgnn_core.specs.entry.Entry`, written beside its family's
spec (the spec module's ``ENTRIES``); the catalogue is the explicit list
:data:`dpgnn_core.specs.CATALOGUE` of them, in order, so what it holds never depends on which
module happened to be imported first. A method defined outside dpgnn joins it by
:func:`add` (docs/adding-a-method.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from dpgnn_core.specs import CATALOGUE as SHIPPED
from dpgnn_core.specs.entry import Canary, Check, Entry

_CATALOG: dict[str, Entry] = {}
#: Read-only view: CLI name -> entry.
CATALOG: Mapping[str, Entry] = MappingProxyType(_CATALOG)


def add(*entries: Entry) -> None:
    """Add the entries of a family defined outside :data:`dpgnn_core.specs.CATALOGUE` (a
    method of another package): its names then resolve in the catalogue and the registry.

    Raises:
        ValueError: a name is in the catalogue already.
    """
    taken = sorted(e.name for e in entries if e.name in _CATALOG)
    if taken or len({e.name for e in entries}) < len(entries):
        raise ValueError(f"methods {taken or [e.name for e in entries]} are in the catalogue "
                         "already")
    _CATALOG.update((e.name, e) for e in entries)


add(*SHIPPED)


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


__all__ = ["CATALOG", "Canary", "Check", "Entry", "add", "entry", "is_private", "spec_types"]
