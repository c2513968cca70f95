"""Where a row-wise training's batches come from: a :class:`RowSource` hands the trainer
the (inputs, labels) of a Poisson batch (private steps) or of given rows (the mini-batches
of a non-private epoch), and scores a model on the validation rows. The trainers of DP-MLP
and of GAP's and ProGAP's modules (:mod:`dpgnn_core.methods._row_training`) take one, so
the same optimisation, clipping, noise and accounting run on rows held in memory
(:class:`TensorRows`) or on rows drawn from the partitions of a dataset by Dask workers
(:class:`dpgnn_core.distributed.rows.PartitionedRows`), which never gathers more than a
batch to the trainer."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import torch
from torch import Tensor, nn

from dpgnn_core.training.dp_sgd import PoissonSampler


class RowSource(Protocol):
    """Training rows, one per training node, drawn in batches."""

    @property
    def num_rows(self) -> int:
        """N, the training rows."""

    @property
    def device(self) -> torch.device:
        """Where the batches are put."""

    @property
    def has_val(self) -> bool:
        """Whether there are labelled validation rows."""

    def poisson(self, rate: float) -> tuple[Tensor, Tensor]:
        """A Poisson batch: every row independently with probability ``rate``, drawn
        from a secret source (unless the run is insecure-reproducible)."""

    def take(self, ids: Tensor) -> tuple[Tensor, Tensor]:
        """The rows ``ids`` (indices in ``[0, num_rows)``)."""

    def take_many(self, batches: list[Tensor]) -> list[tuple[Tensor, Tensor]]:
        """:meth:`take` of several batches at once."""

    def val_accuracy(self, model: nn.Module) -> float | None:
        """``model``'s accuracy on the labelled validation rows (:obj:`None` when there
        are none); the model is in evaluation mode when this is called."""


@dataclass
class TensorRows:
    """Rows held in memory (the single-process path).

    Args:
        inputs (Tensor): ``[N, ...]`` on the training device.
        labels (Tensor): ``[N]``.
        generator (torch.Generator): the Poisson draws' source (secret by default:
            :class:`~dpgnn_core.privacy.randomness.Randomness`).
        val (tuple, optional): (inputs, labels) of the labelled validation rows.
    """

    inputs: Tensor
    labels: Tensor
    generator: torch.Generator
    val: tuple[Tensor, Tensor] | None = None
    _sampler: PoissonSampler | None = field(default=None, repr=False)

    @property
    def num_rows(self) -> int:
        return int(self.inputs.shape[0])

    @property
    def device(self) -> torch.device:
        return self.inputs.device

    def poisson(self, rate: float) -> tuple[Tensor, Tensor]:
        if self._sampler is None or self._sampler.rate != rate:
            self._sampler = PoissonSampler(self.num_rows, rate, self.generator)
        return self.take(self._sampler.sample())

    @property
    def has_val(self) -> bool:
        return self.val is not None and bool(len(self.val[1]))

    def take(self, ids: Tensor) -> tuple[Tensor, Tensor]:
        ids = ids.to(self.device)
        return self.inputs[ids], self.labels[ids]

    def take_many(self, batches: list[Tensor]) -> list[tuple[Tensor, Tensor]]:
        return [self.take(ids) for ids in batches]

    def val_accuracy(self, model: nn.Module) -> float | None:
        if self.val is None or not self.has_val:
            return None
        with torch.no_grad():
            return float((model(self.val[0]).argmax(1) == self.val[1]).float().mean())


def batch_losses(model: nn.Module, batch: tuple[Tensor, Tensor]) -> tuple[Tensor, float]:
    """Per-row cross-entropy of ``model`` on a batch, and its mean to report (0 for an
    empty Poisson batch: the noise is still added, as the analysis assumes)."""
    inputs, labels = batch
    losses = nn.functional.cross_entropy(model(inputs), labels, reduction="none")
    return losses, float(losses.detach().mean()) if len(labels) else 0.0


def selector(model: nn.Module, source: RowSource) -> Callable[[], float] | None:
    """``select()`` for :func:`~dpgnn_core.training.dp_sgd.train_steps`: the model's
    validation accuracy from ``source`` (evaluation mode while scoring); :obj:`None` when
    the source has no labelled validation row."""
    if not source.has_val:
        return None

    def select() -> float:
        model.eval()
        acc = source.val_accuracy(model)
        model.train()
        return float(acc if acc is not None else 0.0)
    return select
