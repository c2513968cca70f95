"""The warm runner: a process of ``dpgnn server start`` that has imported the heavy,
environment-independent modules once (:mod:`flows.warm_child`) and runs each ``dpgnn run``
or ``dpgnn audit`` of its project home in a process forked from itself, so a command skips
seconds of imports (benchmarks/RESULTS.md, issue 52 §7).

Protocol, over ``$DPGNN_HOME/warm.sock`` (mode 0600; a peer of another user is refused):
the client (:mod:`flows.warm_client`) sends one JSON line (argument vector, working
directory, environment, umask, :func:`flows.warm_env.fingerprint`) with its descriptors
0, 1, 2. For each connection the runner forks a supervisor, which answers
``{"refused": why}`` (the client then runs the command itself) or ``{"ready": true}``;
on the client's ``{"go": true}`` it forks the command (:func:`flows.warm_child.run`),
sends ``{"pid": N}``, passes on each ``{"signal": S}`` (SIGINT and SIGQUIT to the
command's process group, as a terminal does; others to the command), kills the command
(SIGKILL) when the connection closes before it ends, and ends with ``{"exit": code}``
(minus the signal number of a command ended by a signal). The runner itself stays single
threaded and forks nothing but supervisors; ``SIGTERM`` ends it (commands under way
finish: their supervisors are processes of their own).

Started and stopped with the Prefect server (:mod:`flows.server`) by
:mod:`flows.warm_state`.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import sys
import time
from pathlib import Path
from typing import Any

from flows import warm_child, warm_env

#: Packages the runner must never have imported (the command imports them itself).
FORBIDDEN = ("prefect", "mlflow", "dpgnn_core", "tasks", "flows", "dask", "distributed",
             "matplotlib", "amplitude", "pyarrow", "pandas")
#: flows modules the runner is made of (covered by the runner's source stamp).
OWN = ("flows", "flows.warm", "flows.warm_env", "flows.warm_child", "flows.warm_state")


def forbidden() -> list[str]:
    """Modules of :data:`FORBIDDEN` that the runner has imported (none, or it must not
    serve)."""
    return sorted(m for m in sys.modules
                  if m.split(".")[0] in FORBIDDEN and m not in OWN)


# ---------------------------------------------------------------- the runner

class _Stop(Exception):
    """SIGTERM: stop serving."""


def _log(message: str) -> None:
    print(f"{time.strftime('%Y-%m-%d %H:%M:%S')} warm runner {os.getpid()}: {message}",
          file=sys.stderr, flush=True)


def _listen(path: Path) -> socket.socket:
    path.unlink(missing_ok=True)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        if len(str(path)) < 100:
            sock.bind(str(path))
        else:
            fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
            try:
                sock.bind(f"/proc/self/fd/{fd}/{path.name}")
            finally:
                os.close(fd)
    finally:
        os.umask(old)
    sock.listen(16)
    return sock


def _still_ours(path: Path, inode: int) -> bool:
    """Whether the socket this runner bound is still at ``path``."""
    try:
        return path.stat().st_ino == inode
    except OSError:
        return False


class Runner:
    """The serving loop's state."""

    def __init__(self, home: Path, saved: warm_child.Saved, fingerprint: dict[str, Any],
                 stamp: str) -> None:
        self.home, self.saved, self.pid = home, saved, os.getpid()
        self.fingerprint, self.stamp = fingerprint, stamp
        self.listener: socket.socket | None = None

    def serve(self) -> warm_child.Job | None:
        """Accept connections until SIGTERM; returns a job only in a forked command."""
        path = warm_env.socket_path(self.home)
        self.listener = _listen(path)
        inode = path.stat().st_ino

        def stop(_signum: int, _frame: Any) -> None:
            raise _Stop

        signal.signal(signal.SIGTERM, stop)
        _log(f"serving {path}")
        try:
            while _still_ours(path, inode):
                self._reap()
                ready, _, _ = select.select([self.listener], [], [], 1.0)
                if ready:
                    job = self._accept()
                    if job is not None:
                        return job
            # The home (or only the socket) was removed, or another runner took the path:
            # nobody can reach this one any more, so it does not stay behind holding its
            # imports (a test's removed home left one running).
            _log(f"{path} is gone or no longer ours: stopping")
        except _Stop:
            _log("stopped (SIGTERM)")
        finally:
            if os.getpid() == self.pid:  # not in a forked supervisor or command
                with contextlib.suppress(OSError):
                    if path.stat().st_ino == inode:
                        path.unlink()
        return None

    @staticmethod
    def _reap() -> None:
        with contextlib.suppress(ChildProcessError):
            while os.waitpid(-1, os.WNOHANG)[0] > 0:
                pass

    def _accept(self) -> warm_child.Job | None:
        assert self.listener is not None
        try:
            conn, _ = self.listener.accept()
        except OSError:
            return None
        creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)
        uid = int.from_bytes(creds[4:8], sys.byteorder)
        n = warm_child.threads()
        if uid != os.getuid() or n != 1:
            why = (f"the runner has {n} threads" if n != 1 else "another user's connection")
            _log(f"refused: {why}")
            _send(conn, {"refused": why})
            conn.close()
            return None
        try:
            pid = os.fork()
        except OSError as e:
            _send(conn, {"refused": f"cannot fork: {e}"})
            conn.close()
            return None
        if pid:
            conn.close()
            return None
        return Supervisor(self, conn).run()


def _send(conn: socket.socket, msg: dict[str, Any]) -> bool:
    try:
        conn.sendall(json.dumps(msg).encode() + b"\n")
    except OSError:
        return False
    return True


