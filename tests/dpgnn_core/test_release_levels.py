"""What the pre-flight knows of a run's release before anything is calibrated
(:func:`dpgnn_core.methods.preflight.release_levels`) is what its plan holds: for every
private name of the catalogue, the (level, relation) pairs equal those of the events of
the method's planned ledger, so the budget's unit check before Prefect cannot drift from
what the odometer is later charged."""

from __future__ import annotations

from typing import Any

import pytest

from dpgnn_core.methods.catalog import CATALOG
from dpgnn_core.methods.preflight import release_levels

#: Options some names need before they can plan (a degree bound, the k of k-neighbour).
_OPTIONS: dict[str, dict[str, Any]] = {
    "gap-ndp": {"max_degree": 5}, "progap-ndp": {"max_degree": 5},
    "dpdgc-ndp": {"max_degree": 5}, "dpdgc-kndp": {"k": 2},
}


@pytest.mark.parametrize("name", sorted(n for n, e in CATALOG.items() if e.private))
def test_release_levels_are_the_planned_ledgers(name: str) -> None:
    from dpgnn_core.methods.registry import get

    method = get(name)
    opts = {"epsilon": 2.0, **_OPTIONS.get(name, {})}
    if "max_degree" in method.options() and "max_degree" not in opts:
        opts["max_degree"] = 5  # DP-GNN and DRW plan with K given
    spec = method.spec(**opts)
    planned = method.ledger_for(spec, 100)(1.0)
    assert planned.events, name
    assert set(release_levels(spec)) == {(e.level, e.relation) for e in planned.events}


@pytest.mark.parametrize("name", sorted(n for n, e in CATALOG.items() if not e.private))
def test_a_non_private_name_releases_at_no_level(name: str) -> None:
    from dpgnn_core.methods.registry import get

    assert release_levels(get(name).spec()) == ()
