"""GAP's private multi-hop aggregation (PMA) on a partitioned dataset, as Dask work.

Each hop is a block-sparse product: the task of destination block i reads its edge
partition (edges whose destination lies in block i), and sums ``A_ij · X_j`` over the
source blocks j, one source block in memory at a time; then the same per-row math as the
single-process :func:`dpgnn_core.privacy.pma.pma`, from the same functions: the summed row
clipped (:func:`~dpgnn_core.privacy.pma.clip_rows`, on the whole row sum, never on a part of
it), Gaussian noise of std σ added, the row normalised
(:func:`~dpgnn_core.privacy.pma.row_normalise`). The noise of block i at hop k comes from a
generator the worker draws from :class:`~dpgnn_core.privacy.randomness.Randomness` (secret:
seeded from the worker's OS CSPRNG, never stored or sent back). Every block of hop k is
written (``hop-k/part-00000.npy``, ...) before hop k+1 starts, so a worker holds one
destination block's edges and sums and one source block, never the graph.

The sensitivity, σ and the ledger events are the single-process ones
(:func:`~dpgnn_core.methods.gap.pma_noise_std`, :func:`~dpgnn_core.methods.gap.pma_events`):
why partitioning changes no released quantity's distribution is in docs/privacy.md
("PMA on partitions").
"""

from __future__ import annotations

import hashlib
import os
import uuid
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np
import numpy.typing as npt
import torch
from torch import Tensor

from dpgnn_core.data.partitioned import (
    Bounds,
    partition_bounds,
    read_edge_block,
    read_feature_block,
    verify_partitioned,
)
from dpgnn_core.distributed.memory import releasing
from dpgnn_core.errors import DataError
from dpgnn_core.io import atomic_dir, sha256_file
from dpgnn_core.privacy.pma import clip_rows, row_normalise
from dpgnn_core.privacy.randomness import Randomness

Array = npt.NDArray[np.float32]


def block_file(folder: str | Path, block: int) -> Path:
    """Block ``block``'s ``.npy`` in a folder of row blocks (an X(0) or a hop)."""
    return Path(folder) / f"part-{block:05d}.npy"


def _save(path: Path, rows: Array) -> str:
    """``rows`` to ``path`` atomically (temp file, rename); its sha256."""
    tmp = path.with_name(f".{path.name}.tmp-{uuid.uuid4().hex[:8]}")
    with open(tmp, "wb") as f:
        np.save(f, np.ascontiguousarray(rows, dtype=np.float32))
    os.replace(tmp, path)
    return sha256_file(path)


def _csr(rows: npt.NDArray[np.int64], cols: npt.NDArray[np.int64],
         shape: tuple[int, int]) -> Tensor:
    """The 0/1 matrix of ``shape`` with ones at (rows, cols), as sparse CSR."""
    if rows.size and not bool((rows[1:] >= rows[:-1]).all()):
        order = np.argsort(rows, kind="stable")
        rows, cols = rows[order], cols[order]
    crow = np.zeros(shape[0] + 1, dtype=np.int64)
    crow[1:] = np.cumsum(np.bincount(rows, minlength=shape[0]))
    with warnings.catch_warnings():  # torch marks sparse CSR as beta at every construction
        warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
        return torch.sparse_csr_tensor(torch.from_numpy(crow), torch.from_numpy(cols),
                                       torch.ones(cols.shape[0]), shape,
                                       check_invariants=False)


def block_sum(src: npt.NDArray[np.int64], dst_local: npt.NDArray[np.int64], rows: int,
              dim: int, bounds: Bounds, load: Callable[[int], Array]) -> Tensor:
    """Destination block's pre-clipping sums ``sum_j A_ij X_j`` ``[rows, dim]``: the edges
    (``src`` global, ``dst_local`` within the block) grouped by source block j, each group a
    sparse product with ``load(j)`` (X_j, loaded only if the block has an edge from j)."""
    starts = np.array([lo for lo, _ in bounds], dtype=np.int64)
    owner = np.searchsorted(starts, src, side="right") - 1
    order = np.argsort(owner, kind="stable")
    cuts = np.searchsorted(owner[order], np.arange(len(bounds) + 1))
    agg = torch.zeros(rows, dim)
    for j, (lo, hi) in enumerate(bounds):
        sel = order[cuts[j]:cuts[j + 1]]
        if sel.size:
            x_j = torch.from_numpy(np.ascontiguousarray(load(j), dtype=np.float32))
            agg.add_(torch.sparse.mm(_csr(dst_local[sel], src[sel] - lo, (rows, hi - lo)), x_j))
    return agg


