"""Canonical dataset format: in-memory :class:`GraphData`, Parquet store, loaders, splits.

The names below are imported on first use, so that a light submodule (the loaders' option
models, :mod:`dpgnn_core.data.options`, which ``dpgnn --help`` reads) does not import
pyarrow with the package.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dpgnn_core.data.graph import SPLIT_NAMES, GraphData
    from dpgnn_core.data.store import read_dataset, read_manifest, write_dataset

_WHERE = {"SPLIT_NAMES": "graph", "GraphData": "graph", "read_dataset": "store",
          "read_manifest": "store", "write_dataset": "store"}

__all__ = ["SPLIT_NAMES", "GraphData", "read_dataset", "read_manifest", "write_dataset"]


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
