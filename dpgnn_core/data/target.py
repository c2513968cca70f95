"""The folder an ingest writes: one ingest at a time (:func:`ingest_lock`), and
``overwrite`` replaces only a dataset folder (:func:`check_replaceable`).

The write itself is atomic (:func:`~dpgnn_core.io.atomic_dir`, whose own lock covers only
the final write); the lock here covers the whole ingest, loading included, so a second
ingest of the same folder is refused at once, naming the first, instead of loading for
minutes and then failing, or silently replacing what the first wrote. Standard library
only (``dpgnn datasets`` and the command line stay light).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dpgnn_core.errors import DataError
from dpgnn_core.io import HOST_TAG, TargetBusyError, TargetExistsError, flock_beside

MANIFEST = "manifest.json"


class NotADatasetError(DataError):
    """``overwrite`` was asked of something that is not a dataset folder (a file, a
    folder without a dpgnn manifest, or one holding other files too): it is left as it
    is."""


def lock_file(folder: Path) -> Path:
    """``.NAME.ingest.lock`` beside ``folder`` (made absolute, so that ``.`` names its
    folder): held by the ingest writing it."""
    folder = Path(os.path.abspath(folder))
    return folder.with_name(f".{folder.name}.ingest.lock")


def _holder_text(raw: bytes) -> str:
    """Who holds a lock, from the record its holder wrote."""
    try:
        rec = json.loads(raw.decode(errors="replace") or "{}")
        who = f"pid {int(rec['pid'])}"
    except (ValueError, KeyError, TypeError):
        return "pid unknown"
    if rec.get("host") not in (None, HOST_TAG):
        who += f" on {rec['host']}"
    if rec.get("since"):
        who += f", since {rec['since']}"
    if rec.get("command"):
        who += f": {rec['command']}"
    return who


def _make_parents(folder: Path) -> list[Path]:
    """Create ``folder``'s missing parents; returns those created (deepest last). A
    regular file in the way is ``NotADirectoryError`` naming it."""
    created: list[Path] = []
    for anc in reversed(folder.parents):
        if anc.exists():
            if not anc.is_dir():
                import errno

                raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(anc))
            continue
        with contextlib.suppress(FileExistsError):  # made meanwhile by another writer
            anc.mkdir()
            created.append(anc)
    return created


def _remove_empty(created: list[Path]) -> None:
    """Remove the folders :func:`_make_parents` created, if still empty."""
    for d in reversed(created):
        try:
            d.rmdir()
        except OSError:
            return


@contextlib.contextmanager
def ingest_lock(folder: str | Path) -> Iterator[None]:
    """Hold the ingest lock of ``folder`` for the block (an exclusive, non-blocking
    ``flock`` of :func:`lock_file`), creating its missing parent folders (removed again,
    if still empty, when the block fails).

    The lock file records the holder (pid, host, start time, command) for the error a
    second ingest gets, and is removed on release; a holder that dies releases it (the
    kernel drops the ``flock``), so a killed ingest never blocks the next.

    Raises:
        TargetBusyError: another process holds it: one line naming ``folder`` and the
            holder.
        OSError: the lock file cannot be created (a read-only folder, a file in the way).
    """
    folder = Path(folder)
    created = _make_parents(Path(os.path.abspath(folder)))
    try:
        with _locked(folder):
            yield
    except BaseException:
        _remove_empty(created)
        raise


def _locked(folder: Path) -> contextlib.AbstractContextManager[None]:
    """:func:`~dpgnn_core.io.flock_beside` on ``folder``'s :func:`lock_file`, recording
    the holder's pid, host, start time and command."""
    def record() -> bytes:
        return json.dumps({"pid": os.getpid(), "host": HOST_TAG,
                           "since": time.strftime("%H:%M:%S", time.localtime()),
                           "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]])[:160]
                           if sys.argv and sys.argv[0] else None}).encode()

    def busy(holder: bytes) -> Exception:
        return TargetBusyError(f"{folder} is being written by another process "
                               f"({_holder_text(holder)}); wait for it to finish or choose "
                               "another folder")

    return flock_beside(lock_file(folder), record, busy)


def _manifest_problem(folder: Path) -> tuple[str | None, dict[str, Any] | None]:
    """Why ``folder``'s ``manifest.json`` is not a dpgnn dataset manifest (None if it
    is), and the manifest."""
    path = folder / MANIFEST
    if not path.is_file():
        return "it has no manifest.json", None
    try:
        manifest = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as e:
        return f"its manifest.json does not read as JSON ({type(e).__name__})", None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("files"), dict) \
            or "schema_version" not in manifest or "content_sha256" not in manifest:
        return "its manifest.json is not a dpgnn dataset manifest", None
    return None, manifest


def _listing(names: list[str]) -> str:
    shown = ", ".join(names[:5])
    return shown + (f" and {len(names) - 5} more" if len(names) > 5 else "")


def check_replaceable(folder: str | Path, *, overwrite: bool, owned: bool = False) -> None:
    """Raise unless writing ``folder`` may replace what is there: nothing is, or
    ``overwrite`` is given and ``folder`` is a dataset folder (a ``manifest.json`` written
    by ``dpgnn ingest``, and no file but those it lists) or an empty folder; or, when
    ``owned`` (the project's own folder, ``$DPGNN_HOME/datasets/<name>-<key>``, which only
    dpgnn writes), any folder: a half-written one is ingested again.

    Raises:
        TargetExistsError: ``folder`` exists and ``overwrite`` is false.
        NotADatasetError: ``overwrite`` is given but ``folder`` is a file, a symbolic link,
            a folder without a dataset manifest, or one that holds other files too (all
            named, up to five): one line, and ``folder`` is left as it is.
    """
    shown, folder = Path(folder), Path(os.path.abspath(folder))  # ".": the folder itself
    if not folder.exists() and not folder.is_symlink():
        return
    if not overwrite:
        raise TargetExistsError(f"{shown} already exists; choose another folder or pass "
                                "overwrite=True (--overwrite)")
    keep = " --overwrite replaces only a dataset folder written by `dpgnn ingest`; it was " \
        "left as it is"
    if folder.is_symlink():
        raise NotADatasetError(f"{shown} is a symbolic link;{keep} (name the folder it "
                               "points to, if that is a dataset)")
    if not folder.is_dir():
        raise NotADatasetError(f"{shown} is a file, not a dataset folder;{keep}")
    names = sorted(p.name for p in folder.iterdir())
    if not names or owned:
        return  # an empty folder: nothing to lose; the project's own: dpgnn's to replace
    why, manifest = _manifest_problem(folder)
    if why is not None:
        raise NotADatasetError(f"{shown} is not a dataset folder: {why} (it holds "
                               f"{_listing(names)});{keep}")
    assert manifest is not None
    others = [n for n in names if n != MANIFEST and n not in manifest["files"]]
    if others:
        raise NotADatasetError(f"{shown} holds files that are not its dataset's "
                               f"({_listing(others)});{keep}: move them away first")


__all__ = ["NotADatasetError", "check_replaceable", "ingest_lock", "lock_file"]