def add_noise(agg: Tensor, sigma: float, generator: torch.Generator) -> Tensor:
    """``agg`` plus i.i.d. N(0, σ²) in every entry, in place: the noise of
    :func:`~dpgnn_core.privacy.pma.pma`, drawn from ``generator`` (the worker's secret one)."""
    return agg.add_(torch.randn(agg.shape, generator=generator, dtype=agg.dtype),
                    alpha=sigma)


@dataclass(frozen=True)
class Encode:
    """A picklable X(0) function for :func:`write_x0`: ``module.encode`` in eval mode on
    CPU, without gradients (e.g. GAP's encoder).

    Args:
        module (torch.nn.Module): has ``encode(Tensor) -> Tensor``.
    """

    module: torch.nn.Module

    def __call__(self, x: Array) -> Array:
        encode = cast(Callable[[Tensor], Tensor], self.module.cpu().eval().encode)
        with torch.no_grad():
            out: Array = encode(torch.from_numpy(np.require(x, np.float32, ["C", "W"]))).numpy()
        return out


@dataclass(frozen=True)
class HopJob:
    """One destination block of one hop: what a worker needs, and nothing secret (the
    noise generator is drawn on the worker, from ``randomness``)."""

    dataset: str
    block: int
    hop: int
    bounds: Bounds
    num_nodes: int
    dim: int
    previous: str
    out: str
    sigma: float
    row_clip: float | None
    randomness: Randomness
    normalise_input: bool


def _load_rows(job: HopJob, j: int) -> Array:
    rows: Array = np.load(block_file(job.previous, j))
    lo, hi = job.bounds[j]
    if rows.shape != (hi - lo, job.dim):
        raise DataError(f"holds rows of shape {list(rows.shape)}, expected "
                        f"[{hi - lo}, {job.dim}]", path=block_file(job.previous, j),
                        field="shape", value=list(rows.shape))
    if job.normalise_input:  # X(0) as pma() takes it: normalised before the first hop
        rows = row_normalise(torch.from_numpy(rows)).numpy()
    return rows


@releasing
def run_hop_block(job: HopJob) -> dict[str, Any]:
    """A worker's task: hop ``job.hop`` of destination block ``job.block``, written to
    ``job.out``. Returns the block, its rows and the file's sha256 (never the noise)."""
    torch.set_num_threads(1)
    src, dst = read_edge_block(job.dataset, job.block, job.bounds, job.num_nodes)
    lo, hi = job.bounds[job.block]
    with torch.no_grad():
        agg = clip_rows(block_sum(src, dst - lo, hi - lo, job.dim, job.bounds,
                                  lambda j: _load_rows(job, j)), job.row_clip)
        if job.sigma > 0:
            gen = job.randomness.torch_generator(f"pma/noise/hop{job.hop}/block{job.block}")
            add_noise(agg, job.sigma, gen)
        out = row_normalise(agg).numpy()
    digest = _save(block_file(job.out, job.block), out)
    return {"block": job.block, "rows": hi - lo, "sha256": digest}


@releasing
def _write_x0_block(dataset: str, block: int, out: str,
                    encode: Callable[[Array], Array] | None) -> dict[str, Any]:
    torch.set_num_threads(1)
    x = read_feature_block(dataset, block)
    rows = x if encode is None else encode(x)
    return {"block": block, "sha256": _save(block_file(out, block), rows)}


def write_x0(client: Any, dataset: str | Path, out: str | Path,
             encode: Callable[[Array], Array] | None = None) -> Path:
    """X(0) as row blocks in ``out``: each feature partition, through ``encode`` (a
    picklable function, e.g. the encoder's; the raw features when :obj:`None`), written by
    a worker. ``dataset`` must have been checked (:func:`verify_partitioned`)."""
    from dpgnn_core.data.store import read_manifest

    bounds = partition_bounds(dataset, read_manifest(dataset))
    Path(out).mkdir(parents=True, exist_ok=True)
    futures = [client.submit(_write_x0_block, str(dataset), b, str(out), encode, pure=False)
               for b in range(len(bounds))]
    client.gather(futures)
    return Path(out)


