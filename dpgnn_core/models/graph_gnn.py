"""Graph classifiers (Mueller et al.): 2-4 GCN / GraphSAGE / GAT layers, optional instance
norm, mean or max pooling, MLP head.

Like :class:`~dpgnn_core.models.subgraph_gnn.SubgraphGNN`, every trainable parameter sits in
an ``nn.Linear``, so per-graph gradients are exact (:mod:`dpgnn_core.training.per_sample`)
on padded dense per-graph batches ``[B, S, d]``:

.. math::
    \\text{gcn:}\\; \\hat D^{-1/2}(A + I)\\hat D^{-1/2} H W, \\qquad
    \\text{sage:}\\; H W_1 + D^{-1} A H W_2, \\qquad
    \\text{gat:}\\; \\text{10-head dot-product attention over } N(i) \\cup \\{i\\}

GAT uses dot-product attention (as DP-GNN's GAT here), not GATConv's additive attention,
whose attention vectors would need a grad sampler of their own. ``norm="batch"`` exists for
the non-private model only: BatchNorm mixes the graphs of a batch and is refused under DP.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torch_geometric.nn import MessagePassing, global_max_pool, global_mean_pool
from torch_geometric.utils import add_self_loops, degree, scatter, softmax

from dpgnn_core.models.subgraph_gnn import _Attention


class _WeightedSum(MessagePassing):  # type: ignore[misc]
    r""":math:`\sum_j w_{ji} h_j`: the sparse form of the dense products (an explainer's
    edge mask multiplies each message)."""

    def __init__(self) -> None:
        super().__init__(aggr="add")

    def forward(self, h: Tensor, edge_index: Tensor, weight: Tensor) -> Tensor:
        out: Tensor = self.propagate(edge_index, h=h, weight=weight)
        return out

    def message(self, h_j: Tensor, weight: Tensor) -> Tensor:
        return weight.view(-1, 1) * h_j


class _DotAttention(MessagePassing):  # type: ignore[misc]
    """Sparse multi-head dot-product attention with the dense path's weights."""

    def __init__(self) -> None:
        super().__init__(aggr="add", node_dim=0)

    def forward(self, q: Tensor, k: Tensor, v: Tensor, edge_index: Tensor) -> Tensor:
        out: Tensor = self.propagate(edge_index, q=q, k=k, v=v)
        return out

    def message(self, q_i: Tensor, k_j: Tensor, v_j: Tensor, index: Tensor,
                ptr: Tensor | None, size_i: int | None) -> Tensor:
        alpha: Tensor = softmax((q_i * k_j).sum(-1) / math.sqrt(q_i.shape[-1]), index, ptr,
                                size_i)
        return alpha.unsqueeze(-1) * v_j


def _instance_norm(h: Tensor, m: Tensor) -> Tensor:
    """Per graph and feature, zero mean and unit variance over the graph's nodes."""
    cnt = m.sum(1, keepdim=True).clamp_min(1.0)
    mu = (h * m).sum(1, keepdim=True) / cnt
    var = (((h - mu) * m) ** 2).sum(1, keepdim=True) / cnt
    return (h - mu) / torch.sqrt(var + 1e-5) * m


@dataclass(frozen=True)
class GraphConv:
    """One convolution of :class:`GraphGNN` (an entry of :data:`CONVS`).

    Args:
        parts (tuple): the per-layer weight lists it uses besides ``lins`` (``roots``,
            ``att``).
        prepare (callable): ``prepare(adj, mask)``: the padded dense adjacency (no
            padding) as its dense layers read it.
        dense (callable): ``dense(model, i, h, prepared)``: layer i on dense batches.
        edges (callable): ``edges(edge_index, n)``: the sparse path's edges and their
            weights (None for attention).
        sparse (callable): ``sparse(model, i, h, edges, weights)``: layer i on PyG's
            sparse form, through ``MessagePassing`` (so explainers can mask edges).
    """

    parts: tuple[str, ...]
    prepare: Callable[[Tensor, Tensor], Tensor]
    dense: Callable[[GraphGNN, int, Tensor, Tensor], Tensor]
    edges: Callable[[Tensor, int], tuple[Tensor, Tensor | None]]
    sparse: Callable[[GraphGNN, int, Tensor, Tensor, Tensor | None], Tensor]


