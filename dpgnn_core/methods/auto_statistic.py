"""The one private statistic ``dpgnn run auto`` may spend ε on: a noisy mean degree, at the
levels whose edges are protected (``node``, ``k_neighbor``).

The statistic is the number of edges m (an undirected edge once; a directed edge once),
released with Gaussian noise of standard deviation z·Δ, where Δ is the L2 (here also L1:
one number) sensitivity of m under the level's neighbouring relation
(:func:`edge_count_sensitivity`; derived in docs/privacy.md, "dpgnn run auto"):

* ``node`` (add/remove one node with its edges, every degree <= D; undirected degree, or
  in + out degree on a directed graph, as the node-level methods bound it): the node's
  edges go with it, at most D of them, and no other edge changes: Δ = D;
* ``k_neighbor`` (add/remove a node's features and label and / or up to k of its edges):
  Δ = k.

The mean degree the rules read is 2 m̃ / N on an undirected graph and m̃ / N (mean
in-degree) on a directed one, N public as for every method here (δ = 1/(10 N_train)).
The noise multiplier z is a function of public inputs only (:func:`noise_for`): the
estimate's standard deviation is :data:`TARGET_SD` degrees, which separates the sparse
graphs (mean degree 2.7-3.9) from the schools (mean degree 40-90) by the rules' threshold
of 10, and costs little (z >= N / Δ).

The release is one Gaussian mechanism, a :class:`~dpgnn_core.privacy.GaussianEvent` at the
level (relation add/remove), noise from the secret generator
(:class:`~dpgnn_core.privacy.randomness.Randomness`). Its ε at δ_c is charged beside the
chosen method's (basic composition: ε_c + ε_m = the user's ε at δ_c + δ_m = δ).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

#: The standard deviation (in degrees) of the noisy mean degree.
TARGET_SD = 2.0
#: The largest noise multiplier used (a cheaper release changes nothing measurable).
MAX_NOISE = 1000.0
#: The statistic is not bought when it would cost more than this share of the user's ε:
#: the rules then fall back to what the public inputs alone decide.
MAX_SHARE = 0.1
#: The share of the user's δ given to the statistic (the method keeps the rest).
DELTA_SHARE = 0.1


def edge_count_sensitivity(level: str, *, max_degree: int | None = None,
                           k: int | None = None) -> float:
    """Δ of the edge count m under ``level``'s relation (module docstring).

    Raises:
        ValueError: a level without a statistic, or its bound missing.
    """
    if level == "node":
        if max_degree is None:
            raise ValueError("level node: the edge count's sensitivity is the bound D")
        return float(max_degree)
    if level == "k_neighbor":
        return float(k or 1)
    raise ValueError(f"level {level!r} releases no degree statistic")


def edge_count(edge_index: npt.NDArray[np.int64], directed: bool) -> int:
    """m: the directed edges, or the undirected ones (each stored both ways, counted
    once)."""
    e = int(np.asarray(edge_index).shape[1])
    return e if directed else e // 2


def noise_for(num_nodes: int, sensitivity: float, directed: bool) -> float:
    """z such that the mean degree's standard deviation is :data:`TARGET_SD`: sd =
    (2 or 1)·z·Δ / N, so z = TARGET_SD·N / ((2 or 1)·Δ); at most :data:`MAX_NOISE`."""
    scale = 1.0 if directed else 2.0
    return float(min(MAX_NOISE, TARGET_SD * num_nodes / (scale * sensitivity)))


@dataclass(frozen=True)
class DegreePlan:
    """The statistic's release, fixed from public inputs before it is made.

    Args:
        level (str): the level (the event's unit).
        sensitivity (float): Δ of the edge count.
        noise_multiplier (float): z (std z·Δ).
        num_nodes (int): N.
        directed (bool): the manifest's flag.
        delta (float): δ_c, the statistic's share of δ.
        epsilon (float): ε_c, the Gaussian mechanism's ε at δ_c (PLD accountant, tight).
    """

    level: str
    sensitivity: float
    noise_multiplier: float
    num_nodes: int
    directed: bool
    delta: float
    epsilon: float

    def event(self) -> Any:
        """The release's privacy event."""
        from dpgnn_core.privacy import GaussianEvent

        return GaussianEvent(noise_multiplier=self.noise_multiplier,
                             level=self.level,  # type: ignore[arg-type]
                             relation="add_remove")

    def mean_degree(self, count: float) -> float:
        """The mean degree from an edge count (noisy or not)."""
        return (1.0 if self.directed else 2.0) * count / max(1, self.num_nodes)

    def as_dict(self) -> dict[str, Any]:
        return {"statistic": "mean degree from a noisy edge count (Gaussian)",
                "level": self.level, "sensitivity": self.sensitivity,
                "noise_multiplier": self.noise_multiplier, "num_nodes": self.num_nodes,
                "directed": self.directed, "delta": self.delta, "epsilon": self.epsilon}


def plan(level: str, num_nodes: int, directed: bool, delta: float, *,
         max_degree: int | None = None, k: int | None = None) -> DegreePlan:
    """The statistic's release at ``level`` from public inputs: Δ, z, its δ_c (a share
    :data:`DELTA_SHARE` of ``delta``) and its ε_c at δ_c."""
    from dpgnn_core.privacy import Ledger, epsilon

    sens = edge_count_sensitivity(level, max_degree=max_degree, k=k)
    z = noise_for(num_nodes, sens, directed)
    draft = DegreePlan(level=level, sensitivity=sens, noise_multiplier=z,
                       num_nodes=int(num_nodes), directed=bool(directed),
                       delta=DELTA_SHARE * delta, epsilon=0.0)
    eps = epsilon(Ledger().add(draft.event()), draft.delta, accountant="pld")
    return DegreePlan(**{**draft.__dict__, "epsilon": float(eps)})


def check_bound(edge_index: npt.NDArray[np.int64], p: DegreePlan) -> None:
    """At node level, refuse a graph with a degree above D (Δ = D holds only within it),
    with the node-level methods' own check and message.

    Raises:
        DataError: some degree exceeds D.
    """
    if p.level == "node":
        from dpgnn_core.graph.gap_degree import check_degree_bound

        check_degree_bound(edge_index, p.num_nodes, int(p.sensitivity), directed=p.directed,
                           method="dpgnn run auto's node-level degree statistic",
                           instead="--level k_neighbor or node_feature")


def release(edge_index: npt.NDArray[np.int64], p: DegreePlan,
            rng: np.random.Generator) -> float:
    """m + N(0, (z·Δ)²): the noisy edge count (``rng``: a secret generator).

    At node level Δ = D holds only on a graph whose every degree is within D: a graph
    beyond it is refused first, with the node-level methods' own check and message (one
    bit, "some degree exceeds D", as theirs; nothing is released).

    Raises:
        DataError: at node level, a degree above D.
    """
    check_bound(edge_index, p)
    return float(edge_count(edge_index, p.directed)
                 + rng.normal(0.0, p.noise_multiplier * p.sensitivity))


__all__ = ["DELTA_SHARE", "MAX_NOISE", "MAX_SHARE", "TARGET_SD", "DegreePlan",
           "check_bound", "edge_count", "edge_count_sensitivity", "noise_for", "plan", "release"]
