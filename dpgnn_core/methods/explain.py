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


#: Frame colours of the panels: which model an explanation belongs to.
_PANEL_COLOURS = {"original": "#888888", "non-private": "#1f77b4", "private": "#d62728"}


def _undirected_mask(rec: dict[str, Any]) -> dict[tuple[int, int], float]:
    """Edge importance per undirected edge: the larger mask of its two directions."""
    out: dict[tuple[int, int], float] = {}
    for (s, d), w in zip(rec["edge_index"].T.tolist(), rec["mask"].tolist(), strict=True):
        key = (min(s, d), max(s, d))
        out[key] = max(out.get(key, 0.0), float(w))
    return out


def plot(private: list[dict[str, Any]], public: list[dict[str, Any]], path: str | Path,
         count: int = 3, *, threshold: float = 0.2, private_label: str = "private model",
         ious: list[float] | None = None) -> None:
    """PNG: for ``count`` graphs, the original graph, the non-private and the private
    model's explanation side by side. Edges are coloured by GNNExplainer's importance (the
    edge mask, colour bar on the right); edges at or above ``threshold`` (the explanation)
    are drawn thick, the others thin and dashed. Panel frames and the legend tell the
    models apart (``private_label`` names the private one, e.g. with its ε); ``ious``
    (private vs non-private, per graph) go into the row titles. Written atomically."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt
    import networkx as nx
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import ListedColormap, Normalize
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    count = min(count, len(private))
    rows = max(count, 1)
    # viridis reversed (dark = important), without its palest yellow (invisible on white)
    cmap = ListedColormap(plt.get_cmap("viridis_r")(np.linspace(0.12, 1.0, 256)))
    norm = Normalize(0.0, 1.0)
    fig, axes = plt.subplots(rows, 3, figsize=(11, 3.4 * rows + 1.2), squeeze=False)
    titles = ("original graph", "non-private model", private_label)
    kinds = ("original", "non-private", "private")
    for row in range(count):
        a, b = private[row], public[row]
        g = nx.Graph()
        g.add_nodes_from(range(int(a["edge_index"].max(initial=-1)) + 1))
        g.add_edges_from(map(tuple, a["edge_index"].T.tolist()))
        pos = nx.spring_layout(g, seed=0)
        edges = [(min(u, v), max(u, v)) for u, v in g.edges()]
        for col, (kind, rec) in enumerate(zip(kinds, (None, b, a), strict=True)):
            ax = axes[row][col]
            nx.draw_networkx_nodes(g, pos, ax=ax, node_size=28, node_color="#555555")
            if rec is None:
                nx.draw_networkx_edges(g, pos, ax=ax, edgelist=edges, edge_color="#555555",
                                       width=1.2)
            else:
                mask = _undirected_mask(rec)
                kept = [e for e in edges if mask.get(e, 0.0) >= threshold]
                rest = [e for e in edges if mask.get(e, 0.0) < threshold]
                for group, width, style in ((rest, 0.8, "dashed"), (kept, 3.0, "solid")):
                    if group:
                        nx.draw_networkx_edges(
                            g, pos, ax=ax, edgelist=group, width=width, style=style,
                            edge_color=[cmap(norm(mask.get(e, 0.0))) for e in group])
            ax.set_title(titles[col], fontsize=10, color=_PANEL_COLOURS[kind])
            ax.set_xticks([])
            ax.set_yticks([])
            for spine in ax.spines.values():
                spine.set_edgecolor(_PANEL_COLOURS[kind])
                spine.set_linewidth(2.5 if kind != "original" else 1.0)
        iou = f", IoU(private, non-private) = {ious[row]:.2f}" if ious else ""
        axes[row][0].set_ylabel(f"graph {a['graph']}{iou}", fontsize=9)
    fig.subplots_adjust(left=0.05, right=0.86, top=1 - 1.0 / (3.4 * rows + 1.2),
                        bottom=0.02, wspace=0.08, hspace=0.25)
    cax = fig.add_axes((0.89, 0.1, 0.02, 0.75))
    bar = fig.colorbar(ScalarMappable(norm=norm, cmap=cmap), cax=cax)
    bar.set_label(f"edge importance (GNNExplainer edge mask); line: threshold {threshold:g}")
    bar.ax.axhline(threshold, color="black", linewidth=1.5)
    handles = [Line2D([], [], color=cmap(norm(0.8)), linewidth=3.0,
                      label=f"in the explanation (mask >= {threshold:g})"),
               Line2D([], [], color=cmap(norm(0.05)), linewidth=0.8, linestyle="dashed",
                      label=f"not in it (mask < {threshold:g})"),
               Patch(facecolor="none", edgecolor=_PANEL_COLOURS["non-private"], linewidth=2,
                     label="non-private model"),
               Patch(facecolor="none", edgecolor=_PANEL_COLOURS["private"], linewidth=2,
                     label=private_label)]
    fig.legend(handles=handles, loc="upper center", ncol=4, fontsize=9, frameon=False,
               bbox_to_anchor=(0.46, 1.0))
    with atomic_file(path) as tmp:
        fig.savefig(tmp, format="png", dpi=90)
    plt.close(fig)