@dataclass
class PartitionedRelease:
    """PMA's release on partitions: ``folder/hop-k/part-*.npy`` for k = 1..K.

    Args:
        folder (Path): the release folder.
        hops (int): K.
        sigma (float): the noise std of every hop.
        bounds (list): the node ranges of the blocks.
        files (dict): ``hop-k/part-i.npy`` -> sha256.
    """

    folder: Path
    hops: int
    sigma: float
    bounds: Bounds
    files: dict[str, str] = field(default_factory=dict)

    def hop(self, k: int) -> Array:
        """Hop k's rows, all blocks concatenated (for graphs that fit one process)."""
        return np.concatenate([np.load(block_file(self.folder / f"hop-{k}", b))
                               for b in range(len(self.bounds))])


def _check_x0(x0: Path, bounds: Bounds) -> int:
    """The width of X(0)'s blocks; every block there with its range's rows."""
    dims = set()
    for b, (lo, hi) in enumerate(bounds):
        p = block_file(x0, b)
        if not p.is_file():
            raise DataError("X(0) block missing", path=p)
        rows = np.load(p, mmap_mode="r")
        if rows.ndim != 2 or rows.shape[0] != hi - lo:
            raise DataError(f"holds rows of shape {list(rows.shape)}, the block has "
                            f"{hi - lo} nodes", path=p, field="shape", value=list(rows.shape))
        dims.add(int(rows.shape[1]))
    if len(dims) != 1:
        raise DataError("X(0) blocks of different widths", path=x0, field="shape",
                        value=sorted(dims))
    return dims.pop()


def pma_partitioned(client: Any, dataset: str | Path, x0: str | Path, out: str | Path,
                    hops: int, sigma: float, row_clip: float | None = None,
                    randomness: Randomness | None = None, *, overwrite: bool = False,
                    manifest: dict[str, Any] | None = None) -> PartitionedRelease:
    """PMA over a partitioned dataset on ``client``'s workers (see the module docstring).

    Args:
        client (distributed.Client): where the blocks run.
        dataset (str or Path): the partitioned dataset folder (checked here, every
            partition hashed by the workers, before any work, unless ``manifest`` is
            the result of that check).
        x0 (str or Path): X(0) as row blocks (:func:`write_x0`); normalised here.
        out (str or Path): the release folder, written atomically.
        hops (int): K >= 1.
        sigma (float): the noise std of every hop (0: none).
        row_clip (float, optional): c of :func:`~dpgnn_core.privacy.pma.clip_rows`.
        randomness (Randomness, optional): the noise's source; secret when omitted.
        overwrite (bool, optional): replace an existing ``out`` once the new one is whole.
    """
    if hops < 1:
        raise DataError("PMA needs at least one hop", field="hops", value=hops)
    dataset = Path(dataset)
    manifest = manifest or verify_partitioned(dataset, client)
    bounds = partition_bounds(dataset, manifest)
    dim = _check_x0(Path(x0), bounds)
    source = randomness or Randomness.secret()
    release = PartitionedRelease(Path(out), hops, float(sigma), bounds)
    with atomic_dir(out, overwrite=overwrite) as tmp:
        previous = Path(x0)
        for k in range(1, hops + 1):
            hop_dir = tmp / f"hop-{k}"
            hop_dir.mkdir()
            jobs = [HopJob(str(dataset), b, k, bounds, int(manifest["num_nodes"]), dim,
                           str(previous), str(hop_dir), float(sigma), row_clip, source,
                           normalise_input=k == 1) for b in range(len(bounds))]
            futures = [client.submit(run_hop_block, job, pure=False,
                                     key=f"pma-hop{k}-block{job.block}-{uuid.uuid4().hex}")
                       for job in jobs]
            for res in client.gather(futures):  # the whole hop written before the next
                release.files[f"hop-{k}/part-{res['block']:05d}.npy"] = res["sha256"]
            previous = hop_dir
    return release


def content_digest(release: PartitionedRelease) -> str:
    """One sha256 over the release's files' sha256 (in name order)."""
    h = hashlib.sha256()
    for name in sorted(release.files):
        h.update(f"{name}:{release.files[name]}\n".encode())
    return h.hexdigest()
