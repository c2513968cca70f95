"""Privacy-utility plots of a sweep's results (matplotlib, PNG).

:func:`privacy_utility`: test accuracy against ε per private method, mean ± std over seeds
of the configuration chosen on validation at each ε, with the non-private references as
horizontal lines. :func:`hyperparameters`: validation accuracy against each swept option
that takes more than one value, per method. matplotlib is imported inside the functions
(the Agg backend: files only, no display).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from dpgnn_core.io import atomic_file
from dpgnn_core.sweeps import aggregate, best_per_method_and_epsilon


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(plt: Any, fig: Any, path: str | Path) -> Path:
    """Write ``fig`` as a PNG atomically and close it."""
    fig.tight_layout()
    path = Path(path)
    with atomic_file(path) as tmp:
        fig.savefig(tmp, format="png")
    plt.close(fig)
    return path


def _legend(ax: Any, **kw: Any) -> None:
    """A legend when some artist has a label (matplotlib warns "No artists with labels"
    otherwise: a sweep whose every point was refused plots nothing)."""
    if ax.get_legend_handles_labels()[0]:
        ax.legend(**kw)


def privacy_utility(rows: Sequence[Mapping[str, Any]], path: str | Path,
                    title: str = "") -> Path:
    """Test accuracy vs ε (log axis): per private method the configuration with the best
    mean validation accuracy at each ε, mean ± std over seeds; non-private methods as
    dashed horizontal lines (their best configuration). Returns ``path``."""
    plt = _pyplot()
    best = best_per_method_and_epsilon(rows)
    fig, ax = plt.subplots(figsize=(7.5, 4.8), dpi=120)
    private = sorted({b["method"] for b in best if b["epsilon"] is not None})
    colours = plt.get_cmap("tab10")
    for i, method in enumerate(private):
        pts = sorted((b for b in best if b["method"] == method), key=lambda b: b["epsilon"])
        eps = [b["epsilon"] for b in pts]
        mean = [b["test_accuracy_mean"] for b in pts]
        std = [b["test_accuracy_std"] for b in pts]
        ax.errorbar(eps, mean, yerr=std, marker="o", capsize=3, color=colours(i),
                    label=f"{method} ({pts[0]['seeds']} seed"
                          f"{'s' if pts[0]['seeds'] != 1 else ''})")
    for j, b in enumerate(sorted((b for b in best if b["epsilon"] is None),
                                 key=lambda b: b["method"])):
        if math.isnan(b["test_accuracy_mean"]):
            continue
        ax.axhline(b["test_accuracy_mean"], ls="--", lw=1.2,
                   color=colours(len(private) + j),
                   label=f"{b['method']} (non-private) {b['test_accuracy_mean']:.3f}")
    if private:
        ax.set_xscale("log")
        all_eps = sorted({b["epsilon"] for b in best if b["epsilon"] is not None})
        ax.set_xticks(all_eps)
        ax.set_xticklabels([f"{e:g}" for e in all_eps])
        ax.xaxis.set_minor_formatter(plt.NullFormatter())
    ax.set_xlabel("ε (target; δ per point in the table)")
    ax.set_ylabel("test accuracy (mean ± std over seeds)")
    ax.set_title(title or "privacy-utility: configuration chosen on validation")
    ax.grid(True, alpha=0.3)
    _legend(ax, fontsize=8, loc="best")
    return _save(plt, fig, path)


def _hashable(value: Any) -> Any:
    """An option's value as a dict key: lists (a budget split, layer clips) as tuples."""
    if isinstance(value, (list, tuple)):
        return tuple(_hashable(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _hashable(v)) for k, v in value.items()))
    return value


