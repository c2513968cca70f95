"""DP-GNN's model: encoder MLP -> r message-passing layers -> decoder MLP (Daigavane et al.).

Two forward paths share one set of weights:

* ``forward(x, adj, mask)`` on padded dense subgraph batches ``[B, S, d]`` (root at index 0),
  the training path: every trainable parameter sits in an ``nn.Linear`` (or GIN's
  :class:`~dpgnn_core.training.per_sample.Scale`), so per-sample gradients are exact and
  cheap (:mod:`dpgnn_core.training.per_sample`); PyG's MessagePassing layers have no
  per-sample gradient support in Opacus and ``torch.func.vmap`` fails through their scatter;
* ``forward_sparse(x, edge_index)`` on a whole graph, for inference, with PyG's
  ``SimpleConv`` for the parameter-free aggregations and PyG's segment ``softmax`` for
  attention.

Aggregations, with :math:`A_{ij} = 1` for a message j -> i:

.. math::
    \\text{gcn:}\\; (D + I)^{-1}(A + I) H W, \\qquad
    \\text{sage:}\\; H W_1 + D^{-1} A H W_2, \\qquad
    \\text{gin:}\\; \\mathrm{MLP}((1 + \\epsilon) H + A H),

    \\text{gat:}\\; \\Big\\Vert_{h=1}^{10} \\sum_{j \\in N(i) \\cup \\{i\\}}
    \\mathrm{softmax}_j\\Big(\\frac{(W^h_Q H_i)^\\top W^h_K H_j}{\\sqrt{d_h}}\\Big)
    W^h_V H_j \\;\\text{ then } W_O,

GAT's attention is dot-product (10 heads of size :math:`\\lceil \\text{hidden}/10 \\rceil`),
so its parameters are all Linear layers and need no grad sampler of their own; GIN's
trainable :math:`\\epsilon` has one (``Scale``).

Only the root's output is needed for DP-GNN's loss, so the last layer is computed for the
root alone on the dense path (``all_nodes=False``); DRW trains on every node of a
subgraph (``all_nodes=True``).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import torch
from torch import Tensor, nn
from torch_geometric.nn import SimpleConv
from torch_geometric.utils import add_remaining_self_loops, softmax

from dpgnn_core.training.per_sample import Scale

ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {
    "tanh": torch.tanh, "relu": torch.relu, "elu": nn.functional.elu}
CONVS = ("gcn", "sage", "gin", "gat")


class _Attention(nn.Module):
    """Multi-head dot-product attention over (dense or sparse) neighbourhoods + self."""

    def __init__(self, hidden: int, heads: int) -> None:
        super().__init__()
        self.heads, self.dim = heads, math.ceil(hidden / heads)
        width = heads * self.dim
        self.q, self.k, self.v = (nn.Linear(hidden, width) for _ in range(3))
        self.out = nn.Linear(width, hidden)

    def dense(self, h: Tensor, allowed: Tensor, rows: int) -> Tensor:
        """``h`` [B, S, H], ``allowed`` [B, rows, S] -> [B, rows, H] (rows: the first
        ``rows`` positions attend)."""
        b, s, _ = h.shape
        q = self.q(h[:, :rows]).view(b, rows, self.heads, self.dim).transpose(1, 2)
        k = self.k(h).view(b, s, self.heads, self.dim).transpose(1, 2)
        v = self.v(h).view(b, s, self.heads, self.dim).transpose(1, 2)
        score = q @ k.transpose(-1, -2) / math.sqrt(self.dim)
        score = score.masked_fill(~allowed[:, None], float("-inf"))
        att = torch.softmax(score, dim=-1) @ v  # [B, heads, rows, dim]
        out: Tensor = self.out(att.transpose(1, 2).reshape(b, rows, -1))
        return out

    def sparse(self, h: Tensor, edge_index: Tensor) -> Tensor:
        n = h.shape[0]
        ei, _ = add_remaining_self_loops(edge_index, num_nodes=n)
        src, dst = ei[0], ei[1]
        q = self.q(h).view(n, self.heads, self.dim)
        k = self.k(h).view(n, self.heads, self.dim)
        v = self.v(h).view(n, self.heads, self.dim)
        alpha = softmax((q[dst] * k[src]).sum(-1) / math.sqrt(self.dim), dst, num_nodes=n)
        agg = torch.zeros_like(q).index_add_(0, dst, alpha[..., None] * v[src])
        out: Tensor = self.out(agg.reshape(n, -1))
        return out


class SubgraphGNN(nn.Module):
    """Encoder, ``layers`` message-passing layers, decoder.

    Args:
        conv (str): ``gcn``, ``sage``, ``gin`` or ``gat``.
        in_dim (int): input features.
        out_dim (int): classes.
        hidden (int, optional): latent size. (default: :obj:`256`)
        layers (int, optional): message-passing layers r. (default: :obj:`1`)
        activation (str, optional): ``tanh`` (the paper's choice under DP), ``relu`` or
            ``elu``. (default: :obj:`"tanh"`)
        gin_eps (float, optional): GIN's initial :math:`\\epsilon`. (default: :obj:`0.0`)
        train_eps (bool, optional): train GIN's :math:`\\epsilon`. (default: :obj:`True`)
        heads (int, optional): GAT's attention heads. (default: :obj:`10`)
    """

    def __init__(self, conv: str, in_dim: int, out_dim: int, hidden: int = 256,
                 layers: int = 1, activation: str = "tanh", gin_eps: float = 0.0,
                 train_eps: bool = True, heads: int = 10) -> None:
        super().__init__()
        if conv not in CONVS:
            raise ValueError(f"unknown conv {conv!r}; choose one of {', '.join(CONVS)}")
        if activation not in ACTIVATIONS:
            raise ValueError(f"unknown activation {activation!r}; choose {sorted(ACTIVATIONS)}")
        self.conv, self.act = conv, ACTIVATIONS[activation]
        self.encoder = nn.Linear(in_dim, hidden)
        n = layers
        self.lins = nn.ModuleList(nn.Linear(hidden, hidden) for _ in range(n if conv != "gat"
                                                                           else 0))
        self.roots = nn.ModuleList(nn.Linear(hidden, hidden, bias=False)
                                   for _ in range(n if conv == "sage" else 0))
        self.gin_out = nn.ModuleList(nn.Linear(hidden, hidden)
                                     for _ in range(n if conv == "gin" else 0))
        self.eps = nn.ModuleList(Scale(gin_eps) for _ in range(n if conv == "gin" else 0))
        for s in self.eps:
            s.eps.requires_grad_(train_eps)
        self.att = nn.ModuleList(_Attention(hidden, heads) for _ in range(n if conv == "gat"
                                                                          else 0))
        self.num_layers = n
        self.decoder = nn.Linear(hidden, out_dim)
        self._sparse = {"gcn": SimpleConv(aggr="mean", combine_root="self_loop"),
                        "sage": SimpleConv(aggr="mean"), "gin": SimpleConv(aggr="sum"),
                        "gat": None}[conv]

    def groups(self) -> list[list[nn.Module]]:
        """Layer-wise clipping groups: encoder, aggregation layers, decoder."""
        agg: list[nn.Module] = [m for m in (self.lins, self.roots, self.gin_out, self.eps,
                                             self.att) if len(m)]
        return [[self.encoder], agg, [self.decoder]]

    def _att(self, i: int) -> _Attention:
        att = self.att[i]
        assert isinstance(att, _Attention)
        return att

    def _layer(self, i: int, h: Tensor, agg: Tensor) -> Tensor:
        """Layer i on the rows of ``agg`` (``h`` holds the same rows)."""
        if self.conv == "gcn":
            return self.act(self.lins[i](agg))
        if self.conv == "sage":
            return self.act(self.roots[i](h) + self.lins[i](agg))
        z = self.act(self.lins[i](self.eps[i](h) + agg))
        return self.act(self.gin_out[i](z))

    def forward(self, x: Tensor, adj: Tensor, mask: Tensor, all_nodes: bool = False
                ) -> Tensor:
        """Logits of dense batches (``adj`` 0/1, ``adj[b, i, j]`` = j -> i): of the roots
        ``[B, C]``, or of every position ``[B, S, C]`` with ``all_nodes``."""
        dt = x.dtype
        m = mask.unsqueeze(-1).to(dt)
        a = adj * m * mask.unsqueeze(-2).to(dt)  # no message to or from padding
        if self.conv == "gcn":
            a = a + torch.diag_embed(mask.to(dt))
            a = a / a.sum(dim=-1, keepdim=True).clamp_min(1.0)
        elif self.conv == "sage":
            a = a / a.sum(dim=-1, keepdim=True).clamp_min(1.0)
        elif self.conv == "gat":
            eye = torch.eye(a.shape[-1], dtype=torch.bool, device=a.device)
            allowed = (a > 0) | eye  # padding attends itself only (masked out below)
        h = self.act(self.encoder(x)) * m
        for i in range(self.num_layers):
            rows = h.shape[1] if all_nodes or i < self.num_layers - 1 else 1
            if self.conv == "gat":
                h_new = self.act(self._att(i).dense(h, allowed[:, :rows], rows))
            else:
                h_new = self._layer(i, h[:, :rows], torch.bmm(a[:, :rows], h))
            h = h_new * m[:, :rows]
        if not all_nodes:
            h = h[:, 0]
        out: Tensor = self.decoder(h)
        return out

    def forward_sparse(self, x: Tensor, edge_index: Tensor) -> Tensor:
        """Logits ``[n, C]`` of every node of a graph (``edge_index`` src -> dst)."""
        h = self.act(self.encoder(x))
        for i in range(self.num_layers):
            if self.conv == "gat":
                h = self.act(self._att(i).sparse(h, edge_index))
            else:
                assert self._sparse is not None
                h = self._layer(i, h, self._sparse(h, edge_index))
        out: Tensor = self.decoder(h)
        return out


def _pyg_sparse(model: SubgraphGNN, x: Tensor, edge_index: Tensor) -> Tensor:
    return model.forward_sparse(x, edge_index)


def _dgl_sparse(model: SubgraphGNN, x: Tensor, edge_index: Tensor) -> Tensor:
    from dpgnn_core.models.dgl_backend import forward_dgl  # the optional dgl extra

    return forward_dgl(model, x, edge_index)


#: Sparse inference backends (the spec's ``backend``): PyG (:meth:`SubgraphGNN.forward_sparse`)
#: or DGL's layers with the same weights (:mod:`dpgnn_core.models.dgl_backend`, needs
#: ``pip install 'dpgnn[dgl]'``). ``auto`` (:func:`resolve_backend`) picks between them.
SPARSE_BACKENDS: dict[str, Callable[[SubgraphGNN, Tensor, Tensor], Tensor]] = {
    "pyg": _pyg_sparse, "dgl": _dgl_sparse}


@functools.cache
def dgl_available() -> bool:
    """Whether DGL is installed and loads (imported once, at the first ``auto`` choice)."""
    from dpgnn_core.errors import MissingExtraError
    from dpgnn_core.interop.dgl import import_dgl

    try:
        import_dgl()
    except MissingExtraError:
        return False
    return True


def resolve_backend(backend: str, conv: str, device: torch.device) -> str:
    """The backend that runs: ``auto`` is ``dgl`` for gcn, sage and gin on the CPU when DGL
    is installed (about 3.5x faster than PyG's path on a 2M-edge graph, benchmarks/RESULTS.md;
    the extra installs DGL's CPU build), else ``pyg``. The two agree to 1e-5 (tested)."""
    if backend not in ("auto", *SPARSE_BACKENDS):
        raise ValueError(f"unknown backend {backend!r}; choose auto, "
                         f"{', '.join(SPARSE_BACKENDS)}")
    if backend != "auto":
        return backend
    from dpgnn_core.models.dgl_backend import DGL_CONVS  # lazy: it imports DGL interop

    if conv in DGL_CONVS and device.type == "cpu" and dgl_available():
        return "dgl"
    return "pyg"


def sparse_logits(model: SubgraphGNN, x: Tensor, edge_index: Tensor, backend: str = "auto"
                  ) -> Tensor:
    """Logits ``[n, C]`` of every node of a graph on the named backend (see
    :data:`SPARSE_BACKENDS` and :func:`resolve_backend`).

    Args:
        model (SubgraphGNN): the trained model.
        x (torch.Tensor): node features ``[n, d]``.
        edge_index (torch.Tensor): ``[2, E]`` messages src -> dst.
        backend (str, optional): ``auto``, ``pyg`` or ``dgl``. (default: :obj:`"auto"`)
    """
    return SPARSE_BACKENDS[resolve_backend(backend, model.conv, x.device)](model, x,
                                                                           edge_index)
