"""Contextual stochastic block model (CSBM): the embedded default dataset and the scale graph.

Each node gets a class uniformly at random and a Gaussian feature vector around its class
mean, or (``feature_kind="bag_of_words"``) sparse binary word-presence features drawn from a
background vocabulary distribution mixed with its class's topic, as in a citation graph.
Edges are drawn as ``m = n * avg_degree / 2`` undirected pairs: the source with
probability proportional to a degree weight ``theta`` (all ones, or Pareto weights for
power-law degrees, as in a degree-corrected SBM), the target from the source's own class
with probability ``homophily`` (else from a uniformly chosen other class), again in
proportion to ``theta``. Self-loops are discarded, the graph is symmetrised and duplicate
pairs merged, so the realised directed edge count is slightly below ``n * avg_degree`` and
is recorded in the manifest. Deterministic for a given seed; vectorised in chunks so that
2.5 million nodes and 100 million directed edges fit well within 24 GiB.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from dpgnn_core.data.graph import GraphData
from dpgnn_core.data.loader import Loaded, Loader
from dpgnn_core.data.options import CsbmOptions, ErGraphsOptions
from dpgnn_core.data.splits import stratified_split
from dpgnn_core.errors import DataError

_CHUNK = 1 << 23


def _draw(cum: npt.NDArray[np.float64], lo: npt.NDArray[np.float64],
          hi: npt.NDArray[np.float64], u: npt.NDArray[np.float64]) -> npt.NDArray[np.int64]:
    """Inverse-CDF draw: position of ``lo + u * (hi - lo)`` in the cumulative weights."""
    idx = np.searchsorted(cum, lo + u * (hi - lo), side="right")
    out: npt.NDArray[np.int64] = np.minimum(idx, cum.shape[0] - 1).astype(np.int64)
    return out


def csbm(
    num_nodes: int = 3000,
    num_classes: int = 5,
    feature_dim: int = 32,
    avg_degree: float = 10.0,
    homophily: float = 0.8,
    feature_signal: float = 1.0,
    power_law: float | None = None,
    seed: int = 0,
    fractions: tuple[float, float, float] = (0.5, 0.2, 0.3),
    name: str | None = None,
    feature_kind: str = "gaussian",
    words: float = 32.0,
    class_share: float = 0.15,
) -> GraphData:
    """Generate a CSBM graph.

    .. math::
        y_v \\sim \\mathrm{U}\\{0..C-1\\}, \\quad
        x_v = \\mu_{y_v} + \\varepsilon_v, \\;
        \\mu_c \\sim \\mathcal{N}(0, \\tfrac{s^2}{d} I), \\; \\varepsilon_v \\sim \\mathcal{N}(0, I)

    Args:
        num_nodes (int, optional): nodes. (default: :obj:`3000`)
        num_classes (int, optional): classes. (default: :obj:`5`)
        feature_dim (int, optional): feature dimension. (default: :obj:`32`)
        avg_degree (float, optional): expected directed degree before dedup.
            (default: :obj:`10.0`)
        homophily (float, optional): probability an edge stays in its source's class.
            (default: :obj:`0.8`)
        feature_signal (float, optional): norm ``s`` of the class means relative to unit
            noise; 0 gives features with no signal. (default: :obj:`1.0`)
        power_law (float, optional): Pareto exponent ``alpha > 2`` of degree weights,
            ``theta = (1 - U)^{-1/(alpha-1)}``; :obj:`None` for uniform weights.
            (default: :obj:`None`)
        seed (int, optional): seed of the ``numpy.random.Generator``. (default: :obj:`0`)
        fractions (tuple, optional): train/val/test fractions. (default: ``(0.5, 0.2, 0.3)``)
        name (str, optional): dataset name. (default: ``csbm-n{num_nodes}-s{seed}``)
        feature_kind (str, optional): ``"gaussian"`` (above) or ``"bag_of_words"``: binary
            features over a vocabulary of ``feature_dim`` words (:func:`bag_of_words`);
            ``feature_signal`` is then unused. (default: ``"gaussian"``)
        words (float, optional): with ``bag_of_words``, the mean number of words a node
            draws (Poisson, at least one; repeats merge, so fewer distinct ones).
            (default: :obj:`32.0`)
        class_share (float, optional): with ``bag_of_words``, the weight of the node's
            class topic against the shared background: the feature signal. (default:
            :obj:`0.15`)
    """
    checks = {
        "num_nodes": num_nodes >= 2, "num_classes": 2 <= num_classes <= num_nodes,
        "feature_dim": feature_dim >= 1, "avg_degree": avg_degree > 0,
        "homophily": 0.0 <= homophily <= 1.0, "feature_signal": feature_signal >= 0,
        "power_law": power_law is None or power_law > 2,
        "feature_kind": feature_kind in ("gaussian", "bag_of_words"), "words": words > 0,
        "class_share": 0.0 <= class_share <= 1.0,
    }
    for field, ok in checks.items():
        if not ok:
            raise DataError("invalid synthetic-graph parameter", field=field,
                            value=locals()[field])
    rng = np.random.default_rng(seed)
    n, c = int(num_nodes), int(num_classes)
    y = rng.integers(0, c, size=n, dtype=np.int64)
    if power_law is None:
        theta = np.ones(n)
    else:
        theta = (1.0 - rng.random(n)) ** (-1.0 / (power_law - 1.0))
    # Nodes sorted by class: class k occupies the cumulative-weight interval [lo_k, hi_k).
    by_class = np.argsort(y, kind="stable")
    cum = np.cumsum(theta[by_class])
    ends = np.searchsorted(y[by_class], np.arange(c), side="right")
    hi_c = cum[ends - 1]
    lo_c = np.concatenate([[0.0], hi_c[:-1]])
    cum_all = np.cumsum(theta)

    m = round(n * avg_degree / 2)
    keys_parts = []
    for start in range(0, m, _CHUNK):
        k = min(_CHUNK, m - start)
        src = _draw(cum_all, np.zeros(k), np.full(k, cum_all[-1]), rng.random(k))
        cls = y[src]
        other = (cls + rng.integers(1, c, size=k)) % c
        tgt_cls = np.where(rng.random(k) < homophily, cls, other)
        dst = by_class[_draw(cum, lo_c[tgt_cls], hi_c[tgt_cls], rng.random(k))]
        keep = src != dst
        src, dst = src[keep], dst[keep]
        keys_parts.append(src * n + dst)
        keys_parts.append(dst * n + src)
        del src, dst, cls, other, tgt_cls, keep
    keys = np.concatenate(keys_parts) if keys_parts else np.zeros(0, dtype=np.int64)
    del keys_parts
    keys.sort(kind="quicksort")
    if keys.size:
        uniq = np.empty(keys.shape[0], dtype=bool)
        uniq[0] = True
        np.not_equal(keys[1:], keys[:-1], out=uniq[1:])
        keys = keys[uniq]
        del uniq
    edge_index = np.empty((2, keys.shape[0]), dtype=np.int64)
    np.floor_divide(keys, n, out=edge_index[0])
    np.remainder(keys, n, out=edge_index[1])
    del keys

    params: dict[str, Any] = {
        "num_nodes": n, "num_classes": c, "feature_dim": feature_dim,
        "avg_degree": avg_degree, "homophily": homophily, "feature_signal": feature_signal,
        "power_law": power_law, "seed": seed}
    if feature_kind == "bag_of_words":
        x = bag_of_words(y, c, feature_dim, words, class_share, rng)
        params |= {"feature_kind": feature_kind, "words": words, "class_share": class_share}
    else:  # the Gaussian draws, in the order every existing dataset of a seed was made
        means = rng.standard_normal((c, feature_dim)).astype(np.float32)
        means *= np.float32(feature_signal / np.sqrt(feature_dim))
        x = rng.standard_normal((n, feature_dim), dtype=np.float32)
        x += means[y]
    split = stratified_split(y, fractions, rng=rng)
    meta = {
        "source": {"format": "synthetic", "generator": "csbm", "options": params},
        "split": {"scheme": "random-stratified", "fractions": list(fractions), "seed": seed},
        "cleaning": {"sampled_pairs": m},
    }
    return GraphData(name=name or f"csbm-n{n}-s{seed}", task="node", x=x,
                     edge_index=edge_index, y=y, split=split, num_classes=c, directed=False,
                     meta=meta)


def bag_of_words(y: npt.NDArray[np.int64], num_classes: int, vocab: int, words: float,
                 class_share: float, rng: np.random.Generator) -> npt.NDArray[np.float32]:
    """Sparse binary bag-of-words features, as a citation graph's (Cora, CiteSeer).

    .. math::
        L_v \\sim \\max(1, \\mathrm{Poisson}(w)), \\quad
        t_{v,1..L_v} \\sim (1 - a)\\, b + a\\, \\tau_{y_v}, \\quad
        x_{v,j} = [\\exists i: t_{v,i} = j]

    with a background ``b ~ Dirichlet(0.3)`` and class topics ``τ_c ~ Dirichlet(0.05)``
    over the ``vocab`` words (a few dozen words carry each topic) and ``a`` =
    ``class_share``. Words are drawn with replacement, so a node has at most ``L_v``
    distinct ones. Vectorised: every word of every node is one inverse-CDF draw, from the
    background or from its node's topic.

    Args:
        y (numpy.ndarray): the nodes' classes.
        num_classes (int): classes (topics).
        vocab (int): vocabulary size (the feature dimension).
        words (float): mean words drawn per node.
        class_share (float): the topic's weight ``a`` in each word's distribution.
        rng (numpy.random.Generator): the generator (the graph's, seeded).

    Returns:
        numpy.ndarray: ``float32`` features of 0 and 1, shape ``(len(y), vocab)``.
    """
    n = y.shape[0]
    background = np.cumsum(rng.dirichlet(np.full(vocab, 0.3)))
    topics = np.cumsum(rng.dirichlet(np.full(vocab, 0.05), size=num_classes), axis=1)
    length = np.maximum(1, rng.poisson(words, size=n))
    node = np.repeat(np.arange(n), length)
    u = rng.random(node.shape[0])
    from_topic = rng.random(node.shape[0]) < class_share
    word = np.searchsorted(background, u * background[-1], side="right")
    for k in range(num_classes):  # each topic's words by its own cumulative distribution
        pick = from_topic & (y[node] == k)
        word[pick] = np.searchsorted(topics[k], u[pick] * topics[k, -1], side="right")
    x = np.zeros((n, vocab), dtype=np.float32)
    x[node, np.minimum(word, vocab - 1)] = 1.0
    return x


def er_graphs(num_graphs: int = 1000, num_nodes: int = 20, p: tuple[float, float] = (0.2, 0.3),
              feature_dim: int = 9, mean: tuple[float, float] = (0.0, 0.1), std: float = 0.5,
              split: tuple[int, int, int] = (600, 100, 300), seed: int = 0,
              name: str | None = None) -> GraphData:
    """Mueller et al.'s synthetic graph-classification set: Erdős–Rényi graphs whose class
    sets the edge probability and the feature mean.

    .. math::
        G_i \\sim \\mathrm{ER}(n, p_{y_i}), \\qquad x_v \\sim \\mathcal{N}(\\mu_{y_i}, s^2 I)

    Classes alternate (half of each), isolated nodes are kept, and the split is by count
    in random order.

    Args:
        num_graphs (int, optional): graphs. (default: :obj:`1000`)
        num_nodes (int, optional): nodes per graph. (default: :obj:`20`)
        p (tuple, optional): edge probability of class 0 and 1. (default: ``(0.2, 0.3)``)
        feature_dim (int, optional): features. (default: :obj:`9`)
        mean (tuple, optional): feature mean of class 0 and 1. (default: ``(0.0, 0.1)``)
        std (float, optional): feature std. (default: :obj:`0.5`)
        split (tuple, optional): train / val / test graph counts.
            (default: ``(600, 100, 300)``)
        seed (int, optional): seed. (default: :obj:`0`)
        name (str, optional): dataset name. (default: ``er-synthetic-s{seed}``)
    """
    if sum(split) != num_graphs or min(split) < 0:
        raise DataError("split counts must be >= 0 and sum to num_graphs", field="split",
                        value=tuple(split))
    for f, ok in {"num_nodes": num_nodes >= 1, "feature_dim": feature_dim >= 1,
                  "p": all(0 <= q <= 1 for q in p), "std": std >= 0}.items():
        if not ok:
            raise DataError("invalid synthetic-graph parameter", field=f, value=locals()[f])
    rng = np.random.default_rng(seed)
    g_y = np.arange(num_graphs, dtype=np.int64) % 2
    rng.shuffle(g_y)
    n = num_graphs * num_nodes
    graph_id = np.repeat(np.arange(num_graphs, dtype=np.int64), num_nodes)
    x = (np.asarray(mean)[g_y[graph_id], None]
         + std * rng.standard_normal((n, feature_dim))).astype(np.float32)
    iu, ju = np.triu_indices(num_nodes, k=1)
    keep = rng.random((num_graphs, iu.shape[0])) < np.asarray(p)[g_y][:, None]
    gi, pair = np.nonzero(keep)
    src = gi * num_nodes + iu[pair]
    dst = gi * num_nodes + ju[pair]
    edge_index = np.stack([np.concatenate([src, dst]), np.concatenate([dst, src])])
    order = np.lexsort((edge_index[1], edge_index[0]))
    edge_index = np.ascontiguousarray(edge_index[:, order]).astype(np.int64)
    g_split = np.empty(num_graphs, dtype=np.int8)
    perm = rng.permutation(num_graphs)
    g_split[perm[:split[0]]] = 0
    g_split[perm[split[0]:split[0] + split[1]]] = 1
    g_split[perm[split[0] + split[1]:]] = 2
    meta = {"generator": {"kind": "er_graphs", "num_graphs": num_graphs,
                          "num_nodes": num_nodes, "p": list(p), "feature_dim": feature_dim,
                          "mean": list(mean), "std": std, "seed": seed},
            "split": {"scheme": "random-counts", "counts": list(split), "seed": seed}}
    return GraphData(name=name or f"er-synthetic-s{seed}", task="graph", x=x,
                     edge_index=edge_index, y=np.full(n, -1, dtype=np.int64),
                     split=g_split[graph_id], num_classes=2, graph_id=graph_id, graph_y=g_y,
                     graph_split=g_split, meta=meta)


#: The generators of format ``synthetic``, by the option ``kind`` (the first: the default).
GENERATORS: dict[str, Callable[..., GraphData]] = {"csbm": csbm, "er_graphs": er_graphs}


def _load(source: Path | None, name: str | None, options: dict[str, Any]) -> Loaded:
    """Format ``synthetic``: the generator ``options["kind"]`` (csbm when not given) with
    the other options (no source: the options are the whole input)."""
    kind = options.pop("kind", "csbm")
    if options.pop("partition_nodes", None) is not None:
        raise DataError("partition_nodes writes a partitioned dataset folder, which only "
                        "`dpgnn ingest` (dpgnn_core.data.ingest.ingest) writes",
                        field="partition_nodes")
    return GENERATORS[kind](name=name, **options), None


#: This module's ingest format (:mod:`dpgnn_core.data.catalog`).
LOADERS = (Loader("synthetic", CsbmOptions, _load, needs_source=False,
                  kinds={"csbm": CsbmOptions, "er_graphs": ErGraphsOptions}),)
