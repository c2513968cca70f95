"""In-memory form of a dataset: numpy arrays, one object for node and graph classification."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

#: Split names in code order: ``split`` arrays hold these indices as int8.
SPLIT_NAMES: tuple[str, ...] = ("train", "val", "test", "unused")
TRAIN, VAL, TEST, UNUSED = 0, 1, 2, 3

Task = Literal["node", "graph"]


@dataclass
class GraphData:
    """A graph dataset held as numpy arrays.

    Args:
        name (str): dataset name.
        task (str): ``"node"`` (node classification) or ``"graph"`` (graph classification).
        x (np.ndarray): node features, float32 ``[n, d]``.
        edge_index (np.ndarray): directed edges, int64 ``[2, E]``; an undirected graph holds
            both directions.
        y (np.ndarray): node labels, int64 ``[n]`` with -1 for unlabeled; or, multi-label,
            int64 ``[n, C]`` of 0/1 with a row of -1 for unlabeled; for graph tasks all -1.
        split (np.ndarray): int8 ``[n]`` codes into :data:`SPLIT_NAMES`.
        num_classes (int): number of classes of the prediction target.
        directed (bool): whether the graph is directed.
        graph_id (np.ndarray, optional): int64 ``[n]``, the graph each node belongs to.
        graph_y (np.ndarray, optional): int64 ``[G]`` graph labels (graph tasks).
        graph_split (np.ndarray, optional): int8 ``[G]`` graph split codes (graph tasks).
        edge_attr (np.ndarray, optional): float32 ``[E, k]`` edge features.
        meta (dict): provenance, split scheme and cleaning counts written to the manifest.
    """

    name: str
    task: Task
    x: npt.NDArray[np.float32]
    edge_index: npt.NDArray[np.int64]
    y: npt.NDArray[np.int64]
    split: npt.NDArray[np.int8]
    num_classes: int
    directed: bool = False
    graph_id: npt.NDArray[np.int64] | None = None
    graph_y: npt.NDArray[np.int64] | None = None
    graph_split: npt.NDArray[np.int8] | None = None
    edge_attr: npt.NDArray[np.float32] | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def multi_label(self) -> bool:
        return bool(self.y.ndim == 2)

    def labeled(self) -> npt.NDArray[np.bool_]:
        """Mask of nodes that carry a label."""
        return np.asarray(self.y[:, 0] >= 0 if self.multi_label else self.y >= 0)

    @property
    def num_nodes(self) -> int:
        return int(self.x.shape[0])

    @property
    def num_edges(self) -> int:
        return int(self.edge_index.shape[1])

    @property
    def num_features(self) -> int:
        return int(self.x.shape[1])

    @property
    def num_graphs(self) -> int:
        return 0 if self.graph_y is None else int(self.graph_y.shape[0])

    def mask(self, split: str) -> npt.NDArray[np.bool_]:
        """Boolean node mask of one split (``"train"``, ``"val"``, ``"test"``, ``"unused"``)."""
        return np.asarray(self.split == SPLIT_NAMES.index(split))

    def split_counts(self) -> dict[str, int]:
        codes = self.graph_split if self.task == "graph" else self.split
        assert codes is not None
        counts = np.bincount(codes.astype(np.int64), minlength=len(SPLIT_NAMES))
        return {name: int(c) for name, c in zip(SPLIT_NAMES, counts, strict=True)}
