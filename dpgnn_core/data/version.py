"""One version of a dataset folder, read whole even while an ingest replaces it.

``dpgnn ingest --overwrite`` swaps a new folder in by renames and then deletes the old one
(:func:`~dpgnn_core.io.atomic_dir`); a reader that opened the manifest of one version and a
table after the swap would mix two versions (a run trained on one split and evaluated on
another, reported under the first one's name). :class:`FolderVersion` opens the folder
once (a directory descriptor: it keeps naming the version it opened after a rename), reads
the manifest through it, then opens and memory-maps every file the manifest lists through
it: whatever happens to the folder afterwards, what is read is that version (an open or
mapped file outlives its deletion). A version deleted before its files were opened is
:class:`VersionGone` (the reader tries again, or, pinned to it, fails).

Dataset files are never modified in place (every writer writes a new folder and renames
it), so the mapped bytes are those hashed. Standard library, numpy-free.
"""

from __future__ import annotations

import contextlib
import hashlib
import mmap
import os
from pathlib import Path

from dpgnn_core.errors import ArtifactError, DataError


class VersionGone(DataError):
    """The folder's version was deleted (replaced by an ingest) before its files were
    opened."""


class OtherVersionError(DataError, ArtifactError):
    """A dataset folder holds another version than the one a run pinned (re-ingested
    since the run started)."""


class FolderVersion:
    """The files of the version of ``folder`` present when it is opened.

    Args:
        folder (str or Path): a dataset folder.

    Use as a context; :meth:`manifest_text` first, then :meth:`open_files` with the names
    the manifest lists, then :meth:`buffer` / :meth:`sha256` of each.
    """

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)
        self._dir: int | None = None
        self._maps: dict[str, mmap.mmap | bytes] = {}

    def __enter__(self) -> FolderVersion:
        if not self.folder.is_dir():
            raise DataError("dataset folder not found", path=self.folder)
        self._dir = os.open(self.folder, os.O_RDONLY | os.O_DIRECTORY)
        return self

    def __exit__(self, *_exc: object) -> None:
        if self._dir is not None:
            os.close(self._dir)
            self._dir = None
        # The maps are left to the arrays read from them (closing one that numpy still
        # views is an error); they are unmapped when the last of those goes.
        self._maps = {}

    def _read(self, name: str) -> bytes:
        fd = os.open(name, os.O_RDONLY, dir_fd=self._dir)
        try:
            with os.fdopen(fd, "rb", closefd=False) as f:
                return f.read()
        finally:
            os.close(fd)

    def manifest_text(self, name: str = "manifest.json") -> str | None:
        """The manifest's text, or None when this version has none."""
        try:
            return self._read(name).decode()
        except FileNotFoundError:
            return None

    def open_files(self, names: list[str]) -> None:
        """Open and map every file of ``names`` (all before any is read).

        Raises:
            VersionGone: one of them is missing: the version was deleted meanwhile, or
                the manifest lists a file that is not there (told apart by the caller).
        """
        for name in names:
            try:
                fd = os.open(name, os.O_RDONLY, dir_fd=self._dir)
            except (FileNotFoundError, NotADirectoryError):
                raise VersionGone("file listed in the manifest is missing",
                                  path=self.folder / name) from None
            try:
                size = os.fstat(fd).st_size
                self._maps[name] = (mmap.mmap(fd, 0, access=mmap.ACCESS_READ) if size
                                    else b"")
            finally:
                os.close(fd)

    def buffer(self, name: str) -> memoryview:
        """The bytes of ``name`` (mapped, zero-copy)."""
        return memoryview(self._maps[name])

    def sha256(self, name: str) -> str:
        """The sha256 of ``name``'s bytes as they are read."""
        return hashlib.sha256(self._maps[name]).hexdigest()

    def still_current(self) -> bool:
        """Whether ``folder`` still names this version (not replaced since it was
        opened)."""
        if self._dir is None:
            return False
        with contextlib.suppress(OSError):
            return os.path.samestat(os.fstat(self._dir), os.stat(self.folder))
        return False


__all__ = ["FolderVersion", "OtherVersionError", "VersionGone"]
