"""A private run that reads its data without noise (``--log-raw-loss``,
``--clip-percentile``, ``--select-on-validation``): on a budgeted dataset, a release without
privacy (issue 48 §3; docs/privacy.md, "Every release on a budgeted dataset counts")."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tasks.budget import admit_non_private

#: The options of a private run that read private data without noise: no privacy event
#: covers them, so on a budgeted dataset each is a release without privacy (issue 48 §3).
UNACCOUNTED_OPTIONS = {
    "log_raw_loss": "--log-raw-loss records each step's training loss on the private batch "
                    "without noise",
    "clip_percentile": "--clip-percentile sets the clipping norms from per-sample gradient "
                       "norms of private training data without noise",
    "select_on_validation": "--select-on-validation keeps the weights chosen by validation "
                            "accuracy over the full private graph, without noise",
}


def unaccounted_uses(spec: Any) -> list[str]:
    """What a private ``spec`` reads without noise (:data:`UNACCOUNTED_OPTIONS`), in
    words; empty for a non-private spec (:func:`admit_non_private` decides it whole)."""
    if getattr(spec, "epsilon", None) is None:
        return []
    return [words for option, words in UNACCOUNTED_OPTIONS.items()
            if getattr(spec, option, None) not in (None, False)]


def admit_unaccounted(dataset: Mapping[str, Any], method: str, spec: Any, *,
                      allowed: bool) -> dict[str, Any]:
    """A private run with an unaccounted use of its data (:func:`unaccounted_uses`) on a
    budgeted dataset is a release without privacy: refused unless ``allowed``, then
    recorded, voiding the guarantee, as :func:`admit_non_private` does. Nothing to do on
    a dataset without a budget, or for a spec without such an option.

    Raises:
        NonPrivateRefused: a finite budget and no override.
    """
    uses = unaccounted_uses(spec)
    if not uses:
        return {}
    return admit_non_private(dataset, method, allowed=allowed, what=(
        f"{method} with {'; '.join(uses)}: no privacy event covers that"))


__all__ = ["UNACCOUNTED_OPTIONS", "admit_unaccounted", "unaccounted_uses"]
