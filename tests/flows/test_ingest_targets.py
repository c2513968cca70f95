"""What `dpgnn ingest` may replace and run code from, as a user meets it (issue 48 §1-§2):
a crafted Planetoid pickle does not run; --overwrite replaces only a dataset folder; one
ingest per folder at a time; an empty home is refused; a run keeps the version it began
with."""

from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from flows.cli import app
from tests.flows.clirunner import CliRunner, one_error_line

runner = CliRunner()
DPGNN = Path(sys.executable).parent / "dpgnn"

_one_error_line = one_error_line


def _ingest(out: Path, *extra: str) -> Any:
    return runner.invoke(app, ["ingest", "-f", "synthetic", "-o", "num_nodes=60",
                               "--out", str(out), *extra])


# --- §1: a crafted pickle in a Planetoid folder -------------------------------------------


class _System:
    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return os.system, (self.command,)


def test_crafted_planetoid_pickle_is_refused_and_never_runs(tmp_path: Path) -> None:
    from tests.dpgnn_core.data.test_planetoid_gaps import N_ALLX, write_planetoid

    src, marker, out = tmp_path / "raw", tmp_path / "PWNED", tmp_path / "ds"
    write_planetoid(src, np.arange(N_ALLX, N_ALLX + 40), name="citeseer")
    (src / "ind.citeseer.x").write_bytes(pickle.dumps(_System(f"touch {marker}"), protocol=2))
    r = runner.invoke(app, ["ingest", "--format", "planetoid", "--source", str(src),
                            "--out", str(out)])
    assert not marker.exists(), "the crafted pickle ran"
    assert r.exit_code == 1, r.output
    line = _one_error_line(r.output)
    assert str(src / "ind.citeseer.x") in line and f"{os.system.__module__}.system" in line
    assert not out.exists()


# --- §2: --overwrite replaces only a dataset folder ---------------------------------------


def _thesis(folder: Path) -> dict[str, bytes]:
    folder.mkdir()
    (folder / "thesis.tex").write_text("\\chapter{Results}\n")
    (folder / "figures").mkdir()
    (folder / "figures" / "a.pdf").write_bytes(b"%PDF")
    return _snapshot(folder)


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("case", ["file", "thesis", "dataset-plus-notes", "symlink",
                                  "bad-manifest"])
def test_overwrite_refuses_what_is_not_a_dataset_folder(tmp_path: Path, case: str) -> None:
    out = tmp_path / "out"
    needle = {"file": "is a file", "thesis": "thesis.tex", "dataset-plus-notes": "notes.txt",
              "symlink": "symbolic link", "bad-manifest": "manifest.json"}[case]
    guarded = out
    if case == "file":
        out.write_text("my only copy\n")
    elif case == "thesis":
        _thesis(out)
    elif case == "dataset-plus-notes":
        assert _ingest(out).exit_code == 0
        (out / "notes.txt").write_text("keep me\n")
    elif case == "symlink":
        guarded = tmp_path / "real"
        assert _ingest(guarded).exit_code == 0
        out.symlink_to(guarded)
    else:
        out.mkdir()
        (out / "manifest.json").write_text('{"my": "own manifest"}')
    before = out.read_bytes() if case == "file" else _snapshot(guarded)
    r = _ingest(out, "--overwrite")
    assert r.exit_code == 2, r.output
    line = _one_error_line(r.output)
    assert str(out) in line and needle in line and "left as it is" in line, line
    assert (out.read_bytes() if case == "file" else _snapshot(guarded)) == before
    assert (case == "symlink") == out.is_symlink()
    leftovers = [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]
    assert leftovers == [], leftovers


