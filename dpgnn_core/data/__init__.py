"""Canonical dataset format: in-memory :class:`GraphData`, Parquet store, loaders, splits."""

from dpgnn_core.data.graph import SPLIT_NAMES, GraphData
from dpgnn_core.data.store import read_dataset, read_manifest, write_dataset

__all__ = ["SPLIT_NAMES", "GraphData", "read_dataset", "read_manifest", "write_dataset"]
