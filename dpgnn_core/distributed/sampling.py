"""DP-GNN's in-degree bound (SAMPLE-EDGELISTS) on a partitioned dataset, as Dask work.

The single-process sampler (:func:`~dpgnn_core.graph.dpgnn_sampler.sample_edgelists`) keeps
each candidate edge u -> v (u != v, both training nodes) independently with probability
min(1, K / (2 |RE_v|)), then drops every node whose kept in-degree still exceeds K: its own
list is emptied and it is removed from every other list. Everything but that last removal
depends on the destination's own edge list, which its destination partition holds whole
(edges are partitioned by destination range). So it runs in two passes:

1. every destination block (one worker task each) reads its edges and the training flags
   of their ends, draws one float32 uniform per candidate from a generator it takes from
   :class:`~dpgnn_core.privacy.randomness.Randomness` on the worker (secret: seeded from
   the worker's OS CSPRNG, never stored or sent back), thins its lists with the very
   function of the single-process sampler
   (:func:`~dpgnn_core.graph.dpgnn_sampler.thin_edgelists`), writes the kept edges to a
   scratch file and returns the ids of its nodes above K;
2. the ids above K (at most ``kept edges / K`` of them) go to every block, which removes
   the edges with either end among them and writes its final partition.

Given the same uniforms, the result is the single-process sampler's edge for edge
(``tests/dpgnn_core/test_distributed_sampling.py`` feeds it the blocks' draws); every
kept in-degree is <= K whatever the input degrees. docs/privacy.md ("DP-GNN's in-degree
bound on partitions") has the argument.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.parquet as pq

from dpgnn_core.data.graph import SPLIT_NAMES
from dpgnn_core.data.partitioned import (
    Bounds,
    part_name,
    partition_bounds,
    read_edge_block,
    verify_partitioned,
)
from dpgnn_core.data.store import _split_codes
from dpgnn_core.distributed.memory import releasing
from dpgnn_core.errors import DataError
from dpgnn_core.graph.dpgnn_sampler import candidates, thin_edgelists
from dpgnn_core.io import atomic_dir, sha256_file
from dpgnn_core.privacy.randomness import Randomness

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]
TRAIN = SPLIT_NAMES.index("train")


def edgelist_stream(block: int) -> str:
    """The name of block ``block``'s stream of edge draws (what a reproducible
    :class:`Randomness` derives its generator from; a secret one ignores it)."""
    return f"dpgnn/edgelists/block{block}"


def read_train_block(dataset: str | Path, block: int) -> BoolArray:
    """Node partition ``block``'s training flags (its split column)."""
    p = Path(dataset) / part_name("nodes", block)
    codes = _split_codes(pq.read_table(p, columns=["split"]).column("split"), path=p)
    return np.asarray(codes == TRAIN)


def train_flags(dataset: str | Path, nodes: IntArray, bounds: Bounds) -> BoolArray:
    """The training flags of ``nodes`` (global ids), one node partition read at a time."""
    starts = np.array([lo for lo, _ in bounds], dtype=np.int64)
    owner = np.searchsorted(starts, nodes, side="right") - 1
    out = np.zeros(nodes.shape[0], dtype=bool)
    for j in np.unique(owner):
        sel = owner == j
        out[sel] = read_train_block(dataset, int(j))[nodes[sel] - starts[j]]
    return out


@dataclass(frozen=True)
class BlockJob:
    """One destination block of the sampling (nothing secret in it: the generator is
    drawn on the worker from ``randomness``)."""

    dataset: str
    block: int
    bounds: Bounds
    num_nodes: int
    max_degree: int
    scratch: str
    randomness: Randomness


def _scratch(job: BlockJob) -> Path:
    return Path(job.scratch) / f"kept-{job.block:05d}.npy"


@releasing
def thin_block(job: BlockJob) -> dict[str, Any]:
    """Pass 1 (a worker's task): block ``job.block``'s candidates thinned, kept edges to a
    scratch file; returns its candidate count and the ids of its nodes above K."""
    src, dst = read_edge_block(job.dataset, job.block, job.bounds, job.num_nodes)
    lo, hi = job.bounds[job.block]
    own, of_src = read_train_block(job.dataset, job.block), train_flags(job.dataset, src,
                                                                         job.bounds)
    every = bool(own.all()) and bool(of_src.all())
    cand = candidates(src, dst, None if every else of_src, None if every else own[dst - lo])
    src, dst = src[cand], dst[cand]
    rng = job.randomness.numpy_generator(edgelist_stream(job.block))
    uniforms: npt.NDArray[np.float32] = np.asarray(rng.random(src.shape[0], dtype=np.float32))
    keep, over = thin_edgelists(dst - lo, hi - lo, job.max_degree, uniforms)
    np.save(_scratch(job), np.stack([src[keep], dst[keep]]))
    return {"block": job.block, "candidates": int(cand.sum()),
            "over": (np.flatnonzero(over) + lo).astype(np.int64)}


