"""The sensitivity contract, run on every registered private family: each declares the L2
sensitivity of every noisy quantity it releases and a brute force over neighbouring
datasets (:class:`~dpgnn_core.privacy.sensitivity.SensitivityCheck`); the brute force
never sees a change above the declared bound, and reaches it where a worst case is known.
A private family without a check is refused, and so is one whose bound is halved."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest

from dpgnn_core.methods import catalog, dp_mlp, registry
from dpgnn_core.methods.registry import METHODS, Method, check_sensitivity
from dpgnn_core.privacy import PrivacyError
from dpgnn_core.privacy.sensitivity import Case, SensitivityCheck, verify


def private_families() -> dict[str, Method]:
    """One registered method per family that has a private name (its checks are the
    family's: every name of a family registers the same ones)."""
    out: dict[str, Method] = {}
    for name in sorted(METHODS):
        m = METHODS[name]
        if m.private:
            out.setdefault(m.family, m)
    return out


#: Checks whose brute force knows no input that attains the bound (it is reached only in
#: the limit): they must still never see a change above it, and their family must still
#: refuse a halved bound through another check. Adding one is a reviewed decision.
NO_KNOWN_WORST_CASE = {"DPDGC's adjacency encoder: one step's clipped gradient sum (edge, "
                       "node within D, k-neighbour)"}


def test_every_name_of_a_family_shares_its_checks() -> None:
    for name, m in METHODS.items():
        assert m.sensitivity == private_families().get(m.family, m).sensitivity, name


@pytest.mark.parametrize("family", sorted(private_families()))
def test_private_family_sensitivity_holds(family: str) -> None:
    """The family's brute force runs, sees no change above the declared sensitivity, and
    meets it on the known worst cases."""
    m = private_families()[family]
    checked = check_sensitivity(m)
    assert m.sensitivity and list(checked) == [c.released for c in m.sensitivity]
    for released, cases in checked.items():
        assert cases and all(case.observed <= bound * (1 + 1e-4) for case, bound in cases)
        # a worst case is known: a too-loose bound is caught too
        assert any(case.tight for case, _ in cases) != (released in NO_KNOWN_WORST_CASE), \
            released


def _scaled(check: SensitivityCheck, factor: float) -> SensitivityCheck:
    def bound(**args: object) -> float:
        return factor * check.sensitivity(**args)
    return dataclasses.replace(check, sensitivity=bound)


@pytest.mark.parametrize("family", sorted(private_families()))
def test_a_halved_bound_is_refused(family: str) -> None:
    """A copy of the family whose every declared sensitivity is halved fails its check
    (the brute force reaches beyond half of each bound); doubled, it is refused as looser
    than the known worst case."""
    m = private_families()[family]
    for check in m.sensitivity:
        if check.released in NO_KNOWN_WORST_CASE:
            continue
        with pytest.raises(PrivacyError, match="is below the change"):
            verify(_scaled(check, 0.5))
        with pytest.raises(PrivacyError, match="looser than the known worst case"):
            verify(_scaled(check, 2.0))
    halved = dataclasses.replace(m, sensitivity=tuple(_scaled(c, 0.5) for c in m.sensitivity))
    with pytest.raises(PrivacyError, match="is below the change"):
        check_sensitivity(halved)


@pytest.fixture
def throwaway() -> Iterator[str]:
    """A private family ``throwaway`` in the catalogue and the registry (DP-MLP's entry,
    spec and implementation) without a sensitivity check; taken out afterwards."""
    e = dataclasses.replace(catalog.CATALOG["dp-mlp"], family="throwaway")
    catalog._CATALOG["dp-throwaway"] = e
    try:
        impl = dataclasses.replace(dp_mlp.IMPLEMENTATION, sensitivity=())
        registry._REGISTRY["dp-throwaway"] = Method.of(e, impl)
        yield "dp-throwaway"
    finally:
        catalog._CATALOG.pop("dp-throwaway", None)
        registry._REGISTRY.pop("dp-throwaway", None)


def test_a_private_family_without_a_check_is_refused(throwaway: str) -> None:
    """The contract's parametrisation picks the new family up, and its check refuses it."""
    assert "throwaway" in private_families()
    with pytest.raises(PrivacyError, match="declares no sensitivity check"):
        check_sensitivity(registry.get(throwaway))


def test_verify_needs_a_case() -> None:
    empty = SensitivityCheck("nothing", lambda: 1.0, lambda: iter(()))
    with pytest.raises(PrivacyError, match="checked no case"):
        verify(empty)
    one = SensitivityCheck("one", lambda: 1.0, lambda: iter([Case("c", {}, 1.0, True)]))
    assert [b for _, b in verify(one)] == [1.0]
