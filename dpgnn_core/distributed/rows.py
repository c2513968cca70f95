"""Training rows drawn from a partitioned dataset by Dask workers (issue 51 §3): a
:class:`~dpgnn_core.training.batches.RowSource` whose Poisson batch is drawn by every
partition at rate q on its worker, with a generator the worker takes from
:class:`~dpgnn_core.privacy.randomness.Randomness` (secret: seeded from its OS CSPRNG,
never stored or sent back), and only the batch's rows are gathered to the trainer (the
GPU when there is one). The trainer never holds all rows. Evaluation streams over the
partitions too: each worker runs the model on its block and sends back its logits.

A row is one training node's: ``reader(dataset, block, rows)`` reads the rows of the
block's nodes at in-block positions ``rows`` (its features, :class:`FeatureRows`; or its
features and PMA's release, :class:`ReleaseRows`), and ``prepare`` makes the model's input
of them (on the trainer for training, on the worker for evaluation).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow.parquet as pq
import torch
from torch import Tensor, nn

from dpgnn_core.data.graph import SPLIT_NAMES
from dpgnn_core.data.partitioned import part_name, partition_bounds
from dpgnn_core.data.store import _matrix, _split_codes
from dpgnn_core.data.validate import check_finite
from dpgnn_core.distributed.memory import releasing
from dpgnn_core.distributed.pma import block_file
from dpgnn_core.errors import DataError
from dpgnn_core.privacy.randomness import Randomness
from dpgnn_core.training.metrics import metrics_by_split

Array = npt.NDArray[np.float32]
IntArray = npt.NDArray[np.int64]
Reader = Callable[[str, int, IntArray], Array]
Prepare = Callable[[Tensor], Tensor]
TRAIN, VAL = SPLIT_NAMES.index("train"), SPLIT_NAMES.index("val")
#: Rows a worker runs the model on at once when it evaluates its block.
EVAL_CHUNK = 8192


@dataclass(frozen=True)
class FeatureRows:
    """A row is the node's features (DP-MLP; GAP's encoder)."""

    def __call__(self, dataset: str, block: int, rows: IntArray) -> Array:
        p = Path(dataset) / part_name("features", block)
        col = pq.read_table(p, columns=["x"], memory_map=True).column("x")
        x = _matrix(col.take(rows), path=p, field="x")
        check_finite(x, path=p, field="x")
        return x


@dataclass(frozen=True)
class ReleaseRows:
    """A row is the node's features, then its rows of PMA's release X(1..K) (GAP's
    classifier: ``prepare`` recomputes X(0) from the features)."""

    release: str
    hops: int

    def __call__(self, dataset: str, block: int, rows: IntArray) -> Array:
        parts = [FeatureRows()(dataset, block, rows)]
        for k in range(1, self.hops + 1):
            hop = np.load(block_file(Path(self.release) / f"hop-{k}", block), mmap_mode="r")
            parts.append(np.asarray(hop[rows], dtype=np.float32))
        return np.concatenate(parts, axis=1)


@dataclass(frozen=True)
class AsTensor:
    """``prepare`` of rows that are the model's input as they are."""

    def __call__(self, rows: Tensor) -> Tensor:
        return rows


def _nodes(dataset: str, block: int) -> tuple[IntArray, npt.NDArray[np.int8]]:
    p = Path(dataset) / part_name("nodes", block)
    table = pq.read_table(p, columns=["label", "split"], memory_map=True)
    return (table.column("label").to_numpy().astype(np.int64),
            _split_codes(table.column("split"), path=p))


@releasing
def block_counts(dataset: str, block: int) -> dict[str, int]:
    """A worker's task: block ``block``'s training rows, those without a label, and its
    labelled validation rows."""
    y, split = _nodes(dataset, block)
    train = split == TRAIN
    return {"train": int(train.sum()), "unlabelled": int((y[train] < 0).sum()),
            "val": int(((split == VAL) & (y >= 0)).sum())}


