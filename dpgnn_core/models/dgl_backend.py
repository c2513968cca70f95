"""The sparse inference path of :class:`~dpgnn_core.models.subgraph_gnn.SubgraphGNN` on DGL.

DGL's own layers do the message passing, loaded with the weights the dense training path
trained (the optional ``dgl`` extra; :func:`~dpgnn_core.interop.dgl.import_dgl`):

* ``gcn``: ``GraphConv(norm="right")`` on the graph with a self-loop added to every node,
  i.e. :math:`(D + I)^{-1}(A + I) H W + b` (the weight is ``lins[i]``, transposed);
* ``sage``: ``SAGEConv("mean")``: :math:`H W_1 + D^{-1} A H W_2 + b` (``fc_self`` =
  ``roots[i]`` with ``lins[i]``'s bias, ``fc_neigh`` = ``lins[i]`` without it);
* ``gin``: ``GINConv("sum")`` with :math:`\\epsilon` fixed to the trained value and the
  layer's two Linear maps as its ``apply_func``.

GAT has no DGL layer: this model's attention is dot-product with separate query, key and
value projections, and DGL's ``DotGatConv`` shares one projection for all three (its
``GATConv`` is additive attention), so ``backend="dgl"`` refuses ``conv="gat"`` (the spec
says so before training).

Messages follow ``edge_index`` (src -> dst), as on the PyG path.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

from dpgnn_core.interop.dgl import import_dgl

if TYPE_CHECKING:
    from dpgnn_core.models.subgraph_gnn import SubgraphGNN

class _Apply(nn.Module):
    """GIN's update after the sum: ``act(out(act(lin(r))))``."""

    def __init__(self, lin: nn.Module, out: nn.Module, act: Callable[[Tensor], Tensor]
                 ) -> None:
        super().__init__()
        self.lin, self.out, self.act = lin, out, act

    def forward(self, r: Tensor) -> Tensor:
        return self.act(self.out(self.act(self.lin(r))))


def _linear(m: nn.Module) -> nn.Linear:
    assert isinstance(m, nn.Linear)
    return m


def _gcn(dglnn: Any, model: SubgraphGNN, i: int, width: int) -> Any:
    lin = _linear(model.lins[i])
    conv = dglnn.GraphConv(width, width, norm="right", allow_zero_in_degree=True)
    conv.weight.copy_(lin.weight.t())
    conv.bias.copy_(lin.bias)
    return conv


def _sage(dglnn: Any, model: SubgraphGNN, i: int, width: int) -> Any:
    lin = _linear(model.lins[i])
    conv = dglnn.SAGEConv(width, width, "mean")
    conv.fc_self.weight.copy_(_linear(model.roots[i]).weight)
    conv.fc_self.bias.copy_(lin.bias)
    conv.fc_neigh.weight.copy_(lin.weight)
    return conv


def _gin(dglnn: Any, model: SubgraphGNN, i: int, width: int) -> Any:
    eps = float(model.eps[i].eps.detach())  # type: ignore[operator]
    return dglnn.GINConv(_Apply(_linear(model.lins[i]), model.gin_out[i], model.act), "sum",
                         init_eps=eps, learn_eps=False)


@dataclass(frozen=True)
class DglConv:
    """How the DGL backend runs one convolution of the model (an entry of
    :data:`DGL_CONVS`).

    Args:
        layer (callable): ``layer(dgl.nn, model, i, width)``: the DGL layer holding layer
            i's weights (copies).
        self_loops (bool): the graph gets a self-loop on every node.
        activates (bool): the layer applies the model's activation itself (GIN's
            ``apply_func``); else it is applied after the layer.
    """

    layer: Callable[[Any, SubgraphGNN, int, int], Any]
    self_loops: bool = False
    activates: bool = False


#: Convolutions the DGL backend runs (GAT's dot-product attention has no DGL layer).
DGL_CONVS: dict[str, DglConv] = {"gcn": DglConv(_gcn, self_loops=True),
                                 "sage": DglConv(_sage),
                                 "gin": DglConv(_gin, activates=True)}


def _dgl_conv(model: SubgraphGNN) -> DglConv:
    if model.conv not in DGL_CONVS:
        raise ValueError(f"the DGL backend runs {', '.join(DGL_CONVS)}, not {model.conv!r}")
    return DGL_CONVS[model.conv]


def dgl_layers(model: SubgraphGNN) -> list[nn.Module]:
    """DGL convolutions holding ``model``'s message-passing weights (copies)."""
    dglnn = import_dgl().nn
    kind = _dgl_conv(model)
    width = model.encoder.out_features
    dev = model.encoder.weight.device
    with torch.no_grad():
        return [kind.layer(dglnn, model, i, width).to(dev) for i in range(model.num_layers)]


def dgl_graph(model: SubgraphGNN, edge_index: Tensor, num_nodes: int) -> Any:
    """The DGL graph the model's layers read (self-loops added for ``gcn``)."""
    dgl = import_dgl()
    g = dgl.graph((edge_index[0], edge_index[1]), num_nodes=num_nodes,
                  device=edge_index.device)
    return dgl.add_self_loop(g) if _dgl_conv(model).self_loops else g


def forward_dgl(model: SubgraphGNN, x: Tensor, edge_index: Tensor) -> Tensor:
    """Logits ``[n, C]`` of every node, as :meth:`SubgraphGNN.forward_sparse`, with DGL's
    layers doing the message passing."""
    if x.device.type != "cpu":
        raise ValueError("the dgl extra installs DGL's CPU build: backend 'dgl' runs on the "
                         "CPU only (use --backend pyg or auto on CUDA)")
    g = dgl_graph(model, edge_index, x.shape[0])
    h = model.act(model.encoder(x))
    activates = _dgl_conv(model).activates  # GIN's activations are inside its apply_func
    for conv in dgl_layers(model):
        h = conv(g, h) if activates else model.act(conv(g, h))
    out: Tensor = model.decoder(h)
    return out
