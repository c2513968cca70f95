"""The privacy report: what a run's ε means, as a frozen, typed value.

Every method's fit (through :mod:`dpgnn_core.methods.registry`) returns one. The fields
every report has are typed attributes; method-specific details (clipping norms, PMA's
sensitivity, the occurrence bound, ...) are in ``details``. The report is a plain frozen
dataclass, not a mapping: read its typed attributes (``report.epsilon``), its details
(``report.details["max_degree"]``), or its JSON form (:meth:`PrivacyReport.to_dict`), which
is what tasks persist as ``report.json``; nothing downstream edits it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from dpgnn_core.privacy.events import Ledger

#: What a private run asked to log its raw loss (``log_raw_loss``) releases without noise:
#: the training loss of each step, computed on the private batch (history.json, MLflow's
#: train_loss, the progress display). No event covers it, so the report lists it as
#: unaccounted and marks the run (``unaccounted_release``; docs/privacy.md). By default a
#: private run records no training loss, and this note is absent.
TRAINING_LOSS_NOTE = ("training loss of each step on the private batch, without noise, in "
                      "the history (history.json, MLflow train_loss, progress display), "
                      "logged because log_raw_loss was set")


def with_loss_note(report: dict[str, Any], ledger: Ledger, logged: bool
                   ) -> tuple[dict[str, Any], Ledger]:
    """The report and ledger of a run, marked when it is private and ``logged`` its raw
    training loss: :data:`TRAINING_LOSS_NOTE` among their unaccounted uses (once) and the
    report's ``unaccounted_release`` listing it. Unchanged otherwise (a private run records
    no training loss by default; a non-private run has no guarantee to mark).

    Args:
        report (dict): the method's report.
        ledger (Ledger): the run's ledger.
        logged (bool): the spec's ``log_raw_loss``.
    """
    if not report.get("private") or not logged:
        return report, ledger
    if TRAINING_LOSS_NOTE not in ledger.unaccounted:
        ledger = ledger.flag(TRAINING_LOSS_NOTE)
    released = [*report.get("unaccounted_release", [])]
    if TRAINING_LOSS_NOTE not in released:
        released.append(TRAINING_LOSS_NOTE)
    return {**report, "unaccounted": list(ledger.unaccounted),
            "unaccounted_release": released}, ledger


#: Keys that are typed attributes (everything else is a detail).
_TYPED = ("method", "private", "epsilon", "delta", "accountant", "noise_multiplier", "steps",
          "level", "relation", "protects", "inference", "unaccounted", "randomness",
          "epsilon_by_step", "ledger")
#: Typed attributes that only some reports have: ``None`` when absent, and absent from the
#: JSON form then (so a report's JSON keys are what its method wrote, as before typing).
_OPTIONAL = ("release", "unaccounted_release", "warnings", "public", "scope",
             "target_epsilon", "insecure_reproducible_noise", "clips", "num_train",
             "structure_defaults")
_SEQUENCES = ("unaccounted_release", "warnings", "public", "clips")


@dataclass(frozen=True)
class PrivacyReport:
    """A run's privacy statement.

    Attributes:
        method (str): the method's name (``dp-gcn``; ``...-non-private`` for the same path
            without noise).
        private (bool): whether the run has a finite ε.
        epsilon (float): ε spent (``inf`` for non-private runs).
        delta (float, optional): δ.
        accountant (str, optional): ``rdp`` or ``pld``.
        noise_multiplier (float): the calibrated multiplier (0 without privacy).
        steps (int, optional): optimisation steps T.
        level (str, optional): the protected unit (``edge``, ``node``, ``node_feature``,
            ``graph``).
        relation (str, optional): ``add_remove`` or ``replace``.
        protects (str): what is protected, in words.
        inference (str, optional): what predictions read at inference.
        unaccounted (tuple of str): uses of private data no event covers.
        randomness (str, optional): where the noise and sampling came from.
        epsilon_by_step (tuple of (int, float)): ε spent after step t (every step with RDP,
            about 20 points with PLD; the last is ``epsilon``).
        ledger (Ledger, optional): the privacy events ε was computed from.
        release (Mapping, optional): the stored release this run made (``id``,
            ``replaces``, resume notes); set by the task that stores it.
        unaccounted_release (tuple of str, optional): what the run released outside ε
            (e.g. the raw training loss with ``log_raw_loss``).
        warnings (tuple of str, optional): cautions the method attached.
        public (tuple of str, optional): what the guarantee assumes public.
        scope (str, optional): what the guarantee covers, when narrower than the model.
        target_epsilon (float, optional): the ε the spec asked for (``epsilon`` is what
            the plan spends, at most this).
        insecure_reproducible_noise (bool, optional): the noise came from the spec's seed:
            the run is not private.
        clips (tuple of float, optional): the clipping norm of each DP-SGD phase.
        num_train (int, optional): the number of training records the plan used.
        structure_defaults (Mapping, optional): the structure options a method chose from
            the public graph statistics.
        details (Mapping): method-specific entries.

    Every optional attribute is ``None`` when the method did not set it and then absent
    from :meth:`to_dict`.
    """

    method: str
    private: bool
    epsilon: float
    delta: float | None = None
    accountant: str | None = None
    noise_multiplier: float = 0.0
    steps: int | None = None
    level: str | None = None
    relation: str | None = None
    protects: str = "nothing"
    inference: str | None = None
    unaccounted: tuple[str, ...] = ()
    randomness: str | None = None
    epsilon_by_step: tuple[tuple[int, float], ...] = ()
    ledger: Ledger | None = None
    release: Mapping[str, Any] | None = None
    unaccounted_release: tuple[str, ...] | None = None
    warnings: tuple[str, ...] | None = None
    public: tuple[str, ...] | None = None
    scope: str | None = None
    target_epsilon: float | None = None
    insecure_reproducible_noise: bool | None = None
    clips: tuple[float, ...] | None = None
    num_train: int | None = None
    structure_defaults: Mapping[str, Any] | None = None
    details: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> PrivacyReport:
        """From a method's report dict (or a stored ``report.json``)."""
        eps = d.get("epsilon")
        return cls(
            method=str(d.get("method", "?")), private=bool(d.get("private")),
            epsilon=math.inf if eps is None else float(eps), delta=d.get("delta"),
            accountant=d.get("accountant"),
            noise_multiplier=float(d.get("noise_multiplier") or 0.0), steps=d.get("steps"),
            level=d.get("level"), relation=d.get("relation"),
            protects=str(d.get("protects", "nothing")), inference=d.get("inference"),
            unaccounted=tuple(d.get("unaccounted", ())), randomness=d.get("randomness"),
            epsilon_by_step=tuple((int(t), float(e)) for t, e in d.get("epsilon_by_step", ())),
            ledger=_ledger(d.get("ledger")),
            **{k: _optional(k, d.get(k)) for k in _OPTIONAL},
            details=MappingProxyType({k: v for k, v in d.items()
                                      if k not in _TYPED and k not in _OPTIONAL}))

    def with_release(self, release: Mapping[str, Any]) -> PrivacyReport:
        """This report with the stored release it describes (a new object)."""
        return replace(self, release=MappingProxyType(dict(release)))

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (``epsilon`` None for non-private runs)."""
        out: dict[str, Any] = dict(self.details)
        out.update({k: getattr(self, k) for k in _TYPED})
        out["epsilon"] = None if math.isinf(self.epsilon) else self.epsilon
        out["unaccounted"] = list(self.unaccounted)
        out["epsilon_by_step"] = [list(p) for p in self.epsilon_by_step]
        out["ledger"] = None if self.ledger is None else self.ledger.to_dict()
        for k in _OPTIONAL:
            v = getattr(self, k)
            if v is not None:
                out[k] = list(v) if k in _SEQUENCES else dict(v) if isinstance(
                    v, Mapping) else v
        return out


def _optional(key: str, value: Any) -> Any:
    if value is None:
        return None
    if key in _SEQUENCES:
        return tuple(value)
    return MappingProxyType(dict(value)) if isinstance(value, Mapping) else value


def _ledger(value: Any) -> Ledger | None:
    if value is None or isinstance(value, Ledger):
        return value
    return Ledger.from_dict(value)
