"""The staged runners are a mapping from the catalogue's ``staged`` name (flows/staged.py)."""

from __future__ import annotations

from dpgnn_core.methods.catalog import CATALOG
from flows.staged import STAGED_RUNNERS
from tasks import gap, progap


def test_every_staged_name_in_the_catalogue_has_its_runner() -> None:
    staged = {e.staged for e in CATALOG.values() if e.staged is not None}
    assert staged == set(STAGED_RUNNERS) == {"gap", "progap"}
    assert STAGED_RUNNERS["gap"] is gap.run_stages
    assert STAGED_RUNNERS["progap"] is progap.run_stages
