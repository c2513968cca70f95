"""Errors raised by dpgnn_core. Each names the file, field and value that is wrong."""

from __future__ import annotations

from pathlib import Path
from typing import Any


class DpgnnError(Exception):
    """Base class of every error dpgnn raises on purpose."""


class DataError(DpgnnError, ValueError):
    """Bad input data: names the file, the field (column) and the offending value.

    Args:
        message (str): what is wrong, in words a user can act on.
        path (str or Path, optional): the file or folder concerned. (default: :obj:`None`)
        field (str, optional): the column, key or option concerned. (default: :obj:`None`)
        value (Any, optional): the offending value (shortened when long). (default: :obj:`None`)
    """

    def __init__(
        self,
        message: str,
        *,
        path: str | Path | None = None,
        field: str | None = None,
        value: Any = None,
    ) -> None:
        self.message = message
        self.path = str(path) if path is not None else None
        self.field = field
        self.value = value
        parts = []
        if self.path is not None:
            parts.append(f"file {self.path}")
        if field is not None:
            parts.append(f"field {field!r}")
        if value is not None:
            text = repr(value)
            parts.append(f"value {text[:200] + '...' if len(text) > 200 else text}")
        where = f" [{', '.join(parts)}]" if parts else ""
        super().__init__(f"{message}{where}")


class ArtifactError(DpgnnError, RuntimeError):
    """An artifact (a dataset, model or stage output) is missing or changed since it was
    written, or does not belong with the others it is used with. Re-running with
    ``--refresh`` rebuilds it."""


class PrivacyError(DpgnnError, ValueError):
    """An invalid privacy parameter, or a ledger an accountant cannot analyse soundly."""


class DeviceError(DpgnnError, RuntimeError):
    """The requested compute device is not available."""


class ServerError(DpgnnError, RuntimeError):
    """The local Prefect server could not be started or reached."""


class TrackingError(DpgnnError, RuntimeError):
    """The MLflow tracking URI cannot be reached (an HTTP server that does not answer) or
    written (a SQLite file whose folder is missing or read-only)."""


class MissingExtraError(DpgnnError, ImportError):
    """An optional integration is used but its extra is not installed (or does not load);
    the message names the install command."""
