"""Shared fixtures. Real datasets come from ../shared/datasets (skipped when absent)."""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

# One project directory per test process (each pytest-xdist worker and the controller), set
# before `tasks` (and so Prefect) is imported; removed when the session ends.
_HOME = Path(tempfile.mkdtemp(prefix="dpgnn-test-home-"))
_OWNER = os.getpid()
os.environ["DPGNN_HOME"] = str(_HOME)
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.pop("PREFECT_API_URL", None)
# One compute thread per test process (set before torch is imported; child processes inherit
# it): `make test` runs two xdist workers on two cores, and torch's default of one OpenMP
# thread per core in each, next to Prefect servers and Dask workers, oversubscribed the
# cores: a 10 s Cora baseline test took 200 s in the suite.
for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
# No warm runner (flows.warm) beside the servers the tests start with `dpgnn server start`:
# its imports cost ~7 s of CPU each, for tests about something else. The tests of the
# runner (tests/flows/test_warm.py, test_servers.py's server test) ask for one.
os.environ.setdefault("DPGNN_WARM", "0")
# DGL (the optional extra) otherwise writes ~/.dgl/config.json when a test imports it first.
os.environ.setdefault("DGLBACKEND", "pytorch")
# Prefect servers started by the tests (and by their `dpgnn` children) do not register the
# block types at start: the template database they start from has them (``_BUILD``). A
# server on a home not seeded from it (the tests of a first migration) then has none; no
# part of dpgnn saves or reads a block on the server (results go to a local path).
os.environ.setdefault("PREFECT_API_BLOCKS_REGISTER_ON_START", "false")

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared" / "datasets"

# Prefect's SQLite database, migrated once per session (~18 s on 2 busy cores) into a template
# folder that the controller process creates; each process's home, and every fresh home a test
# asks for (``fresh_home``), starts from a copy. The folder travels to pytest-xdist workers
# (and child pytests that pass it on) in this variable; the process that created it removes it.
# `make test` creates it for both of its pytest sessions (the workers' and the one of the
# tests that wait) and removes it: the first session to claim it (``_claim_build``) builds
# it, once, and the other waits for it.
PREFECT_TEMPLATE_ENV = "DPGNN_TEST_PREFECT_TEMPLATE"
_TEMPLATE_OWNER = PREFECT_TEMPLATE_ENV not in os.environ
if _TEMPLATE_OWNER:
    os.environ[PREFECT_TEMPLATE_ENV] = tempfile.mkdtemp(prefix="dpgnn-test-prefect-")
_TEMPLATE = Path(os.environ[PREFECT_TEMPLATE_ENV])
# dpgnn's own cache (tasks.prefect_db: the Prefect database template of new homes) is the
# session's, never the user's ~/.cache/dpgnn; the session's migrated database becomes its
# template once built (``_build_prefect_template``), as a first server would make it.
os.environ["DPGNN_CACHE"] = str(_TEMPLATE / "cache")
# The template also holds the block types a server registers when it starts (what Prefect's
# own start-up does, ``add_block_types``), so that servers on a copy skip that step
# (PREFECT_API_BLOCKS_REGISTER_ON_START above): ~2 s of each server's ~10 s of CPU, and the
# suite starts ~16 servers. What the copy holds is then what a server that registered them
# itself would hold.
_BUILD = ("import asyncio\n"
          "from prefect.server.database import provide_database_interface\n"
          "from prefect.server.models.block_registration import "
          "run_block_auto_registration\n"
          "async def build():\n"
          "    db = provide_database_interface()\n"
          "    await db.create_db()\n"
          "    session = await db.session()\n"
          "    async with session:\n"
          "        await run_block_auto_registration(session=session)\n"
          "asyncio.run(build())\n")
_builder: subprocess.Popen[bytes] | None = None


@pytest.fixture(scope="session")
def shared() -> Path:
    """The real datasets folder; skips the test when it is absent."""
    if not SHARED.is_dir():
        pytest.skip(f"real datasets not found at {SHARED} (clone with ../shared beside it)")
    return SHARED


@pytest.fixture(autouse=True)
def _cli_environment() -> Iterator[None]:
    """The CLI's global options write the environment (``--home`` sets DPGNN_HOME,
    ``--verbose`` DPGNN_VERBOSE) of the process that runs it: restore both after every
    test, so an in-process CLI call cannot leak into the next test or the subprocesses it
    starts."""
    saved = {k: os.environ.get(k) for k in ("DPGNN_HOME", "DPGNN_VERBOSE")}
    yield
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture(scope="session")
def home() -> Path:
    return _HOME