@pytest.mark.parametrize("case", ["dataset", "empty-folder"])
def test_overwrite_replaces_a_dataset_folder_or_an_empty_one(tmp_path: Path,
                                                             case: str) -> None:
    out = tmp_path / "out"
    if case == "dataset":
        assert _ingest(out).exit_code == 0
    else:
        out.mkdir()
    r = _ingest(out, "--overwrite", "--seed", "3", "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["source"]["options"]["seed"] == 3


# --- §2: one ingest per folder ------------------------------------------------------------


def _wait_for_holder(lock: Path, proc: subprocess.Popen[str]) -> int:
    """The pid the running ingest wrote into its lock file (it holds the lock)."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            return int(json.loads(lock.read_text())["pid"])
        except (OSError, ValueError, KeyError):
            time.sleep(0.01)
    raise AssertionError(f"no ingest lock at {lock} while the first ingest ran "
                         f"(exit {proc.poll()})")


@pytest.mark.slow
def test_a_second_ingest_of_a_folder_is_refused_at_once_naming_the_first(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first ingest (a real `dpgnn ingest`, paused while it loads) holds the folder;
    a second, with or without --overwrite, is refused before it loads anything, naming
    the first; the first then completes and its dataset is the folder's."""
    import dpgnn_core.data.ingest as core

    out = tmp_path / "ds"
    first = subprocess.Popen([DPGNN, "ingest", "-f", "synthetic", "--out", str(out),
                              "-o", "num_nodes=200000", "--seed", "1"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    loads: list[object] = []
    monkeypatch.setattr(core, "load_from_spec", lambda spec: loads.append(spec))
    try:
        pid = _wait_for_holder(tmp_path / ".ds.ingest.lock", first)
        os.kill(first.pid, signal.SIGSTOP)  # still loading: it holds the lock meanwhile
        for extra in ([], ["--overwrite"]):
            start = time.monotonic()
            r = _ingest(out, "--seed", "2", *extra)
            assert r.exit_code == 1, r.output
            line = _one_error_line(r.output)
            assert f"{out} is being written by another process (pid {pid}" in line, line
            assert "dpgnn ingest" in line and time.monotonic() - start < 10
        assert loads == []  # refused before loading
    finally:
        os.kill(first.pid, signal.SIGCONT)
    _, se = first.communicate(timeout=300)
    assert first.returncode == 0, se
    assert json.loads((out / "manifest.json").read_text())["source"]["options"]["seed"] == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds"]  # no lock file left


# --- §2: an empty home --------------------------------------------------------------------


@pytest.mark.parametrize("how", ["env", "option", "blank"])
def test_an_empty_home_is_refused_in_one_line(tmp_path: Path, how: str,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # where an empty home used to put everything
    args = ["budget", "show"]
    if how == "env":
        monkeypatch.setenv("DPGNN_HOME", "")
    else:
        monkeypatch.delenv("DPGNN_HOME", raising=False)
        args = ["--home", "" if how == "option" else "  ", *args]
    r = runner.invoke(app, args)
    assert r.exit_code == 2, r.output
    line = _one_error_line(r.output)
    assert ("DPGNN_HOME" if how == "env" else "--home") in line and "empty" in line, line
    assert list(tmp_path.iterdir()) == []


def test_project_dir_refuses_an_empty_home(monkeypatch: pytest.MonkeyPatch) -> None:
    from dpgnn_core.errors import DpgnnError
    from dpgnn_core.home import project_dir

    monkeypatch.setenv("DPGNN_HOME", "")
    with pytest.raises(DpgnnError, match=r"\$DPGNN_HOME is set but empty"):
        project_dir()


# --- §2: a run keeps the version it started with ------------------------------------------


@pytest.mark.slow
def test_a_run_whose_dataset_is_reingested_meanwhile_reports_nothing(
        tmp_path: Path, dpgnn_here: Callable[..., Any],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """`ingest --overwrite` of the dataset after the run trained on it and before it
    evaluates: the run does not evaluate the new split under the old name; it fails in one
    line naming the folder and both versions."""
    import tasks.evaluate
    from dpgnn_core.data.ingest import ingest
    from dpgnn_core.specs import IngestSpec

    ds = tmp_path / "ds"
    assert _ingest(ds).exit_code == 0
    old = json.loads((ds / "manifest.json").read_text())["content_sha256"]
    evaluate = tasks.evaluate._evaluate
    new: list[str] = []

    def reingest_then_evaluate(*args: Any, **kwargs: Any) -> Any:
        spec = IngestSpec(format="synthetic", options={"num_nodes": 60, "seed": 9})
        new.append(ingest(spec, ds, overwrite=True)["content_sha256"])
        return evaluate(*args, **kwargs)

    monkeypatch.setattr(tasks.evaluate, "_evaluate", reingest_then_evaluate)
    r = dpgnn_here(tmp_path / "home", ["run", "mlp", "--dataset", str(ds), "--epochs", "2",
                                       "--json"])
    assert new and new[0] != old
    assert r.exit_code == 1, r.output
    line = _one_error_line(r.stderr)
    assert str(ds) in line and old[:12] in line and new[0][:12] in line, line
    assert "accuracy" not in r.stdout
