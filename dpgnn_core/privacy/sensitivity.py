"""A private family's declared sensitivities and the brute force that checks them.

Every noisy quantity a private method releases has an L2 sensitivity under the family's
neighbouring relation and protection level (DP-SGD's clipped gradient sum over rows: C;
PMA's hop: :func:`~dpgnn_core.privacy.pma.sensitivity`; ...). The noise is calibrated to
that number, so a bound below the truth is a silent privacy failure that no ledger check
sees. A private family therefore declares, in its implementation, one
:class:`SensitivityCheck` per released quantity: the declared sensitivity function and a
brute force that computes the quantity itself, before noise, on small adversarial datasets
(stars, maximum-degree nodes, rows at the clipping bound, directed and undirected) and on
their neighbours, and reports the largest L2 change it saw (:class:`Case`).
:func:`verify` refuses a case whose change exceeds the declared bound, and one marked
``tight`` (a known worst case) whose change falls short of it, so a bound too small or too
loose is caught. The method contract test runs every registered private family's checks
(``tests/dpgnn_core/test_sensitivity_contract.py``); the derivations are in
docs/privacy.md.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from dpgnn_core.privacy.events import PrivacyError

#: Relative slack of the comparisons (float32 arithmetic in the brute force).
RTOL = 1e-4


@dataclass(frozen=True)
class Case:
    """One brute-forced input: the declared function's arguments and the largest L2 change
    of the pre-noise quantity over the neighbours visited.

    Attributes:
        what (str): the input and neighbours, one line (``"star D=4, hub removed"``).
        args (Mapping): the arguments of the declared sensitivity function for this input.
        observed (float): max over the neighbours of ``||f(D) - f(D')||_2``.
        tight (bool): the input is a known worst case: the change must reach the bound.
    """

    what: str
    args: Mapping[str, Any]
    observed: float
    tight: bool = False


@dataclass(frozen=True)
class SensitivityCheck:
    """One released quantity of a private family: its declared L2 sensitivity and the
    brute force over neighbouring datasets that checks it.

    Attributes:
        released (str): the quantity, the protected unit and the relation, one line.
        sensitivity (Callable): the declared sensitivity, a function of the case's ``args``
            (the one the family calibrates its noise with, not a copy of it).
        cases (Callable): runs the brute force: ``() -> iterable of Case``.
    """

    released: str
    sensitivity: Callable[..., float]
    cases: Callable[[], Iterable[Case]] = field(repr=False)


def verify(check: SensitivityCheck) -> list[tuple[Case, float]]:
    """Run ``check``'s brute force; return each case with its declared bound.

    Raises:
        PrivacyError: a change above the declared bound (the bound is unsound), a tight
            case below it (the bound is looser than the known worst case), or no case.
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # thousands of tiny products: threads only add start-up
    try:
        return _verify(check)
    finally:
        torch.set_num_threads(threads)


def _verify(check: SensitivityCheck) -> list[tuple[Case, float]]:
    out = []
    for case in check.cases():
        bound = float(check.sensitivity(**case.args))
        if case.observed > bound * (1 + RTOL) + 1e-9:
            raise PrivacyError(f"{check.released}: the declared sensitivity {bound:.6g} is "
                               f"below the change {case.observed:.6g} seen on {case.what}")
        if case.tight and case.observed < bound * (1 - RTOL):
            raise PrivacyError(f"{check.released}: the declared sensitivity {bound:.6g} is "
                               f"looser than the known worst case {case.observed:.6g} "
                               f"({case.what})")
        out.append((case, bound))
    if not out:
        raise PrivacyError(f"{check.released}: the brute force checked no case")
    return out


__all__ = ["Case", "SensitivityCheck", "verify"]
