"""GAP's PMA stage on a partitioned dataset: :func:`aggregate_partitioned` is
:func:`dpgnn_core.methods.gap.aggregate` with the product done by Dask workers
(:func:`~dpgnn_core.distributed.pma.pma_partitioned`). The σ, the budget gate, the
release mark and the ledger events are taken from the same functions as the
single-process stage's, so they are the same numbers."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
from torch import Tensor

from dpgnn_core.data.partitioned import partition_bounds, read_edge_block, verify_partitioned
from dpgnn_core.distributed.memory import releasing
from dpgnn_core.distributed.pma import Encode, PartitionedRelease, pma_partitioned, write_x0
from dpgnn_core.distributed.rows import AsTensor, FeatureRows, PartitionedRows, ReleaseRows
from dpgnn_core.distributed.training import check_partitioned_task
from dpgnn_core.errors import DataError
from dpgnn_core.graph.gap_degree import check_degree_bound
from dpgnn_core.methods.gap import (
    _gate,
    calibrate_gap_for,
    finish_run,
    fit_classifier_on,
    fit_encoder_on,
    pma_events,
    pma_noise_std,
)
from dpgnn_core.methods.private_run import PrivateRun
from dpgnn_core.models.gap import GapClassifier, GapEncoder, with_own_encoding
from dpgnn_core.privacy.events import Ledger
from dpgnn_core.privacy.randomness import Randomness
from dpgnn_core.specs.gap import GapSpec
from dpgnn_core.training.checkpoint import suspended
from dpgnn_core.training.device import resolve_device


@releasing
def _block_degree_problem(dataset: str, block: int, bounds: list[tuple[int, int]],
                         num_nodes: int, max_degree: int) -> tuple[str, Any] | None:
    """A worker's task: :func:`check_degree_bound` on ``block``'s edges; ``None`` when it
    passes, else its message and value (a :class:`DataError` is raised again by the
    caller, with the single-process check's own words)."""
    src, dst = read_edge_block(dataset, block, bounds, num_nodes)
    try:
        check_degree_bound(np.stack([src, dst]), num_nodes, max_degree, directed=False)
    except DataError as e:
        return e.message, e.value
    return None


def check_degree_partitioned(client: Any, dataset: str | Path, manifest: dict[str, Any],
                             max_degree: int) -> None:
    """GAP-NDP's degree check, local to each destination partition: on a graph flagged
    undirected (both directions stored) a node's degree is its in-degree, which its own
    edge partition holds whole, and the out-degrees a partition sees are at most the true
    ones; so "every partition passes" is exactly the single-process check's decision.
    A directed graph needs out-degrees, a shuffle by source: refused for now.

    Raises:
        DataError: the single-process check's message (names D, never a degree).
    """
    if manifest.get("directed"):
        raise DataError("node-level PMA on partitions of a directed graph needs the "
                        "out-degree shuffle, not there yet; use edge level",
                        path=Path(dataset) / "manifest.json", field="directed", value=True)
    bounds = partition_bounds(dataset, manifest)
    n = int(manifest["num_nodes"])
    problems = client.gather([client.submit(_block_degree_problem, str(dataset), b, bounds,
                                            n, max_degree, pure=False)
                              for b in range(len(bounds))])
    for problem in problems:
        if problem is not None:
            raise DataError(problem[0], field="max_degree", value=problem[1])


def aggregate_partitioned(client: Any, spec: GapSpec, z: float, dataset: str | Path,
                          x0: str | Path, out: str | Path, *, overwrite: bool = False,
                          manifest: dict[str, Any] | None = None,
                          run: PrivateRun | None = None) -> tuple[PartitionedRelease, Ledger]:
    """Stage 2 of GAP on partitions: the folder checked (every partition hashed by the
    workers; skipped when ``manifest`` is that check's result in this run), the degree
    check at node level, then PMA's K releases to ``out`` and their privacy event,
    exactly :func:`dpgnn_core.methods.gap.aggregate`'s (the plan reserved and the release
    told through the fit's engine ``run``)."""
    run = run or PrivateRun()
    manifest = manifest or verify_partitioned(dataset, client)
    n_train = int(manifest["split_counts"]["train"])
    if spec.level == "node":
        assert spec.max_degree is not None  # the spec's own validation
        check_degree_partitioned(client, dataset, manifest, int(spec.max_degree))
    sigma = pma_noise_std(spec, z, bool(manifest["directed"]))
    if spec.level != "none":
        _gate(run, spec, n_train, z)
    release = pma_partitioned(client, dataset, x0, out, spec.hops, sigma, spec.row_clip,
                              Randomness.for_spec(spec), overwrite=overwrite,
                              manifest=manifest)
    if spec.level != "none":
        run.released()
    return release, pma_events(spec, n_train, z)


@dataclass(frozen=True)
class OwnEncoding:
    """``prepare`` of :class:`~dpgnn_core.distributed.rows.ReleaseRows`: rows
    ``[x | X(1) | ... | X(K)]`` to the classifier's input ``[X(0), X(1..K)]``, X(0)
    recomputed from the features by ``encoder`` (a CPU copy; on the trainer for training,
    on a worker for evaluation)."""

    encoder: GapEncoder
    in_dim: int
    hops: int

    def __call__(self, rows: Tensor) -> Tensor:
        agg = rows[:, self.in_dim:].reshape(rows.shape[0], self.hops, -1)
        return with_own_encoding(self.encoder, rows[:, :self.in_dim], agg, self.hops)


@dataclass
class PartitionedGapResult:
    """Everything a GAP run on partitions produces: the modules, PMA's release (row
    blocks on disk), the ledger, report and history (in the single-process run's form),
    and the metrics per split (computed block by block)."""

    encoder: GapEncoder
    classifier: GapClassifier  # with the encoder attached
    release: PartitionedRelease
    ledger: Ledger
    report: dict[str, Any]
    history: list[dict[str, Any]]
    metrics: dict[str, dict[str, float]]


def train_gap_partitioned(client: Any, dataset: str | Path, spec: GapSpec,
                          workdir: str | Path, run: PrivateRun | None = None, *,
                          overwrite: bool = False, manifest: dict[str, Any] | None = None
                          ) -> PartitionedGapResult:
    """GAP on a partitioned dataset, every stage as Dask work: the folder checked and the
    composition calibrated (:func:`~dpgnn_core.methods.gap.calibrate_gap_for`, the
    single-process calibration) before any row is read; the encoder on rows drawn from
    the partitions (:class:`~dpgnn_core.distributed.rows.PartitionedRows`); X(0) and PMA
    block by block to ``workdir/x0`` and ``workdir/release``; the classifier on rows of
    features and release; then the run's report from the stages' events
    (:func:`~dpgnn_core.methods.gap.finish_run`: refused unless they equal the plan) and
    the metrics, block by block. The trainer holds batches, never all rows. ``manifest``:
    :func:`verify_partitioned`'s result, when this run already checked the folder; ``run``
    the fit's engine (a bare one by default)."""
    run = run or PrivateRun()
    manifest = manifest or verify_partitioned(dataset, client)
    n_train = check_partitioned_task(dataset, manifest, spec, "GAP")
    d, c = int(manifest["feature_dim"]), int(manifest["num_classes"])
    graph = SimpleNamespace(directed=bool(manifest["directed"]),
                            meta={k: manifest.get(k, {}) for k in ("split", "source", "cleaning")})
    planned, z, report = calibrate_gap_for(spec, n_train, d, graph)
    if spec.level == "node":  # the graph's check comes first, as in one process
        assert spec.max_degree is not None
        check_degree_partitioned(client, dataset, manifest, int(spec.max_degree))
    device, randomness = resolve_device(spec.device), Randomness.for_spec(spec)
    rows = PartitionedRows(client, dataset, manifest, FeatureRows(), AsTensor(), device,
                           randomness, "encoder")
    enc, enc_hist, enc_events = fit_encoder_on(rows, spec, z, (d, c), run)
    cpu = copy.deepcopy(enc).cpu().eval()
    work = Path(workdir)
    x0 = write_x0(client, dataset, work / "x0", Encode(cpu))
    release, pma = aggregate_partitioned(client, spec, z, dataset, x0, work / "release",
                                         overwrite=overwrite, manifest=manifest, run=run)
    prepare = OwnEncoding(cpu, d, spec.hops)
    rows = PartitionedRows(client, dataset, manifest, ReleaseRows(str(release.folder),
                                                                  spec.hops),
                           prepare, device, randomness, "classifier")
    with suspended():  # it trains on a release a rerun redraws: never resumed (as in one
        clf, cls_hist, cls_events = fit_classifier_on(rows, spec, z, c, run)  # process)
    edges = int(manifest["num_edges"])
    report, history = finish_run(
        spec, {**report, "graph": {"edges_before": edges, "directed": graph.directed,
                                   "edges_after": edges}},
        planned, enc_events + pma + cls_events, n_train, z, enc_hist, cls_hist)
    metrics = rows.metrics(clf, prepare, c)
    return PartitionedGapResult(enc, clf.attach_encoder(enc), release, report["ledger"],
                                report, history, metrics)
