"""The noisy validation score of private selection's candidates
(:mod:`dpgnn_core.sweep_tuning`): the count of correct validation predictions plus Gaussian
noise, its planned noise and event, and the note for methods whose score sensitivity is not
bounded. Derivation: docs/privacy.md, "The selection score's sensitivity"."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dpgnn_core.privacy.accountants import RdpAccountant
from dpgnn_core.privacy.calibrate import calibrate_noise
from dpgnn_core.privacy.events import GaussianEvent, Ledger, PrivacyError
from dpgnn_core.privacy.randomness import Randomness

#: What the selection reads without noise, for a method with no score sensitivity bound.
SCORE_NOTE = ("private selection score: each candidate's validation accuracy is computed "
              "without noise and is in no candidate's ledger: this method predicts on the "
              "full private graph, where one node's features reach the validation "
              "predictions of every node within r hops, so no sensitivity of the score is "
              "claimed; the tuning bound assumes the score is part of each candidate's "
              "private output (docs/privacy.md, \"The selection score's sensitivity\")")

#: The score event's description (it is in every candidate's ledger).
SCORE_EVENT = "private selection score: noisy count of correct validation predictions"


@dataclass(frozen=True)
class ScorePlan:
    """The noisy validation score each candidate releases: the number of validation
    records its model predicts correctly plus Gaussian noise of std ``noise_multiplier`` ·
    ``sensitivity``, one Gaussian event at the training ledger's unit and relation.

    Attributes:
        sensitivity (float): Δ, the score's L2 sensitivity for a fixed model
            (:attr:`~dpgnn_core.methods.registry.Method.score_sensitivity`).
        noise_multiplier (float): z_s = σ / Δ.
        level (str): the unit (the training ledger's).
        relation (str): the relation (the training ledger's).
        share (float): the part of the target ε the score alone would spend (RDP, at δ);
            it fixed z_s.
    """

    sensitivity: float
    noise_multiplier: float
    level: str
    relation: str
    share: float

    def event(self) -> GaussianEvent:
        return GaussianEvent(noise_multiplier=self.noise_multiplier, count=1,
                             level=self.level, relation=self.relation,  # type: ignore[arg-type]
                             description=SCORE_EVENT)

    def ledger(self) -> Ledger:
        return Ledger().add(self.event())

    @property
    def noise_std(self) -> float:
        return self.noise_multiplier * self.sensitivity


def noisy_count(correct: int, score: ScorePlan, generator: Any | None = None
                ) -> tuple[float, GaussianEvent]:
    """Release ``correct`` (the number of validation records predicted correctly) with
    Gaussian noise of std z_s·Δ: the Gaussian mechanism, whose event is returned with it.

    .. math::
        \\tilde{c} = c + \\mathcal{N}(0, (z_s \\Delta)^2)

    Args:
        correct (int): the exact count (private).
        score (ScorePlan): Δ and z_s.
        generator (torch.Generator, optional): the noise source; default a fresh secret
            one (:class:`~dpgnn_core.privacy.randomness.Randomness`, OS entropy, never
            stored). Pass one only in tests.
    """
    import torch

    if int(correct) != correct or correct < 0:
        raise PrivacyError(f"a count of correct predictions must be a non-negative integer, "
                           f"got {correct!r}")
    gen = generator if generator is not None else Randomness.secret().torch_generator(
        "score")
    noise = torch.normal(0.0, score.noise_std, size=(1,), generator=gen,
                         dtype=torch.float64)
    return float(correct) + float(noise.item()), score.event()


def correct_count(accuracy: float, n: int) -> int:
    """The number of correct predictions behind an accuracy over ``n`` records (exact:
    accuracy is that count divided by n).

    Raises:
        PrivacyError: ``accuracy · n`` is not an integer (not an accuracy over n records).
    """
    c = round(accuracy * n)
    if not (0 <= c <= n and abs(accuracy * n - c) < 1e-6):
        raise PrivacyError(f"validation accuracy {accuracy!r} is not a count over {n} "
                           "validation records")
    return int(c)


def score_plan(method: Any, training: Ledger, target_epsilon: float, delta: float,
               share: float) -> ScorePlan | None:
    """The score's noise: z_s with the score alone at ``share`` · target (RDP, at δ), at
    the unit and relation of the training ledger ``training``; None when ``method`` claims
    no score sensitivity.

    Raises:
        PrivacyError: ``share`` outside (0, 1), or a training ledger mixing units or
            relations.
    """
    sens = getattr(method, "score_sensitivity", None)
    if sens is None:
        return None
    if not 0.0 < share < 1.0:
        raise PrivacyError(f"score_share must lie in (0, 1), got {share!r}")
    units = {(e.level, e.relation) for e in training.events}
    if len(units) != 1:
        raise PrivacyError(f"{method.name}: a training ledger at one unit and relation is "
                           f"needed for the score, got {sorted(units)}")
    ((level, relation),) = units

    def gaussian(z: float) -> Ledger:
        return ScorePlan(float(sens), z, level, relation, share).ledger()

    z = calibrate_noise(gaussian, share * target_epsilon, delta, RdpAccountant()
                        ).noise_multiplier
    return ScorePlan(float(sens), z, level, relation, share)
