"""DPDGC's modules (Chien et al., NeurIPS 2023): the released adjacency embeddings and the
classifier over a node's features and its row of the private aggregation. The recipe that
trains them privately is :mod:`dpgnn_core.methods.dpdgc`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor, nn

from dpgnn_core.errors import DataError
from dpgnn_core.models.sparse_rows import (
    SPARSE_DENSITY,
    SparseRows,
    dropout_values,
    sparse_linear,
)


def input_dropout(x: Tensor, p: float, training: bool) -> Tensor:
    """``nn.functional.dropout(x, p, training)`` for a mostly-zero input that needs no
    gradient (bag-of-words features): the keep mask is drawn only at the non-zero entries,
    from torch's global generator as dropout's is. A zero entry is zero whatever its mask,
    so the output has dropout's distribution exactly (each entry kept with probability
    1 − p and scaled by 1/(1 − p), independently), at a fraction of its cost: on Cora's
    2,033 × 1,437 training rows (1.3 % non-zero) about a third of dropout's CPU time, most
    of DPDGC's full-batch epoch (issue 52 §7). The masks drawn for a seed differ from
    dropout's. A denser input, or one that needs its gradient, takes dropout itself."""
    if not training or p == 0.0 or x.requires_grad or p >= 1.0:
        return nn.functional.dropout(x, p, training)
    nz = x.nonzero(as_tuple=True)
    if nz[0].numel() * SPARSE_DENSITY > x.numel():  # denser: dropout itself
        return nn.functional.dropout(x, p, training)
    out = torch.zeros_like(x)
    out[nz] = dropout_values(x[nz], p)
    return out


def mask_dropout(x: Tensor, p: float, training: bool) -> Tensor:
    """``nn.functional.dropout(x, p, training)`` with its keep mask drawn as
    ``torch.rand(...) >= p`` (each entry kept with probability 1 − p, independently,
    scaled by 1/(1 − p): dropout's distribution), from torch's global generator as
    dropout's is. On the CPU PyTorch's dropout draws its Bernoulli mask about twice as
    slowly (~5 ms for DPDGC's 2,033 × 128 hidden rows, twice per full-batch epoch: issue
    52 §7). The masks drawn for a seed differ from dropout's."""
    if not training or p == 0.0:
        return x
    if p >= 1.0:
        return nn.functional.dropout(x, p, training)
    return dropout_values(x, p)


def _has_hooks(module: nn.Module) -> bool:
    """Whether ``module`` has hooks of its own (per-sample clipping's): a forward that
    bypasses its call would skip them."""
    return bool(module._forward_hooks or module._forward_pre_hooks or module._backward_hooks
                or module._backward_pre_hooks)


class AdjacencyEncoder(nn.Module):
    """The released adjacency embeddings W ``[n, h]`` (a buffer: trained by
    :func:`fit_adjacency_encoder`, not by the classifier's optimiser). :meth:`encode`
    returns them (what the aggregation summed; the audit's edge canaries read it)."""

    weight: Tensor

    def __init__(self, num_nodes: int, adj_dim: int) -> None:
        super().__init__()
        self.register_buffer("weight", torch.zeros(num_nodes, adj_dim))

    def encode(self, x: Tensor) -> Tensor:
        if x.shape[0] != self.weight.shape[0]:
            raise DataError(f"DPDGC's adjacency embeddings have {self.weight.shape[0]} rows, "
                            f"the graph {x.shape[0]} nodes (transductive only)",
                            field="num_nodes", value=int(x.shape[0]))
        return self.weight


class DpdgcClassifier(nn.Module):
    """A feature branch and an aggregation branch, concatenated, then a head:

    .. math::
        \\hat y_v = W_3\\, \\mathrm{SELU}(W_2 [\\mathrm{SELU}(W_x x_v) \\,\\|\\,
                    \\mathrm{SELU}(W_H \\tilde H_v)])

    with dropout on the features and the hidden layers. The input is one tensor
    ``[x_v, H_v]`` (so per-sample clipping sees one record per row).

    Args:
        in_dim (int): node features.
        adj_dim (int): width h of the aggregation.
        hidden (int): hidden width.
        num_classes (int): classes.
        dropout (float, optional): dropout rate. (default: 0.0)
    """

    encoder: AdjacencyEncoder | None

    def __init__(self, in_dim: int, adj_dim: int, hidden: int, num_classes: int,
                 dropout: float = 0.0) -> None:
        super().__init__()
        self.in_dim = in_dim
        self.dropout = nn.Dropout(dropout)
        self.feat = nn.Linear(in_dim, hidden)
        self.agg = nn.Linear(adj_dim, hidden)
        self.lin = nn.Linear(2 * hidden, hidden)
        self.head = nn.Linear(hidden, num_classes)
        self.encoder = None

    def attach_encoder(self, encoder: AdjacencyEncoder) -> DpdgcClassifier:
        """Keep the released embeddings W with the classifier (saved in its state dict)."""
        self.encoder = encoder
        return self

    def load_state_dict(self, state_dict: Mapping[str, Any], strict: bool = True,
                        assign: bool = False) -> Any:
        """:meth:`torch.nn.Module.load_state_dict`, attaching an encoder of the stored
        embeddings' shape first where the state holds them (``encoder.weight``: a run with
        ``messages="adjacency"``), so that the model a spec describes loads either form."""
        w = state_dict.get("encoder.weight")
        if w is not None and self.encoder is None:
            self.attach_encoder(AdjacencyEncoder(int(w.shape[0]), int(w.shape[1])))
        return super().load_state_dict(state_dict, strict, assign)

    def forward(self, xh: Tensor | SparseRows) -> Tensor:
        """Logits ``[n, C]`` of rows ``[x_v, H_v]``: a dense tensor, or
        :class:`SparseRows` (the same function, its feature branch a sparse product)."""
        p, training = self.dropout.p, self.training
        if isinstance(xh, SparseRows) and _has_hooks(self.feat):
            xh = xh.dense()  # per-sample clipping hooks the Linear: call it
        if isinstance(xh, SparseRows):
            fx = sparse_linear(xh, self.feat.weight, self.feat.bias, p if training else 0.0)
            h = xh.h
        else:
            x, h = xh[:, :self.in_dim], xh[:, self.in_dim:]
            fx = self.feat(input_dropout(x, p, training))
        z = torch.cat([torch.selu(fx), torch.selu(self.agg(h))], 1)
        out: Tensor = self.head(mask_dropout(torch.selu(self.lin(mask_dropout(z, p, training))),
                                             p, training))
        return out


__all__ = ["AdjacencyEncoder", "DpdgcClassifier", "SparseRows", "input_dropout", "mask_dropout"]
