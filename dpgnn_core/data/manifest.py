"""What a dataset folder's ``manifest.json`` alone can tell, without reading a table: the
hash of its own keys (``manifest_sha256``) and whether its listed files are there at
their recorded sizes. Imports only the standard library (``dpgnn datasets`` lists folders
with it and stays light); :mod:`dpgnn_core.data.store` checks the files' sha256 and what
they state."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dpgnn_core.errors import DataError
from dpgnn_core.io import sha256_json

#: Keys never part of ``manifest_sha256``: the hash itself, and the folder's ``path`` that
#: readers add to the manifest they pass on (never written to ``manifest.json``).
UNHASHED = ("manifest_sha256", "path")


def load_manifest(path: str | Path) -> dict[str, Any]:
    """The JSON object in the manifest file ``path``, unchecked otherwise.

    Raises:
        DataError: the file cannot be read, is not JSON or holds no object: one line
            naming the file (a bare ``JSONDecodeError`` named none).
    """
    try:
        data = json.loads(Path(path).read_text())
    except OSError as e:
        raise DataError(f"cannot read the manifest: {e.strerror or e}", path=path) from e
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise DataError(f"manifest is not valid JSON: {e}", path=path) from e
    if not isinstance(data, dict):
        raise DataError("manifest is not a JSON object", path=path)
    return data


def manifest_digest(manifest: dict[str, Any]) -> str:
    """The sha256 of every key of ``manifest`` but ``manifest_sha256`` (and a reader's
    ``path``): what ``manifest_sha256`` records, so that an edit of any key is seen."""
    return sha256_json({k: v for k, v in manifest.items() if k not in UNHASHED})


def quick_problem(folder: str | Path, manifest: dict[str, Any]) -> str | None:
    """Why a run would refuse ``folder``, as far as its manifest and the files' sizes
    show (no hashing of the files): the manifest has no ``manifest_sha256`` or was edited,
    or a listed file is missing or of another size. ``None`` when none of that is seen."""
    folder = Path(folder)
    stated = manifest.get("manifest_sha256")
    if stated is None:
        return "written before manifest_sha256 (ingest it again with --overwrite)"
    if stated != manifest_digest(manifest):
        return "manifest edited after ingest (its keys do not give its manifest_sha256)"
    files = manifest.get("files")
    if not isinstance(files, dict):
        return "manifest lists no files"
    for name, info in sorted(files.items()):
        p = folder / name
        if not p.is_file():
            return f"{name} is missing"
        if isinstance(info, dict) and info.get("bytes") not in (None, p.stat().st_size):
            return f"{name} changed after ingest (its size differs)"
    return None
