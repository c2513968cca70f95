"""A long run's per-step curves reach MLflow thinned (issue 33 §6: GAP-EDP's 6,400 steps on
Cora were 19,200 metric points, ~100 s of logging on a busy machine): at most
``MAX_CURVE_POINTS`` per metric, evenly spaced, first and last kept; a short run's every
step. And a run's MLflow writes are batched."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path
from typing import Any

import pytest

from tasks.tracking import MAX_CURVE_POINTS, history_points, log_run


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


@pytest.mark.slow  # creates an MLflow SQLite store (its migrations: ~10 s)
def test_log_run_logs_params_tags_and_metrics_in_as_few_batches_as_mlflow_allows(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 52 §7: each ``log_batch`` is one SQLite transaction; a run's params, tags and
    metric points share batches (at most 100 params, 100 tags, 1,000 entities each), and
    every one of them still reaches MLflow."""
    from mlflow.tracking import MlflowClient

    calls: list[tuple[int, int, int]] = []
    real = MlflowClient.log_batch

    def counted(self: Any, run_id: str, metrics: Any = (), params: Any = (), tags: Any = (),
                **kw: Any) -> Any:
        calls.append((len(params), len(metrics), len(tags)))
        return real(self, run_id, metrics=metrics, params=params, tags=tags, **kw)

    monkeypatch.setattr(MlflowClient, "log_batch", counted)
    history = [{"step": t, "train_loss": 1.0 / t, "epsilon_spent": t / 900.0}
               for t in range(1, 901)]
    hist = tmp_path / "history.json"
    hist.write_text(json.dumps(history))
    params = {f"p{i}": i for i in range(130)}
    tags = {f"dpgnn.t{i}": str(i) for i in range(120)}
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    out = log_run.fn(run_name="r", params=params, history_path=str(hist),
                     metrics={"test": {"accuracy": 0.5, "f1": math.nan}}, artifacts=[],
                     tags=tags, tracking_uri=uri, experiment="e")
    points = 2 * MAX_CURVE_POINTS + 1  # two thinned curves and the test accuracy
    assert [sum(c) for c in calls] == [1000, points + 250 - 1000]  # was 2 + 1 + 2 calls
    run = MlflowClient(tracking_uri=uri).get_run(out["run_id"])
    assert run.data.params == {k: str(v) for k, v in params.items()}
    assert all(run.data.tags[k] == v for k, v in tags.items())
    assert run.data.metrics["test_accuracy"] == 0.5 and "test_f1" not in run.data.metrics
    curve = MlflowClient(tracking_uri=uri).get_metric_history(out["run_id"], "train_loss")
    assert len(curve) == MAX_CURVE_POINTS and max(m.step for m in curve) == 900
