"""Disjoint random-walk training (Ayle et al.): DRW, DRW-R and DRW-D.

The training nodes are partitioned into disjoint random-walk subgraphs (walk length L, R
walks per root for DRW-R); each subgraph is one record, its loss the mean over its nodes.
A node lies in exactly one subgraph, so replacing its features and label changes one
clipped gradient: noise std λ·2C. The walks are functions of the edges, so the edges are
public (level ``node_feature``, as Ayle et al. state): replacing a node's edges could move
it and others between walks and is not covered. Batches of m subgraphs are drawn uniformly
without replacement from a partition of at least ceil(N / (R·L + 1)) subgraphs, so the
sampling rate is at most
m / ceil(N / (R·L + 1)) (:func:`~dpgnn_core.privacy.drw_sampling_rate`); the ledger holds
one :class:`~dpgnn_core.privacy.UniformGaussianEvent`. DRW-D draws a fresh partition every
k steps: at every step a node still lies in one subgraph of the partition sampled from.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dpgnn_core.data.graph import GraphData
from dpgnn_core.graph.dpgnn_sampler import SAMPLING_SCHEME
from dpgnn_core.graph.random_walk import drw, drw_partitions
from dpgnn_core.graph.subgraphs import Subgraphs
from dpgnn_core.methods._private import check_node_task, resolve_steps
from dpgnn_core.methods._subgraph import (
    SubgraphResult,
    build_subgraph_model,
    evaluate_subgraph_model,
    train_on_subgraphs,
)
from dpgnn_core.methods.contract import Implementation, node_private
from dpgnn_core.methods.private_run import PrivateRun
from dpgnn_core.privacy import Ledger, UniformGaussianEvent, drw_sampling_rate
from dpgnn_core.privacy.randomness import Randomness
from dpgnn_core.specs import DrwSpec

#: The clipped gradient sum's sensitivity per unit of clipping norm: one node's features
#: and label replaced change the one walk subgraph that holds it (a disjoint partition).
UNIT_SENSITIVITY = 2.0

evaluate_drw = evaluate_subgraph_model


def ledger_for(spec: DrwSpec, num_train: int) -> Callable[[float], Ledger]:
    """λ ↦ the ledger of the whole training plan (an unset batch size becomes every
    subgraph a partition is guaranteed to have, at most 16384)."""
    spec = with_drw_batch_size(spec, num_train)
    rate = drw_sampling_rate(num_train, spec.batch, spec.walk_length, spec.restarts)

    def ledger(lam: float) -> Ledger:
        return Ledger().add(UniformGaussianEvent(noise_multiplier=lam, sampling_rate=rate,
                                                 steps=spec.steps, level="node_feature",
                                                 description=f"{spec.variant.upper()} "
                                                 "training"),
                            sampler_scheme=SAMPLING_SCHEME)
    return ledger


def with_drw_batch_size(spec: DrwSpec, num_train: int) -> DrwSpec:
    """``spec`` with its batch size set from the ceil(N / (R·L + 1)) subgraphs a partition of
    ``num_train`` nodes is guaranteed to have."""
    spec_: DrwSpec = spec.with_batch_size(-(-num_train // (spec.restarts * spec.walk_length
                                                         + 1)))
    return spec_


def resolve_plan_spec(spec: DrwSpec, num_train: int) -> DrwSpec:
    """``spec`` as the fit calibrates it: the batch size of :func:`with_drw_batch_size`,
    then "train until spent" steps."""
    out: DrwSpec = resolve_steps(with_drw_batch_size(spec, num_train), num_train,
                                 ledger_for)
    return out


def train_drw(data: GraphData, spec: DrwSpec, run: PrivateRun | None = None
              ) -> SubgraphResult:
    """Train on disjoint random-walk subgraphs; see the module docstring.

    ``run``, the fit's engine (a bare one by default), calibrates and reserves the plan,
    follows training (a private run's step records hold ``epsilon``, ε spent so far) and
    the walks of the first partition (its ``progress``)."""
    n_train = check_node_task(data, spec, spec.variant.upper())
    spec = resolve_plan_spec(spec, n_train)
    train = data.mask("train")
    ledger_of = ledger_for(spec, n_train)  # refuses a batch larger than the smallest partition
    randomness = Randomness.for_spec(spec)
    walks = randomness.numpy_generator("walks")
    run = run or PrivateRun()
    progress = run.stage_progress
    if spec.variant == "drw-d":
        parts = drw_partitions(data.edge_index, data.num_nodes, train, spec.walk_length,
                               restarts=spec.restarts, rng=walks, progress=progress)
        state: dict[str, Any] = {"sg": None}

        def subgraphs_at(step: int) -> Subgraphs:
            if state["sg"] is None or (step - 1) % spec.resample_every == 0:
                state["sg"] = next(parts)
            sg: Subgraphs = state["sg"]
            return sg
    else:
        fixed = drw(data.edge_index, data.num_nodes, train, spec.walk_length,
                    restarts=spec.restarts, rng=walks, progress=progress)

        def subgraphs_at(step: int) -> Subgraphs:
            return fixed
    result = train_on_subgraphs(
        data, spec, method=f"{spec.variant}-{spec.conv}", n_train=n_train, plan=ledger_of,
        randomness=randomness,
        unit_sensitivity=UNIT_SENSITIVITY,
        protects="model parameters against replacing one training node's features and label "
        "(replace-one, Ayle et al.'s relation); the graph structure is public: the walks and "
        "the number of subgraphs are functions of the edges, which are not protected",
        subgraphs_at=subgraphs_at, all_nodes=True, run=run)
    return result


# --- the implementation (the catalogue's "drw" family: drw-*, drw-r-*, drw-d-*) ------------
from dpgnn_core.methods.brute_force.subgraphs import drw_check  # noqa: E402

IMPLEMENTATION: Implementation = node_private(
    train=train_drw, ledger_for=ledger_for, build=build_subgraph_model, evaluate=evaluate_drw,
    eval_options=lambda spec: {"backend": spec.backend},
    sensitivity=(drw_check(UNIT_SENSITIVITY),))
