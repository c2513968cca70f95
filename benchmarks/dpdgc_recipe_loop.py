"""The loop behind benchmarks/RESULTS.md, "DPDGC on sparse low-degree graphs" (issue 49 §4):
methods' defaults (or given options) run through the registry, as ``dpgnn run`` trains
them, on Cora, a Facebook100 school or a generated citation-like graph, one line per
(method, options, ε) with the mean validation and test accuracy over the seeds.

    PYTHONPATH=. python benchmarks/dpdgc_recipe_loop.py DATASET 'JOBS' [SEEDS]

DATASET: ``cora``, ``amherst41`` (benchmarks/label_messages_loop.py's loaders, stratified
75/10/15) or ``cite`` / ``cite{"seed": 1, ...}`` (:func:`citation_like`, options as JSON);
JOBS: a JSON list of ``[method, options, epsilon or null]``; SEEDS: ``0,1`` (default).
Defaults are chosen on the validation column only.
"""

from __future__ import annotations

import json
import sys
import time
import warnings
from typing import Any

import numpy as np

sys.path.insert(0, __file__.rsplit("/", 1)[0])


def citation_like(num_nodes: int = 3327, num_classes: int = 6, vocab: int = 3703,
                  words: int = 32, class_share: float = 0.15, avg_degree: float = 2.8,
                  homophily: float = 0.75, power_law: float = 3.0, seed: int = 0) -> Any:
    """A citation-like graph (CiteSeer's size: 3,327 nodes, 3,703 binary features, 6
    classes): the project's CSBM structure with Pareto degrees (median degree 2, about
    13 % isolated nodes, edge homophily 0.74) and sparse binary bag-of-words features
    (about ``words`` distinct words per node, drawn from a background distribution mixed
    with the node's class topic at weight ``class_share``). Split 75/10/15, stratified."""
    from dpgnn_core.data.graph import GraphData
    from dpgnn_core.data.synthetic import csbm

    g = csbm(num_nodes=num_nodes, num_classes=num_classes, feature_dim=1,
             avg_degree=avg_degree, homophily=homophily, power_law=power_law, seed=seed,
             fractions=(0.75, 0.1, 0.15))
    rng = np.random.default_rng(seed + 1)
    background = rng.dirichlet(np.full(vocab, 0.3))
    topics = rng.dirichlet(np.full(vocab, 0.05), size=num_classes)
    x = np.zeros((num_nodes, vocab), dtype=np.float32)
    for v, length in enumerate(np.maximum(1, rng.poisson(words, size=num_nodes))):
        p = (1 - class_share) * background + class_share * topics[g.y[v]]
        x[v, rng.choice(vocab, size=int(length), p=p)] = 1.0
    return GraphData(name=f"citation-like-s{seed}", task="node", x=x,
                     edge_index=g.edge_index, y=g.y, split=g.split,
                     num_classes=num_classes, directed=False, meta=g.meta)


def load(dataset: str) -> Any:
    if dataset.startswith("cite"):
        return citation_like(**(json.loads(dataset[4:]) if len(dataset) > 4 else {}))
    from label_messages_loop import load as load_real

    return load_real(dataset)


def run(data: Any, method: str, options: dict[str, Any], eps: float | None,
        seed: int) -> tuple[float, float]:
    """Validation and test accuracy of one run through the registry."""
    import dpgnn_core.methods.dp_mlp as dm
    from dpgnn_core.methods.registry import get

    setattr(dm, "epsilon_plan", lambda *a, **k: [])  # noqa: B010 (skips the ε curve)
    m = get(method)
    spec = m.spec(seed=seed, device="cpu", **options,
                  **({} if eps is None else {"epsilon": eps}))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fitted = m._fit(data, spec, None)
        acc = m.evaluate(fitted.model, data, spec, fitted.extra)
    return acc["val"]["accuracy"], acc["test"]["accuracy"]


def main() -> None:
    import torch

    torch.set_num_threads(1)
    dataset, jobs = sys.argv[1], json.loads(sys.argv[2])
    seeds = [int(s) for s in (sys.argv[3] if len(sys.argv) > 3 else "0,1").split(",")]
    data = load(dataset)
    for method, options, eps in jobs:
        t = time.time()
        runs = [run(data, method, options, eps, s) for s in seeds]
        val, test = (np.array([r[i] for r in runs]) for i in (0, 1))
        print(json.dumps({"dataset": dataset, "method": method, "options": options,
                          "epsilon": eps, "seeds": seeds, "val": round(val.mean(), 4),
                          "test": round(test.mean(), 4), "test_each": test.round(4).tolist(),
                          "seconds": round(time.time() - t, 1)}), flush=True)


if __name__ == "__main__":
    main()
