"""Models: an MLP and message-passing stacks built from PyTorch Geometric layers."""

from dpgnn_core.models.gnn import GNN, build_model
from dpgnn_core.models.mlp import MLP

__all__ = ["GNN", "MLP", "build_model"]
