"""A long run's per-step curves reach MLflow thinned (issue 33 §6: GAP-EDP's 6,400 steps on
Cora were 19,200 metric points, ~100 s of logging on a busy machine): at most
``MAX_CURVE_POINTS`` per metric, evenly spaced, first and last kept; a short run's every
step."""

from __future__ import annotations

import itertools
import math

from tasks.tracking import MAX_CURVE_POINTS, history_points


def test_a_long_history_is_thinned_per_metric_keeping_both_ends() -> None:
    steps = 6400
    history = [{"step": t, "train_loss": 1.0 / t, "epsilon_spent": t / steps,
                **({"selection_score": 0.5} if t % 100 == 0 else {})}
               for t in range(1, steps + 1)]
    history[10]["train_loss"] = math.nan  # skipped, as before
    pts = history_points(history)
    by: dict[str, list[tuple[int, float]]] = {}
    for k, step, v in pts:
        by.setdefault(k, []).append((step, v))
    assert set(by) == {"train_loss", "epsilon_spent", "selection_score"}
    eps = by["epsilon_spent"]
    assert len(eps) == MAX_CURVE_POINTS
    assert eps[0] == (1, 1 / steps) and eps[-1] == (steps, 1.0)  # the final ε is logged
    gaps = [b[0] - a[0] for a, b in itertools.pairwise(eps)]
    assert max(gaps) - min(gaps) <= 1  # evenly spaced
    assert len(by["selection_score"]) == 64  # a sparse metric keeps all its points


def test_a_short_history_keeps_every_step() -> None:
    history = [{"epoch": t, "train_loss": float(t)} for t in range(1, 41)]
    assert history_points(history) == [("train_loss", t, float(t)) for t in range(1, 41)]
