"""A project home's Prefect database: a new home's copied from a migrated template, and a
server on a database already at the head revision started without migrating it.

Prefect's server migrates its SQLite database at every start (``alembic upgrade head``):
~13 s of CPU for a new database (every migration since Prefect 2.0 runs), ~1.2 s for one
already at the head (the migration scripts are still loaded and checked). Every new project
home paid the first (the README tour's first `dpgnn run`, issue 52 §7) and every command
that starts a temporary server the second. Prefect has no template of its own: this module
keeps one per installed Prefect version in dpgnn's cache folder (:func:`cache_dir`), saved
from the first database a server of that version migrated (:func:`after_start`, through
SQLite's online backup, so a database in use is copied consistently), and copied into each
new home (:func:`prepare`). A copy is what a migration of that version makes: the template's
``alembic_version`` is the head revision it was migrated to. Where a home's database is at
that revision (and it is the head of the installed Prefect's migration scripts), the
server starts with ``PREFECT_SERVER_DATABASE_MIGRATE_ON_START=false``:
Prefect's own setting, set only then and only when the user set none.

Only the project's own SQLite database is touched (``PREFECT_HOME/prefect.db``). Nothing
is done when ``PREFECT_API_URL`` is set (no server starts on the home), or when a database
URL or any other database setting is given in the environment or in a Prefect settings
file (``prefect.toml``, ``.env``, ``pyproject.toml``'s ``[tool.prefect]``, the home's
``profiles.toml``): the server may then use another database. ``DPGNN_PREFECT_TEMPLATE=off``
turns all of it off. The database holds no training data (flow and task run records); the
template holds none at all (it is saved only while no flow run is recorded)."""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import os
import re
import secrets
import sqlite3
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path

__all__ = ["CACHE_ENV", "MIGRATE_ENV", "SWITCH_ENV", "after_start", "cache_dir", "head",
           "prepare", "revision", "seed", "template_path"]

#: dpgnn's cache folder (else ``$XDG_CACHE_HOME/dpgnn``, else ``~/.cache/dpgnn``).
CACHE_ENV = "DPGNN_CACHE"
#: ``off`` (or ``0``) turns the template and the skipped migration off.
SWITCH_ENV = "DPGNN_PREFECT_TEMPLATE"
#: Prefect's setting (its ``PREFECT_API_...`` alias is read too).
MIGRATE_ENV = "PREFECT_SERVER_DATABASE_MIGRATE_ON_START"
_DB = "prefect.db"
#: Settings files in the working directory that may name another database.
_CWD_FILES = ("prefect.toml", ".env")


def cache_dir(env: Mapping[str, str] | None = None) -> Path:
    """``$DPGNN_CACHE``, else ``$XDG_CACHE_HOME/dpgnn``, else ``~/.cache/dpgnn``."""
    env = os.environ if env is None else env
    if env.get(CACHE_ENV):
        return Path(env[CACHE_ENV]).expanduser()
    base = env.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser() / "dpgnn"


def template_path(env: Mapping[str, str] | None = None) -> Path | None:
    """The template of the installed Prefect version; None when Prefect is not installed."""
    try:
        version = metadata.version("prefect")
    except metadata.PackageNotFoundError:
        return None
    return cache_dir(env) / f"prefect-{version}.db"


@functools.cache
def head() -> str | None:
    """The head revision of the installed Prefect's SQLite migrations, read from the newest
    migration script (their names start with the date; the script's ``revision = "..."``
    line), without importing Prefect or alembic; None when it cannot be read. Read once per
    process: the installed Prefect does not change under it."""
    spec = importlib.util.find_spec("prefect")
    if spec is None or spec.origin is None:
        return None
    versions = Path(spec.origin).parent / "server/database/_migrations/versions/sqlite"
    try:
        newest = max((p for p in versions.glob("[0-9]*.py")), key=lambda p: p.name)
        found = re.search(r'^revision\s*=\s*["\']([0-9a-f]+)["\']', newest.read_text(),
                          re.MULTILINE)
    except (OSError, ValueError):
        return None
    return found.group(1) if found else None


def revision(db: Path) -> str | None:
    """The alembic revision recorded in the SQLite database ``db`` (read only); None when
    it is missing, unreadable or holds no single revision."""
    if not db.is_file():
        return None
    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
        try:
            rows = con.execute("SELECT version_num FROM alembic_version").fetchall()
        finally:
            con.close()
    except sqlite3.Error:
        return None
    return str(rows[0][0]) if len(rows) == 1 and rows[0][0] else None


