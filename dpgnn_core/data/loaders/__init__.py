"""Loaders: raw formats in, :class:`~dpgnn_core.data.GraphData` out (then ``write_dataset``)."""

from dpgnn_core.data.loaders.dgl_bin import load_dgl
from dpgnn_core.data.loaders.facebook100 import load_facebook100
from dpgnn_core.data.loaders.ogb import load_ogbg
from dpgnn_core.data.loaders.planetoid import load_planetoid
from dpgnn_core.data.loaders.tabular import load_tabular
from dpgnn_core.data.loaders.tu import load_tu

__all__ = ["load_dgl", "load_facebook100", "load_ogbg", "load_planetoid", "load_tabular", "load_tu"]
