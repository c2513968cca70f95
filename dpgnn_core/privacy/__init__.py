"""Privacy accounting: events, ledger, RDP and PLD accountants, calibration.

Layers (as in Opacus): pure functions of numbers (:mod:`.rdp`, :mod:`.pld`), accountant
classes that compose a :class:`Ledger` (:mod:`.accountants`), and the small facade below.
No module here imports a model or an optimizer.
"""

from dpgnn_core.privacy.accountants import (
    Accountant,
    PldAccountant,
    RdpAccountant,
    make_accountant,
)
from dpgnn_core.privacy.calibrate import Calibration, calibrate_noise, max_steps
from dpgnn_core.privacy.events import (
    DpgnnEvent,
    GaussianEvent,
    Ledger,
    PoissonGaussianEvent,
    PrivacyError,
    PrivacyEvent,
    UniformGaussianEvent,
    dp_sgd_noise_multiplier,
    drw_sampling_rate,
    neighbourhood_size,
)
from dpgnn_core.privacy.report import PrivacyReport


def epsilon(ledger: Ledger, delta: float, accountant: str = "rdp") -> float:
    """ε of ``ledger`` at ``delta``."""
    return make_accountant(accountant).epsilon(ledger, delta)


def delta(ledger: Ledger, epsilon: float, accountant: str = "rdp") -> float:
    """δ of ``ledger`` at ``epsilon``."""
    return make_accountant(accountant).delta(ledger, epsilon)


__all__ = [
    "Accountant", "Calibration", "DpgnnEvent", "GaussianEvent", "Ledger", "PldAccountant",
    "PoissonGaussianEvent", "PrivacyError", "PrivacyEvent", "PrivacyReport", "RdpAccountant",
    "UniformGaussianEvent", "calibrate_noise", "delta", "dp_sgd_noise_multiplier",
    "drw_sampling_rate", "epsilon", "make_accountant", "max_steps", "neighbourhood_size",
]
