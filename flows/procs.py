"""Who a pid is: its start time and command line, so that a recorded pid is never taken for
another process that reuses the number later (pids wrap around; a reboot restarts them).

Linux reads ``/proc/<pid>/stat`` (field 22, start time in clock ticks after boot) and
``/proc/<pid>/cmdline``; elsewhere :mod:`psutil` when installed. Standard library otherwise;
imports nothing heavy.
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

_PROC = Path("/proc")


class Unverifiable(RuntimeError):
    """Neither ``/proc`` nor psutil can say who a pid is on this platform."""


def _stat_fields(pid: int) -> list[bytes] | None:
    try:
        data = (_PROC / str(pid) / "stat").read_bytes()
    except (FileNotFoundError, ProcessLookupError):
        return None
    # Field 2 (comm) is in parentheses and may hold spaces or ')': split after the last ')'.
    # The list then starts at field 3 (state).
    return data[data.rindex(b")") + 2:].split()


def _psutil() -> Any:
    try:
        import psutil
    except ImportError as e:  # pragma: no cover - Linux always has /proc
        raise Unverifiable("cannot identify processes here: no /proc and no psutil") from e
    return psutil


def start_time(pid: int) -> str | None:
    """An opaque token of when ``pid`` started, equal only for the same process; ``None``
    when no such process exists or it is a zombie (finished, not yet reaped)."""
    if pid <= 0:
        return None
    if _PROC.is_dir():
        fields = _stat_fields(pid)
        if fields is None or fields[0] in (b"Z", b"X"):
            return None
        return f"proc:{int(fields[19])}"  # field 22
    psutil = _psutil()  # pragma: no cover - non-Linux
    try:  # pragma: no cover
        p = psutil.Process(pid)
        if p.status() == psutil.STATUS_ZOMBIE:
            return None
        return f"psutil:{p.create_time():.6f}"
    except psutil.NoSuchProcess:  # pragma: no cover
        return None


def cmdline(pid: int) -> list[str] | None:
    """The argument vector of ``pid``, ``None`` when it is gone."""
    if _PROC.is_dir():
        try:
            raw = (_PROC / str(pid) / "cmdline").read_bytes()
        except (FileNotFoundError, ProcessLookupError):
            return None
        return [a.decode(errors="replace") for a in raw.split(b"\0") if a]
    psutil = _psutil()  # pragma: no cover - non-Linux
    try:  # pragma: no cover
        return [str(a) for a in psutil.Process(pid).cmdline()]
    except psutil.NoSuchProcess:  # pragma: no cover
        return None


def group_running(pgid: int) -> bool:
    """Whether any process of process group ``pgid`` is still running (zombies, which have
    ended and wait to be reaped, do not count)."""
    if _PROC.is_dir():
        for entry in _PROC.iterdir():
            if not entry.name.isdigit():
                continue
            fields = _stat_fields(int(entry.name))
            if fields is not None and int(fields[2]) == pgid and fields[0] not in (b"Z", b"X"):
                return True
        return False
    try:  # pragma: no cover - non-Linux: zombies count as running here
        os.killpg(pgid, 0)
    except ProcessLookupError:  # pragma: no cover
        return False
    except PermissionError:  # pragma: no cover
        return True
    return True  # pragma: no cover


def identity(pid: int | None = None) -> dict[str, Any]:
    """``{"pid", "host", "start_time"}`` of ``pid`` (this process by default)."""
    pid = os.getpid() if pid is None else pid
    return {"pid": pid, "host": socket.gethostname(), "start_time": start_time(pid)}


def same_process(record: dict[str, Any]) -> bool | None:
    """Whether the process ``record`` (from :func:`identity`) names is still running: ``True``
    if it is, ``False`` if it has ended (its pid free or reused), ``None`` if it cannot be
    told from here (another host)."""
    if record.get("host") != socket.gethostname():
        return None
    now = start_time(int(record["pid"]))
    return now is not None and now == record.get("start_time")


__all__ = ["Unverifiable", "cmdline", "group_running", "identity", "same_process", "start_time"]


@contextlib.contextmanager
def watching(check: Callable[[], str | None], on_event: Callable[[str], None],
             every: float, name: str) -> Iterator[None]:
    """Within the block, a daemon thread calls ``check()`` every ``every`` seconds and, the
    first time it returns a sentence, ``on_event(sentence)`` (in that thread: it may end the
    process) and stops. The shared loop of the disk and server watchers."""
    import threading

    done = threading.Event()

    def loop() -> None:
        while not done.wait(every):
            why = check()
            if why is not None:
                on_event(why)
                return

    thread = threading.Thread(target=loop, name=name, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join(5)
