"""Helpers shared by loaders: provenance of the raw files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dpgnn_core.errors import DataError
from dpgnn_core.io import sha256_file


def require_file(path: Path, what: str) -> Path:
    if not path.is_file():
        raise DataError(f"missing {what}", path=path)
    return path


def provenance(fmt: str, source: Path, files: list[Path], **options: Any) -> dict[str, Any]:
    """Source record for the manifest: format, path, options, and sha256 of each raw file."""
    return {
        "format": fmt,
        "path": str(source.resolve()),
        "options": options,
        "files": {p.name: sha256_file(p) for p in sorted(files)},
    }
