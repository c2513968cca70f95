r"""The auditor's record of one audit's canaries (:class:`Canaries`), the secret source of
their inclusion bits, and the table entry (:class:`CanaryKind`: how a kind is inserted and
scored) that each canary kind's module fills in. The kinds: :mod:`.node_canaries`,
:mod:`.edge_canaries`, :mod:`.star_canaries`, :mod:`.node_edge_canaries` and
:mod:`.graph_canaries`; the audit that reads the table: :mod:`.canaries`.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Literal, Protocol

import numpy as np
import numpy.typing as npt
import torch

from dpgnn_core.data.graph import GraphData
from dpgnn_core.errors import DataError

Relation = Literal["add/remove", "replace-one"]
Kind = Literal["node", "edge", "star", "node-edges", "graph"]

def secret_generator() -> np.random.Generator:
    """A numpy generator seeded with 128 bits from the operating system's CSPRNG: the
    canaries' inclusion bits must not be derivable from anything the run stores."""
    return np.random.default_rng(secrets.randbits(128))


@dataclass(frozen=True)
class Canaries:
    """The canaries of one audit: what the auditor keeps (the trainer sees ``data`` only).

    Attributes:
        kind (str): ``"node"`` or ``"edge"``.
        relation (str): ``"add/remove"`` or ``"replace-one"``.
        included (np.ndarray): bool ``[m]``, the secret inclusion bits.
        features (np.ndarray): node canaries: float32 ``[m, d']``, each canary's features
            in the audited feature space (d' = d + m); edge canaries: ``[0, 0]``.
        labels (np.ndarray): node canaries: int64 ``[m]``; edge canaries: empty.
        pairs (np.ndarray): edge canaries: int64 ``[m, 2]``, the endpoints (node ids of the
            audited data); node canaries: ``[0, 2]``.
        node_ids (np.ndarray): node canaries: int64 ``[m]``, the canary's node in the
            training data, -1 when it is not a node there (excluded under add/remove).

    Graph canaries (``kind="graph"``) use the same fields for a graph each:
    ``features`` is the row every node of the canary carries, ``labels`` the graph labels,
    ``pairs`` the canary graph's local edges, ``node_ids`` its graph id in the training
    data (see :mod:`~dpgnn_core.audit.graph_canaries`).
    """

    kind: Kind
    relation: Relation
    included: npt.NDArray[np.bool_]
    features: npt.NDArray[np.float32] = field(
        default_factory=lambda: np.zeros((0, 0), np.float32))
    labels: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, np.int64))
    pairs: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros((0, 2), np.int64))
    node_ids: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, np.int64))
    leaves: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros((0, 0), np.int64))

    @property
    def m(self) -> int:
        return int(self.included.shape[0])

    def save(self, path: str | Path) -> None:
        """Write the record to ``path`` (``.npz``), atomically: it is the auditor's, kept
        beside the audited dataset so the score step can read the bits after guessing."""
        from dpgnn_core.io import atomic_file

        arrays = {f.name: np.asarray(getattr(self, f.name)) for f in fields(self)}
        with atomic_file(path) as tmp, open(tmp, "wb") as fh:
            np.savez(fh, **arrays)  # type: ignore[arg-type]

    @classmethod
    def load(cls, path: str | Path) -> Canaries:
        """Read a record written by :meth:`save`."""
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
        return cls(kind=str(arrays.pop("kind")), relation=str(arrays.pop("relation")),  # type: ignore[arg-type]
                   **arrays)


def draw_bits(m: int, rng: np.random.Generator,
               included: npt.NDArray[np.bool_] | None = None) -> npt.NDArray[np.bool_]:
    """Each canary in with probability 1/2, or the caller's bits (a multi-run audit builds
    the same canary once in and once out). The draw is made either way, so the rest of the
    canary (labels, copied nodes) is the same for both."""
    bits = np.asarray(rng.random(m) < 0.5)
    if included is None:
        return bits
    forced = np.asarray(included, dtype=bool)
    if forced.shape != (m,):
        raise DataError("included must hold one bit per canary", field="included",
                        value=list(forced.shape))
    return forced


def check_node_data(data: GraphData, m: int) -> None:
    if data.task != "node" or data.multi_label:
        raise DataError("canaries are inserted into single-label node data", field="task",
                        value=data.task)
    if m < 1:
        raise DataError("an audit needs at least one canary", field="m", value=m)


class CanaryPlan(Protocol):
    """What a kind's insert and score read of an audit plan
    (:class:`~dpgnn_core.audit.canaries.AuditPlan`)."""

    @property
    def relation(self) -> Relation: ...

    @property
    def attack(self) -> str: ...

    @property
    def degree(self) -> int: ...


#: ``insert(plan, data, m, scale, rng, included)``: the training data and the record.
InsertFn = Callable[[CanaryPlan, GraphData, int, float, "np.random.Generator | None",
                     "npt.NDArray[np.bool_] | None"], "tuple[GraphData, Canaries]"]
#: ``score(plan, model, extra, data, canaries, spec)``: every canary's score (lower = "in").
ScoreFn = Callable[[CanaryPlan, torch.nn.Module, dict[str, Any], GraphData, "Canaries", Any],
                   "npt.NDArray[np.float64]"]


@dataclass(frozen=True)
class CanaryKind:
    """One row of the canary table: how a kind is inserted and how it is scored.

    Attributes:
        insert (callable): ``(plan, data, m, scale, rng, included)`` to
            ``(GraphData, Canaries)``.
        score (callable): ``(plan, model, extra, data, canaries, spec)`` to the scores.
    """

    insert: InsertFn
    score: ScoreFn


__all__ = [
    "Canaries",
    "CanaryKind",
    "CanaryPlan",
    "InsertFn",
    "Kind",
    "Relation",
    "ScoreFn",
    "check_node_data",
    "draw_bits",
    "secret_generator",
]
