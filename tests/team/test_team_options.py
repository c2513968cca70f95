"""A team's setup, its options: ``dpgnn server start --database-url`` (or
``DPGNN_SERVER_DATABASE_URL``) refuses a URL Prefect's server could not use in one line,
before any server starts; runs log to ``$MLFLOW_TRACKING_URI`` when set. The whole setup
on a real PostgreSQL: test_team_postgres.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.flows.clirunner import CliRunner
from tests.team.postgres import binaries, postgres


def _start(home: Path, *args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    from flows.cli import app

    r = CliRunner().invoke(app, ["--home", str(home), "server", "start", "--port", "1",
                                 *args], env=env)
    return r.exit_code, r.output


@pytest.mark.parametrize(("url", "says"), [
    ("postgresql://team:s3cret@db.example:5432/prefect",
     "driver 'postgresql' is not one Prefect's server runs on (postgresql+asyncpg, "
     "sqlite+aiosqlite) (Prefect's server needs the async driver: postgresql+asyncpg://...)"),
    ("postgresql+asyncpg://team:s3cret@db.example:5432",
     "names no database (…/DATABASE at the end)"),
    ("mysql+aiomysql://team:s3cret@db.example/prefect", "driver 'mysql+aiomysql' is not one"),
    ("not a url", "is not a database URL (expected postgresql+asyncpg://USER:PASSWORD@HOST:"
     "PORT/DATABASE)"),
])
def test_a_database_url_prefect_cannot_use_is_one_line(tmp_path: Path, url: str,
                                                       says: str) -> None:
    code, out = _start(tmp_path / "home", "--database-url", url)
    assert code == 1
    assert out.count("\n") == 1 and out.startswith("error: --database-url "), out
    assert says in out
    assert "s3cret" not in out  # the password is masked
    assert not (tmp_path / "home" / "server.json").exists()  # no server was started


def test_the_database_url_from_the_environment(tmp_path: Path) -> None:
    """``DPGNN_SERVER_DATABASE_URL`` when no option is given; a server that does not answer
    (a closed port) is one line."""
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"postgresql+asyncpg://team:s3cret@127.0.0.1:{port}/prefect"
    code, out = _start(tmp_path / "home", env={"DPGNN_SERVER_DATABASE_URL": url})
    assert code == 1
    assert out == (f"error: --database-url 'postgresql+asyncpg://team:***@127.0.0.1:{port}/"
                   f"prefect': the database server does not answer ([Errno 111] Connect call "
                   f"failed ('127.0.0.1', {port}))\n")


@pytest.mark.integration
def test_a_missing_database_is_one_line(tmp_path: Path) -> None:
    """A real PostgreSQL server that has no such database (nor a server started)."""
    bin_dir, why = binaries()
    if bin_dir is None:
        pytest.skip(why)
    with postgres(bin_dir) as pg:
        url = pg.url("nosuch", "postgresql+asyncpg")
        code, out = _start(tmp_path / "home", "--database-url", url)
    assert code == 1
    assert out == f"error: --database-url {url!r}: database \"nosuch\" does not exist\n"
    assert not (tmp_path / "home" / "server.json").exists()


def test_runs_log_to_mlflow_tracking_uri_when_set(monkeypatch: pytest.MonkeyPatch,
                                                  tmp_path: Path) -> None:
    """A team's workers set ``MLFLOW_TRACKING_URI`` to its tracking server: a run without
    ``--tracking-uri`` logs there; unset (or empty), to SQLite under the project."""
    from tasks.tracking import default_tracking_uri

    monkeypatch.setenv("DPGNN_HOME", str(tmp_path))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://mlflow.team:5000")
    assert default_tracking_uri() == "http://mlflow.team:5000"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "")
    assert default_tracking_uri() == f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.delenv("MLFLOW_TRACKING_URI")
    assert default_tracking_uri() == f"sqlite:///{tmp_path / 'mlflow.db'}"


def test_prefects_own_database_variable_is_checked_too(tmp_path: Path) -> None:
    """``PREFECT_API_DATABASE_CONNECTION_URL`` (what the server would use when it is set)
    is checked as the option is, and named as the source."""
    url = "postgresql://team:s3cret@db.example:5432/prefect"
    code, out = _start(tmp_path / "home", env={"PREFECT_API_DATABASE_CONNECTION_URL": url})
    assert code == 1
    assert out.startswith("error: PREFECT_API_DATABASE_CONNECTION_URL "
                          "'postgresql://team:***@db.example:5432/prefect': driver "
                          "'postgresql' is not one"), out
