"""What every ``dpgnn`` command shares: the one-line error, the usage-error group, stdout
kept for dpgnn's own output, ``KEY=VALUE`` options, the Prefect server to use and the
server and disk watchers.

Running one spec through the pipeline flow (pre-flight, Ctrl-C at a step's end) is
:mod:`flows.cli.execute`; the run summary it prints is :mod:`flows.cli.summary`. The
command modules (:mod:`flows.cli.run`, :mod:`.audit`, :mod:`.sweep`, :mod:`.budget`,
:mod:`.privacy`, :mod:`.ingest`) and the top-level app (:mod:`flows.cli`) import from
these three, never from each other.
"""


from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import typer
from typer.core import TyperGroup

# The command-line framework's error classes (typer vendors click: found from typer's own
# BadParameter, whichever click it is built on).
_USAGE_ERROR: Any = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError")
#: The framework's usage error (raise it with ``ctx=`` for a one-line error naming the
#: command's ``--help``).
USAGE_ERROR: Any = _USAGE_ERROR
_CLICK_ERROR: Any = next(c for c in typer.BadParameter.__mro__
                         if c.__name__ == "ClickException")


class OneLineErrors(TyperGroup):
    """The top-level group: a usage error of the command-line framework (an unknown command
    or option, a bad or missing value) is one ``error:`` line naming it and the ``--help``
    to read, as dpgnn's own errors are, instead of the framework's usage box."""

    def main(self, args: Sequence[str] | None = None, prog_name: str | None = None,
             complete_var: str | None = None, standalone_mode: bool = True,
             windows_expand_args: bool = True, **extra: Any) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False,
                                windows_expand_args=windows_expand_args, **extra)
        try:  # not standalone: the framework raises its errors instead of printing them
            rv = super().main(args, prog_name, complete_var, standalone_mode=False,
                              windows_expand_args=windows_expand_args, **extra)
        except _USAGE_ERROR as e:
            where = e.ctx.command_path if e.ctx is not None else "dpgnn"
            if e.format_message().strip():  # (none after a bare group's help)
                error(f"{e.format_message().strip()} (see `{where} --help`)")
            sys.exit(e.exit_code)
        except _CLICK_ERROR as e:
            error(e.format_message())
            sys.exit(e.exit_code)
        except typer.Abort as e:
            cause = e.__cause__  # the framework turns any EOFError into Abort, not only
            # Ctrl-D at a prompt: a truncated gzip file said only "aborted"
            error(f"{type(cause).__name__}: {cause}" if isinstance(cause, EOFError)
                  and str(cause) else "aborted")
            sys.exit(1)
        sys.exit(rv if isinstance(rv, int) else 0)  # an Exit's code (0 when none)


def field_help(model: type) -> dict[str, str]:
    """``name -> text`` from the ``Args:`` sections of a spec or option class and its bases
    (the class's own text wins)."""
    import inspect
    import re

    out: dict[str, str] = {}
    for cls in reversed(model.__mro__):
        doc = inspect.getdoc(cls) or ""
        for m in re.finditer(r"^\s*(\w+) \([^)]*\):\s*(.+?)(?=^\s*\w+ \([^)]*\):|\Z|^\s*$)",
                             doc, flags=re.M | re.S):
            out[m.group(1)] = " ".join(m.group(2).split())
    return out


def pydantic_line(e: dict[str, Any]) -> str:
    """One pydantic error as ``--field VALUE: message``; the union tag (the method name)
    and a whole-spec input are left out."""
    from dpgnn_core.methods.catalog import spec_types as method_specs

    loc = [str(p) for p in e.get("loc", ()) if str(p) not in method_specs()]
    msg = str(e.get("msg", e)).removeprefix("Value error, ")
    if not loc:
        return msg
    return f"--{'.'.join(loc).replace('_', '-')} {e.get('input')!r}: {msg}"


def error(msg: str | Exception) -> None:
    errors = getattr(msg, "errors", None)
    if callable(errors):  # pydantic's ValidationError: keep its messages only
        msg = "; ".join(pydantic_line(e) for e in errors())
    typer.secho(f"error: {msg}", fg=typer.colors.RED, err=True)