@dataclass(frozen=True)
class BlockRows:
    """What a worker needs to draw from one block (nothing secret: the generator is drawn
    on the worker from ``randomness``)."""

    dataset: str
    block: int
    reader: Reader
    randomness: Randomness


@releasing
def draw_rows(job: BlockRows, rate: float | None, ids: list[IntArray] | None,
              stream: str, count: int = 1) -> list[tuple[Array, IntArray]]:
    """A worker's task: the rows and labels of several batches of block ``job.block``'s
    training rows, the block's rows read once for them all: ``count`` Poisson batches
    (each training row independently with probability ``rate`` in each, one uniform per
    row and batch, in turn from the worker's generator for ``stream``), or the batches of
    positions ``ids`` among its training rows."""
    y, split = _nodes(job.dataset, job.block)
    train = np.flatnonzero(split == TRAIN)
    if rate is not None:
        rng = job.randomness.numpy_generator(stream)
        ids = [np.flatnonzero(rng.random(train.shape[0]) < rate) for _ in range(count)]
    assert ids is not None
    wanted = np.unique(np.concatenate(ids)) if ids else np.zeros(0, np.int64)
    rows = job.reader(job.dataset, job.block, train[wanted])
    return [(rows[np.searchsorted(wanted, i)], y[train[i]]) for i in ids]


@releasing
def block_logits(job: BlockRows, model: nn.Module, prepare: Prepare, only_val: bool
                 ) -> tuple[Array, IntArray, npt.NDArray[np.int8]]:
    """A worker's task: ``model``'s logits on block ``job.block``'s nodes (only its
    labelled validation nodes with ``only_val``), their labels and splits; on CPU, the
    model run on :data:`EVAL_CHUNK` rows at a time (its activations on a whole block
    would be several times the block's rows: a 1 GiB worker was paused by them)."""
    torch.set_num_threads(1)
    y, split = _nodes(job.dataset, job.block)
    rows = (np.flatnonzero((split == VAL) & (y >= 0)) if only_val
            else np.arange(y.shape[0], dtype=np.int64))
    data = torch.from_numpy(np.require(job.reader(job.dataset, job.block, rows), np.float32,
                                       ["C", "W"]))
    model = model.eval()
    with torch.no_grad():
        parts = [model(prepare(data[i:i + EVAL_CHUNK])).numpy()
                 for i in range(0, max(len(rows), 1), EVAL_CHUNK)]
    return np.concatenate(parts), y[rows], split[rows]


