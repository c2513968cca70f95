"""Training subgraphs: one flat container for every subgraph sampler, and the padded
dense batches that training consumes. Sampled subgraphs are never written to disk:
the proofs of DP-GNN and DRW need the sampling secret (docs/privacy.md)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import torch

from dpgnn_core.errors import DataError

IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class Subgraphs:
    """Subgraphs in flat form.

    Attributes:
        roots (np.ndarray): root of each subgraph ``[S]`` (subgraph id = position).
        offsets (np.ndarray): ``[S + 1]``; nodes of subgraph i are
            ``nodes[offsets[i]:offsets[i+1]]``, root first.
        nodes (np.ndarray): global node ids.
        edge_offsets (np.ndarray): ``[S + 1]`` into ``edges``.
        edges (np.ndarray): ``[2, M]`` message edges (src sends to dst, global ids).
        occurrence_bound (int): the declared bound on how many subgraphs a node occurs in.
        sampling_scheme (str): the batch-sampling scheme the accountant must assume.
    """

    roots: IntArray
    offsets: IntArray
    nodes: IntArray
    edge_offsets: IntArray
    edges: IntArray
    occurrence_bound: int
    sampling_scheme: str

    @property
    def num_subgraphs(self) -> int:
        return int(self.roots.shape[0])

    def sizes(self) -> IntArray:
        out: IntArray = np.diff(self.offsets)
        return out

    def occurrences(self, num_nodes: int) -> IntArray:
        """How many subgraphs each node occurs in."""
        out: IntArray = np.bincount(self.nodes, minlength=num_nodes).astype(np.int64)
        return out

    def subgraph(self, i: int) -> tuple[IntArray, IntArray]:
        """(nodes, message edges) of subgraph ``i``."""
        return (self.nodes[self.offsets[i]:self.offsets[i + 1]],
                self.edges[:, self.edge_offsets[i]:self.edge_offsets[i + 1]])


@dataclass(frozen=True)
class DenseBatch:
    """Padded dense batch: ``x`` [B, S, d], ``mask`` [B, S], ``adj`` [B, S, S]; the root of
    every subgraph at index 0. ``adj[b, i, j]`` is the weight of the message j -> i;
    ``nodes`` [B, S] holds the global node ids (-1 on padding)."""

    x: torch.Tensor
    mask: torch.Tensor
    adj: torch.Tensor
    roots: torch.Tensor
    nodes: torch.Tensor


def build_batch(sg: Subgraphs, ids: IntArray, features: npt.NDArray[np.float32], *,
                size: int | None = None, normalisation: str = "gcn") -> DenseBatch:
    """Dense tensors for the subgraphs ``ids``.

    Args:
        sg (Subgraphs): the subgraphs.
        ids (np.ndarray): subgraph ids of the batch.
        features (np.ndarray): node features ``[n, d]``.
        size (int, optional): padded size S; the largest subgraph in the batch by default.
            A subgraph larger than ``size`` is an error, never truncated.
        normalisation (str, optional): ``gcn`` for DP-GNN's :math:`(D+I)^{-1}(A+I)` (row
            normalised, self-loops on real nodes), or ``none`` for the 0/1 adjacency.
            (default: ``"gcn"``)
    """
    ids = np.asarray(ids, dtype=np.int64)
    starts, ends = sg.offsets[ids], sg.offsets[ids + 1]
    counts = ends - starts
    s = int(counts.max(initial=1)) if size is None else int(size)
    if (counts > s).any():
        raise DataError(f"a subgraph has {int(counts.max())} nodes, more than the padded size",
                        field="size", value=s)
    b = ids.shape[0]
    slot = np.repeat(np.arange(b), counts)
    local = np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts)
    glob = sg.nodes[np.repeat(starts, counts) + local]
    x = torch.zeros((b, s, features.shape[1]), dtype=torch.float32)
    x[slot, local] = torch.from_numpy(np.ascontiguousarray(features[glob]))
    mask = torch.zeros((b, s), dtype=torch.bool)
    mask[slot, local] = True
    # Message edges to local positions: look (slot, global id) up among the batch's members.
    estarts, eends = sg.edge_offsets[ids], sg.edge_offsets[ids + 1]
    ecounts = eends - estarts
    eslot = np.repeat(np.arange(b), ecounts)
    epos = np.repeat(estarts, ecounts) + (np.arange(int(ecounts.sum()))
                                          - np.repeat(np.cumsum(ecounts) - ecounts, ecounts))
    n = np.int64(max(int(sg.nodes.max(initial=0)), int(features.shape[0])) + 1)
    keys = slot.astype(np.int64) * n + glob
    order = np.argsort(keys)
    src_k = eslot * n + sg.edges[0, epos]
    dst_k = eslot * n + sg.edges[1, epos]
    src_l = local[order[np.searchsorted(keys[order], src_k)]]
    dst_l = local[order[np.searchsorted(keys[order], dst_k)]]
    adj = torch.zeros((b, s, s), dtype=torch.float32)
    adj[eslot, dst_l, src_l] = 1.0
    if normalisation == "gcn":
        adj[slot, local, local] = 1.0
        deg = adj.sum(dim=2, keepdim=True).clamp_min(1.0)
        adj = adj / deg
    elif normalisation != "none":
        raise DataError("unknown normalisation; choose gcn or none", field="normalisation",
                        value=normalisation)
    nodes = torch.full((b, s), -1, dtype=torch.int64)
    nodes[slot, local] = torch.from_numpy(glob)
    return DenseBatch(x=x, mask=mask, adj=adj, roots=torch.from_numpy(sg.roots[ids]),
                      nodes=nodes)