def check_experiment(name: str, option: str = "--experiment") -> None:
    """Refuse an MLflow experiment name MLflow refuses (empty or blank) before anything
    runs: ``--experiment ""`` trained, was charged, then only warned that the MLflow
    logging failed (issue 48).

    Raises:
        DpgnnError: naming the option and the value.
    """
    from dpgnn_core.errors import DpgnnError

    if not name.strip():
        raise DpgnnError(f"{option} {name!r}: an MLflow experiment needs a name (the "
                         "default is used when the option is left out)")


@contextlib.contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """Keep stdout for dpgnn's own output: libraries (MLflow's run links, say) that print
    while a command works write to stderr instead, so `--json` prints one object."""
    with contextlib.redirect_stdout(sys.stderr):
        yield


def console() -> Any:
    from rich.console import Console

    return Console(stderr=True)


def parse_kv(pairs: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for pair in pairs:
        if "=" not in pair:
            raise typer.BadParameter(f"expected KEY=VALUE, got {pair!r}", param_hint="--option")
        k, v = pair.split("=", 1)
        try:
            out[k.replace("-", "_")] = json.loads(v)
        except json.JSONDecodeError:
            out[k.replace("-", "_")] = v
    return out


def find_datasets(root: Path) -> list[tuple[Path, dict[str, Any]]]:
    """The dataset folders at or under ``root`` with their manifests; a folder whose
    manifest cannot be read as JSON is left out with a ``warning:`` line naming the file
    (it was left out silently)."""
    from dpgnn_core.data.manifest import load_manifest
    from dpgnn_core.errors import DataError

    found = []
    cands = [root] + (sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else [])
    for p in cands:
        m = p / "manifest.json"
        if m.is_file():
            try:
                found.append((p, load_manifest(m)))
            except DataError as e:
                typer.secho(f"warning: {e}; a run refuses it", fg=typer.colors.YELLOW,
                            err=True)
    return found


def use_server_if_running() -> str | None:
    """Before a command starts Prefect (and Dask): end what a killed command left running
    on this home and start this one's watchdog (:func:`flows.reaper.guard`), then point
    Prefect at the background server when it is up, else (no ``PREFECT_API_URL`` either)
    at a temporary server of the command's own (:func:`flows.server.start_temporary`)."""
    from dpgnn_core.home import project_dir
    from flows import reaper, server

    reaper.guard(project_dir())
    url = server.api_url_if_running()
    if url:
        os.environ["PREFECT_API_URL"] = url
    elif not os.environ.get("PREFECT_API_URL"):
        import tasks  # noqa: F401 - Prefect's environment first

        if "prefect" in sys.modules:  # in-process (a test, a library user): Prefect's own
            server.detach_ephemeral()  # a Ctrl-C on the terminal must not end it mid-run
        else:  # a command: the same server, without Prefect's server modules here;
            # it starts while the command imports (server_ready before the first flow)
            server.start_temporary(wait=False)
    return url


def server_ready() -> None:
    """Wait for the temporary server :func:`use_server_if_running` started, if it did
    (call once the command's imports are done, before its first flow)."""
    from flows import server

    server.wait_temporary()


def give_up(why: str) -> None:
    """End the command at once with one ``error:`` line (called from a watcher thread, and
    on an error raised by a full disk before the watcher saw it)."""
    if "tasks.budget" in sys.modules:  # a training that released nothing: given back
        sys.modules["tasks.budget"].give_back_live(f"ended: {why}")
    error(f"{why}; the run stops here. Nothing half-written is kept (every artifact is "
         "written atomically): rerun the same command once fixed (finished steps are "
         "reused; a training resumes from its checkpoint, kept from its first step on, "
         "and is charged once; one that had not trained a step gave its reservation back)")
    sys.stderr.flush()
    os._exit(1)  # the flow's own end would wait minutes on a dead API or a full disk


@contextlib.contextmanager
def server_watched() -> Iterator[None]:
    """Within the block, a Prefect server that ends mid-run, or a project home whose disk
    fills up, ends the command within a second with one ``error:`` line (exit 1), instead
    of minutes of Prefect's retries and a bare ``ConnectError`` or thousands of lines of
    database tracebacks. Artifacts are written atomically and checkpoints stay, so nothing
    half-written is kept and a rerun reuses the finished steps."""
    from dpgnn_core.home import project_dir
    from flows import clilog, server

    with server.watched(give_up), clilog.disk_watched(project_dir(), give_up):
        yield