def _sym_norm(a: Tensor, mask: Tensor) -> Tensor:
    a = a + torch.diag_embed(mask.to(a.dtype))
    d = a.sum(-1).clamp_min(1.0).rsqrt()
    return d.unsqueeze(-1) * a * d.unsqueeze(-2)


def _gcn_edges(edge_index: Tensor, n: int) -> tuple[Tensor, Tensor | None]:
    ei, _ = add_self_loops(edge_index, num_nodes=n)
    d = degree(ei[1], n).clamp_min(1.0).rsqrt()
    return ei, d[ei[0]] * d[ei[1]]


def _sage_edges(edge_index: Tensor, n: int) -> tuple[Tensor, Tensor | None]:
    dst = edge_index[1]
    return edge_index, 1.0 / degree(dst, n).clamp_min(1.0)[dst]


def _gat_sparse(m: GraphGNN, i: int, h: Tensor, ei: Tensor, w: Tensor | None) -> Tensor:
    att, n = m._att(i), h.shape[0]
    z = m.lins[i](h)
    q, k, v = (f(z).view(n, att.heads, att.dim) for f in (att.q, att.k, att.v))
    out: Tensor = att.out(m._dot(q, k, v, ei).reshape(n, -1))
    return out


#: The convolutions of :class:`GraphGNN` (the spec's ``conv``).
CONVS: dict[str, GraphConv] = {
    "gcn": GraphConv((), _sym_norm, lambda m, i, h, a: torch.bmm(a, m.lins[i](h)), _gcn_edges,
                     lambda m, i, h, ei, w: m._sum(m.lins[i](h), ei, w)),
    "sage": GraphConv(
        ("roots",), lambda a, mask: a / a.sum(-1, keepdim=True).clamp_min(1.0),
        lambda m, i, h, a: m.roots[i](h) + m.lins[i](torch.bmm(a, h)), _sage_edges,
        lambda m, i, h, ei, w: m.roots[i](h) + m.lins[i](m._sum(h, ei, w))),
    "gat": GraphConv(
        ("att",),
        lambda a, mask: (a > 0) | torch.eye(a.shape[-1], dtype=torch.bool, device=a.device),
        lambda m, i, h, allowed: m._att(i).dense(m.lins[i](h), allowed, h.shape[1]),
        lambda ei, n: (add_self_loops(ei, num_nodes=n)[0], None), _gat_sparse),
}


