"""Classification metrics: accuracy, micro/macro F1, ROC AUC (binary, or micro one-vs-rest)."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt


def _multi_label_metrics(y_true: npt.NDArray[np.int64], logits: npt.NDArray[np.floating],
                         out: dict[str, float]) -> dict[str, float]:
    """Multi-label: subset accuracy, F1 of logits > 0, micro ROC AUC over label entries."""
    from sklearn.metrics import f1_score, roc_auc_score  # here: multi-label only

    pred = (logits > 0).astype(np.int64)
    out["accuracy"] = float((pred == y_true).all(axis=1).mean())
    out["f1_micro"] = float(f1_score(y_true, pred, average="micro", zero_division=0))
    out["f1_macro"] = float(f1_score(y_true, pred, average="macro", zero_division=0))
    if len(np.unique(y_true)) > 1:
        out["roc_auc"] = float(roc_auc_score(y_true.ravel(), logits.ravel()))
    return out


def _f1_micro_macro(y_true: npt.NDArray[np.int64], pred: npt.NDArray[np.int64],
                    num_classes: int) -> tuple[float, float]:
    """Micro and macro F1 over the labels ``0..num_classes-1``, the very float operations of
    scikit-learn's ``f1_score(..., labels=range(C))`` (macro with ``zero_division=0``) on
    its per-label counts, without its input checks (a millisecond or more per call, paid
    for every split of every evaluation); ``test_f1_is_sklearns`` holds them equal."""
    tp = np.bincount(y_true[y_true == pred], minlength=num_classes)[:num_classes]
    pred_sum = np.bincount(pred, minlength=num_classes)[:num_classes]
    true_sum = np.bincount(y_true[(y_true >= 0) & (y_true < num_classes)],
                           minlength=num_classes)[:num_classes]

    def f(tp: npt.NDArray[np.int64], true: npt.NDArray[np.int64],
          predicted: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
        denom = 1.0 * true.astype(np.float64) + predicted.astype(np.float64)
        zero = denom == 0
        denom[zero] = 1
        out: npt.NDArray[np.float64] = (2.0 * tp.astype(np.float64)) / denom
        out[zero] = 0.0
        return out

    micro = f(tp.sum(keepdims=True), true_sum.sum(keepdims=True), pred_sum.sum(keepdims=True))
    return float(np.nanmean(micro)), float(np.nanmean(f(tp, true_sum, pred_sum)))


def _roc_auc(positive: npt.NDArray[np.bool_], score: npt.NDArray[np.floating]) -> float:
    """ROC AUC of ``score`` for the items where ``positive`` holds against the others (both
    present), the very float operations of scikit-learn's ``roc_auc_score`` (its
    ``roc_curve`` with ``drop_intermediate`` and ``auc``: counts at each distinct score,
    collinear points dropped, trapezoids) without its input checks and the import of
    scikit-learn (half a second in every process that evaluates); scores that are not all
    finite go to scikit-learn itself (its error). ``test_roc_auc_is_sklearns`` holds them
    equal."""
    if not np.isfinite(score).all():
        from sklearn.metrics import roc_auc_score

        return float(roc_auc_score(positive.astype(np.int64), score))
    order = np.argsort(score, kind="stable")[::-1]  # descending; ties stay together
    ranked = score[order]
    ends = np.r_[np.nonzero(np.diff(ranked))[0], ranked.shape[0] - 1]
    tps = np.cumsum(positive[order].astype(np.float64), dtype=np.float64)[ends]
    fps = 1 + ends.astype(np.float64) - tps
    if fps.shape[0] > 2:
        keep = np.r_[True, np.logical_or(np.diff(fps, 2), np.diff(tps, 2)), True]
        fps, tps = fps[keep], tps[keep]
    fpr, tpr = np.r_[0.0, fps] / fps[-1], np.r_[0.0, tps] / tps[-1]
    return float(np.sum((fpr[1:] - fpr[:-1]) * (tpr[1:] + tpr[:-1]) / 2.0))  # SciPy's


def classification_metrics(y_true: npt.NDArray[np.int64], logits: npt.NDArray[np.floating],
                           num_classes: int) -> dict[str, float]:
    """Metrics of predictions ``logits`` ``[n, C]`` against labels ``y_true`` ``[n]`` (or
    multi-label 0/1 targets ``[n, C]``).

    Returns ``accuracy``, ``f1_micro``, ``f1_macro`` and ``roc_auc`` (binary: the positive
    class's score; multi-class: micro-averaged one-vs-rest), NaN when a metric is undefined
    (no items, or a single class present for ROC AUC).
    """
    out = {"accuracy": float("nan"), "f1_micro": float("nan"), "f1_macro": float("nan"),
           "roc_auc": float("nan"), "sensitivity": float("nan"),
           "specificity": float("nan")}
    if y_true.shape[0] == 0:
        return out
    if y_true.ndim == 2:
        return _multi_label_metrics(y_true, logits, out)
    pred = logits.argmax(axis=1)
    out["accuracy"] = float((pred == y_true).mean())
    labels = list(range(num_classes))
    out["f1_micro"], out["f1_macro"] = _f1_micro_macro(y_true, pred, num_classes)
    # Sensitivity (recall) and specificity: of the positive class for two classes, else
    # averaged over classes one-vs-rest (macro).
    classes = [1] if num_classes == 2 else [c for c in labels if (y_true == c).any()]
    sens, spec = [], []
    for c in classes:
        pos, hit = y_true == c, pred == c
        if pos.any():
            sens.append(float((hit & pos).sum() / pos.sum()))
        if (~pos).any():
            spec.append(float((~hit & ~pos).sum() / (~pos).sum()))
    out["sensitivity"] = float(np.mean(sens)) if sens else float("nan")
    out["specificity"] = float(np.mean(spec)) if spec else float("nan")
    z = logits - logits.max(axis=1, keepdims=True)
    prob = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
    if len(np.unique(y_true)) > 1:
        if num_classes == 2:  # scikit-learn's positive class: the larger label
            out["roc_auc"] = _roc_auc(y_true == np.max(y_true), prob[:, 1])
        else:  # micro: every (item, class) entry, in row-major order
            onehot = np.eye(num_classes)[y_true]
            out["roc_auc"] = _roc_auc(onehot.ravel() == 1, prob.ravel())
    return out


def metrics_by_split(data: Any, logits: npt.NDArray[np.floating]) -> dict[str, dict[str, float]]:
    """:func:`classification_metrics` on the train, val and test nodes of ``data``."""
    from dpgnn_core.data.graph import SPLIT_NAMES

    return {name: classification_metrics(data.y[data.split == code], logits[data.split == code],
                                         data.num_classes)
            for code, name in enumerate(SPLIT_NAMES[:3])}
