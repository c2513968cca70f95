"""What the staged compositions of GAP and ProGAP share: the graph their private
aggregation reads (:func:`prepare_graph`, the node-level degree check), one noise scale for
the whole composition (:func:`solve_composition`), the budget keeper's gate before a stage's
private computation (:func:`gate_plan`), what the privacy report says about the release
(:func:`release_report`), and the in-memory stages' common state (:class:`InMemoryStages`)."""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from dpgnn_core.data.graph import GraphData
from dpgnn_core.errors import DataError
from dpgnn_core.graph.gap_degree import check_degree_bound
from dpgnn_core.privacy import Ledger, PrivacyError, calibrate_noise, make_accountant
from dpgnn_core.privacy import gate as release_gate
from dpgnn_core.privacy.randomness import Randomness
from dpgnn_core.specs import GapSpec, ProgapSpec

#: Largest noise multiplier the calibrations of GAP, ProGAP and DPDGC accept: beyond it every
#: release is noise, so a budget that needs more is refused with the smallest ε reached at
#: this noise.
MAX_NOISE = 1e3


def prepare_graph(data: GraphData, spec: GapSpec | ProgapSpec
                  ) -> tuple[np.ndarray, dict[str, Any]]:
    """The edges PMA aggregates over: all of them. At node level the graph must already
    have every degree within D (:func:`~dpgnn_core.graph.gap_degree.check_degree_bound`
    refuses it otherwise, naming D but not the graph's degrees); no edge is dropped."""
    ei = np.asarray(data.edge_index)
    info: dict[str, Any] = {"edges_before": int(ei.shape[1]), "directed": is_directed(data)}
    if spec.level == "node":
        assert spec.max_degree is not None
        check_degree_bound(ei, data.num_nodes, spec.max_degree, directed=is_directed(data))
        if data.meta.get("cleaning", {}).get("degree_bound"):
            warnings.warn("this dataset was degree-bounded by GAP's edge sampler (by the "
                          "removed `dpgnn materialize --sampler gap-degree`): node-level "
                          "privacy holds for the bounded graph, not for the graph it was "
                          "sampled from",
                          stacklevel=2)
            info["bounded_by_sampler"] = True
    if ei.shape[1] == 0:
        raise DataError("no edge left to aggregate over", field="edge_index", value=0)
    info["edges_after"] = int(ei.shape[1])
    return ei, info


def is_directed(data: GraphData) -> bool:
    """The manifest flag ``directed``, never inferred from the edges: a symmetric edge list
    flagged directed is still a directed graph (one record = one directed edge)."""
    return bool(data.directed)


def solve_composition(spec: GapSpec | ProgapSpec, make: Callable[[float], Ledger],
                      delta: float, report: dict[str, Any], what: str) -> float:
    """The common noise scale z of a staged composition (GAP, ProGAP) calibrated to
    ``spec.epsilon`` at ``delta`` (0 for a non-private level), with the budget fields added
    to ``report``.

    Raises:
        PrivacyError: no noise up to :data:`MAX_NOISE` reaches the target (``what`` names
            the composition).
    """
    if spec.level == "none":
        report.update({"epsilon": math.inf, "noise_multiplier": 0.0})
        return 0.0
    assert spec.epsilon is not None
    try:
        cal = calibrate_noise(make, spec.epsilon, delta, make_accountant(spec.accountant),
                              max_noise=MAX_NOISE)
    except PrivacyError as e:
        raise PrivacyError(f"{what}: {e}") from e
    report.update({"epsilon": cal.epsilon, "target_epsilon": spec.epsilon,
                   "noise_multiplier": cal.noise_multiplier, "accountant": spec.accountant})
    return cal.noise_multiplier


def release_report(data: GraphData, spec: GapSpec | ProgapSpec, parameters: str,
                   own_input: str, aggregation: str) -> dict[str, Any]:
    """What a GAP-style report says about its release: directedness, row clipping, the
    randomness, what is protected at the spec's level and how inference spends nothing.
    ``parameters`` names the private modules, ``own_input`` what of node v's own data its
    prediction reads un-noised, ``aggregation`` the aggregations (for the inductive case)."""
    directed = is_directed(data)
    inductive = bool(data.meta.get("split", {}).get("inductive", False))
    unit = "one directed edge" if directed else "one undirected edge (both directions)"
    return {
        "row_clip": spec.row_clip, "directed": directed,
        "selection": ("the weights of the best validation epoch (validation labels are not "
                      "protected at this level; the release is read as post-processing)"
                      if spec.selection == "best-val" else "the last step's weights"),
        **Randomness.for_spec(spec).describe(),
        "protects": {
            "edge": f"aggregations X(1..K), parameters and predictions against adding or "
                    f"removing {unit} (graph flagged {'directed' if directed else 'undirected'}"
                    "); node features and labels are not protected",
            "node": f"{parameters} and the released aggregations "
                    "X(1..K) against adding or removing one node with its edges, on graphs "
                    f"whose every {'in + out degree' if directed else 'degree'} is <= "
                    f"{spec.max_degree} (a graph beyond it is refused, which reveals that "
                    "bit). Predictions: node v's prediction also reads v's own features "
                    f"through {own_input}, which is not noised; the predictions of all "
                    "nodes other than v are post-processing of the private outputs and "
                    "their own data, so they are protected against v (a joint-DP-style, "
                    "per-node statement), v's own prediction is not",
            "none": "nothing"}[spec.level],
        "inference": (
            f"inductive: {aggregation} once on the whole disjoint graph, i.e. separately on "
            "the training and test graphs (parallel composition): no extra budget"
            if inductive else "transductive: test nodes reuse the cached private "
            "aggregations (no extra budget)")}


def gate_plan(spec: GapSpec | ProgapSpec, plan: Ledger, n_train: int) -> None:
    """The whole calibrated ``plan`` of a staged run to the budget keeper, before a stage's
    private computation (a second call in one run reserves nothing more)."""
    release_gate.before_release(plan, _plan_info(spec, n_train))


def admit_plan(spec: GapSpec | ProgapSpec, plan: Ledger, n_train: int) -> None:
    """The whole calibrated ``plan`` to the budget keeper's check, before a stage that
    releases nothing private trains (the edge level's encoder or first stage): a plan the
    budget refuses is refused before any stage runs (:func:`~dpgnn_core.privacy.gate.
    admit`); nothing is reserved until the first private computation."""
    release_gate.admit(plan, _plan_info(spec, n_train))


def _plan_info(spec: GapSpec | ProgapSpec, n_train: int) -> dict[str, Any]:
    delta = spec.delta if spec.delta is not None else 1.0 / (10 * n_train)
    return {"method": spec.method, "epsilon": spec.epsilon, "delta": delta}


@dataclass
class InMemoryStages:
    """What the in-memory stages of GAP and ProGAP share: the data, the spec, the progress
    callback, the calibrated noise scale and the graph (with what was checked on it)."""

    data: GraphData
    spec: Any
    on_step: Callable[[int, dict[str, float]], None] | None
    graph_info: dict[str, Any] | None = None

    def noise_scale(self, calibration: tuple[Ledger, float, dict[str, Any]]) -> float:
        return calibration[1]

    def graph(self) -> np.ndarray:
        ei, self.graph_info = prepare_graph(self.data, self.spec)
        return ei

