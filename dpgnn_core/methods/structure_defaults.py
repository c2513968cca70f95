"""DP-GNN's defaults read from the public graph structure (level ``node_feature``).

At level ``node_feature`` the graph structure is public (only a node's features and label
are protected), so an unset degree bound K may be chosen from the degrees and the number
of training nodes without any privacy cost. The rule (benchmarks/RESULTS.md, "Defaults
from the public structure"; chosen on validation accuracy):

* K = 2 when there are at least :data:`LARGE_TRAIN` training nodes and the median degree
  is at least 2; else K = 1. The sensitivity 2C·N(K, r) = 2C(1 + K) grows by half from
  K = 1 to K = 2, and on N_train ~ 400-2000 nodes (Cora, CSBM graphs of average degree 3,
  10 and 20, Amherst41) that noise costs more than a second neighbour brings; on Cornell5
  (11,902 training nodes) K = 2 wins. With a median degree below 2 most nodes have no
  second neighbour to sample;
* the batch is every training node's subgraph, at most 16384;
* 60 steps at learning rate 2e-2 (the spec's defaults: the search found no dependence on
  N or the degrees that beat them).

At level ``node`` (a node's edges are protected too) the degrees are private and the
rule was not evaluated: an unset K is :data:`PRIVATE_STRUCTURE_K`, read from nothing.
Values the spec gives always win. The statistics are exact functions of the edge list and
the split (no randomness).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from dpgnn_core.specs import DpgnnSpec, LargeBatchDefaults

#: K = 2 from this many training nodes on (with a median degree of at least
#: :data:`MIN_MEDIAN_DEGREE`), else K = 1.
LARGE_TRAIN = 5000
#: Below this median degree K = 1 whatever N_train.
MIN_MEDIAN_DEGREE = 2.0
#: K when the structure is not public (level ``node``): the swept default of issue 14.
PRIVATE_STRUCTURE_K = DpgnnSpec.node_level_degree
#: The rule's steps and learning rate (the spec's defaults; no structure dependence).
RULE_STEPS = 60
RULE_LR = 2e-2
#: Spec fields the rule can fill.
RULE_FIELDS = ("max_degree", "batch_size", "steps", "lr")


@dataclass(frozen=True)
class StructureStats:
    """Public statistics of a graph at level ``node_feature``.

    Args:
        num_nodes (int): N.
        num_train (int): training nodes (the split is public, as for δ = 1 / (10 N)).
        mean_degree (float): 2|E| / N on an undirected graph (directed: in-degree).
        median_degree (float): median in-degree (the degree the sampler bounds).
    """

    num_nodes: int
    num_train: int
    mean_degree: float
    median_degree: float


@dataclass(frozen=True)
class StructureDefaults:
    """What the rule chose, and from what.

    Args:
        max_degree (int): K.
        batch_size (int): subgraphs per step.
        steps (int): training steps T.
        lr (float): learning rate.
        stats (StructureStats): the statistics read (:obj:`None` at level ``node``).
        given (tuple): K and the batch when the spec fixed them (the rule did not choose
            them).
        rule (str): the rule in words.
    """

    max_degree: int
    batch_size: int
    steps: int
    lr: float
    stats: StructureStats | None
    given: tuple[str, ...]
    rule: str

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["given"] = list(self.given)
        return out


def structure_stats(edge_index: npt.NDArray[np.int64], num_nodes: int, num_train: int
                    ) -> StructureStats:
    """The degree statistics the rule reads: in-degrees (messages travel along edges, and
    the sampler bounds the in-degree; on an undirected graph in- and out-degree agree)."""
    deg = np.bincount(np.asarray(edge_index)[1], minlength=int(num_nodes)) if num_nodes \
        else np.zeros(0, np.int64)
    return StructureStats(num_nodes=int(num_nodes), num_train=int(num_train),
                          mean_degree=float(deg.mean()) if deg.size else 0.0,
                          median_degree=float(np.median(deg)) if deg.size else 0.0)


def choose_max_degree(stats: StructureStats) -> int:
    """K from the public statistics: 2 when N_train >= :data:`LARGE_TRAIN` and the median
    degree >= :data:`MIN_MEDIAN_DEGREE`, else 1."""
    large = stats.num_train >= LARGE_TRAIN and stats.median_degree >= MIN_MEDIAN_DEGREE
    return 2 if large else 1


def choose(stats: StructureStats) -> dict[str, Any]:
    """The rule's values for every field it fills (module docstring)."""
    return {"max_degree": choose_max_degree(stats),
            "batch_size": LargeBatchDefaults.default_batch_for(stats.num_train),
            "steps": RULE_STEPS, "lr": RULE_LR}


def _given(spec: DpgnnSpec) -> tuple[str, ...]:
    """The fields the rule fills that the spec fixed itself (set: not None). Steps and lr
    always have a value (the rule's values are their defaults), so they are not marked."""
    return tuple(f for f in ("max_degree", "batch_size") if getattr(spec, f) is not None)


def resolve(spec: DpgnnSpec, num_train: int, stats: StructureStats | None
            ) -> tuple[DpgnnSpec, StructureDefaults]:
    """``spec`` with an unset K and batch filled: by the rule at level ``node_feature``
    (from ``stats``, which must then be given), by :data:`PRIVATE_STRUCTURE_K` and
    ``num_train`` alone at level ``node`` (``stats`` is then ignored: the degrees are
    private there). A value the spec gives is kept. Steps and lr are the spec's own (the
    rule's values are the spec's defaults)."""
    given = _given(spec)
    public = spec.level == "node_feature"
    if public and stats is None:
        raise ValueError("level node_feature: the defaults read the public degrees; pass "
                         "structure_stats(...)")
    batch = LargeBatchDefaults.default_batch_for(num_train)
    rule = choose(stats) if public and stats is not None else {
        "max_degree": PRIVATE_STRUCTURE_K, "batch_size": batch}
    update = {k: rule[k] for k in ("max_degree", "batch_size") if getattr(spec, k) is None}
    out = spec.model_copy(update=update)
    words = (f"level node_feature, structure public: K = 2 if N_train >= {LARGE_TRAIN} "
             f"and median degree >= {MIN_MEDIAN_DEGREE:g} else 1; batch min(N_train, "
             f"{LargeBatchDefaults.default_batch}); {RULE_STEPS} steps; lr {RULE_LR:g}"
             if public else f"level node, structure private: K = {PRIVATE_STRUCTURE_K}, "
             f"batch min(N_train, {LargeBatchDefaults.default_batch}); degrees not read")
    assert out.max_degree is not None and out.batch_size is not None
    return out, StructureDefaults(max_degree=out.max_degree, batch_size=out.batch_size,
                                  steps=out.steps, lr=out.lr,
                                  stats=stats if public else None, given=given, rule=words)
