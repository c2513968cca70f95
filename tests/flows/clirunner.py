"""typer's ``CliRunner`` that builds ``dpgnn``'s command once per test process.

typer's ``CliRunner.invoke(app, ...)`` converts the typer app into its click command on
every call (``typer.main.get_command``): for ``dpgnn``'s ~40 commands that is ~0.2 s of
CPU, most of an in-process ``--help`` or refused command. The conversion reads only what
the app's decorators registered at import, so it gives the same command each time; this
runner converts each app once and otherwise invokes exactly as typer's does (the same
isolation, output capture, exit codes and exception handling).
"""

from __future__ import annotations

import functools
from typing import Any

import typer
import typer.main
import typer.testing
from typer.testing import Result

__all__ = ["CliRunner", "click_command"]


@functools.cache
def click_command(app: typer.Typer) -> Any:
    """``typer.main.get_command(app)``, built on first use."""
    return typer.main.get_command(app)


class CliRunner(typer.testing.CliRunner):
    """:class:`typer.testing.CliRunner` whose ``invoke`` uses :func:`click_command`."""

    def invoke(self, app: typer.Typer, *args: Any, **kwargs: Any) -> Result:
        build = typer.testing._get_command  # type: ignore[attr-defined]
        typer.testing._get_command = click_command  # type: ignore[attr-defined]
        try:
            return super().invoke(app, *args, **kwargs)
        finally:
            typer.testing._get_command = build  # type: ignore[attr-defined]
