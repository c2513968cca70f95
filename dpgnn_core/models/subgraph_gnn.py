"""DP-GNN's model: encoder MLP -> r message-passing layers -> decoder MLP (Daigavane et al.).

Two forward paths share one set of weights:

* ``forward(x, adj, mask)`` on padded dense subgraph batches ``[B, S, d]`` (root at index 0),
  the training path: every trainable parameter sits in an ``nn.Linear``, so Opacus's
  per-sample gradient hooks apply (they do not support PyG's MessagePassing layers, and
  ``torch.func.vmap`` fails through PyG's scatter);
* ``forward_sparse(x, edge_index)`` on a whole graph, for inference, with PyG's
  ``SimpleConv`` for the (parameter-free) aggregation.

Aggregations, with :math:`A_{ij} = 1` for a message j -> i:

.. math::
    \\text{gcn:}\\; (D + I)^{-1}(A + I) H W, \\qquad
    \\text{sage:}\\; H W_1 + D^{-1} A H W_2, \\qquad
    \\text{gin:}\\; \\mathrm{MLP}((1 + \\epsilon) H + A H)

GIN's :math:`\\epsilon` is a fixed constant here (no grad sampler needed).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn
from torch_geometric.nn import SimpleConv

ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {
    "tanh": torch.tanh, "relu": torch.relu, "elu": nn.functional.elu}


class SubgraphGNN(nn.Module):
    """Encoder, ``layers`` message-passing layers, decoder.

    Args:
        conv (str): ``gcn``, ``sage`` or ``gin``.
        in_dim (int): input features.
        out_dim (int): classes.
        hidden (int, optional): latent size. (default: :obj:`256`)
        layers (int, optional): message-passing layers r. (default: :obj:`1`)
        activation (str, optional): ``tanh`` (the paper's choice under DP), ``relu`` or
            ``elu``. (default: :obj:`"tanh"`)
        gin_eps (float, optional): GIN's fixed :math:`\\epsilon`. (default: :obj:`0.0`)
    """

    def __init__(self, conv: str, in_dim: int, out_dim: int, hidden: int = 256,
                 layers: int = 1, activation: str = "tanh", gin_eps: float = 0.0) -> None:
        super().__init__()
        if conv not in ("gcn", "sage", "gin"):
            raise ValueError(f"unknown conv {conv!r}; choose gcn, sage or gin")
        if activation not in ACTIVATIONS:
            raise ValueError(f"unknown activation {activation!r}; choose {sorted(ACTIVATIONS)}")
        self.conv, self.act, self.gin_eps = conv, ACTIVATIONS[activation], gin_eps
        self.encoder = nn.Linear(in_dim, hidden)
        self.lins = nn.ModuleList(nn.Linear(hidden, hidden) for _ in range(layers))
        self.roots = nn.ModuleList(nn.Linear(hidden, hidden, bias=False)
                                   for _ in range(layers if conv == "sage" else 0))
        self.gin_out = nn.ModuleList(nn.Linear(hidden, hidden)
                                     for _ in range(layers if conv == "gin" else 0))
        self.decoder = nn.Linear(hidden, out_dim)
        self._sparse = {"gcn": SimpleConv(aggr="mean", combine_root="self_loop"),
                        "sage": SimpleConv(aggr="mean"), "gin": SimpleConv(aggr="sum")}[conv]

    def _layer(self, i: int, h: Tensor, agg: Tensor) -> Tensor:
        if self.conv == "gcn":
            return self.act(self.lins[i](agg))
        if self.conv == "sage":
            return self.act(self.roots[i](h) + self.lins[i](agg))
        z = self.act(self.lins[i]((1.0 + self.gin_eps) * h + agg))
        return self.act(self.gin_out[i](z))

    def forward(self, x: Tensor, adj: Tensor, mask: Tensor) -> Tensor:
        """Root logits ``[B, C]`` of dense batches (``adj`` 0/1, ``adj[b, i, j]`` = j -> i)."""
        m = mask.unsqueeze(-1).to(x.dtype)
        a = adj * m * mask.unsqueeze(-2).to(x.dtype)  # no message to or from padding
        if self.conv == "gcn":
            a = a + torch.diag_embed(mask.to(x.dtype))
            a = a / a.sum(dim=-1, keepdim=True).clamp_min(1.0)
        elif self.conv == "sage":
            a = a / a.sum(dim=-1, keepdim=True).clamp_min(1.0)
        h = self.act(self.encoder(x)) * m
        for i in range(len(self.lins)):
            h = self._layer(i, h, torch.bmm(a, h)) * m
        out: Tensor = self.decoder(h[:, 0])
        return out

    def forward_sparse(self, x: Tensor, edge_index: Tensor) -> Tensor:
        """Logits ``[n, C]`` of every node of a graph (``edge_index`` src -> dst)."""
        h = self.act(self.encoder(x))
        for i in range(len(self.lins)):
            h = self._layer(i, h, self._sparse(h, edge_index))
        out: Tensor = self.decoder(h)
        return out
