"""No process of a ``dpgnn`` command outlives it: the ephemeral Prefect server, the Dask
workers of a sweep and the servers those workers start end with the command, even when it
is killed with SIGKILL (which no ``atexit`` or signal handler sees).

How a process is known to be ours: before Prefect or Dask starts anything, the command puts
an owner token in its environment (``DPGNN_OWNER=<pid>:<start time>:<project home>``,
:func:`claim`). Every process it starts inherits it (Prefect's ephemeral server copies
``os.environ``, Dask's workers are spawned with it or forked from a forkserver started
with it (:func:`flows.sweep.local_cluster`; a process that runs several sweeps on several
homes forks them all from the first one's, whose token they then show), and their own
children again), and Linux shows it in ``/proc/<pid>/environ`` for the life of the
process. A process is ours
when it runs as this user and its environment carries a token naming this project home; it
is orphaned when the token's owner (pid *and* start time, :mod:`flows.procs`) is no longer
running. A pid that was reused by another process is never mistaken for the owner, and a
process of another project home or another user is never touched.

Two mechanisms use it:

- a watchdog (:func:`start_watchdog`), a small detached process started by the command,
  which polls its owner twice a second and, once the owner has ended by any means, ends
  every process that carries the owner's token (SIGTERM, then SIGKILL after a grace);
- :func:`reap_orphans`, run by the next command on the same home before it starts
  anything, for what a killed command left when its watchdog was killed too (a
  ``kill -9`` of the whole process group, a lost machine).

Linux only (``/proc``); elsewhere both do nothing. Standard library only.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from flows import procs

OWNER_ENV = "DPGNN_OWNER"
_PROC = Path("/proc")
#: The watchdog this process started (one per process), by owner token.
_WATCHDOG: dict[str, subprocess.Popen[bytes]] = {}


@dataclass(frozen=True)
class Owner:
    """The process that a token names: its pid, its start time and its project home."""

    pid: int
    start_time: str
    home: str

    @property
    def token(self) -> str:
        return f"{self.pid}:{self.start_time}:{self.home}"

    @classmethod
    def parse(cls, token: str) -> Owner | None:
        parts = token.split(":", 3)  # the start time is "proc:<ticks>": two fields
        if len(parts) != 4 or not parts[0].isdigit():
            return None
        return cls(int(parts[0]), f"{parts[1]}:{parts[2]}", parts[3])

    def running(self) -> bool:
        return procs.start_time(self.pid) == self.start_time


def this_process(home: Path) -> Owner | None:
    """The owner token of this process for ``home``; None where pids cannot be verified."""
    try:
        started = procs.start_time(os.getpid())
    except procs.Unverifiable:  # pragma: no cover - non-Linux without psutil
        return None
    return None if started is None else Owner(os.getpid(), started, str(home.resolve()))


def claim(home: Path) -> Owner | None:
    """Put this process's owner token in its environment (inherited by every process it
    starts from now on); returns it."""
    owner = this_process(home)
    if owner is not None:
        os.environ[OWNER_ENV] = owner.token
    return owner


def _environ_token(pid: int) -> str | None:
    try:
        raw = (_PROC / str(pid) / "environ").read_bytes()
    except OSError:  # gone, or not ours to read
        return None
    prefix = f"{OWNER_ENV}=".encode()
    for item in raw.split(b"\0"):
        if item.startswith(prefix):
            return item[len(prefix):].decode(errors="replace")
    return None


@dataclass(frozen=True)
class Tagged:
    """A running process that carries an owner token: its pid, start time and owner."""

    pid: int
    start_time: str
    owner: Owner


def tagged(home: Path | str | None = None) -> list[Tagged]:
    """This user's running processes (this one excepted) whose environment carries an owner
    token, of project ``home`` only when given."""
    if not _PROC.is_dir():
        return []
    want = None if home is None else str(Path(home).resolve())
    me, uid = os.getpid(), os.getuid()
    out = []
    for entry in _PROC.iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        pid = int(entry.name)
        try:
            if entry.stat().st_uid != uid:
                continue
        except OSError:
            continue
        token = _environ_token(pid)
        owner = Owner.parse(token) if token else None
        if owner is None or (want is not None and owner.home != want):
            continue
        started = procs.start_time(pid)
        if started is not None:
            out.append(Tagged(pid, started, owner))
    return out


def end(processes: Iterable[Tagged], grace: float = 3.0) -> list[int]:
    """SIGTERM each process that is still the one recorded (same start time), SIGKILL those
    left after ``grace`` seconds; returns the pids signalled."""
    alive = [p for p in processes if procs.start_time(p.pid) == p.start_time]
    for p in alive:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(p.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if all(procs.start_time(p.pid) != p.start_time for p in alive):
            break
        time.sleep(0.1)
    for p in alive:
        if procs.start_time(p.pid) == p.start_time:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(p.pid, signal.SIGKILL)
    return [p.pid for p in alive]


def reap_orphans(home: Path) -> list[int]:
    """End the processes of project ``home`` whose owner (a ``dpgnn`` command) has ended:
    what a killed command and its killed watchdog left. Returns their pids."""
    return end([p for p in tagged(home) if not p.owner.running()])


def start_watchdog(owner: Owner) -> subprocess.Popen[bytes] | None:
    """Start (once per owner) the detached process that ends ``owner``'s processes once
    ``owner`` has ended (:func:`watch`)."""
    if owner.token in _WATCHDOG and _WATCHDOG[owner.token].poll() is None:
        return _WATCHDOG[owner.token]
    env = {k: v for k, v in os.environ.items() if k != OWNER_ENV}  # not one of its own
    env["PYTHONPATH"] = os.pathsep.join(
        [str(Path(__file__).resolve().parent.parent), *filter(None, [env.get("PYTHONPATH")])])
    proc = subprocess.Popen([sys.executable, "-m", "flows.reaper", owner.token],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env=env, start_new_session=True,
                            close_fds=True)
    _WATCHDOG[owner.token] = proc
    return proc


def guard(home: Path) -> Owner | None:
    """Before a command starts Prefect or Dask: end what killed commands left on ``home``
    (:func:`reap_orphans`), mark this process as the owner of what it starts
    (:func:`claim`) and start its watchdog. Returns the owner; never raises (an error only
    costs the clean-up)."""
    try:
        reap_orphans(home)
        owner = claim(home)
        if owner is not None:
            start_watchdog(owner)
        return owner
    except Exception:  # pragma: no cover - best effort
        return None


def watch(owner: Owner, poll: float = 0.5) -> list[int]:
    """Wait until ``owner`` has ended, then end every process that carries its token."""
    while owner.running():
        time.sleep(poll)
    mine = [p for p in tagged(owner.home) if p.owner == owner]
    return end(mine)


def _main(argv: list[str]) -> int:
    owner = Owner.parse(argv[0]) if argv else None
    if owner is None:
        print("usage: python -m flows.reaper PID:START:HOME", file=sys.stderr)
        return 2
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C of the terminal is the owner's
    watch(owner)
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