def _build_prefect_template() -> None:
    """Migrate a new Prefect database in the template folder (a child process: Prefect reads
    its home from the environment); mark the folder ``ready`` or ``failed``."""
    global _builder
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env |= {"PREFECT_HOME": str(_TEMPLATE), "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
            "PREFECT_LOGGING_LEVEL": "WARNING"}
    try:
        _builder = subprocess.Popen([sys.executable, "-c", _BUILD], env=env,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        _, err = _builder.communicate(timeout=600)
        ok = _builder.returncode == 0 and (_TEMPLATE / "prefect.db").is_file()
        if ok:
            from tasks import prefect_db

            template = prefect_db.template_path()
            if template is not None:
                _copy_atomically(_TEMPLATE / "prefect.db", template)
        (_TEMPLATE / ("ready" if ok else "failed")).write_bytes(err[-2000:])
    except (OSError, subprocess.SubprocessError) as e:
        with contextlib.suppress(OSError):
            (_TEMPLATE / "failed").write_text(str(e))


def _claim_build() -> bool:
    """Whether this process builds the template: the first to create its ``building`` mark."""
    try:
        os.close(os.open(_TEMPLATE / "building", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


def pytest_configure(config: pytest.Config) -> None:
    # Started while the workers import and collect, by the first process to claim the folder
    # (an xdist controller configures before its workers start).
    if not config.option.collectonly and _claim_build():
        threading.Thread(target=_build_prefect_template, daemon=True).start()


def seed_prefect(prefect_home: Path, timeout: float = 600) -> bool:
    """Copy the session's migrated Prefect database into ``prefect_home`` (a project home's
    ``prefect`` folder) unless it has a database already. Waits for the template; returns
    False (Prefect then migrates its own) when the template could not be built."""
    target = prefect_home / "prefect.db"
    if target.exists():
        return False
    deadline = time.monotonic() + timeout
    while not (_TEMPLATE / "ready").exists():
        if (_TEMPLATE / "failed").exists() or time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    _copy_atomically(_TEMPLATE / "prefect.db", target)
    return True


def _copy_atomically(source: Path, target: Path) -> None:
    """``source`` to ``target`` (its folder created) through a temporary name beside it, so
    that a process opening ``target`` never sees half a database."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}")
    shutil.copyfile(source, tmp)
    os.replace(tmp, target)


def _is_slow(item: pytest.Item) -> bool:
    return any(item.get_closest_marker(m) is not None for m in ("slow", "integration"))


def _module(item: pytest.Item) -> str:
    return item.nodeid.split("::", 1)[0]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist, the slow tests first, dealt among the workers a module at a time.

    Why: `make test`'s ``--dist worksteal`` gives each of the N workers one contiguous
    block of the collection (``len // N`` in turn), and an idle worker steals the *end* of
    another's block. In collection order the longest tests (sweeps on clusters, killed
    workers, servers: 30-60 s each) came last, in tests/flows, so the run ended with one
    worker busy for about a minute while the others had nothing left. Here each block
    starts with its share of the ``slow`` and ``integration`` tests and its fast tests fill
    the rest: the long tests run first and the short ones, which can be stolen, end the
    run. A module's slow tests stay together, in one block and one after the other (those
    of modules with tests that start servers first), so that a module-scoped fixture (a
    Dask cluster, a server) is set up once: dealt one test at a time, the two tests of
    test_distributed_pma.py each started its own LocalCluster on another worker (~10 s
    each). Modules go to the block with the fewest slow tests so far, the largest first.
    Only the order changes: every worker collects the same items, and this ordering is the
    same in each (it depends only on the collection and the worker count), as xdist
    requires. Without xdist (a plain ``pytest``, a nested one) the order is the
    collection's."""
    workers = int(getattr(config, "workerinput", {}).get("workercount", 1))
    if workers <= 1 or len(items) < workers:
        return
    groups: dict[str, list[pytest.Item]] = {}
    fast: list[pytest.Item] = []
    for i in items:
        if _is_slow(i):
            groups.setdefault(_module(i), []).append(i)
        else:
            fast.append(i)
    dealt: list[list[pytest.Item]] = [[] for _ in range(workers)]
    for group in sorted(groups.values(), key=len, reverse=True):  # stable: ties in order
        min(dealt, key=len).extend(group)
    for block in dealt:  # modules that start servers first; each module kept together
        order = {m: k for k, m in enumerate(dict.fromkeys(map(_module, block)))}
        serves = {_module(i) for i in block if i.get_closest_marker("integration")}
        block.sort(key=lambda i: (_module(i) not in serves, order[_module(i)]))
    order_: list[pytest.Item] = []
    left = len(items)
    for k in range(workers):
        size = left // (workers - k)  # what xdist's worksteal gives the k-th worker
        take = max(0, size - len(dealt[k]))
        order_ += dealt[k] + fast[:take]
        del fast[:take]
        left -= size
    order_ += fast
    items[:] = order_


_seeded_home = False
#: Where tests start Prefect (in this process or in ``dpgnn`` children that share its home).
_PREFECT_TESTS = tuple(REPO / "tests" / d for d in ("flows", "deployments", "tasks"))


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Before the first test that may start Prefect sets up its fixtures (after the skip
    marks, so a skipped test waits for nothing): this process's Prefect database, and its
    home's MLflow store (which the flows run in this process log to), from the templates.
    Each worker otherwise ran MLflow's migrations on its first logged run (~2.5 s of CPU;
    no test here is about the creation of this home's store: those use their own homes)."""
    global _seeded_home
    starts_prefect = (any(item.path.is_relative_to(d) for d in _PREFECT_TESTS)
                      or item.get_closest_marker("integration") is not None)
    if _seeded_home or not starts_prefect:
        return
    _seeded_home = True
    seed_prefect(Path(os.environ.get("PREFECT_HOME", _HOME / "prefect")).expanduser())
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        seed_mlflow(_HOME)


# MLflow's SQLite tracking store (``HOME/mlflow.db``), created once per session on first use
# (``seed_mlflow``) in the same template folder: a ``dpgnn`` command that finds none creates
# it and runs MLflow's migrations, ~2.5 s of CPU of the ~4 s its first MLflow call costs.
_BUILD_MLFLOW = ("import sys\n"
                 "from mlflow.tracking import MlflowClient\n"
                 "MlflowClient(tracking_uri=f'sqlite:///{sys.argv[1]}').search_experiments()\n")


def _mlflow_template() -> Path | None:
    """The session's migrated MLflow database, created by the first process that asks (the
    others wait on a lock); None when it could not be created."""
    import fcntl

    template = _TEMPLATE / "mlflow.db"
    with open(_TEMPLATE / "mlflow.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not template.exists():
            tmp = _TEMPLATE / f".mlflow.db.{os.getpid()}"
            env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
            r = subprocess.run([sys.executable, "-c", _BUILD_MLFLOW, str(tmp)], env=env,
                               cwd=_TEMPLATE, capture_output=True, timeout=600)
            if r.returncode != 0 or not tmp.is_file():
                return None
            os.replace(tmp, template)
    return template


def seed_mlflow(home: Path) -> bool:
    """Copy the session's migrated MLflow database to ``home / "mlflow.db"`` (the project
    home's default tracking store) unless it has one; what a ``dpgnn`` command then logs
    there is as on a fresh home. Not for tests about the store's creation. Returns False
    (MLflow then creates its own) when the template could not be built."""
    target = home / "mlflow.db"
    if target.exists():
        return False
    template = _mlflow_template()
    if template is None:
        return False
    _copy_atomically(template, target)
    return True


@pytest.fixture(scope="session")
def seeded_mlflow() -> Callable[[Path], bool]:
    """:func:`seed_mlflow`: ``seeded_mlflow(home)`` before a ``dpgnn`` command that logs to
    MLflow in the project ``home``."""
    return seed_mlflow


@pytest.fixture
def fresh_home(tmp_path: Path) -> Path:
    """``tmp_path / "home"``: a new project home, its Prefect database already migrated (a
    copy of the session's template) so that a server or ``dpgnn`` process started on it
    skips the migration."""
    seed_prefect(tmp_path / "home" / "prefect")
    return tmp_path / "home"


@pytest.fixture(scope="session")
def seeded_prefect() -> Callable[[Path], bool]:
    """:func:`seed_prefect`, for fixtures wider than a test (``seeded_prefect(home /
    "prefect")``)."""
    return seed_prefect


@pytest.fixture
def prefect_api_url() -> str:
    """The API URL of this test process's own Prefect server, for the ``dpgnn`` commands
    (and the Dask workers of their sweeps) that a test starts as subprocesses: pass it as
    ``PREFECT_API_URL`` in their environment.

    Why: a ``dpgnn`` command without ``PREFECT_API_URL`` starts Prefect's temporary server
    (and so does every Dask worker of a sweep, and one on a fresh home migrates its database
    first): 5-10 s of CPU each, ~25 times in the suite, most of the process tests' cost.
    Pointed at this one they start none, as a user's command with ``PREFECT_API_URL`` set
    does (the CLI leaves a server it did not start alone). The tests that are about the
    temporary server itself (Ctrl-C, a killed server, ``kill -9`` of a sweep, a full disk
    under the home) keep their own, and so do the ``dpgnn server`` tests.

    The server is the one Prefect runs for flows in this process (``SubprocessASGIServer``,
    its database under this process's Prefect home, seeded from the template), started on
    first use, so it costs a worker one start-up at most. It is this process's child: the
    session's clean-up and Prefect's exit handler stop it. Nothing of a test's isolation
    depends on it: a command's results, cache records, budget and runs live in its own
    ``--home``; a test that reads flow runs from it picks its own by id or by the run
    records in its own home (test_recover). Restarted if it has died."""
    import tasks  # noqa: F401, I001 - first: Prefect's home (this process's)
    from prefect.server.api.server import SubprocessASGIServer

    server = SubprocessASGIServer()
    proc = server.server_process
    if proc is not None and proc.poll() is not None:  # it died: start another
        server.stop()
        server = SubprocessASGIServer()
    if not server.running:
        seed_prefect(Path(os.environ["PREFECT_HOME"]).expanduser())
        server.start()
    return server.api_url


def _uses_home(environ: dict[str, str], home: Path) -> bool:
    return any(environ.get(k, "").startswith(str(home))
               for k in ("DPGNN_HOME", "PREFECT_HOME", "PREFECT_LOCAL_STORAGE_PATH"))


def _is_resource_tracker(proc: Any) -> bool:
    """Whether ``proc`` (psutil) is multiprocessing's resource tracker. It ignores SIGTERM
    by design and ends by itself when the process that started it (this one) exits, which
    closes its pipe; terminated here, it held every worker's clean-up for the whole
    10 s grace period at the end of `make test`."""
    return any("multiprocessing.resource_tracker" in a for a in proc.cmdline())


def _stop_processes_under(home: Path) -> None:
    """Stop what this process started that still works in ``home``: a ``dpgnn server``
    recorded there, Prefect's ephemeral server (its database is under ``home``), and any
    other process descending from this one whose environment points into ``home``."""
    if (home / "server.json").is_file():
        from flows import server

        with contextlib.suppress(Exception):
            server.stop(home)
    ephemeral = sys.modules.get("prefect.server.api.server")
    if ephemeral is not None:
        for instance in list(ephemeral.SubprocessASGIServer._instances.values()):
            with contextlib.suppress(Exception):
                instance.stop()
    try:
        import psutil
    except ImportError:  # pragma: no cover - psutil comes with torch-geometric
        return
    with contextlib.suppress(psutil.Error):
        left = []
        for child in psutil.Process().children(recursive=True):
            with contextlib.suppress(psutil.Error):
                if _uses_home(child.environ(), home) and not _is_resource_tracker(child):
                    child.terminate()
                    left.append(child)
        _, alive = psutil.wait_procs(left, timeout=10)
        for child in alive:
            with contextlib.suppress(psutil.Error):
                child.kill()


def _remove_home() -> None:
    if os.getpid() != _OWNER:  # a forked child exiting: the home is its parent's
        return
    _stop_processes_under(_HOME)
    shutil.rmtree(_HOME, ignore_errors=True)
    if _builder is not None and _builder.poll() is None:
        _builder.kill()
        _builder.wait()
    if _TEMPLATE_OWNER:
        shutil.rmtree(_TEMPLATE, ignore_errors=True)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    _remove_home()


# Registered before Prefect is imported, so it runs after Prefect's own exit handlers (which
# stop its ephemeral server): removes what anything wrote into the home after the session.
atexit.register(_remove_home)
