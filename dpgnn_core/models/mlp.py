"""Multi-layer perceptron (the structure-free baseline)."""

from __future__ import annotations

import itertools

import torch
from torch import Tensor, nn


class MLP(nn.Module):
    """``layers`` linear maps with ReLU and dropout between them.

    .. math::
        h^{(l+1)} = \\mathrm{ReLU}(W^{(l)} h^{(l)} + b^{(l)})

    Args:
        in_dim (int): input features.
        hidden (int): hidden width.
        out_dim (int): outputs (classes).
        layers (int, optional): number of linear layers. (default: :obj:`2`)
        dropout (float, optional): dropout probability on hidden representations (not on
            the raw input, where it costs more than the layer itself on wide sparse
            features). (default: :obj:`0.5`)
    """

    def __init__(self, in_dim: int, hidden: int, out_dim: int, layers: int = 2,
                 dropout: float = 0.5) -> None:
        super().__init__()
        dims = [in_dim] + [hidden] * (layers - 1) + [out_dim]
        self.lins = nn.ModuleList(nn.Linear(a, b) for a, b in itertools.pairwise(dims))
        self.dropout = dropout

    def forward(self, x: Tensor, edge_index: Tensor | None = None) -> Tensor:
        for i, lin in enumerate(self.lins):
            if i > 0:
                x = nn.functional.dropout(x, self.dropout, self.training)
            x = lin(x)
            if i < len(self.lins) - 1:
                x = torch.relu(x)
        return x