@releasing
def drop_block(job: BlockJob, over: IntArray, out: str) -> dict[str, Any]:
    """Pass 2 (a worker's task): block ``job.block``'s kept edges without those with an
    end in ``over`` (sorted ids), sorted by (dst, src), to ``out``'s edge partition."""
    kept = np.load(_scratch(job))
    src, dst = kept[0], kept[1]
    if over.size:
        stay = ~np.isin(src, over, assume_unique=False) & ~np.isin(dst, over)
        src, dst = src[stay], dst[stay]
    order = np.lexsort((src, dst))
    path = Path(out) / part_name("edges", job.block)
    tmp = path.with_name(f".{path.name}.tmp-{uuid.uuid4().hex[:8]}")
    pq.write_table(pa.table({"src": pa.array(src[order]), "dst": pa.array(dst[order])}), tmp)
    tmp.replace(path)
    _scratch(job).unlink()
    return {"block": job.block, "rows": int(src.shape[0]), "sha256": sha256_file(path)}


@dataclass
class PartitionedEdges:
    """The result of :func:`sample_edgelists_partitioned`: ``folder/edges/part-*.parquet``
    (the kept edges of each destination block, sorted by (dst, src)).

    Args:
        folder (Path): where the partitions are.
        bounds (list): the node ranges of the blocks.
        dropped_nodes (np.ndarray): the nodes removed for a kept in-degree above K.
        candidate_edges (int): the candidates before sampling.
        edge_rows (list): each partition's kept edges.
        files (dict): ``edges/part-i.parquet`` -> sha256.
    """

    folder: Path
    bounds: Bounds
    dropped_nodes: IntArray
    candidate_edges: int
    edge_rows: list[int] = field(default_factory=list)
    files: dict[str, str] = field(default_factory=dict)

    def edge_index(self) -> IntArray:
        """All kept edges ``[2, E']`` sorted by (src, dst), as the single-process sampler
        returns them (for graphs that fit one process)."""
        parts = [pq.read_table(self.folder / part_name("edges", b))
                 for b in range(len(self.bounds))]
        src = np.concatenate([t.column("src").to_numpy() for t in parts]).astype(np.int64)
        dst = np.concatenate([t.column("dst").to_numpy() for t in parts]).astype(np.int64)
        order = np.lexsort((dst, src))
        return np.stack([src[order], dst[order]])


def sample_edgelists_partitioned(client: Any, dataset: str | Path, out: str | Path,
                                 max_degree: int, randomness: Randomness | None = None, *,
                                 manifest: dict[str, Any] | None = None,
                                 overwrite: bool = False) -> PartitionedEdges:
    """SAMPLE-EDGELISTS over a partitioned dataset on ``client``'s workers (module
    docstring), written atomically to ``out``.

    Args:
        client (distributed.Client): where the blocks run.
        dataset (str or Path): the partitioned dataset folder (checked first, every
            partition hashed by the workers, unless ``manifest`` is that check's result).
        out (str or Path): the folder to write.
        max_degree (int): K >= 1.
        randomness (Randomness, optional): the draws' source; secret when omitted.
        manifest (dict, optional): :func:`verify_partitioned`'s result, if already run.
        overwrite (bool, optional): replace an existing ``out`` once the new one is whole.

    Raises:
        DataError: K not an integer >= 1, a directed graph (its messages follow reversed
            edges, which needs a shuffle by source: not there yet), or a tampered folder.
    """
    if int(max_degree) != max_degree or max_degree < 1:
        raise DataError("max degree K must be an integer >= 1", field="max_degree",
                        value=max_degree)
    dataset = Path(dataset)
    manifest = manifest or verify_partitioned(dataset, client)
    if manifest.get("directed"):
        raise DataError("DP-GNN's edge sampling on partitions of a directed graph needs the "
                        "reversed edges, a shuffle by source: not there yet",
                        path=dataset / "manifest.json", field="directed", value=True)
    bounds = partition_bounds(dataset, manifest)
    source = randomness or Randomness.secret()
    with atomic_dir(out, overwrite=overwrite) as tmp:
        (tmp / "edges").mkdir()
        (tmp / "scratch").mkdir()
        jobs = [BlockJob(str(dataset), b, bounds, int(manifest["num_nodes"]), int(max_degree),
                         str(tmp / "scratch"), source) for b in range(len(bounds))]
        first = client.gather([client.submit(thin_block, job, pure=False,
                                             key=f"edgelists-thin-{b}-{uuid.uuid4().hex}")
                               for b, job in enumerate(jobs)])
        over = np.sort(np.concatenate([r["over"] for r in first]))
        over_f = client.scatter(over, broadcast=True)
        second = client.gather([client.submit(drop_block, job, over_f, str(tmp), pure=False,
                                              key=f"edgelists-drop-{b}-{uuid.uuid4().hex}")
                                for b, job in enumerate(jobs)])
        (tmp / "scratch").rmdir()
    result = PartitionedEdges(Path(out), bounds, over.astype(np.int64),
                              sum(int(r["candidates"]) for r in first))
    for r in sorted(second, key=lambda r: int(r["block"])):
        result.edge_rows.append(int(r["rows"]))
        result.files[part_name("edges", int(r["block"]))] = r["sha256"]
    return result