class GraphGNN(nn.Module):
    """``layers`` message-passing layers, pooling, a two-layer head.

    Args:
        conv (str): ``gcn``, ``sage`` or ``gat``.
        in_dim (int): node features.
        num_classes (int): graph classes.
        hidden (int, optional): width. (default: :obj:`64`)
        layers (int, optional): message-passing layers, 2-4. (default: :obj:`3`)
        pool (str, optional): ``mean`` or ``max``. (default: :obj:`"mean"`)
        norm (str, optional): ``none``, ``instance`` (per graph, no parameters) or
            ``batch`` (non-private only). (default: :obj:`"none"`)
        heads (int, optional): GAT heads. (default: :obj:`4`)
    """

    kind: GraphConv
    lins: nn.ModuleList
    roots: nn.ModuleList
    att: nn.ModuleList
    _sum: _WeightedSum
    _dot: _DotAttention

    def __init__(self, conv: str, in_dim: int, num_classes: int, hidden: int = 64,
                 layers: int = 3, pool: str = "mean", norm: str = "none",
                 heads: int = 4) -> None:
        super().__init__()
        if conv not in CONVS:
            raise ValueError(f"unknown conv {conv!r}; choose one of {', '.join(CONVS)}")
        if not 1 <= layers <= 4:
            raise ValueError(f"layers must lie in 1..4, got {layers}")
        if pool not in ("mean", "max") or norm not in ("none", "instance", "batch"):
            raise ValueError(f"pool must be mean or max and norm none, instance or batch; "
                             f"got {pool!r}, {norm!r}")
        self.conv, self.kind, self.pool, self.norm = conv, CONVS[conv], pool, norm
        dims = [in_dim] + [hidden] * layers
        self.lins = nn.ModuleList(nn.Linear(a, b) for a, b in itertools.pairwise(dims))
        self.roots = nn.ModuleList(nn.Linear(a, b, bias=False)
                                   for a, b in itertools.pairwise(dims)
                                   if "roots" in self.kind.parts)
        self.att = nn.ModuleList(_Attention(hidden, heads) for _ in range(layers)
                                 if "att" in self.kind.parts)
        self.bns = nn.ModuleList(nn.BatchNorm1d(hidden) for _ in range(layers)
                                 if norm == "batch")
        self.head1 = nn.Linear(hidden, hidden)
        self.head2 = nn.Linear(hidden, num_classes)
        self._sum = _WeightedSum()
        self._dot = _DotAttention()

    def _att(self, i: int) -> _Attention:
        att = self.att[i]
        assert isinstance(att, _Attention)
        return att

    def forward(self, x: Tensor, adj: Tensor, mask: Tensor) -> Tensor:
        """Logits ``[B, C]`` of padded dense graphs (``adj[b, i, j]`` = 1 for j -> i)."""
        dt = x.dtype
        m = mask.unsqueeze(-1).to(dt)
        a = self.kind.prepare(adj * m * mask.unsqueeze(-2).to(dt), mask)
        h = x * m
        for i in range(len(self.lins)):
            h = self.kind.dense(self, i, h, a)
            if self.norm == "instance":
                h = _instance_norm(h, m)
            elif self.norm == "batch":
                flat = self.bns[i](h[mask])
                h = torch.zeros(h.shape[:2] + flat.shape[1:], dtype=flat.dtype,
                                device=flat.device).index_put((mask,), flat)
            h = torch.relu(h) * m
        if self.pool == "mean":
            g = h.sum(1) / m.sum(1).clamp_min(1.0)
        else:
            g = h.masked_fill(~mask.unsqueeze(-1), -math.inf).amax(1)
            g = torch.where(torch.isfinite(g), g, torch.zeros_like(g))
        out: Tensor = self.head2(torch.relu(self.head1(g)))
        return out

    def forward_sparse(self, x: Tensor, edge_index: Tensor, batch: Tensor | None = None
                       ) -> Tensor:
        """Logits ``[G, C]`` from PyG's sparse form (``edge_index`` src -> dst, ``batch`` the
        graph of each node), with the same weights as :meth:`forward`; its message passing
        runs through PyG ``MessagePassing`` layers, so PyG's explainers can mask edges."""
        n = x.shape[0]
        batch = torch.zeros(n, dtype=torch.long, device=x.device) if batch is None else batch
        ei, weight = self.kind.edges(edge_index, n)
        h = x
        for i in range(len(self.lins)):
            h = self.kind.sparse(self, i, h, ei, weight)
            if self.norm == "instance":
                cnt = degree(batch, dtype=h.dtype).clamp_min(1.0)[:, None]
                mu = scatter(h, batch, 0, reduce="sum") / cnt
                var = scatter((h - mu[batch]) ** 2, batch, 0, reduce="sum") / cnt
                h = (h - mu[batch]) / torch.sqrt(var[batch] + 1e-5)
            elif self.norm == "batch":
                h = self.bns[i](h)
            h = torch.relu(h)
        g = global_mean_pool(h, batch) if self.pool == "mean" else global_max_pool(h, batch)
        out: Tensor = self.head2(torch.relu(self.head1(g)))
        return out
