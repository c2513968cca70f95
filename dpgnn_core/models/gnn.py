"""Message-passing stacks (GCN, GraphSAGE) from PyTorch Geometric layers."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import torch
from torch import Tensor, nn
from torch_geometric.nn import GCNConv, MessagePassing, SAGEConv

from dpgnn_core.models.mlp import MLP

#: The baselines' convolutions (the method name): ``(in, out) ->`` the PyG layer.
CONVS: dict[str, Callable[[int, int], MessagePassing]] = {
    "gcn": lambda a, b: GCNConv(a, b, cached=False),
    "sage": lambda a, b: SAGEConv(a, b, aggr="mean")}


class GNN(nn.Module):
    """``layers`` message-passing layers with ReLU and dropout between them.

    GCN (Kipf & Welling, 2017) uses symmetric normalisation with self-loops,

    .. math::
        H^{(l+1)} = \\sigma(\\hat D^{-1/2} (A + I) \\hat D^{-1/2} H^{(l)} W^{(l)}),

    GraphSAGE (Hamilton et al., 2017) the mean aggregator with a root weight.

    Args:
        conv (str): ``"gcn"`` or ``"sage"``.
        in_dim (int): input features.
        hidden (int): hidden width.
        out_dim (int): outputs (classes).
        layers (int, optional): number of message-passing layers. (default: :obj:`2`)
        dropout (float, optional): dropout probability on hidden representations (not on
            the raw input, where it costs more than the layer itself on wide sparse
            features). (default: :obj:`0.5`)
    """

    def __init__(self, conv: str, in_dim: int, hidden: int, out_dim: int, layers: int = 2,
                 dropout: float = 0.5) -> None:
        super().__init__()
        if conv not in CONVS:
            raise ValueError(f"unknown conv {conv!r}; choose {' or '.join(CONVS)}")
        make = CONVS[conv]
        dims = [in_dim] + [hidden] * (layers - 1) + [out_dim]
        self.convs = nn.ModuleList(make(a, b) for a, b in itertools.pairwise(dims))
        self.dropout = dropout

    def forward(self, x: Tensor, edge_index: Tensor | None = None) -> Tensor:
        if edge_index is None:
            raise ValueError("a GNN needs edge_index")
        for i, conv in enumerate(self.convs):
            if i > 0:
                x = nn.functional.dropout(x, self.dropout, self.training)
            x = conv(x, edge_index)
            if i < len(self.convs) - 1:
                x = torch.relu(x)
        return x


def build_model(method: str, in_dim: int, hidden: int, out_dim: int, layers: int,
                dropout: float) -> nn.Module:
    """The model of a baseline method: ``mlp``, ``gcn`` or ``sage``."""
    if method == "mlp":
        return MLP(in_dim, hidden, out_dim, layers, dropout)
    return GNN(method, in_dim, hidden, out_dim, layers, dropout)
