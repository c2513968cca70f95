"""Models: an MLP and message-passing stacks built from PyTorch Geometric layers.

The package imports nothing at once: ``dpgnn_core.models.mlp`` (plain torch) must not pull
in PyTorch Geometric (about 5 s of CPU at import, most of it torch._dynamo), so ``GNN`` and
``build_model`` are loaded from :mod:`dpgnn_core.models.gnn` on first access (PEP 562).
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {"GNN": "dpgnn_core.models.gnn", "build_model": "dpgnn_core.models.gnn",
         "MLP": "dpgnn_core.models.mlp"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["GNN", "MLP", "build_model"]
