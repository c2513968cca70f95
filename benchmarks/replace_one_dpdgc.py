"""DPDGC-FDP's defaults under replace-one (benchmarks/RESULTS.md, "Node-feature level").

DPDGC-FDP states ε for adding or removing one node's features and label; DP-GCN and DRW
state it for replacing one. For DPDGC-FDP's planned ledger at each add/remove target ε
(defaults: label messages, one released hop, the full-batch DP-Adam classifier), this
prints two replace-one figures at the same δ:

* ``odometer``: what ``dpgnn budget`` charges a ``node_feature`` budget for the run
  (:func:`dpgnn_core.privacy.odometer.compose`: group privacy at group size 2, i.e. every
  Gaussian event's sensitivity doubled; sound and conservative);
* ``direct``: the replacement's own sensitivities, with the project's accountant: the
  label hop's rows change by e_b - e_a (√2 times the add/remove sensitivity, not 2) and
  the full-batch classifier's clipped gradient sum by at most 2C (exactly the group-2
  figure at sampling rate 1). Not what the odometer charges.

Run: ``python benchmarks/replace_one_dpdgc.py [N_TRAIN]`` (default 2033, Cora's 75 %
split as ``benchmarks/sweeps/labels-cora.toml`` ingests it).
"""

from __future__ import annotations

import dataclasses
import math
import sys

from dpgnn_core.methods import dpdgc
from dpgnn_core.privacy import calibrate_noise, make_accountant
from dpgnn_core.privacy.events import GaussianEvent, Ledger, PoissonGaussianEvent
from dpgnn_core.privacy.odometer import Charge, compose
from dpgnn_core.specs import DpdgcSpec


def direct_replace_one(ledger: Ledger) -> Ledger:
    """``ledger`` with each event's noise multiplier divided by its replace-one
    sensitivity factor (√2 for a label hop; 2 for the classifier at sampling rate 1)."""
    out = Ledger()
    for entry in ledger.entries:
        ev = entry.event
        if isinstance(ev, PoissonGaussianEvent) and ev.sampling_rate < 1.0:
            raise ValueError("a subsampled classifier: no direct replace-one figure here")
        factor = math.sqrt(2.0) if isinstance(ev, GaussianEvent) else 2.0
        out = out.add(dataclasses.replace(ev, noise_multiplier=ev.noise_multiplier / factor),
                      sampler_scheme=entry.sampler_scheme)
    return out


def main(n_train: int = 2033) -> None:
    """Print add/remove ε, the odometer's replace-one ε and the direct one."""
    print("| add/remove ε | replace-one ε, odometer (charged) | replace-one ε, direct |")
    print("|---|---|---|")
    for eps in (1.0, 2.0, 4.0, 8.0):
        spec = DpdgcSpec(method="dpdgc-fdp", epsilon=eps)
        delta = 1.0 / (10 * n_train)
        make = dpdgc.ledger_for(spec, n_train)
        accountant = make_accountant(spec.accountant)
        cal = calibrate_noise(make, eps, delta, accountant, max_noise=1e3)
        planned = make(cal.noise_multiplier)
        odometer = compose([Charge(ledger=planned)], delta, units=["node_feature"])
        direct = accountant.epsilon(direct_replace_one(planned), delta)
        print(f"| {cal.epsilon:.4g} | {odometer['node_feature'].epsilon:.3g} | "
              f"{direct:.3g} |")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 2033)
