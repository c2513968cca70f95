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
from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torch_geometric.nn import SimpleConv
from torch_geometric.utils import add_remaining_self_loops, softmax

from dpgnn_core.training.per_sample import Scale

ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {
    "tanh": torch.tanh, "relu": torch.relu, "elu": nn.functional.elu}


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


@dataclass(frozen=True)
class SubgraphConv:
    """One convolution of :class:`SubgraphGNN` (an entry of :data:`CONVS`): the weights
    each of its layers has and how a layer passes messages, on both paths.

    Args:
        parts (tuple): the model's per-layer weight lists it uses (``lins``, ``roots``,
            ``gin_out``, ``eps``, ``att``); the others stay empty.
        prepare (callable): ``prepare(adj, mask)``: the dense adjacency (0/1, no padding)
            as the dense layers read it (normalised; for attention, who may attend whom).
        dense (callable): ``dense(model, i, h, prepared, rows)``: layer i's output for the
            first ``rows`` positions of dense batches ``h`` ``[B, S, H]``.
        sparse (callable): ``sparse(model, i, h, edge_index)``: layer i on a whole graph.
    """

    parts: tuple[str, ...]
    prepare: Callable[[Tensor, Tensor], Tensor]
    dense: Callable[[SubgraphGNN, int, Tensor, Tensor, int], Tensor]
    sparse: Callable[[SubgraphGNN, int, Tensor, Tensor], Tensor]


Update = Callable[["SubgraphGNN", int, Tensor, Tensor], Tensor]


def _passing(parts: tuple[str, ...], prepare: Callable[[Tensor, Tensor], Tensor],
             update: Update, aggregate: SimpleConv) -> SubgraphConv:
    """A convolution that aggregates with a fixed matrix (``prepare``'s on the dense path,
    PyG's parameter-free ``aggregate`` on the sparse one), then applies ``update(model, i,
    h, aggregated)``."""
    return SubgraphConv(
        parts, prepare,
        dense=lambda m, i, h, a, rows: update(m, i, h[:, :rows], torch.bmm(a[:, :rows], h)),
        sparse=lambda m, i, h, ei: update(m, i, h, aggregate(h, ei)))


def _row_mean(a: Tensor, mask: Tensor) -> Tensor:
    return a / a.sum(dim=-1, keepdim=True).clamp_min(1.0)


def _row_mean_with_self(a: Tensor, mask: Tensor) -> Tensor:
    return _row_mean(a + torch.diag_embed(mask.to(a.dtype)), mask)


def _attends(a: Tensor, mask: Tensor) -> Tensor:
    eye = torch.eye(a.shape[-1], dtype=torch.bool, device=a.device)
    return (a > 0) | eye  # padding attends itself only (masked out by the model)


def _gcn(m: SubgraphGNN, i: int, h: Tensor, agg: Tensor) -> Tensor:
    return m.act(m.lins[i](agg))


def _sage(m: SubgraphGNN, i: int, h: Tensor, agg: Tensor) -> Tensor:
    return m.act(m.roots[i](h) + m.lins[i](agg))


def _gin(m: SubgraphGNN, i: int, h: Tensor, agg: Tensor) -> Tensor:
    return m.act(m.gin_out[i](m.act(m.lins[i](m.eps[i](h) + agg))))


#: The convolutions of :class:`SubgraphGNN` (the spec's ``conv``).
CONVS: dict[str, SubgraphConv] = {
    "gcn": _passing(("lins",), _row_mean_with_self, _gcn,
                    SimpleConv(aggr="mean", combine_root="self_loop")),
    "sage": _passing(("lins", "roots"), _row_mean, _sage, SimpleConv(aggr="mean")),
    "gin": _passing(("lins", "gin_out", "eps"), lambda a, mask: a, _gin,
                    SimpleConv(aggr="sum")),
    "gat": SubgraphConv(
        ("att",), _attends,
        dense=lambda m, i, h, allowed, rows: m.act(m._att(i).dense(h, allowed[:, :rows], rows)),
        sparse=lambda m, i, h, ei: m.act(m._att(i).sparse(h, ei))),
}


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

    kind: SubgraphConv
    act: Callable[[Tensor], Tensor]
    lins: nn.ModuleList
    roots: nn.ModuleList
    gin_out: nn.ModuleList
    eps: nn.ModuleList
    att: nn.ModuleList

    def __init__(self, conv: str, in_dim: int, out_dim: int, hidden: int = 256,
                 layers: int = 1, activation: str = "tanh", gin_eps: float = 0.0,
                 train_eps: bool = True, heads: int = 10) -> None:
        super().__init__()
        if conv not in CONVS:
            raise ValueError(f"unknown conv {conv!r}; choose one of {', '.join(CONVS)}")
        if activation not in ACTIVATIONS:
            raise ValueError(f"unknown activation {activation!r}; choose {sorted(ACTIVATIONS)}")
        self.conv, self.kind, self.act = conv, CONVS[conv], ACTIVATIONS[activation]
        self.encoder = nn.Linear(in_dim, hidden)

        def per_layer(part: str, make: Callable[[], nn.Module]) -> nn.ModuleList:
            return nn.ModuleList(make() for _ in range(layers if part in self.kind.parts
                                                       else 0))

        self.lins = per_layer("lins", lambda: nn.Linear(hidden, hidden))
        self.roots = per_layer("roots", lambda: nn.Linear(hidden, hidden, bias=False))
        self.gin_out = per_layer("gin_out", lambda: nn.Linear(hidden, hidden))
        self.eps = per_layer("eps", lambda: Scale(gin_eps))
        for s in self.eps:
            s.eps.requires_grad_(train_eps)
        self.att = per_layer("att", lambda: _Attention(hidden, heads))
        self.num_layers = layers
        self.decoder = nn.Linear(hidden, out_dim)

    def groups(self) -> list[list[nn.Module]]:
        """Layer-wise clipping groups: encoder, aggregation layers, decoder."""
        agg: list[nn.Module] = [m for m in (self.lins, self.roots, self.gin_out, self.eps,
                                             self.att) if len(m)]
        return [[self.encoder], agg, [self.decoder]]

    def _att(self, i: int) -> _Attention:
        att = self.att[i]
        assert isinstance(att, _Attention)
        return att

    def forward(self, x: Tensor, adj: Tensor, mask: Tensor, all_nodes: bool = False
                ) -> Tensor:
        """Logits of dense batches (``adj`` 0/1, ``adj[b, i, j]`` = j -> i): of the roots
        ``[B, C]``, or of every position ``[B, S, C]`` with ``all_nodes``."""
        dt = x.dtype
        m = mask.unsqueeze(-1).to(dt)
        # no message to or from padding
        a = self.kind.prepare(adj * m * mask.unsqueeze(-2).to(dt), mask)
        h = self.act(self.encoder(x)) * m
        for i in range(self.num_layers):
            rows = h.shape[1] if all_nodes or i < self.num_layers - 1 else 1
            h = self.kind.dense(self, i, h, a, rows) * m[:, :rows]
        if not all_nodes:
            h = h[:, 0]
        out: Tensor = self.decoder(h)
        return out

    def forward_sparse(self, x: Tensor, edge_index: Tensor) -> Tensor:
        """Logits ``[n, C]`` of every node of a graph (``edge_index`` src -> dst)."""
        h = self.act(self.encoder(x))
        for i in range(self.num_layers):
            h = self.kind.sparse(self, i, h, edge_index)
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
