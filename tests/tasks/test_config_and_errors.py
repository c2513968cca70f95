"""The project directory's one default, and the dpgnn errors the tasks raise for artifacts."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from dpgnn_core.errors import ArtifactError, DeviceError, DpgnnError
from dpgnn_core.home import DEFAULT_HOME, project_dir
from dpgnn_core.training.device import resolve_device


def test_project_dir_has_one_default(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import tasks.config
    from flows import server

    monkeypatch.setenv("DPGNN_HOME", str(tmp_path / "h"))
    assert project_dir() == tasks.config.project_dir() == (tmp_path / "h").resolve()
    assert server.state_file() == (tmp_path / "h").resolve() / "server.json"
    monkeypatch.delenv("DPGNN_HOME")
    monkeypatch.chdir(tmp_path)
    assert project_dir() == tasks.config.project_dir() == (tmp_path / DEFAULT_HOME).resolve()
    assert server.state_file().parent == (tmp_path / ".dpgnn").resolve()


def test_changed_artifact_is_a_dpgnn_error(tmp_path: Path) -> None:
    from tasks.evaluate import verify_files
    from tasks.train import load_keyed_dataset

    (tmp_path / "model.pt").write_bytes(b"x")
    with pytest.raises(ArtifactError, match="missing or changed") as e:
        verify_files(tmp_path, {"model.pt": {"sha256": "0" * 64}})
    assert isinstance(e.value, DpgnnError) and isinstance(e.value, RuntimeError)

    from dpgnn_core.data.store import write_dataset
    from dpgnn_core.data.synthetic import csbm

    write_dataset(csbm(num_nodes=50, seed=0), tmp_path / "ds")
    with pytest.raises(ArtifactError, match="holds another version than the one this run "
                       "started with"):
        load_keyed_dataset({"path": str(tmp_path / "ds"), "content_sha256": "0" * 64})


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_missing_cuda_is_a_dpgnn_error() -> None:
    with pytest.raises(DeviceError, match="no CUDA device"):
        resolve_device("cuda")


def test_run_context_sets_the_home_and_refuses_other_code(monkeypatch: pytest.MonkeyPatch,
                                                          tmp_path: Path) -> None:
    """A task given a flow's context writes into the flow's home whatever the worker's
    DPGNN_HOME, and refuses a worker whose code version or home differs (one line)."""
    import pickle

    from tasks.config import HOME_ID, WorkerMismatchError, code_version, home_id, in_context

    flow_home, worker_home = tmp_path / "flow", tmp_path / "worker"
    monkeypatch.setenv("DPGNN_HOME", str(flow_home))
    from tasks.config import run_context

    ctx = run_context()
    assert ctx == {"home": str(flow_home.resolve()), "home_id": home_id(flow_home),
                   "code_version": code_version()}
    assert home_id(flow_home) == ctx["home_id"] and len(ctx["home_id"]) == 32
    monkeypatch.setenv("DPGNN_HOME", str(worker_home))
    with in_context(ctx):
        assert project_dir() == flow_home.resolve()
    assert project_dir() == worker_home.resolve()
    with in_context(None):
        assert project_dir() == worker_home.resolve()
    for bad, words in [({**ctx, "code_version": "f" * 64}, ["code version", "ffffffffffff",
                                                            code_version()[:12]]),
                       ({**ctx, "home_id": "0" * 32}, [str(flow_home.resolve()), HOME_ID]),
                       ({**ctx, "home": str(worker_home)}, [str(worker_home)])]:
        with pytest.raises(WorkerMismatchError) as e:
            with in_context(bad):  # type: ignore[arg-type]
                pytest.fail("the body ran")
        msg = str(e.value)
        assert "\n" not in msg and all(w in msg for w in words), msg
        again = pickle.loads(pickle.dumps(e.value))  # crosses Dask as itself
        assert type(again) is WorkerMismatchError and str(again) == msg


def test_cache_key_takes_home_and_code_from_the_context(monkeypatch: pytest.MonkeyPatch,
                                                        tmp_path: Path) -> None:
    from tasks._cache import inputs_and_code
    from tasks.config import code_version

    key = inputs_and_code("train")
    monkeypatch.setenv("DPGNN_HOME", str(tmp_path / "a"))
    here = {"home": str(tmp_path / "a"), "home_id": "x", "code_version": code_version()}
    plain = key(None, {"spec": 1})
    assert key(None, {"spec": 1, "context": here}) == plain  # same home and code: same key
    monkeypatch.setenv("DPGNN_HOME", str(tmp_path / "b"))  # a worker's other environment
    assert key(None, {"spec": 1}) != plain
    assert key(None, {"spec": 1, "context": here}) == plain
    assert key(None, {"spec": 1, "context": {**here, "code_version": "0"}}) != plain


def test_a_process_that_imports_tasks_freezes_its_heap_at_exit(tmp_path: Path) -> None:
    """``import tasks`` registers :func:`gc.freeze` as an exit handler, once, ahead of the
    handlers registered later: a handler registered before it (which runs after it) sees
    the heap frozen, one registered after it (which runs before it) does not. A buffered
    file left open in a module and a logging file handler still reach the disk (the
    interpreter's module teardown and logging's exit handler close them; a file left in a
    reference cycle is lost at exit with or without the freeze: CPython does not finalise
    it)."""
    import os
    import subprocess
    import sys

    code = (
        "import atexit, gc, logging\n"
        "atexit.register(lambda: print('after', gc.get_freeze_count() > 0))\n"
        "import tasks\n"
        "atexit.register(lambda: print('before', gc.get_freeze_count() > 0))\n"
        "import dpgnn_core.freeze_at_exit  # imported by tasks: not registered again\n"
        "f = open('left-open.txt', 'w')\n"
        "f.write('kept')\n"
        "log = logging.getLogger('dpgnn-test')\n"
        "log.addHandler(logging.FileHandler('handler.log'))\n"
        "log.warning('logged')\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120, cwd=tmp_path,
                       env={**os.environ, "DPGNN_HOME": str(tmp_path / "home")})
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[:2] == ["before False", "after True"]
    assert (tmp_path / "left-open.txt").read_text() == "kept"
    assert (tmp_path / "handler.log").read_text() == "logged\n"
