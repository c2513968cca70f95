"""One entry point from a dataset folder and a :class:`~dpgnn_core.specs.SamplerSpec` to an
artifact folder: training subgraphs (DP-GNN, DRW family) or GAP's degree-bounded graph."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from dpgnn_core.data.clean import is_symmetric
from dpgnn_core.data.graph import GraphData
from dpgnn_core.data.store import read_dataset, read_manifest, write_dataset
from dpgnn_core.errors import DataError
from dpgnn_core.graph.degree_bound import bound_degree, degrees
from dpgnn_core.graph.degree_bounded import sample_edgelists, sample_subgraphs
from dpgnn_core.graph.random_walk import drw
from dpgnn_core.graph.subgraphs import write_subgraphs
from dpgnn_core.privacy.randomness import Randomness
from dpgnn_core.specs import SamplerSpec


def materialize(dataset: str | Path, spec: SamplerSpec, out: str | Path, *,
                overwrite: bool = False) -> dict[str, Any]:
    """Sample ``spec`` on the dataset's training nodes and write the artifact to ``out``.

    Returns the artifact's manifest (sampler spec, seed, dataset sha256, counts, occurrence
    bound and batch-sampling scheme; for ``gap-degree`` a dataset manifest).
    """
    dataset = Path(dataset)
    data = read_dataset(dataset)  # validates the folder: a bad dataset fails here, clearly
    ds_sha = read_manifest(dataset)["content_sha256"]
    if data.task != "node":
        raise DataError("subgraph samplers apply to node classification datasets",
                        path=dataset, field="task", value=data.task)
    train = data.mask("train")
    randomness = Randomness.for_spec(spec)
    rng = randomness.numpy_generator("subgraphs")
    meta: dict[str, Any] = {"sampler": spec.model_dump(mode="json"),
                            "seed": None if randomness.secure else spec.seed,
                            **randomness.describe(),
                            "dataset": str(dataset.resolve()), "dataset_sha256": ds_sha}
    if spec.sampler == "gap-degree":
        assert spec.max_degree is not None
        bounded = bound_degree(data.edge_index, data.num_nodes, spec.max_degree,
                               directed=data.directed, rng=rng)
        if bounded.shape[1] == 0 and data.num_edges > 0:
            raise DataError("the degree bound removed every edge", field="max_degree",
                            value=spec.max_degree)
        deg = degrees(bounded, data.num_nodes, directed=data.directed)
        note = ("GAP's edge sampler is not stable under node removal: node-level privacy of "
                "a run on this graph holds for the bounded graph, not the original one")
        out_data = GraphData(
            name=f"{data.name}-deg{spec.max_degree}", task="node", x=data.x,
            edge_index=bounded, y=data.y, split=data.split, num_classes=data.num_classes,
            directed=data.directed,
            meta={**data.meta, "cleaning": {**data.meta.get("cleaning", {}),
                                            "degree_bound": {**meta,
                                                             "edges_before": data.num_edges,
                                                             "edges_after": int(bounded.shape[1]),
                                                             "max_degree_after": int(deg.max(
                                                                 initial=0)),
                                                             "node_level_note": note}}})
        return write_dataset(out_data, out, overwrite=overwrite)
    if spec.sampler == "degree-bounded":
        assert spec.max_degree is not None
        ei = data.edge_index
        if data.directed and not is_symmetric(ei, data.num_nodes):
            # Messages run along reversed sampled edges: sample on the reverse of a directed
            # graph so that they follow its real edges.
            ei = np.ascontiguousarray(ei[::-1])
        sampled = sample_edgelists(ei, data.num_nodes, train, spec.max_degree, rng)
        sg = sample_subgraphs(sampled, data.num_nodes, train, spec.layers, spec.max_degree)
        meta.update({"candidate_edges": sampled.candidate_edges,
                     "sampled_edges": int(sampled.edge_index.shape[1]),
                     "dropped_nodes": int(sampled.dropped_nodes.shape[0])})
    else:
        assert spec.walk_length is not None
        sg = drw(data.edge_index, data.num_nodes, train, spec.walk_length,
                 restarts=spec.restarts, rng=rng)
        meta.update({"min_subgraphs_guaranteed": -(-int(train.sum())
                                                   // (spec.restarts * spec.walk_length + 1))})
    return write_subgraphs(sg, out, meta, overwrite=overwrite)
