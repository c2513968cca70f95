"""Where a run's privacy-relevant randomness comes from.

The proofs behind every reported ε assume that the noise and the sampling (batches,
Poisson rows, subgraph and edge sampling, walks, PMA noise) are secret: an adversary who can
recompute them from the stored artifacts subtracts the noise and the guarantee is void.
So these draws never come from ``spec.seed`` (which is stored in ``model.pt`` and the
manifests). :class:`Randomness` hands out generators for them:

* **secret** (the default): every generator is seeded with fresh bits from the operating
  system's CSPRNG (:mod:`secrets`, i.e. ``getrandom``/``/dev/urandom``): 64 bits for a
  torch generator (the most ``manual_seed`` takes), 128 bits for numpy's PCG64. The seeds
  live only in memory and are never written, logged or returned.
* **insecure reproducible** (``--insecure-reproducible-noise``): generators derived from
  the spec seed and a stream name, for research reproducibility only. The run is then not
  private against anyone who can read its spec, and its report and MLflow tags say so.

Why not a CSPRNG for every draw: torch and numpy sample Gaussians from their own bit
generators (MT19937 / Philox / PCG64) and nothing in them accepts an external stream; a
fresh OS-entropy seed per generator per run, never stored, is what the field's libraries do
(Opacus's ``secure_mode`` seeds torch's generator from OS entropy the same way, and additionally
sums two Gaussians against floating-point attacks, which dpgnn does not do: see
docs/privacy.md).

Seeds stay for what needs no secrecy: initialisation, dropout and data splits.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

#: Report text of the two modes.
SECRET_SOURCE = ("secret: seeded from the operating system's CSPRNG for this run, never "
                 "stored or logged")
INSECURE_SOURCE = ("NOT PRIVATE: noise and sampling are reproducible from the stored seed "
                   "(--insecure-reproducible-noise); anyone who can read the spec can "
                   "recompute them, so the reported epsilon does not hold")


@dataclass(frozen=True)
class Randomness:
    """A source of privacy-relevant randomness for one run.

    Args:
        reproducible_seed (int, optional): :obj:`None` (the default) draws every generator
            from OS entropy; an integer derives them from it (insecure, for research
            reproducibility only).
    """

    reproducible_seed: int | None = None

    @classmethod
    def secret(cls) -> Randomness:
        return cls(None)

    @classmethod
    def for_spec(cls, spec: Any) -> Randomness:
        """Secret unless ``spec.insecure_reproducible_noise`` is set, or the spec is not
        private at all (``epsilon`` is None: a non-private run has no proof to protect, so
        its batches follow ``spec.seed`` and it reproduces exactly)."""
        if getattr(spec, "insecure_reproducible_noise", False) or (
                hasattr(spec, "epsilon") and spec.epsilon is None):
            return cls(int(spec.seed))
        return cls(None)

    @property
    def secure(self) -> bool:
        return self.reproducible_seed is None

    def _derived(self, stream: str, bits: int) -> int:
        digest = hashlib.sha256(f"{self.reproducible_seed}/{stream}".encode()).digest()
        return int.from_bytes(digest, "big") >> (256 - bits)

    def _seed(self, stream: str, bits: int) -> int:
        if self.reproducible_seed is None:
            return secrets.randbits(bits)
        return self._derived(stream, bits)

    def torch_generator(self, stream: str, device: torch.device | str = "cpu"
                        ) -> torch.Generator:
        """A fresh ``torch.Generator`` on ``device`` for ``stream`` (e.g. ``"noise"``)."""
        gen = torch.Generator(device=device)
        gen.manual_seed(self._seed(stream, 64))
        return gen

    def numpy_generator(self, stream: str) -> np.random.Generator:
        """A fresh ``numpy.random.Generator`` (PCG64, 128-bit seed) for ``stream``."""
        return np.random.default_rng(self._seed(stream, 128))

    def describe(self) -> dict[str, Any]:
        """What the privacy report says about the source."""
        if self.secure:
            return {"randomness": SECRET_SOURCE, "insecure_reproducible_noise": False}
        return {"randomness": INSECURE_SOURCE, "insecure_reproducible_noise": True}
