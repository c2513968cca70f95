"""DP-GNN (Daigavane et al.): the recipe tying subgraph sampler, model, DP optimizer and
ledger.

1. SAMPLE-EDGELISTS and SAMPLE-SUBGRAPHS on the training nodes (every node in at most
   N(K, r) subgraphs).
2. Calibrate the noise multiplier λ so that T steps of fixed-size batches of m of the N
   subgraphs spend at most the target (ε, δ) (hypergeometric amplification; the ledger
   holds one :class:`~dpgnn_core.privacy.DpgnnEvent`). What is protected: by default a
   node's features and label with the structure public (``node_feature``, M = N(K,r)
   marked subgraphs); on directed datasets optionally the node's own edge list too
   (``node``, M = 2N(K,r) - 1). Node level on undirected graphs is refused: one node's
   edges change its neighbours' sampling (docs/privacy.md).
3. Train on padded dense batches with per-subgraph clipping to C (or per group, layer-wise)
   and noise std λ·2C·N(K,r).
4. Predict on the full graph with the same weights (sparse path): transductive, or on the
   test graph of a ``-disjoint`` dataset (inductive).

Without ``epsilon`` the same path runs without noise or clipping (the non-private model),
and the ledger is empty with ``epsilon = inf`` in the report.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from dpgnn_core.data.clean import is_symmetric
from dpgnn_core.data.graph import GraphData
from dpgnn_core.graph.dpgnn_sampler import SAMPLING_SCHEME, sample_edgelists, sample_subgraphs
from dpgnn_core.graph.subgraphs import Subgraphs
from dpgnn_core.methods._private import StageProgress, check_node_task, resolve_steps
from dpgnn_core.methods._subgraph import (
    SubgraphResult,
    build_subgraph_model,
    evaluate_subgraph_model,
    train_on_subgraphs,
)
from dpgnn_core.methods.contract import Implementation, node_private
from dpgnn_core.methods.private_run import PrivateRun
from dpgnn_core.methods.structure_defaults import StructureDefaults, resolve, structure_stats
from dpgnn_core.privacy import DpgnnEvent, Ledger, neighbourhood_size
from dpgnn_core.privacy.randomness import Randomness
from dpgnn_core.specs import DpgnnSpec
from dpgnn_core.specs.subgraph import dpgnn_level

DpgnnResult = SubgraphResult
evaluate_dpgnn = evaluate_subgraph_model


def marked_subgraphs(spec: DpgnnSpec) -> int:
    """M, the most training subgraphs one neighbouring change touches: N(K,r) when the
    sampled structure cannot depend on it (``node_feature``), 2N(K,r) - 1 when the node's
    own edge list is replaced too (``node``: the subgraphs holding it before or after)."""
    return marked(spec.level, spec.degree_bound, spec.layers)


def marked(level: str, k: int, r: int) -> int:
    """:func:`marked_subgraphs` of a level, K and r (what the brute force checks)."""
    occ = neighbourhood_size(k, r)
    return occ if level == "node_feature" else 2 * occ - 1


PROTECTS = {
    "node_feature": "model parameters against replacing one training node's features and "
                    "label (replace-one); the graph structure is treated as public and is "
                    "not protected",
    "node": "model parameters against replacing one training node's features, label and "
            "its own outgoing edges (the edges along which its messages travel; "
            "replace-one, directed graph); edges in other nodes' lists are theirs",
}


def ledger_for(spec: DpgnnSpec, num_train: int) -> Callable[[float], Ledger]:
    """λ ↦ the ledger of the whole training plan (one subgraph per training node: an unset
    batch size becomes min(16384, N))."""
    spec = spec.with_batch_size(num_train)
    marked = marked_subgraphs(spec)

    def ledger(lam: float) -> Ledger:
        return Ledger().add(DpgnnEvent(noise_multiplier=lam, num_train=num_train,
                                       batch_size=spec.batch, max_degree=spec.degree_bound,
                                       layers=spec.layers, steps=spec.steps, marked=marked,
                                       level=spec.level, description="DP-GNN training"),
                            sampler_scheme=SAMPLING_SCHEME)
    return ledger


def check_level(data: GraphData, spec: DpgnnSpec) -> None:
    """:func:`~dpgnn_core.specs.subgraph.dpgnn_level` on loaded data."""
    dpgnn_level(spec, {"directed": data.directed, "name": data.name})


def _subgraphs(data: GraphData, spec: DpgnnSpec, rng: np.random.Generator,
               progress: StageProgress | None = None) -> Subgraphs:
    train = data.mask("train")
    ei = data.edge_index
    if data.directed and not is_symmetric(ei, data.num_nodes):
        ei = np.ascontiguousarray(ei[::-1])  # messages follow real edges (see dpgnn_sampler)
    sampled = sample_edgelists(ei, data.num_nodes, train, spec.degree_bound, rng, progress)
    return sample_subgraphs(sampled, data.num_nodes, train, spec.layers, spec.degree_bound,
                            progress)


#: What the structure defaults read, on demand: () ↦ (edge_index ``[2, E]``, N).
Structure = Callable[[], tuple[np.ndarray, int]]


def resolve_for_data(spec: DpgnnSpec, data: GraphData, n_train: int
                     ) -> tuple[DpgnnSpec, StructureDefaults]:
    """``spec`` with an unset K and batch chosen for ``data``
    (:func:`~dpgnn_core.methods.structure_defaults.resolve`): the degrees are read only at
    level ``node_feature``, where the structure is public."""
    return resolve_for_structure(spec, n_train, lambda: (data.edge_index, data.num_nodes))


def resolve_for_structure(spec: DpgnnSpec, n_train: int, structure: Structure
                          ) -> tuple[DpgnnSpec, StructureDefaults]:
    """:func:`resolve_for_data` from the edge list and N that ``structure()`` returns,
    called only at level ``node_feature`` (the early plan passes the dataset folder's)."""
    stats = (structure_stats(*structure(), n_train) if spec.level == "node_feature"
             else None)
    return resolve(spec, n_train, stats)


def resolve_plan_spec(spec: DpgnnSpec, n_train: int, structure: Structure
                      ) -> tuple[DpgnnSpec, StructureDefaults]:
    """``spec`` as the fit calibrates it (the structure defaults, then "train until
    spent" steps), and what the defaults chose."""
    spec, chosen = resolve_for_structure(spec, n_train, structure)
    return resolve_steps(spec, n_train, ledger_for), chosen


def train_dpgnn(data: GraphData, spec: DpgnnSpec, run: PrivateRun | None = None
                ) -> DpgnnResult:
    """Train DP-GNN on ``data``'s training split; see the module docstring.

    ``run``, the fit's engine (a bare one by default), calibrates and reserves the plan,
    follows training (a private run's step records hold ``epsilon``, ε spent so far) and
    the subgraph sampling (its ``progress``).

    Raises:
        DataError: not a node-classification dataset, no labels on training nodes, or a
            batch larger than the training set.
        PrivacyError: a budget too small for the plan (the message names the smallest ε),
            or level ``node`` on an undirected dataset.
    """
    n_train = check_node_task(data, spec, "DP-GNN")
    check_level(data, spec)
    spec, chosen = resolve_plan_spec(spec, n_train,
                                     lambda: (data.edge_index, data.num_nodes))
    run = run or PrivateRun()
    randomness = Randomness.for_spec(spec)
    sg = _subgraphs(data, spec, randomness.numpy_generator("subgraphs"), run.stage_progress)
    result = train_on_subgraphs(
        data, spec, method=f"dp-{spec.conv}", n_train=n_train, plan=ledger_for(spec, n_train),
        randomness=randomness,
        unit_sensitivity=2.0 * neighbourhood_size(spec.degree_bound, spec.layers),
        protects=PROTECTS[spec.level], subgraphs_at=lambda _: sg, all_nodes=False, run=run)
    result.report["occurrence_bound"] = sg.occurrence_bound
    result.report["marked_subgraphs"] = marked_subgraphs(spec)
    result.report["max_degree"] = spec.degree_bound
    result.report["structure_defaults"] = chosen.as_dict()
    return result


# --- the implementation (the catalogue's "dp-gnn" family: dp-gcn, dp-sage, dp-gin, dp-gat) -
from dpgnn_core.methods.brute_force.subgraphs import dpgnn_check  # noqa: E402

IMPLEMENTATION: Implementation = node_private(
    train=train_dpgnn, ledger_for=ledger_for, build=build_subgraph_model,
    evaluate=evaluate_dpgnn, eval_options=lambda spec: {"backend": spec.backend},
    sensitivity=(dpgnn_check(marked),))
