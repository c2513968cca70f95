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

import copy
import functools
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import typer
import typer.main
import typer.testing
from typer.testing import Result

__all__ = ["CliRunner", "Completed", "click_command", "dpgnn_here"]


@functools.cache
def click_command(app: typer.Typer) -> Any:
    """``typer.main.get_command(app)``, built on first use."""
    return typer.main.get_command(app)


def _command(app: Any) -> Any:
    """The click command of ``app``: :func:`click_command`, or ``app`` itself where it is
    one already (:class:`_EntryPoint`)."""
    return app if isinstance(app, _EntryPoint) else click_command(app)


class CliRunner(typer.testing.CliRunner):
    """:class:`typer.testing.CliRunner` whose ``invoke`` uses :func:`click_command`."""

    def invoke(self, app: Any, *args: Any, **kwargs: Any) -> Result:
        build = typer.testing._get_command  # type: ignore[attr-defined]
        typer.testing._get_command = _command  # type: ignore[attr-defined,assignment]
        try:
            return super().invoke(app, *args, **kwargs)
        finally:
            typer.testing._get_command = build  # type: ignore[attr-defined]


class Completed(subprocess.CompletedProcess[str]):
    """A :func:`dpgnn_here` call's outcome, read as a ``dpgnn`` child's
    (:class:`subprocess.CompletedProcess`: ``returncode``, ``stdout``, ``stderr``) or as
    typer's CliRunner result (``exit_code``, ``output``, ``exception``, ``exc_info``)."""

    def __init__(self, args: Sequence[str], result: Result) -> None:
        super().__init__(list(args), result.exit_code, result.stdout, result.stderr)
        self.exit_code: int = result.exit_code
        self.output: str = result.output
        self.exception: BaseException | None = result.exception
        self.exc_info: Any = result.exc_info


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
               main: bool = False, reraise: bool = False) -> Completed:
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
        with temporary_settings(updates=settings):
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
    return Completed(argv, r)