def _receive(conn: socket.socket) -> tuple[dict[str, Any], list[int], bytes]:
    """The request line and the three descriptors; the bytes read after the line."""
    conn.settimeout(30)
    data, fds, _flags, _addr = socket.recv_fds(conn, 1 << 16, 3)
    while b"\n" not in data:
        more = conn.recv(1 << 16)
        if not more:
            raise EOFError("the client closed the connection")
        data += more
    line, rest = data.split(b"\n", 1)
    conn.settimeout(None)
    return dict(json.loads(line)), list(fds), rest


class Supervisor:
    """One connection, in a process forked from the runner (module docstring)."""

    def __init__(self, runner: Runner, conn: socket.socket) -> None:
        self.runner, self.conn, self.buf = runner, conn, b""
        self.fds: list[int] = []

    def run(self) -> warm_child.Job | None:
        """Serve the connection and exit; returns only in the forked command."""
        os.setsid()  # outlives the runner: a command under way finishes after `server stop`
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        assert self.runner.listener is not None
        self.runner.listener.close()
        try:
            job = self._serve()
        except Exception as e:  # the client runs the command itself
            _log(f"supervisor failed: {type(e).__name__}: {e}")
            _send(self.conn, {"refused": f"the runner failed: {type(e).__name__}: {e}"})
            os._exit(1)
        if job is None:
            os._exit(0)
        return job

    def _serve(self) -> warm_child.Job | None:
        req, self.fds, self.buf = _receive(self.conn)
        why = self._refusal(req)
        if why is not None or len(self.fds) != 3:
            _send(self.conn, {"refused": why or "it did not receive three descriptors"})
            return None
        if not _send(self.conn, {"ready": True}) or not self._go():
            return None  # the client went its own way (timeout) or away
        pid = os.fork()
        if pid == 0:
            self.conn.close()
            return warm_child.Job(req, self.fds, self.runner.saved)
        with contextlib.suppress(OSError):  # as the command does: signals to its group
            os.setpgid(pid, pid)  # must find it from the first message on
        for fd in self.fds:
            os.close(fd)
        _send(self.conn, {"pid": pid})
        code = self._relay(pid)
        _log(f"ran `{' '.join(['dpgnn', *req['argv'][1:]])}` as pid {pid}: exit {code}")
        _send(self.conn, {"exit": code})
        return None

    def _refusal(self, req: dict[str, Any]) -> str | None:
        why = warm_env.difference(self.runner.fingerprint, req.get("fingerprint", {}))
        if why is not None:
            return f"the warm runner's {why}"
        if warm_env.source_stamp() != self.runner.stamp:
            # stale for good: the runner ends (`dpgnn server start` starts a new one)
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.runner.pid, signal.SIGTERM)
            return ("the code or the installed packages changed since the warm runner "
                    "started; it stops (`dpgnn server start` starts a new one)")
        return None

    def _message(self) -> dict[str, Any] | None:
        """The next message; None when the client has closed the connection."""
        while b"\n" not in self.buf:
            if not self._read():
                return None
        line, self.buf = self.buf.split(b"\n", 1)
        return dict(json.loads(line))

    def _go(self) -> bool:
        msg = self._message()
        return msg is not None and bool(msg.get("go"))

    def _relay(self, pid: int) -> int:
        """Pass signals on until the command ends; its exit code."""
        pidfd = os.pidfd_open(pid) if hasattr(os, "pidfd_open") else None
        watched: list[Any] = [self.conn] + ([pidfd] if pidfd is not None else [])
        while True:
            for line in self._lines():
                _forward(pid, int(json.loads(line).get("signal", 0)))
            ready, _, _ = select.select(watched, [], [], None if pidfd is not None else 0.05)
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                return os.waitstatus_to_exitcode(status)
            if self.conn in ready and not self._read():
                # the client is gone: end the command as the client's death would have
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])

    def _read(self) -> bool:
        """Read what the client sent; False when it has closed the connection."""
        try:
            data = self.conn.recv(4096)
        except OSError:
            return False
        self.buf += data
        return bool(data)

    def _lines(self) -> list[bytes]:
        *lines, self.buf = self.buf.split(b"\n")
        return [ln for ln in lines if ln.strip()]


def _forward(pid: int, signum: int) -> None:
    if signum <= 0:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if signum in (signal.SIGINT, signal.SIGQUIT):
            os.killpg(pid, signum)
        else:
            os.kill(pid, signum)


def serve(home: Path) -> warm_child.Job | None:
    """Import, check, and serve ``home``; a job only in a forked command."""
    fingerprint = warm_env.fingerprint()  # what the imports read: before they change it
    stamp = warm_env.source_stamp()
    saved, missing = warm_child.preimport()
    bad = forbidden()
    if bad:
        _log(f"not serving: imported {', '.join(bad[:5])}, which the command must import "
             "itself")
        return None
    n = warm_child.threads()
    if n != 1:
        _log(f"not serving: {n} threads after the imports (a fork copies only one)")
        return None
    import gc

    gc.collect()
    gc.freeze()  # the imported objects stay shared with the forks (no copy on collection)
    _log(f"imported {len(sys.modules)} modules ({len(missing)} not installed)")
    return Runner(home, saved, fingerprint, stamp).serve()


def main() -> None:
    """``python -m flows.warm HOME``."""
    job = serve(Path(sys.argv[1]).resolve())
    if job is not None:
        warm_child.run(job)


if __name__ == "__main__":
    main()
