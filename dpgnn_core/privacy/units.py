"""The protected units of the privacy odometer (:mod:`.odometer`) and the conversions
between them: which unit an event's (level, relation) is a guarantee for, and at what group
size it bounds another unit (:data:`IMPLIES`; group privacy). Pure tables and lookups, no
curves; derivations: docs/privacy.md, "Privacy budget across runs (the odometer)".
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from dpgnn_core.errors import PrivacyError

if TYPE_CHECKING:
    from dpgnn_core.privacy.odometer import Charge

#: Protected units, in the order they are shown. ``node_row`` is DP-GNN's ``--level node``
#: relation (replace one node's features, label and its own out-edge row); ``node`` is the
#: add/remove of a node with all its edges (GAP-NDP, ProGAP-NDP, DP-MLP).
UNITS = ("edge", "node", "node_row", "node_feature", "graph", "record")
UNIT_WORDS = {"edge": "edge", "node": "node with its edges",
              "node_row": "node features, label and out-edge row",
              "node_feature": "node features and labels", "graph": "graph",
              "record": "record"}
#: The relation each unit's guarantee is stated under.
CANONICAL = {"edge": "add_remove", "node": "add_remove", "node_row": "replace",
             "node_feature": "replace", "graph": "add_remove", "record": "add_remove"}
#: Units that describe the same kind of dataset (a budget bounds one family).
FAMILIES = {"node_data": ("edge", "node", "node_row", "node_feature"),
            "graph_data": ("graph",), "record_data": ("record",)}
#: source unit -> {implied unit: group size}: an (ε, δ) guarantee for the source unit's
#: neighbours gives one for the implied unit's neighbours at that group size (two implied
#: neighbours are at most that many source neighbours apart). Derived in docs/privacy.md;
#: any pair not listed implies nothing (∞).
IMPLIES: dict[str, dict[str, int]] = {
    "node": {"node": 1, "node_feature": 2, "node_row": 2, "edge": 2},
    "node_row": {"node_row": 1, "node_feature": 1, "edge": 2},
    "node_feature": {"node_feature": 1},
    "edge": {"edge": 1},
    "graph": {"graph": 1},
    "record": {"record": 1},
}


def source_unit(level: str, relation: str) -> tuple[str, int]:
    """The unit an event at ``level`` under ``relation`` is a guarantee for, and the group
    size at which it is one (2: add/remove read as replace-one; 0: no guarantee).

    A node-level replace-one event is DP-GNN's ``--level node`` (the node's out-edge row,
    not its in-edges): unit ``node_row``, never ``node``.
    """
    if level == "node":
        return ("node" if relation == "add_remove" else "node_row"), 1
    if level == "k_neighbor":
        # DPDGC's k-neighbour relation (one node's record and/or up to k >= 1 of its
        # edges, added or removed) contains every edge neighbour: its guarantee is read as
        # an edge guarantee at group size 1. Conservative: the odometer keeps no
        # k-neighbour unit (the events do not carry k as a field, and releases at
        # different k do not compose at one k) and drops the node-feature bound it also
        # gives at group size 2 (docs/privacy.md, "DPDGC's composition").
        return "edge", (1 if relation == "add_remove" else 0)
    if level not in CANONICAL:
        raise PrivacyError(f"unknown protection level {level!r}; known: {UNITS}")
    if relation == CANONICAL[level]:
        return level, 1
    # add/remove -> replace-one: a replacement is a removal then an addition (group 2);
    # replace-one -> add/remove: not derivable (an addition changes the size)
    return level, (2 if relation == "add_remove" else 0)


def group_size(level: str, relation: str, unit: str) -> int:
    """Group size at which an event at (``level``, ``relation``) bounds ``unit``; 0 when it
    bounds nothing about it (∞)."""
    src, g = source_unit(level, relation)
    h = IMPLIES.get(src, {}).get(unit, 0)
    return g * h


def shown_units(charges: Sequence[Charge]) -> tuple[str, ...]:
    """Every unit of the kind(s) of dataset the charges are stated for
    (:data:`FAMILIES`): one line each in ``budget show``."""
    stated = {u for c in charges for u in c.units()}
    fams = {f for u in stated for f, us in FAMILIES.items() if u in us}
    return tuple(u for u in UNITS if any(u in FAMILIES[f] for f in fams))


def protected_units(charges: Sequence[Charge], units: Sequence[str] | None = None
                    ) -> tuple[str, ...]:
    """The units a budget protects: ``units`` if the budget names them, else the units the
    *first* counted charge (in record order) is stated at. The first release of an epoch
    is chosen before any output of the epoch is seen, so this choice is not adaptive;
    every later release must bound each of these units."""
    if units is not None:
        return tuple(units)
    for c in charges:
        if c.units():
            return tuple(u for u in UNITS if u in c.units())
    return ()


def family_of(units: Iterable[str]) -> str:
    fams = {f for u in units for f, us in FAMILIES.items() if u in us}
    if len(fams) != 1:
        raise PrivacyError(f"units {sorted(units)} belong to {len(fams)} kinds of dataset")
    return fams.pop()


__all__ = ["CANONICAL", "FAMILIES", "IMPLIES", "UNITS", "UNIT_WORDS", "family_of",
           "group_size", "protected_units", "shown_units", "source_unit"]
