"""GNNExplainer comparison of a private and a non-private graph classifier (Mueller et al.).

For each graph, PyG's ``Explainer`` with ``GNNExplainer`` learns a soft edge mask for the
model's own prediction; edges with mask >= ``threshold`` (0.2, as the paper) form the
explanation. We report the intersection-over-union of edge sets between the private and
the non-private explanations, and between each explanation and the original graph,
averaged over the graphs explained, and draw a few graphs side by side.

Explaining reads the test graphs' structure and features: the figures and IoUs are
about private data and are not themselves differentially private.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from dpgnn_core.data.graph import GraphData
from dpgnn_core.io import atomic_file
from dpgnn_core.methods.graph_cls import graph_records
from dpgnn_core.models.graph_gnn import GraphGNN


class _Sparse(nn.Module):
    """The ``model(x, edge_index, batch)`` signature PyG's explainers call."""

    def __init__(self, model: GraphGNN) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: Tensor, edge_index: Tensor, batch: Tensor | None = None) -> Tensor:
        return self.model.forward_sparse(x, edge_index, batch)


def edge_iou(a: set[tuple[int, int]], b: set[tuple[int, int]]) -> float:
    """|a ∩ b| / |a ∪ b| (1 when both are empty)."""
    union = a | b
    return 1.0 if not union else len(a & b) / len(union)


def explain(model: GraphGNN, data: GraphData, graph_ids: np.ndarray, *, epochs: int = 100,
            threshold: float = 0.2, seed: int = 0) -> list[dict[str, Any]]:
    """Explanations of ``graph_ids``: for each, local ``edge_index`` ``[2, E]``, the soft
    ``mask`` ``[E]`` and the ``edges`` set at or above ``threshold``."""
    from torch_geometric.explain import Explainer, GNNExplainer

    recs = graph_records(data)
    model = model.cpu().eval()
    explainer = Explainer(
        model=_Sparse(model), algorithm=GNNExplainer(epochs=epochs),
        explanation_type="model", edge_mask_type="object", node_mask_type=None,
        model_config={"mode": "multiclass_classification", "task_level": "graph",
                      "return_type": "raw"})
    out = []
    for g in graph_ids:
        nodes, edges = recs.subgraph(int(g))
        local = np.full(int(nodes.max()) + 1 if len(nodes) else 0, -1, np.int64)
        local[nodes] = np.arange(len(nodes))
        ei = torch.from_numpy(np.stack([local[edges[0]], local[edges[1]]]))
        x = torch.from_numpy(np.ascontiguousarray(data.x[nodes]))
        torch.manual_seed(seed + int(g))
        if ei.shape[1] == 0:
            mask = torch.zeros(0)
        else:
            mask = explainer(x, ei).edge_mask.detach()
        keep = (mask >= threshold).numpy()
        out.append({"graph": int(g), "edge_index": ei.numpy(), "mask": mask.numpy(),
                    "edges": {(int(s), int(d)) for s, d in ei.numpy()[:, keep].T}})
    return out


def compare(private: list[dict[str, Any]], public: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean IoUs over the explained graphs (same graphs, same order)."""
    rows = []
    for a, b in zip(private, public, strict=True):
        original = {(int(s), int(d)) for s, d in a["edge_index"].T}
        rows.append({"graph": a["graph"],
                     "iou_private_nonprivate": edge_iou(a["edges"], b["edges"]),
                     "iou_original_private": edge_iou(original, a["edges"]),
                     "iou_original_nonprivate": edge_iou(original, b["edges"])})
    keys = ("iou_private_nonprivate", "iou_original_private", "iou_original_nonprivate")
    return {**{k: float(np.mean([r[k] for r in rows])) if rows else float("nan")
               for k in keys}, "graphs": rows}


def plot(private: list[dict[str, Any]], public: list[dict[str, Any]], path: str | Path,
         count: int = 3) -> None:
    """PNG: for ``count`` graphs, the original, the non-private and the private explanation
    side by side (kept edges drawn dark, the rest light). Written atomically."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt
    import networkx as nx

    count = min(count, len(private))
    fig, axes = plt.subplots(max(count, 1), 3, figsize=(9, 3 * max(count, 1)), squeeze=False)
    for row in range(count):
        a, b = private[row], public[row]
        g = nx.Graph()
        g.add_nodes_from(range(int(a["edge_index"].max(initial=-1)) + 1))
        g.add_edges_from(map(tuple, a["edge_index"].T.tolist()))
        pos = nx.spring_layout(g, seed=0)
        for col, (title, kept) in enumerate((("original", None), ("non-private", b["edges"]),
                                             ("private", a["edges"]))):
            ax = axes[row][col]
            colours = ["#222222" if kept is None or (u, v) in kept or (v, u) in kept
                       else "#dddddd" for u, v in g.edges()]
            nx.draw_networkx(g, pos, ax=ax, node_size=40, with_labels=False,
                             edge_color=colours, node_color="#4477aa")
            ax.set_title(f"graph {a['graph']}: {title}")
            ax.axis("off")
    fig.tight_layout()
    with atomic_file(path) as tmp:
        fig.savefig(tmp, format="png", dpi=80)
    plt.close(fig)