def _order(value: Any) -> tuple[int, float, str]:
    """Numbers first, by value; anything else (strings, tuples, None) by its text."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return (0, float(value), "")
    return (1, 0.0, str(value))


def hyperparameters(rows: Sequence[Mapping[str, Any]], path: str | Path) -> Path | None:
    """Mean validation accuracy against each option that takes more than one value in the
    sweep, one panel per (method, option), one line per ε. Returns ``path``, or None when
    no option varies."""
    plt = _pyplot()
    agg = aggregate(rows)
    panels: list[tuple[str, str]] = []
    for method in sorted({a["method"] for a in agg}):
        recs = [a for a in agg if a["method"] == method]
        keys = sorted({k for a in recs for k in a["config"]})
        for k in keys:
            values = {repr(a["config"].get(k)) for a in recs}
            if len(values) > 1:
                panels.append((method, k))
    if not panels:
        return None
    cols = min(3, len(panels))
    nrows = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(4.6 * cols, 3.4 * nrows), dpi=110,
                             squeeze=False)
    for ax, (method, key) in zip(axes.flat, panels, strict=False):
        recs = [a for a in agg if a["method"] == method]
        # one axis kind per panel: numeric only if every value is a number (an option a
        # configuration leaves unset takes the method's default, shown as "default")
        numeric = all(isinstance(a["config"].get(key), (int, float))
                      and not isinstance(a["config"].get(key), bool) for a in recs)
        for eps in sorted({a["epsilon"] for a in recs}, key=lambda e: (e is None, e or 0)):
            by_value: dict[Any, list[float]] = {}
            for a in recs:
                if a["epsilon"] == eps and not math.isnan(a["val_accuracy_mean"]):
                    by_value.setdefault(_hashable(a["config"].get(key)), []).append(
                        a["val_accuracy_mean"])
            xs = sorted(by_value, key=_order)
            # several configurations share a value of this option: show the best of them
            ys = [max(by_value[x]) for x in xs]
            pos = xs if numeric else list(range(len(xs)))
            ax.plot(pos, ys, marker="o",
                    label="non-private" if eps is None else f"ε={eps:g}")
            if not numeric:
                ax.set_xticks(pos)
                ax.set_xticklabels(["default" if x is None else str(x) for x in xs],
                                   rotation=30, fontsize=8)
        if key in ("lr",) and numeric:
            ax.set_xscale("log")
            ax.xaxis.set_minor_formatter(plt.NullFormatter())
        ax.set_title(f"{method}: {key}", fontsize=10)
        ax.set_xlabel(key)
        ax.set_ylabel("val accuracy (best config)")
        ax.grid(True, alpha=0.3)
        _legend(ax, fontsize=7)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    return _save(plt, fig, path)


def budget_over_time(series: Mapping[str, Sequence[tuple[str, float]]],
                     budgets: Mapping[str, float | None], path: str | Path,
                     title: str = "") -> Path:
    """Cumulative ε over time, one step line per (dataset, unit) in ``series`` (ISO time,
    ε after that release), with the dataset's budget as a dashed line of the same colour
    (``budgets``, by the same label; None: no budget set). Returns ``path``."""
    from datetime import datetime

    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 4.8), dpi=120)
    colours = plt.get_cmap("tab10")
    drawn: set[tuple[str, float]] = set()
    end = max((datetime.fromisoformat(t) for pts in series.values() for t, _ in pts),
              default=None)
    for i, (label, pts) in enumerate(sorted(series.items())):
        if not pts:
            continue
        times = [datetime.fromisoformat(t) for t, _ in pts]
        eps = [e for _, e in pts]
        # from 0 at the first release, held to the last release of any series
        times, eps = [times[0], *times, end or times[-1]], [0.0, *eps, eps[-1]]
        ax.step(times, eps, where="post", color=colours(i % 10), label=label)
        ax.plot(times[1:-1], eps[1:-1], "o", color=colours(i % 10))
        cap = budgets.get(label)
        name = label.rsplit(" (", 1)[0]
        if cap is not None and (name, cap) not in drawn:  # one line per dataset budget
            drawn.add((name, cap))
            ax.axhline(cap, ls="--", lw=1.2, color="0.3",
                       label=f"budget of {name}: ε = {cap:g} per unit")
    ax.set_ylim(bottom=0)
    ax.set_xlabel("time (UTC)")
    ax.set_ylabel("cumulative ε (composition of every release)")
    ax.set_title(title or "privacy budget spent per dataset and protected unit")
    ax.grid(True, alpha=0.3)
    _legend(ax, fontsize=8, loc="best")
    fig.autofmt_xdate()
    return _save(plt, fig, path)


def audit_scores(scores: Any, included: Any, guesses: Any, path: str | Path,
                 title: str = "") -> Path:
    """An audit's score histograms: the canaries that were in and those that were out
    (revealed after the guess), with the guess cut-offs as vertical lines (scores at or
    below the left line were guessed "in", at or above the right one "out"). Returns
    ``path``."""
    import numpy as np

    plt = _pyplot()
    s = np.asarray(scores, dtype=float)
    inc = np.asarray(included, dtype=bool)
    g = np.asarray(guesses)
    fig, ax = plt.subplots(figsize=(7.5, 4.5), dpi=120)
    finite = s[np.isfinite(s)]
    bins = np.histogram_bin_edges(finite, bins=min(40, max(5, finite.size // 5))) \
        if finite.size else 10
    ax.hist(s[inc], bins=bins, alpha=0.6, color="tab:red",
            label=f"canary in ({int(inc.sum())})")
    ax.hist(s[~inc], bins=bins, alpha=0.6, color="tab:blue",
            label=f"canary out ({int((~inc).sum())})")
    if (g == 1).any():
        ax.axvline(float(s[g == 1].max()), color="k", ls="--", lw=1,
                   label='guessed "in" at or left of this')
    if (g == -1).any():
        ax.axvline(float(s[g == -1].min()), color="k", ls=":", lw=1.2,
                   label='guessed "out" at or right of this')
    ax.set_xlabel("attack score (lower = more likely a member)")
    ax.set_ylabel("canaries" if s.size > 1 else "runs")
    ax.set_title(title or "audit: canary scores")
    ax.grid(True, alpha=0.3)
    _legend(ax, fontsize=8, loc="best")
    return _save(plt, fig, path)
