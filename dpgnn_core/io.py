"""Atomic writes and content hashes.

Artifacts are written to a temporary sibling first and renamed into place, so a reader
never sees a half-written file or folder, and a failure leaves what was stored before intact.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import glob
import hashlib
import json
import os
import re
import shutil
import socket
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from dpgnn_core.errors import DpgnnError

_CHUNK = 1 << 22


def sha256_file(path: str | Path) -> str:
    """Return the hex sha256 of a file's bytes, read in 4 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def sha256_json(obj: Any) -> str:
    """Hash of a JSON-serialisable object with sorted keys (a stable cache key)."""
    blob = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str).encode()
    return hashlib.sha256(blob).hexdigest()


def write_json_atomic(path: str | Path, obj: Any) -> None:
    """Write ``obj`` as indented JSON to ``path`` through a temp file and a rename."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{uuid.uuid4().hex[:8]}")
    try:
        with open(tmp, "w") as f:
            json.dump(obj, f, indent=2, sort_keys=True, default=str)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


@contextlib.contextmanager
def atomic_file(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it onto ``path`` if the block succeeds."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{uuid.uuid4().hex[:8]}")
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


#: This machine's name as it appears in temp-folder names (``-`` is the field separator).
HOST_TAG = re.sub(r"[^A-Za-z0-9_.]", "_", socket.gethostname()) or "host"


class TargetExistsError(FileExistsError):
    """The target folder exists (or appeared while it was being written) and
    ``overwrite`` was not given."""


class TargetBusyError(DpgnnError, RuntimeError):
    """Another process holds the write lock of the target folder."""


def _temp_sibling(path: Path, kind: str) -> Path:
    """``.NAME.<kind>-<host>-<pid>-<hex>``: the writer can be found again from the name."""
    return path.with_name(f".{path.name}.{kind}-{HOST_TAG}-{os.getpid()}-{uuid.uuid4().hex[:8]}")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, owned by someone else
        return True
    return True


def _remove_stale_siblings(path: Path) -> list[Path]:
    """Remove ``.NAME.tmp-*`` / ``.NAME.old-*`` folders left by dead writers on this host.

    Only names that carry this host's tag and a pid that no longer runs are removed; a live
    writer's folder, another machine's (its pids mean nothing here) and old-style names
    without a pid are kept.
    """
    removed = []
    for kind in ("tmp", "old"):
        prefix = f".{path.name}.{kind}-"
        for p in path.parent.glob(f"{glob.escape(prefix)}*"):
            parts = p.name[len(prefix):].rsplit("-", 2)
            if len(parts) != 3 or parts[0] != HOST_TAG or not parts[1].isdigit():
                continue
            if _pid_alive(int(parts[1])):
                continue
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p, ignore_errors=True)
            else:
                with contextlib.suppress(FileNotFoundError):
                    p.unlink()
            removed.append(p)
    return removed


@contextlib.contextmanager
def flock_beside(lock: Path, record: Callable[[], bytes],
                 busy: Callable[[bytes], Exception]) -> Iterator[None]:
    """Hold an exclusive, non-blocking ``flock`` on the file ``lock`` for the block; the file
    holds ``record()`` (who holds it) and is removed on release. Because it is removed, a
    process that opened it just before the release could lock a file no longer in place; so
    after locking, the locked file must still be the one at that path, else it tries again.
    A holder that dies releases it (the kernel drops the ``flock``).

    Raises:
        Exception: ``busy(what the holder wrote)`` when another process holds the lock.
    """
    while True:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            try:
                holder = os.pread(fd, 1000, 0)
            finally:
                os.close(fd)
            raise busy(holder) from None
        except BaseException:
            os.close(fd)
            raise
        try:  # the holder before us may have removed the file we opened: lock it anew
            same = os.path.samestat(os.fstat(fd), os.stat(lock))
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, record(), 0)
        yield
    finally:
        with contextlib.suppress(FileNotFoundError):
            lock.unlink()
        os.close(fd)  # releases the lock


def _target_lock(path: Path) -> contextlib.AbstractContextManager[None]:
    """Hold :func:`flock_beside` on ``.NAME.lock`` beside ``path``, the writer's pid and
    host in it (for the error another writer gets).

    Raises:
        TargetBusyError: when another process holds the lock.
    """
    def busy(holder: bytes) -> Exception:
        pid, _, host = holder.decode(errors="replace").strip().partition(" ")
        who = (f"pid {pid}" + (f" on {host}" if host and host != HOST_TAG else "")
               if pid.isdigit() else "pid unknown")
        return TargetBusyError(f"{path} is being written by another process ({who}); wait "
                               "for it to finish or choose another folder")

    return flock_beside(path.with_name(f".{path.name}.lock"),
                        lambda: f"{os.getpid()} {HOST_TAG}\n".encode(), busy)


def _make_parent(path: Path) -> None:
    """Create ``path``'s parent folders; a regular file in the way is ``NotADirectoryError``
    naming that file (``mkdir`` alone reports it as 'File exists')."""
    for anc in reversed(path.parents):
        if anc.exists() and not anc.is_dir():
            raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(anc))
    path.parent.mkdir(parents=True, exist_ok=True)


@contextlib.contextmanager
def atomic_dir(path: str | Path, *, overwrite: bool = False) -> Iterator[Path]:
    """Yield a temporary folder beside ``path``; move it into place if the block succeeds.

    If the block raises, the temporary folder is removed and ``path`` is untouched. If the
    process dies, its hidden ``.NAME.tmp-<host>-<pid>-<hex>`` sibling stays until the next
    writer of ``path`` on this host sees that pid is gone and removes it (no reader looks
    at hidden siblings). With ``overwrite=True`` an existing ``path`` is replaced only after
    the new folder is complete: it is first renamed aside, then the new one renamed in, then
    the old removed.

    One writer at a time: the lock lives here rather than in ``write_dataset`` so that every
    artifact writer (datasets, the task caches) gets it, and so that it covers exactly the
    span in which the target can change (existence check to final rename). A second writer
    of the same ``path`` fails at once rather than waiting, since waiting would only make it
    replace (or be refused by) what the first wrote.

    Raises:
        TargetExistsError: when ``path`` exists, or appears while the block runs, and
            ``overwrite`` is false.
        TargetBusyError: when another process is writing ``path``.
        OSError: when ``path``'s folder cannot be written (permissions, disk full, ...).
    """
    path = Path(path)

    def refuse() -> TargetExistsError:
        return TargetExistsError(
            f"{path} already exists; choose another folder or pass overwrite=True (--overwrite)"
        )

    if path.exists() and not overwrite:
        raise refuse()
    _make_parent(path)
    with _target_lock(path):
        _remove_stale_siblings(path)
        if path.exists() and not overwrite:  # written by another process meanwhile
            raise refuse()
        tmp = _temp_sibling(path, "tmp")
        tmp.mkdir()
        try:
            yield tmp
            if path.exists():
                if not overwrite:  # appeared while we wrote (a writer that took no lock)
                    raise refuse()
                old = _temp_sibling(path, "old")
                os.replace(path, old)
                os.replace(tmp, path)
                shutil.rmtree(old, ignore_errors=True)
            else:
                os.replace(tmp, path)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)


def parse_mapping(text: str, suffix: str) -> Any:
    """Parse a spec file's text by its suffix: ``.toml``, ``.yaml``/``.yml``, else JSON.
    The parsers' own errors (naming line and column) propagate."""
    if suffix == ".toml":
        import tomllib

        return tomllib.loads(text)
    if suffix in (".yaml", ".yml"):
        import yaml

        return yaml.safe_load(text)
    return json.loads(text)
