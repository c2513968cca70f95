"""``dpgnn`` in the test process: typer's ``CliRunner`` with the click command built once,
and :func:`dpgnn_here`, a ``dpgnn`` command run here as a child process would run it.

typer's ``CliRunner.invoke(app, ...)`` converts the typer app into its click command on
every call (``typer.main.get_command``): for ``dpgnn``'s ~40 commands that is ~0.2 s of
CPU, most of an in-process ``--help`` or refused command. The conversion reads only what
the app's decorators registered at import, so it gives the same command each time; this
runner converts each app once and otherwise invokes exactly as typer's does (the same
isolation, output capture, exit codes and exception handling).

A ``dpgnn`` child process costs ~10-20 s of CPU (its imports: torch, Prefect, MLflow);
:func:`dpgnn_here` runs the same command in this process, where a step needs no process of
its own (the step before it, a real signal, a kill, a full disk, keeps its real one).
"""

from __future__ import annotations

import contextlib
import copy
import functools
import logging
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import typer
import typer.main
import typer.testing
from typer.testing import Result


def one_error_line(output: str) -> str:
    """The one ``error:`` line of a command's ``output``, with no traceback."""
    assert "Traceback" not in output, output
    lines = [line for line in output.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, output
    return lines[0]


__all__ = ["CliRunner", "Completed", "click_command", "dpgnn_here", "one_error_line"]


@functools.cache
def click_command(app: typer.Typer) -> Any:
    """``typer.main.get_command(app)``, built on first use."""
    return typer.main.get_command(app)


def _command(app: Any) -> Any:
    """The click command of ``app``: :func:`click_command`, or ``app`` itself where it is
    one already (:class:`_EntryPoint`)."""
    return app if isinstance(app, _EntryPoint) else click_command(app)


class CliRunner(typer.testing.CliRunner):
    """:class:`typer.testing.CliRunner` whose ``invoke`` uses :func:`click_command`, with
    Prefect's logging set up before the call (:func:`_prefect_logging_first`), and whose
    output streams no logging handler keeps after the call (:func:`_handlers_back`)."""

    def invoke(self, app: Any, *args: Any, **kwargs: Any) -> Result:
        _prefect_logging_first()
        build = typer.testing._get_command  # type: ignore[attr-defined]
        typer.testing._get_command = _command  # type: ignore[attr-defined,assignment]
        try:
            return super().invoke(app, *args, **kwargs)
        finally:
            typer.testing._get_command = build  # type: ignore[attr-defined]

    @contextlib.contextmanager
    def isolation(self, *args: Any, **kwargs: Any) -> Iterator[Any]:
        runner: list[Any] = []
        try:
            with super().isolation(*args, **kwargs) as streams:
                runner = [sys.stdout, sys.stderr]
                yield streams
        finally:
            _handlers_back(runner)


def _prefect_logging_first() -> None:
    """Set up Prefect's logging now (once per process), not on Prefect's first import
    inside a call: that ``dictConfig`` closes every handler there is, and absl's
    (dp-accounting's) closes its stream then unless it is the ``sys.stderr`` of that
    moment, this process's, not the runner's (pytest lost its captured stderr). ``tasks``
    first: it gives Prefect this process's home before Prefect is imported."""
    import tasks  # noqa: F401, I001 - first: Prefect's home
    from prefect.logging.configuration import ensure_logging_setup

    ensure_logging_setup()


def _handlers_back(runner: Sequence[Any]) -> None:
    """Point the logging handlers that write to the runner's ``sys.stdout`` or
    ``sys.stderr`` (``runner``) at this process's own (``sys.__stdout__``,
    ``sys.__stderr__``).

    A library imported for the first time inside a call (torch, DGL, Prefect) creates its
    console handlers on the ``sys.stderr`` of that moment, the runner's, which is closed
    once the call ends: the library's next record, in a later test, would fail on it
    ("I/O operation on closed file") or be lost. A ``dpgnn`` process has its real streams
    then, and so do these handlers now. (Prefect's console handler writes through a rich
    console on the same stream: that is pointed back too.)"""
    own = [sys.__stdout__ or sys.stdout, sys.__stderr__ or sys.stderr]
    loggers = [logging.getLogger(), *logging.Logger.manager.loggerDict.values()]
    for logger in loggers:
        for handler in getattr(logger, "handlers", ()):
            stream = getattr(handler, "stream", None)
            for theirs, ours in zip(runner, own, strict=True):
                if stream is not theirs:
                    continue
                handler.stream = ours
                console = getattr(handler, "console", None)
                if console is not None and getattr(console, "file", None) is theirs:
                    console.file = ours


class Completed(subprocess.CompletedProcess[str]):
    """A :func:`dpgnn_here` call's outcome, read as a ``dpgnn`` child's
    (:class:`subprocess.CompletedProcess`: ``returncode``, ``stdout``, ``stderr``) or as
    typer's CliRunner result (``exit_code``, ``output``, ``exception``, ``exc_info``)."""

    def __init__(self, args: Sequence[str], result: Result,
                 descriptors: Mapping[int, str] | None = None) -> None:
        fds = descriptors or {}
        super().__init__(list(args), result.exit_code, result.stdout + fds.get(1, ""),
                         result.stderr + fds.get(2, ""))
        self.exit_code: int = result.exit_code
        self.output: str = result.output + fds.get(1, "") + fds.get(2, "")
        self.exception: BaseException | None = result.exception
        self.exc_info: Any = result.exc_info


@contextlib.contextmanager
def _descriptors_captured(on: bool) -> Iterator[dict[int, str]]:
    """Within the block, file descriptors 1 and 2 write to temporary files; the dictionary
    yielded holds what each received once the block ends (nothing when not ``on``)."""
    got: dict[int, str] = {}
    if not on:
        yield got
        return
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        files = {1: out, 2: err}
        for stream in (sys.__stdout__, sys.__stderr__):
            if stream is not None:
                stream.flush()
        saved = {fd: os.dup(fd) for fd in files}
        for fd, f in files.items():
            os.dup2(f.fileno(), fd)
        try:
            yield got
        finally:
            for stream in (sys.__stdout__, sys.__stderr__):
                if stream is not None:
                    stream.flush()
            for fd, f in files.items():
                os.dup2(saved[fd], fd)
                os.close(saved[fd])
                f.seek(0)
                got[fd] = f.read().decode("utf-8", "backslashreplace")


class _EntryPoint:
    """``dpgnn``'s entry point (:func:`flows.cli.main`) in the place of the click command
    that :meth:`CliRunner.invoke` calls: ``main`` runs it on ``args`` (``sys.argv``)."""

    name = "dpgnn"

    def main(self, args: Sequence[str], prog_name: str, **extra: Any) -> None:
        from flows import cli

        argv = sys.argv
        sys.argv = [prog_name, *args]
        try:
            cli.main()
        finally:
            sys.argv = argv


#: What a ``dpgnn`` command sets in the environment of the process that runs it (its
#: ``--home`` and ``--verbose``, Prefect's server, the owner token of what it starts, Dask's
#: logging and a nanny's allocator setting): restored after :func:`dpgnn_here`.
SET_BY_COMMANDS = ("DPGNN_HOME", "DPGNN_VERBOSE", "PREFECT_API_URL", "DPGNN_OWNER",
                   "DASK_LOGGING__DISTRIBUTED", "MALLOC_TRIM_THRESHOLD_")
#: Commands that start Dask (:mod:`distributed`, imported before the runner's capture).
DASK_COMMANDS = ("sweep", "demo")


def dpgnn_here(args: Sequence[str], *, home: Path | None = None,
               api_url: str | None = None, env: Mapping[str, str] | None = None,
               main: bool = False, reraise: bool = False, fd: bool = False) -> Completed:
    """``dpgnn ARGS`` in this process (:class:`CliRunner` on ``flows.cli.app``), as a
    ``dpgnn`` child would run it.

    Args:
        args (Sequence[str]): the command line after ``dpgnn``.
        home (Path, optional): the project home: ``--home HOME`` before ``args``, and
            Prefect's task results and cache records in ``HOME/cache`` (what a child's
            environment sets from its home, so that a command run here and one run as a
            child on that home share one cache). Without it, this process's settings.
        api_url (str, optional): ``PREFECT_API_URL`` for the call (in the environment, and
            so for the Dask workers it starts, and in Prefect's settings), as a child
            started with it set has it. Without it, the command finds its server as a
            child would (this process's own, once started: ``prefect_api_url``).
        env (Mapping[str, str], optional): environment variables set for the call.
        main (bool, optional): run it through ``dpgnn``'s entry point
            (:func:`flows.cli.main`), as a child does: an exception the command lets
            through is one ``error:`` line (its traceback in the home's log file) and
            exit 1. Otherwise the command (``flows.cli.app``) as typer's CliRunner runs
            it: such an exception is exit 1 and the result's ``exception``.
            (default: :obj:`False`)
        reraise (bool, optional): without ``main``, raise such an exception instead of
            returning it. (default: :obj:`False`)
        fd (bool, optional): also capture file descriptors 1 and 2: the result's
            ``stdout`` and ``stderr`` then hold what native code and child processes wrote
            there too (after what the command wrote to ``sys.stdout`` and ``sys.stderr``),
            as a child's own streams would. (default: :obj:`False`)

    Returns:
        Completed: its exit status, standard output and error.

    What the command leaves in this process is undone afterwards: the environment
    variables it sets (:data:`SET_BY_COMMANDS`, and ``env``), Dask's configuration, the
    code version it cached (:func:`tasks.config.code_version`: recomputed, as a new
    process would, since the tree may change between calls) and the watchdog it starts
    for this process (:func:`flows.reaper.start_watchdog`, which would otherwise run until
    the session ends).
    """
    import dask
    from prefect.settings import (
        PREFECT_API_URL,
        PREFECT_LOCAL_STORAGE_PATH,
        temporary_settings,
    )

    from flows import reaper
    from flows.cli import app
    from tasks.config import code_version

    if any(a in DASK_COMMANDS for a in args):
        # imported here, not first in the invoke: distributed's log handler would keep the
        # runner's stderr, closed after it (and so are the flow's imports)
        import distributed  # noqa: F401

        import flows.sweep  # noqa: F401
    argv = [*(["--home", str(home)] if home is not None else []), *args]
    settings: dict[Any, Any] = {}
    if home is not None:
        settings[PREFECT_LOCAL_STORAGE_PATH] = home.resolve() / "cache"
    if api_url is not None:
        settings[PREFECT_API_URL] = api_url
    extra = {**({"PREFECT_API_URL": api_url} if api_url is not None else {}), **(env or {})}
    saved = {k: os.environ.get(k) for k in {*SET_BY_COMMANDS, *extra}}
    config = copy.deepcopy(dask.config.config)
    watchdogs = set(reaper._WATCHDOG)
    os.environ.update(extra)
    code_version.cache_clear()
    try:
        with temporary_settings(updates=settings), _descriptors_captured(fd) as descriptors:
            r = CliRunner().invoke(_EntryPoint() if main else app, argv)
    finally:
        for token in set(reaper._WATCHDOG) - watchdogs:
            watchdog = reaper._WATCHDOG.pop(token)
            watchdog.kill()
            watchdog.wait()
        dask.config.config.clear()
        dask.config.config.update(config)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    if reraise and r.exception is not None and not isinstance(r.exception, SystemExit):
        raise r.exception
    return Completed(argv, r, descriptors)