def _ours(prefect_home: Path, env: Mapping[str, str]) -> bool:
    """Whether a server started with ``env`` uses ``prefect_home``'s own SQLite database
    (no database setting anywhere Prefect reads one) and the switch is on."""
    if env.get(SWITCH_ENV, "").lower() in ("off", "0", "false", "no"):
        return False
    if env.get("PREFECT_API_URL"):  # flows go to that server: none starts on this home
        return False
    if any(k.startswith(("PREFECT_SERVER_DATABASE_", "PREFECT_API_DATABASE_"))
           and k not in (MIGRATE_ENV, "PREFECT_API_DATABASE_MIGRATE_ON_START") for k in env):
        return False
    if env.get("PREFECT_PROFILE"):
        return False
    cwd = Path.cwd()
    if any((cwd / f).exists() for f in _CWD_FILES):
        return False
    with contextlib.suppress(OSError, UnicodeDecodeError):
        if "[tool.prefect" in (cwd / "pyproject.toml").read_text():
            return False
    with contextlib.suppress(OSError, UnicodeDecodeError):
        if "DATABASE" in (prefect_home / "profiles.toml").read_text().upper():
            return False
    return Path(env.get("PREFECT_HOME", str(prefect_home))).expanduser() == prefect_home


def _copy_new(source: Path, target: Path) -> bool:
    """``source`` to ``target`` unless ``target`` exists (then False): written under a
    temporary name and linked into place, so a concurrent reader or seeder never sees half a
    database and two seeders never overwrite each other."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}")
    try:
        tmp.write_bytes(source.read_bytes())
        os.link(tmp, target)
    except FileExistsError:
        return False
    finally:
        tmp.unlink(missing_ok=True)
    return True


def _trusted(prefect_home: Path, env: Mapping[str, str]) -> tuple[Path, str] | None:
    """The template and its revision, when ``prefect_home``'s server would use its own
    SQLite database (:func:`_ours`) and the template is at the installed Prefect's head (a
    template that is not is never used); else None."""
    if not _ours(prefect_home, env):
        return None
    template = template_path(env)
    at = head()
    if template is None or at is None or revision(template) != at:
        return None
    return template, at


def seed(prefect_home: Path, env: Mapping[str, str] | None = None) -> bool:
    """Copy the template into ``prefect_home`` if it has no database yet (what every
    process does when it configures its home: :func:`tasks.config.configure_environment`);
    returns whether it did. Never raises."""
    env = os.environ if env is None else env
    db = prefect_home.expanduser() / _DB
    try:
        if db.exists():
            return False
        found = _trusted(prefect_home.expanduser(), env)
        return found is not None and _copy_new(found[0], db)
    except OSError:
        return False


def prepare(prefect_home: Path, env: Mapping[str, str] | None = None) -> dict[str, str]:
    """Before a Prefect server starts on ``prefect_home`` (``PREFECT_HOME``) with ``env``:
    copy the template into a home that has no database yet (:func:`seed`), and return the
    settings the server should start with (``{MIGRATE_ENV: "false"}`` when its database is
    at the template's revision and the user set no migration setting; else nothing). Never
    raises: any failure leaves Prefect to migrate as it always does."""
    env = os.environ if env is None else env
    prefect_home = prefect_home.expanduser()
    try:
        found = _trusted(prefect_home, env)
        if found is None:
            return {}
        template, at = found
        db = prefect_home / _DB
        if not db.exists():
            _copy_new(template, db)
        if revision(db) != at or any(
                k in env for k in (MIGRATE_ENV, "PREFECT_API_DATABASE_MIGRATE_ON_START")):
            return {}
        return {MIGRATE_ENV: "false"}
    except OSError:
        return {}


def after_start(prefect_home: Path, env: Mapping[str, str] | None = None) -> bool:
    """After a server started with ``env`` on ``prefect_home`` answers (its start-up
    migration done): save its database as the template when there is none yet. Returns
    whether it saved one. Never raises."""
    env = os.environ if env is None else env
    prefect_home = prefect_home.expanduser()
    try:
        template = template_path(env)
        db = prefect_home / _DB
        if (template is None or template.exists() or not _ours(prefect_home, env)
                or env.get(MIGRATE_ENV, env.get("PREFECT_API_DATABASE_MIGRATE_ON_START",
                                                "true")).lower() in ("false", "0")
                or head() is None or revision(db) != head()):
            return False
        template.parent.mkdir(parents=True, exist_ok=True)
        tmp = template.with_name(f".{template.name}.{os.getpid()}.{secrets.token_hex(4)}")
        try:
            src = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
            try:
                dst = sqlite3.connect(tmp)
                try:
                    src.backup(dst)
                    runs = dst.execute("SELECT count(*) FROM flow_run").fetchone()[0]
                    # One file (a copy of a WAL database stays WAL, and even a reader of
                    # one writes -shm/-wal files beside it); Prefect sets WAL on a copy.
                    dst.execute("PRAGMA journal_mode=DELETE")
                finally:
                    dst.close()
            finally:
                src.close()
            if runs:  # another process ran a flow on it already: not an empty database
                return False
            os.replace(tmp, template)
        finally:
            tmp.unlink(missing_ok=True)
        return True
    except (OSError, sqlite3.Error):
        return False
