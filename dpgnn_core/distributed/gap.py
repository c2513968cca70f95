"""GAP's PMA stage on a partitioned dataset: :func:`aggregate_partitioned` is
:func:`dpgnn_core.methods.gap.aggregate` with the product done by Dask workers
(:func:`~dpgnn_core.distributed.pma.pma_partitioned`). The σ, the budget gate, the
release mark and the ledger events are taken from the same functions as the
single-process stage's, so they are the same numbers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from dpgnn_core.data.partitioned import partition_bounds, read_edge_block, verify_partitioned
from dpgnn_core.distributed.pma import PartitionedRelease, pma_partitioned
from dpgnn_core.errors import DataError
from dpgnn_core.graph.gap_degree import check_degree_bound
from dpgnn_core.methods.gap import _gate, pma_events, pma_noise_std
from dpgnn_core.privacy import gate as release_gate
from dpgnn_core.privacy.events import Ledger
from dpgnn_core.privacy.randomness import Randomness
from dpgnn_core.specs.gap import GapSpec


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
                          x0: str | Path, out: str | Path, *, overwrite: bool = False
                          ) -> tuple[PartitionedRelease, Ledger]:
    """Stage 2 of GAP on partitions: the folder checked (every partition hashed by the
    workers), the degree check at node level, then PMA's K releases to ``out`` and their
    privacy event, exactly :func:`dpgnn_core.methods.gap.aggregate`'s."""
    manifest = verify_partitioned(dataset, client)
    n_train = int(manifest["split_counts"]["train"])
    if spec.level == "node":
        assert spec.max_degree is not None  # the spec's own validation
        check_degree_partitioned(client, dataset, manifest, int(spec.max_degree))
    sigma = pma_noise_std(spec, z, bool(manifest["directed"]))
    if spec.level != "none":
        _gate(spec, n_train, z)
    release = pma_partitioned(client, dataset, x0, out, spec.hops, sigma, spec.row_clip,
                              Randomness.for_spec(spec), overwrite=overwrite,
                              manifest=manifest)
    if spec.level != "none":
        release_gate.released()
    return release, pma_events(spec, n_train, z)
