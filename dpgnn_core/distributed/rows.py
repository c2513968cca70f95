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
from dpgnn_core.distributed.pma import block_file
from dpgnn_core.errors import DataError
from dpgnn_core.privacy.randomness import Randomness
from dpgnn_core.training.metrics import metrics_by_split

Array = npt.NDArray[np.float32]
IntArray = npt.NDArray[np.int64]
Reader = Callable[[str, int, IntArray], Array]
Prepare = Callable[[Tensor], Tensor]
TRAIN, VAL = SPLIT_NAMES.index("train"), SPLIT_NAMES.index("val")


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


def draw_rows(job: BlockRows, rate: float | None, ids: IntArray | None, stream: str
              ) -> tuple[Array, IntArray]:
    """A worker's task: the rows and labels of block ``job.block``'s training rows, each
    independently with probability ``rate`` (a Poisson batch; one uniform per training
    row from the worker's generator for ``stream``), or those at positions ``ids`` among
    its training rows."""
    y, split = _nodes(job.dataset, job.block)
    train = np.flatnonzero(split == TRAIN)
    if rate is not None:
        rng = job.randomness.numpy_generator(stream)
        ids = np.flatnonzero(rng.random(train.shape[0]) < rate)
    assert ids is not None
    rows = train[ids]
    return job.reader(job.dataset, job.block, rows), y[rows]


def block_logits(job: BlockRows, model: nn.Module, prepare: Prepare, only_val: bool
                 ) -> tuple[Array, IntArray, npt.NDArray[np.int8]]:
    """A worker's task: ``model``'s logits on block ``job.block``'s nodes (only its
    labelled validation nodes with ``only_val``), their labels and splits; on CPU."""
    torch.set_num_threads(1)
    y, split = _nodes(job.dataset, job.block)
    rows = (np.flatnonzero((split == VAL) & (y >= 0)) if only_val
            else np.arange(y.shape[0], dtype=np.int64))
    with torch.no_grad():
        inputs = prepare(torch.from_numpy(np.require(job.reader(job.dataset, job.block, rows),
                                                      np.float32, "CW")))
        logits = model.eval()(inputs).numpy()
    return logits, y[rows], split[rows]


class PartitionedRows:
    """The training rows of a partitioned dataset, drawn by ``client``'s workers (module
    docstring). ``dataset`` must have been checked (:func:`verify_partitioned`)."""

    def __init__(self, client: Any, dataset: str | Path, manifest: dict[str, Any],
                 reader: Reader, prepare: Prepare, device: torch.device,
                 randomness: Randomness, name: str) -> None:
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
        self.steps = 0
        self.batch_sizes: list[int] = []  # what the trainer was sent, step by step

    def stream(self, block: int) -> str:
        """The stream name of block ``block``'s Poisson draws at the current step."""
        return f"{self.name}/batches/step{self.steps}/block{block}"

    def _gather(self, futures: list[Any]) -> tuple[Tensor, Tensor]:
        parts = self.client.gather(futures)
        rows = np.concatenate([p[0] for p in parts]) if parts else np.zeros((0, 0))
        labels = np.concatenate([p[1] for p in parts]) if parts else np.zeros(0, np.int64)
        self.batch_sizes.append(int(labels.shape[0]))
        inputs = self.prepare(torch.from_numpy(np.require(rows, np.float32, "CW")))
        return inputs.to(self.device), torch.from_numpy(labels).to(self.device)

    def poisson(self, rate: float) -> tuple[Tensor, Tensor]:
        self.steps += 1
        return self._gather([self.client.submit(draw_rows, job, rate, None,
                                                self.stream(job.block), pure=False)
                             for job in self.jobs])

    def take(self, ids: Tensor) -> tuple[Tensor, Tensor]:
        flat = ids.cpu().numpy().astype(np.int64)
        owner = np.searchsorted(self.offsets, flat, side="right") - 1
        order = np.argsort(owner, kind="stable")
        futures = [self.client.submit(draw_rows, self.jobs[b], None,
                                      flat[order][owner[order] == b] - self.offsets[b], "",
                                      pure=False)
                   for b in np.unique(owner)]
        inputs, labels = self._gather(futures)
        back = torch.from_numpy(np.argsort(order, kind="stable")).to(self.device)
        return inputs[back], labels[back]  # in the order of ids

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

