"""A dataset's graph fingerprint: the hash of its edges and features, from its manifest's
file hashes (issue 48 §3). Standard library only: ``dpgnn datasets`` lists the folders of the
same graph without importing the budget store, which :mod:`dpgnn_core.budget.graphs` records
it in."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

#: The manifest's files whose content is "the graph": edges and features, not the labels
#: and splits of ``nodes.parquet`` / ``graphs.parquet``.
GRAPH_FILES = ("edges.parquet", "features.parquet")


def graph_fingerprint(manifest: Mapping[str, Any]) -> str | None:
    """The hash of a dataset's edges and features, from its manifest's file hashes (None
    when the manifest lists neither)."""
    files = manifest.get("files") or {}
    parts = {f: (files.get(f) or {}).get("sha256") for f in GRAPH_FILES if f in files}
    if not parts or not all(isinstance(v, str) for v in parts.values()):
        return None
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:32]


def folder_fingerprint(path: str | None, sha256: str | None = None) -> str | None:
    """:func:`graph_fingerprint` of the dataset folder ``path`` (only of the version
    ``sha256`` when given); None when it has no readable manifest."""
    if not path:
        return None
    try:
        manifest = json.loads((Path(path) / "manifest.json").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(manifest, dict) or (
            sha256 is not None and manifest.get("content_sha256") != sha256):
        return None
    return graph_fingerprint(manifest)


__all__ = ["GRAPH_FILES", "folder_fingerprint", "graph_fingerprint"]
