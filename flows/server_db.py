"""The database of ``dpgnn server start``: SQLite under the project (the default), or a
team's PostgreSQL server (``--database-url`` / ``DPGNN_SERVER_DATABASE_URL``).

Prefect's server takes its database from ``PREFECT_API_DATABASE_CONNECTION_URL``, an
SQLAlchemy URL with an *async* driver: ``postgresql+asyncpg://USER:PASSWORD@HOST:PORT/DB``
or ``sqlite+aiosqlite:///PATH``. :func:`check_database_url` checks one before the server is
started, so a typo, a missing driver, a database that does not answer or does not exist is
one line naming the URL (its password masked), not a server that exits with a traceback
in its log.
"""

from __future__ import annotations

import asyncio
from typing import Any

from dpgnn_core.errors import ServerError

#: The variable ``dpgnn server start`` reads when ``--database-url`` is not given.
DATABASE_ENV = "DPGNN_SERVER_DATABASE_URL"

#: The drivers Prefect's server runs on.
DRIVERS = ("postgresql+asyncpg", "sqlite+aiosqlite")


def masked(url: str) -> str:
    """``url`` with its password replaced by ``***`` (for messages and the state file)."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        return str(make_url(url).render_as_string(hide_password=True))
    except (ArgumentError, ValueError):  # shown whole unless it may hold a password
        return url if "@" not in url else "<unparsable URL with credentials>"


def _parse(url: str, label: str) -> Any:
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        return make_url(url)
    except (ArgumentError, ValueError) as e:
        raise ServerError(f"{label} {masked(url)!r} is not a database URL "
                          "(expected postgresql+asyncpg://USER:PASSWORD@HOST:PORT/DATABASE)"
                          ) from e


def _check_form(url: str, label: str) -> Any:
    """The parsed URL; raises when Prefect's server could not use its form."""
    u = _parse(url, label)
    shown = masked(url)
    if u.drivername not in DRIVERS:
        hint = (" (Prefect's server needs the async driver: postgresql+asyncpg://...)"
                if u.drivername.split("+")[0] == "postgresql" else "")
        raise ServerError(f"{label} {shown!r}: driver {u.drivername!r} is not one "
                          f"Prefect's server runs on ({', '.join(DRIVERS)}){hint}")
    if u.drivername.startswith("postgresql") and not u.database:
        raise ServerError(f"{label} {shown!r} names no database (…/DATABASE at the "
                          "end)")
    if u.drivername.startswith("sqlite") and not u.database:
        raise ServerError(f"{label} {shown!r} names no database file")
    return u


async def _connect(dsn: str, timeout: float) -> None:
    import asyncpg

    conn = await asyncpg.connect(dsn=dsn, timeout=timeout)
    await conn.close()


def _reason(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return text[0] if text else type(err).__name__


def check_database_url(url: str, timeout: float = 5.0, label: str = "--database-url") -> str:
    """Check, before the server starts, that Prefect's server can use ``url``: its form
    (an async driver, a database named), and for PostgreSQL that the server answers
    within ``timeout`` seconds and the database exists and takes this user. Returns the
    URL with its password masked. ``label`` names where the URL came from in messages.

    Raises:
        ServerError: one line naming the URL (password masked) and what is wrong.
    """
    u = _check_form(url, label)
    shown = masked(url)
    if not u.drivername.startswith("postgresql"):
        return shown
    try:
        import asyncpg
    except ImportError as e:
        raise ServerError(f"{label} {shown!r}: the asyncpg driver is not installed "
                          "(pip install asyncpg)") from e
    dsn = u.set(drivername="postgresql").render_as_string(hide_password=False)
    try:
        asyncio.run(_connect(dsn, timeout))
    except OSError as e:  # TimeoutError included
        why = f"no answer within {timeout:g} s" if isinstance(e, TimeoutError) else _reason(e)
        raise ServerError(f"{label} {shown!r}: the database server does not answer "
                          f"({why})") from e
    except (asyncpg.PostgresError, asyncpg.InterfaceError, ValueError) as e:
        # no such database, authentication failed, a malformed option, ...
        raise ServerError(f"{label} {shown!r}: {_reason(e)}") from e
    return shown
