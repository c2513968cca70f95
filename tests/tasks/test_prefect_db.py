"""A new home's Prefect database from the migrated template, and no migration at a server's
start where the database is at the installed Prefect's head (tasks.prefect_db).

The rest of the suite runs on it too: tests/conftest.py makes the session's migrated
database the template, so every server that flows.server starts on a home at the head
revision starts without migrating."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tasks import prefect_db

OFF = {prefect_db.MIGRATE_ENV: "false"}


def _env(tmp_path: Path, home: Path, **extra: str) -> dict[str, str]:
    return {"DPGNN_CACHE": str(tmp_path / "cache"), "PREFECT_HOME": str(home), **extra}


@pytest.fixture
def migrated(tmp_path: Path, seeded_prefect: Callable[[Path], bool]) -> Path:
    """A Prefect home whose database is at the head (a copy of the session's)."""
    home = tmp_path / "h0" / "prefect"
    assert seeded_prefect(home)
    assert prefect_db.revision(home / "prefect.db") == prefect_db.head() is not None
    return home


def _set_revision(db: Path, rev: str) -> None:
    with sqlite3.connect(db) as con:
        con.execute("UPDATE alembic_version SET version_num = ?", (rev,))
    con.close()


def test_the_head_is_alembics_head_of_the_sqlite_migrations() -> None:
    from alembic.script import ScriptDirectory
    from prefect.server.database import provide_database_interface
    from prefect.server.database.alembic_commands import alembic_config

    config = alembic_config()  # the SQLite migrations, as Prefect's env.py picks them
    config.set_main_option("version_locations",
                           str(provide_database_interface().orm.versions_dir))
    assert prefect_db.head() == ScriptDirectory.from_config(config).get_current_head()


def test_a_new_home_is_a_copy_of_the_template_and_starts_without_migrating(
        tmp_path: Path, migrated: Path) -> None:
    env = _env(tmp_path, migrated)
    assert prefect_db.prepare(tmp_path / "h1" / "prefect", _env(tmp_path, tmp_path / "h1"
                                                                 / "prefect")) == {}
    assert not (tmp_path / "h1" / "prefect" / "prefect.db").exists()  # no template yet
    assert prefect_db.after_start(migrated, env) is True
    template = prefect_db.template_path(env)
    assert template is not None and prefect_db.revision(template) == prefect_db.head()
    assert prefect_db.after_start(migrated, env) is False  # one template, never replaced
    new = tmp_path / "h1" / "prefect"
    assert prefect_db.prepare(new, _env(tmp_path, new)) == OFF
    assert prefect_db.revision(new / "prefect.db") == prefect_db.head()
    with sqlite3.connect(new / "prefect.db") as con:  # the whole schema, not a stub
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master")}
    con.close()
    assert {"flow_run", "task_run", "deployment", "block_type"} <= tables
    # An existing database is kept as it is: at the head, it skips the migration.
    assert prefect_db.prepare(migrated, env) == OFF


@pytest.mark.parametrize("setting", [
    {"PREFECT_API_URL": "http://127.0.0.1:1/api"},
    {"PREFECT_API_DATABASE_CONNECTION_URL": "postgresql+asyncpg://u@h/db"},
    {"PREFECT_SERVER_DATABASE_CONNECTION_URL": "sqlite+aiosqlite:////elsewhere.db"},
    {"PREFECT_SERVER_DATABASE_HOST": "db.example"},
    {"PREFECT_PROFILE": "team"},
    {prefect_db.SWITCH_ENV: "off"},
    {prefect_db.MIGRATE_ENV: "true"},
])
def test_nothing_where_the_server_may_use_another_database_or_the_user_decides(
        tmp_path: Path, migrated: Path, setting: dict[str, str]) -> None:
    prefect_db.after_start(migrated, _env(tmp_path, migrated))
    new = tmp_path / "h1" / "prefect"
    assert prefect_db.prepare(new, _env(tmp_path, new, **setting)) == {}
    # The user's own migration setting still lets a new home have its copy.
    copied = (new / "prefect.db").exists()
    assert copied == (prefect_db.MIGRATE_ENV in setting)


@pytest.mark.parametrize("where", ["prefect.toml", ".env", "pyproject.toml", "profiles.toml"])
def test_nothing_where_a_settings_file_may_name_another_database(
        tmp_path: Path, migrated: Path, monkeypatch: pytest.MonkeyPatch, where: str) -> None:
    prefect_db.after_start(migrated, _env(tmp_path, migrated))
    new = tmp_path / "h1" / "prefect"
    new.mkdir(parents=True)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    if where == "profiles.toml":
        (new / where).write_text('[profiles.x]\nPREFECT_API_DATABASE_CONNECTION_URL = "x"\n')
    elif where == "pyproject.toml":
        (work / where).write_text('[tool.prefect.server.database]\nconnection_url = "x"\n')
    else:
        (work / where).write_text("PREFECT_SERVER_DATABASE_CONNECTION_URL=x\n")
    assert prefect_db.prepare(new, _env(tmp_path, new)) == {}
    assert not (new / "prefect.db").exists()


def test_a_template_or_database_not_at_the_head_is_never_trusted(
        tmp_path: Path, migrated: Path) -> None:
    env = _env(tmp_path, migrated)
    prefect_db.after_start(migrated, env)
    template = prefect_db.template_path(env)
    assert template is not None
    # A database at another revision (an older Prefect's) migrates at start.
    old = tmp_path / "h1" / "prefect"
    old.mkdir(parents=True)
    shutil.copyfile(template, old / "prefect.db")
    _set_revision(old / "prefect.db", "f416ea180ae1")
    assert prefect_db.prepare(old, _env(tmp_path, old)) == {}
    # A template at another revision is neither copied nor trusted.
    _set_revision(template, "f416ea180ae1")
    new = tmp_path / "h2" / "prefect"
    assert prefect_db.prepare(new, _env(tmp_path, new)) == {}
    assert not (new / "prefect.db").exists()
    assert prefect_db.prepare(migrated, env) == {}
    # Nor is a file that is not a database.
    template.write_bytes(b"not a database")
    assert prefect_db.prepare(new, _env(tmp_path, new)) == {}
    assert not (new / "prefect.db").exists()


def test_a_database_that_holds_a_run_or_is_not_at_the_head_is_not_saved(
        tmp_path: Path) -> None:
    home = tmp_path / "h0" / "prefect"
    home.mkdir(parents=True)
    with sqlite3.connect(home / "prefect.db") as con:
        con.execute("CREATE TABLE alembic_version (version_num TEXT)")
        con.execute("INSERT INTO alembic_version VALUES (?)", (prefect_db.head(),))
        con.execute("CREATE TABLE flow_run (id TEXT)")
        con.execute("INSERT INTO flow_run VALUES ('r')")
    con.close()
    env = _env(tmp_path, home)
    assert prefect_db.after_start(home, env) is False
    template = prefect_db.template_path(env)
    assert template is not None and not template.exists()
    assert [p.name for p in template.parent.iterdir()] == []  # no temporary left behind
    _set_revision(home / "prefect.db", "f416ea180ae1")
    with sqlite3.connect(home / "prefect.db") as con:
        con.execute("DELETE FROM flow_run")
    con.close()
    assert prefect_db.after_start(home, env) is False


def test_concurrent_first_uses_keep_the_first_copy(tmp_path: Path, migrated: Path) -> None:
    env = _env(tmp_path, migrated)
    prefect_db.after_start(migrated, env)
    new = tmp_path / "h1" / "prefect"
    new.mkdir(parents=True)
    (new / "prefect.db").write_bytes(b"another process's database")
    assert prefect_db.prepare(new, _env(tmp_path, new)) == {}
    assert (new / "prefect.db").read_bytes() == b"another process's database"
    assert sorted(p.name for p in new.iterdir()) == ["prefect.db"]


@pytest.mark.slow
def test_a_temporary_server_saves_the_template_a_new_home_then_copies(
        tmp_path: Path, migrated: Path) -> None:
    """As a command meets it: the temporary server a `dpgnn` command starts
    (flows.server.start_temporary) on a home at the head; once it answers, its database is
    the template, and the next new home starts from a copy, without migrating."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PREFECT_", "DPGNN_"))}
    env |= {"DPGNN_HOME": str(migrated.parent), "DPGNN_CACHE": str(tmp_path / "cache"),
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "DO_NOT_TRACK": "1"}
    code = ("import json, os, tasks\n"
            "from flows import server\n"
            "server.start_temporary()\n"
            "print(json.dumps(server._temporary.env.get("
            f"{prefect_db.MIGRATE_ENV!r})))\n")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.split()[-1] == "null"  # no template yet: the server checked its schema
    template = prefect_db.template_path(env)
    assert template is not None and prefect_db.revision(template) == prefect_db.head()
    new = tmp_path / "h1" / "prefect"
    assert prefect_db.prepare(new, {**env, "PREFECT_HOME": str(new)}) == OFF
