"""Training subgraphs: one flat container for every sampler, its Parquet artifact, and the
padded dense batches that training consumes.

Artifact (a folder, written atomically)::

    subgraphs.parquet        subgraph_id int64, root int64, nodes list<int64> (root first)
    subgraph_edges.parquet   subgraph_id int64, src int64, dst int64 (global ids; src sends
                             to dst)
    manifest.json            sampler spec, seed, dataset sha256, counts, the declared
                             per-node occurrence bound and batch-sampling scheme, sha256s
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.parquet as pq
import torch

from dpgnn_core.errors import DataError
from dpgnn_core.io import atomic_dir, sha256_file, sha256_json, write_json_atomic

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


def _list_array(offsets: IntArray, values: IntArray) -> pa.LargeListArray:
    return pa.LargeListArray.from_arrays(pa.array(offsets), pa.array(values))


def write_subgraphs(sg: Subgraphs, folder: str | Path, meta: dict[str, Any], *,
                    overwrite: bool = False) -> dict[str, Any]:
    """Write ``sg`` as a subgraph artifact folder, atomically; return its manifest."""
    folder = Path(folder)
    with atomic_dir(folder, overwrite=overwrite) as tmp:
        ids = np.arange(sg.num_subgraphs, dtype=np.int64)
        pq.write_table(pa.table({"subgraph_id": ids, "root": sg.roots,
                                 "nodes": _list_array(sg.offsets, sg.nodes)}),
                       tmp / "subgraphs.parquet")
        eid = np.repeat(ids, np.diff(sg.edge_offsets))
        pq.write_table(pa.table({"subgraph_id": eid, "src": sg.edges[0], "dst": sg.edges[1]}),
                       tmp / "subgraph_edges.parquet")
        files = {f: {"sha256": sha256_file(tmp / f), "bytes": (tmp / f).stat().st_size}
                 for f in ("subgraphs.parquet", "subgraph_edges.parquet")}
        sizes = sg.sizes()
        manifest = {
            **meta,
            "kind": "subgraphs",
            "num_subgraphs": sg.num_subgraphs,
            "num_memberships": int(sg.nodes.shape[0]),
            "num_edges": int(sg.edges.shape[1]),
            "max_size": int(sizes.max(initial=0)),
            "occurrence_bound": int(sg.occurrence_bound),
            "sampling_scheme": sg.sampling_scheme,
            "files": files,
            "content_sha256": sha256_json({f: v["sha256"] for f, v in files.items()}),
        }
        write_json_atomic(tmp / "manifest.json", manifest)
    return manifest


def read_subgraphs(folder: str | Path) -> Subgraphs:
    """Read a subgraph artifact folder (checksums verified)."""
    import json

    folder = Path(folder)
    mpath = folder / "manifest.json"
    if not mpath.is_file():
        raise DataError("not a subgraph folder: manifest.json is missing", path=mpath)
    manifest = json.loads(mpath.read_text())
    for name, info in manifest["files"].items():
        if sha256_file(folder / name) != info["sha256"]:
            raise DataError("checksum mismatch", path=folder / name, field="sha256")
    t = pq.read_table(folder / "subgraphs.parquet")
    nodes_col = t.column("nodes").combine_chunks()
    offsets = nodes_col.offsets.to_numpy().astype(np.int64)
    nodes = nodes_col.values.to_numpy().astype(np.int64)
    e = pq.read_table(folder / "subgraph_edges.parquet")
    eid = e.column("subgraph_id").to_numpy()
    counts = np.bincount(eid, minlength=t.num_rows)
    eoff = np.zeros(t.num_rows + 1, np.int64)
    np.cumsum(counts, out=eoff[1:])
    return Subgraphs(roots=t.column("root").to_numpy().astype(np.int64), offsets=offsets,
                     nodes=nodes, edge_offsets=eoff,
                     edges=np.stack([e.column("src").to_numpy(),
                                     e.column("dst").to_numpy()]).astype(np.int64),
                     occurrence_bound=int(manifest["occurrence_bound"]),
                     sampling_scheme=str(manifest["sampling_scheme"]))


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
