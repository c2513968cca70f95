"""The ``dpgnn`` command's entry point: run the command in the project's warm runner
(:mod:`flows.warm`, started by ``dpgnn server start``) when one is up and compatible, else
here, as always (:func:`flows.cli.main`).

A delegated command gets this process's standard streams (their file descriptors, passed
over the runner's Unix socket), argument vector, working directory, umask and environment;
this process forwards SIGINT, SIGTERM, SIGHUP and SIGQUIT to it, and exits with its exit
status (or ends by the same signal). If this process is killed, the runner sees its
socket close and kills the command (SIGKILL), as a killed local command would have ended.
Imports only the standard library (and :mod:`flows.warm_env`): it costs a few
milliseconds before the command runs either way.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flows import warm_env

#: Signals passed on to the delegated command.
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
#: Options that start a Dask cluster (a partitioned run): such a command runs by itself
#: (its cluster's worker processes would start from the runner's main module).
CLUSTER_OPTIONS = ("--workers", "--worker-memory", "--dask-address")
#: Seconds to wait for the runner to accept or refuse before running locally.
REPLY_TIMEOUT = 15.0


@dataclass(frozen=True)
class Invocation:
    """The top-level options a command line gives before its command."""

    command: str
    home: Path
    verbose: bool


def parse(argv: list[str], environ: Any = None) -> Invocation | None:
    """The command and project home of ``argv``, when only ``--home`` and ``--verbose``
    precede the command; None otherwise (``--help``, no command, an empty home: the
    command line itself then says what it says)."""
    env = os.environ if environ is None else environ
    args, home, verbose, i = argv[1:], env.get("DPGNN_HOME"), False, 0
    while i < len(args):
        a = args[i]
        if a == "--home" and i + 1 < len(args):
            home, i = args[i + 1], i + 2
        elif a.startswith("--home="):
            home, i = a.split("=", 1)[1], i + 1
        elif a in ("--verbose", "-v"):
            verbose, i = True, i + 1
        elif a.startswith("-"):
            return None
        else:
            if home is not None and not home.strip():
                return None
            verbose = verbose or env.get("DPGNN_VERBOSE", "") not in ("", "0")
            return Invocation(a, Path(home or ".dpgnn").resolve(), verbose)
    return None


def _note(inv: Invocation, why: str) -> None:
    if inv.verbose:
        print(f"note: running here, not in the warm runner: {why}", file=sys.stderr)


class _Lines:
    """Newline-separated JSON messages read from a socket."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock, self.buf = sock, b""

    def next(self) -> dict[str, Any] | None:
        while b"\n" not in self.buf:
            data = self.sock.recv(4096)
            if not data:
                return None
            self.buf += data
        line, self.buf = self.buf.split(b"\n", 1)
        return dict(json.loads(line))


def request(argv: list[str]) -> dict[str, Any]:
    """What the runner needs to run ``argv`` as this process would."""
    umask = os.umask(0o022)
    os.umask(umask)
    return {"argv": argv, "orig_argv": list(getattr(sys, "orig_argv", argv)),
            "cwd": os.getcwd(), "env": dict(os.environ), "umask": umask,
            "path": list(sys.path),
            "line_buffering": [bool(getattr(s, "line_buffering", False))
                               for s in (sys.stdout, sys.stderr)],
            "fingerprint": warm_env.fingerprint()}


def _connect(path: Path) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(REPLY_TIMEOUT)
    try:
        if len(str(path)) < 100:
            sock.connect(str(path))
        else:  # a socket address holds ~108 bytes: reach a deep home through its fd
            fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
            try:
                sock.connect(f"/proc/self/fd/{fd}/{path.name}")
            finally:
                os.close(fd)
    except OSError:
        sock.close()
        raise
    return sock


def _offer(sock: socket.socket, argv: list[str]) -> tuple[_Lines, dict[str, Any] | None]:
    """Send the request with this process's three standard descriptors; the runner's
    first answer (None: it closed the connection)."""
    data = (json.dumps(request(argv)) + "\n").encode()
    socket.send_fds(sock, [data], [0, 1, 2])
    lines = _Lines(sock)
    return lines, lines.next()


def delegate(argv: list[str]) -> int | None:
    """Run ``argv`` in the warm runner and return its exit code (minus a signal's number
    when it ended by a signal); None when it must run here (no runner, another
    environment or code version, ``DPGNN_WARM=0``, not a delegated command)."""
    inv = parse(argv)
    if inv is None or inv.command not in warm_env.DELEGATED or not warm_env.enabled():
        return None
    path = warm_env.socket_path(inv.home)
    if not path.exists():
        return None
    if any(a.split("=", 1)[0] in CLUSTER_OPTIONS for a in argv):
        _note(inv, "a run on a Dask cluster starts its workers from its own main module")
        return None
    try:
        sock = _connect(path)
        lines, first = _offer(sock, argv)
    except (OSError, ValueError) as e:
        _note(inv, f"its socket {path} does not answer ({e})")
        return None
    if first is None or "ready" not in first:
        sock.close()
        _note(inv, str((first or {}).get("refused", "it closed the connection")))
        return None
    return _run(sock, lines, inv)


def _run(sock: socket.socket, lines: _Lines, inv: Invocation) -> int:
    """Tell the runner to start the command, forward signals, wait for its status."""
    def forward(signum: int, _frame: Any) -> None:
        try:
            sock.sendall(json.dumps({"signal": signum}).encode() + b"\n")
        except OSError:
            pass

    for s in FORWARDED:
        signal.signal(s, forward)
    sock.settimeout(None)
    sock.sendall(b'{"go": true}\n')
    while True:
        msg = lines.next()
        if msg is None:
            print("error: the warm runner ended during the command; its outcome is unknown "
                  "(see the run's log under the project home)", file=sys.stderr)
            return 1
        if "pid" in msg and inv.verbose:
            print(f"note: running in the warm runner (pid {msg['pid']})", file=sys.stderr)
        if "exit" in msg:
            return int(msg["exit"])


def _exit_like(code: int) -> None:
    """Exit with ``code``; a negative code ends this process by that signal."""
    if code < 0:
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
        code = 128 - code
    os._exit(code)


def main() -> None:
    """The ``dpgnn`` command."""
    warm_env.one_thread_unless_set()
    code = delegate(sys.argv)
    if code is not None:
        _exit_like(code)
    from flows.cli import main as cli_main

    cli_main()


if __name__ == "__main__":
    main()