class PartitionedRows:
    """The training rows of a partitioned dataset, drawn by ``client``'s workers (module
    docstring). ``dataset`` must have been checked (:func:`verify_partitioned`). Each
    round trip to the workers brings ``ahead`` batches (the trainer holds at most that
    many), so that a step does not wait for the cluster every time."""

    def __init__(self, client: Any, dataset: str | Path, manifest: dict[str, Any],
                 reader: Reader, prepare: Prepare, device: torch.device,
                 randomness: Randomness, name: str, ahead: int = 8) -> None:
        self.client, self.prepare, self.device, self.name = client, prepare, device, name
        self.bounds = partition_bounds(dataset, manifest)
        self.jobs = [BlockRows(str(dataset), b, reader, randomness)
                     for b in range(len(self.bounds))]
        counts = client.gather([client.submit(block_counts, str(dataset), b, pure=False)
                                for b in range(len(self.bounds))])
        if sum(c["unlabelled"] for c in counts):
            raise DataError("a training node has no label", path=Path(dataset),
                            field="y", value=-1)
        per_block = np.array([c["train"] for c in counts], dtype=np.int64)
        self.offsets = np.concatenate([[0], np.cumsum(per_block)])
        self.num_rows = int(self.offsets[-1])
        self.has_val = sum(c["val"] for c in counts) > 0
        self.ahead = ahead
        self.rounds = 0
        self._queue: list[list[tuple[Array, IntArray]]] = []
        self.batch_sizes: list[int] = []  # what the trainer was sent, batch by batch

    def stream(self, block: int) -> str:
        """The stream name of block ``block``'s Poisson draws in the current round."""
        return f"{self.name}/batches/round{self.rounds}/block{block}"

    def _batch(self, parts: list[tuple[Array, IntArray]]) -> tuple[Tensor, Tensor]:
        rows = np.concatenate([p[0] for p in parts]) if parts else np.zeros((0, 0))
        labels = np.concatenate([p[1] for p in parts]) if parts else np.zeros(0, np.int64)
        self.batch_sizes.append(int(labels.shape[0]))
        inputs = self.prepare(torch.from_numpy(np.require(rows, np.float32, ["C", "W"])))
        return inputs.to(self.device), torch.from_numpy(labels).to(self.device)

    def poisson(self, rate: float) -> tuple[Tensor, Tensor]:
        """The next Poisson batch; every :attr:`ahead` steps one task per partition draws
        the next :attr:`ahead` batches at once (the same law: each batch's rows are drawn
        independently of the others'; the batches not used when training ends are
        dropped, never seen)."""
        if not self._queue:
            self.rounds += 1
            per_block = self.client.gather([
                self.client.submit(draw_rows, job, rate, None, self.stream(job.block),
                                   self.ahead, pure=False) for job in self.jobs])
            self._queue = [[blk[i] for blk in per_block] for i in range(self.ahead)]
        return self._batch(self._queue.pop(0))

    def take(self, ids: Tensor) -> tuple[Tensor, Tensor]:
        return self.take_many([ids])[0]

    def take_many(self, batches: list[Tensor]) -> list[tuple[Tensor, Tensor]]:
        """The rows of several batches of ids, one task per partition for them all, each
        batch in the order of its ids."""
        flat = [b.cpu().numpy().astype(np.int64) for b in batches]
        owners = [np.searchsorted(self.offsets, f, side="right") - 1 for f in flat]
        blocks = np.unique(np.concatenate(owners)) if flat else np.zeros(0, np.int64)
        asked = [[f[o == b] - self.offsets[b] for f, o in zip(flat, owners, strict=True)]
                 for b in blocks]
        per_block = self.client.gather([
            self.client.submit(draw_rows, self.jobs[int(b)], None, ids, "", pure=False)
            for b, ids in zip(blocks, asked, strict=True)])
        out = []
        for k, owner in enumerate(owners):
            order = np.concatenate([np.flatnonzero(owner == b) for b in blocks])
            inputs, labels = self._batch([blk[k] for blk in per_block])
            back = torch.from_numpy(np.argsort(order, kind="stable")).to(self.device)
            out.append((inputs[back], labels[back]))  # in the order of the batch's ids
        return out

    def logits(self, model: nn.Module, prepare: Prepare, only_val: bool = False
               ) -> tuple[Array, IntArray, npt.NDArray[np.int8]]:
        """``model``'s logits on every node (or every labelled validation node), block by
        block on the workers, with their labels and splits."""
        cpu = copy.deepcopy(model).cpu().eval()
        parts = self.client.gather([self.client.submit(block_logits, job, cpu, prepare,
                                                       only_val, pure=False)
                                    for job in self.jobs])
        return (np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]),
                np.concatenate([p[2] for p in parts]))

    def val_accuracy(self, model: nn.Module) -> float | None:
        if not self.has_val:
            return None
        logits, y, _ = self.logits(model, self.prepare, only_val=True)
        return float((logits.argmax(1) == y).mean())

    def metrics(self, model: nn.Module, prepare: Prepare, num_classes: int
                ) -> dict[str, dict[str, float]]:
        """Metrics per split (:func:`~dpgnn_core.training.metrics.metrics_by_split`) of
        ``model`` on every node, from logits computed block by block: the trainer holds
        the logits ``[N, C]``, never the rows."""
        logits, y, split = self.logits(model, prepare)
        return metrics_by_split(SimpleNamespace(y=y, split=split, num_classes=num_classes),
                                logits)

