"""How GAP's and ProGAP's modules train on rows (one row per training node): Adam over
epochs of shuffled mini-batches at edge level and ∞, DP-Adam over Poisson-sampled, clipped
rows at node level (:func:`fit_rows`); the mini-batches of an epoch; the validation rows of
``selection="best-val"``."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import torch
from torch import Tensor, nn

from dpgnn_core.data.graph import GraphData
from dpgnn_core.errors import DataError
from dpgnn_core.privacy.randomness import Randomness
from dpgnn_core.specs import GapSpec, ProgapSpec
from dpgnn_core.training.batches import RowSource, TensorRows, batch_losses, selector
from dpgnn_core.training.dp_sgd import Clipping, train_steps
from dpgnn_core.training.optim import adam
from dpgnn_core.training.per_sample import group_noise_stds


def batches_per_epoch(spec: GapSpec | ProgapSpec, num_rows: int) -> int:
    """Mini-batches of one Adam epoch (EDP, ∞): ceil(N / batch_size)."""
    batch: int = spec.with_batch_size(num_rows).batch
    return math.ceil(num_rows / batch)


def epoch_batches(num_rows: int, per_epoch: int, generator: torch.Generator
                  ) -> Callable[[], Tensor]:
    """A function returning the next mini-batch of row indices: each epoch a fresh random
    order of all ``num_rows`` rows cut into ``per_epoch`` near-equal batches (sizes differ
    by at most one, so no batch is a lone row when the batch size is at least 2)."""
    queue: list[Tensor] = []

    def draw() -> Tensor:
        if not queue:
            perm = torch.randperm(num_rows, generator=generator)
            queue.extend(torch.tensor_split(perm, per_epoch))
        return queue.pop(0)
    return draw


#: Mini-batches of a non-private epoch fetched from the source at once (the order of the
#: draws is unchanged, so rows in memory give the very same batches).
TAKE_AHEAD = 8


def fit_rows(model: nn.Module, inputs: Tensor, y: Tensor, spec: GapSpec | ProgapSpec,
             private: bool, z: float, name: str,
             on_step: Callable[[int, dict[str, float]], None] | None,
             val: tuple[Tensor, Tensor] | None = None) -> list[dict[str, float]]:
    """:func:`fit_source` on rows held in memory (:class:`TensorRows`): ``inputs`` and
    labels ``y`` of the training rows, ``val`` = (inputs, labels) of the validation rows
    for ``selection="best-val"``."""
    randomness = Randomness.for_spec(spec)
    source = TensorRows(inputs, y, randomness.torch_generator(f"{name}/batches"), val)
    return fit_source(model, source, spec, private, z, name, on_step, randomness=randomness)


def fit_source(model: nn.Module, source: RowSource, spec: GapSpec | ProgapSpec,
               private: bool, z: float, name: str,
               on_step: Callable[[int, dict[str, float]], None] | None, *,
               randomness: Randomness | None = None, epochs: int | None = None
               ) -> list[dict[str, float]]:
    """Adam over mini-batches (``epochs`` epochs of :func:`batches_per_epoch` batches,
    ``spec.epochs`` unless given; EDP, ∞), or DP-Adam over Poisson-sampled rows (``steps``;
    one row per training node, clipped to ``spec.clip``, noise std ``z * clip``; node
    level), the rows drawn from ``source`` (in memory, or from a dataset's partitions); the
    batches and the noise come from :meth:`Randomness.for_spec` (secret by default), streams
    named after ``name``. The model trains in training mode (dropout, batch statistics) and
    is left in evaluation mode. With ``spec.selection == "best-val"`` (never at node level:
    the spec refuses it) and labelled validation rows in ``source``, the weights of the
    epoch with the best validation accuracy are kept. GAP's encoder and classifier and
    ProGAP's stages train with it."""
    randomness = randomness or Randomness.for_spec(spec)
    noise_gen = randomness.torch_generator(f"{name}/noise", source.device)
    opt = adam(model.parameters(), lr=spec.lr)
    n = source.num_rows
    model.train()
    if not private:
        per_epoch = batches_per_epoch(spec, n)
        if spec.norm == "batch" and n // per_epoch < 2:
            raise DataError("batch norm needs at least 2 rows per mini-batch",
                            field="batch_size", value=spec.with_batch_size(n).batch)
        draw = epoch_batches(n, per_epoch, randomness.torch_generator(f"{name}/batches"))
        select = selector(model, source) if spec.selection == "best-val" else None
        queue: list[tuple[Tensor, Tensor]] = []

        def minibatch() -> tuple[Tensor, float]:
            if not queue:  # a few batches' rows at once (one trip to a cluster's workers)
                queue.extend(source.take_many([draw() for _ in range(TAKE_AHEAD)]))
            return batch_losses(model, queue.pop(0))
        epochs = spec.epochs if epochs is None else epochs
        hist = train_steps(model, opt, epochs * per_epoch, minibatch, clipping=None,
                           on_step=on_step, select=select, select_every=per_epoch)
    else:
        spec = spec.with_batch_size(n)  # the rows trained on: the training nodes
        rate = spec.batch / n
        stds = group_noise_stds(z, 1.0, [spec.clip])
        hist = train_steps(model, opt, spec.steps,
                           lambda: batch_losses(model, source.poisson(rate)),
                           clipping=Clipping((spec.clip,), tuple(stds), float(spec.batch)),
                           generator=noise_gen, on_step=on_step,
                           log_raw_loss=spec.log_raw_loss)
    model.eval()
    return hist


def val_rows(data: GraphData, inputs: Tensor, y: Tensor, spec: GapSpec | ProgapSpec
             ) -> tuple[Tensor, Tensor] | None:
    """The labelled validation rows of ``inputs`` and their labels, for
    ``selection="best-val"`` (edge level and ∞ only); :obj:`None` otherwise."""
    if spec.level == "node" or spec.selection != "best-val":
        return None
    keep = torch.from_numpy(data.mask("val") & (np.asarray(data.y) >= 0)).to(inputs.device)
    return inputs[keep], y[keep]

