"""`dpgnn ingest` on faulty input and hostile targets: one-line errors, exit codes, nothing
lost or left behind."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from flows.cli import app
from tests.flows.clirunner import CliRunner, one_error_line

runner = CliRunner()
DPGNN = Path(sys.executable).parent / "dpgnn"

_one_error_line = one_error_line


def _tables(tmp_path: Path, edges: str) -> tuple[Path, Path]:
    e, n = tmp_path / "edges.csv", tmp_path / "nodes.csv"
    e.write_text(edges)
    n.write_text("id,label,f\nalice,0,1\nbob,1,2\ncarol,0,3\ndave,1,4\n")
    return e, n


# --- fault 1 ----------------------------------------------------------------------------


def test_ingest_refuses_empty_edge_file_unless_allowed(tmp_path: Path) -> None:
    e, n = _tables(tmp_path, "src,dst\n")
    args = ["ingest", "-f", "csv", "--source", str(e), "--nodes", str(n), "--id-col", "id",
            "--relabel", "--out", str(tmp_path / "out")]
    r = runner.invoke(app, args)
    assert r.exit_code == 1
    line = _one_error_line(r.output)
    assert "no edges" in line and str(e) in line and "--allow-no-edges" in line
    assert not (tmp_path / "out").exists()

    r = runner.invoke(app, [*args, "--allow-no-edges", "--json"])
    assert r.exit_code == 0, r.output
    manifest = json.loads(r.stdout)
    assert manifest["num_edges"] == 0
    assert any("no edges" in w for w in manifest["cleaning"]["warnings"])
    assert "warning:" in r.stderr and "no edges" in r.stderr


# --- fault 2 ----------------------------------------------------------------------------


def test_concurrent_ingests_to_one_folder_one_wins(tmp_path: Path) -> None:
    out = tmp_path / "ds"
    procs = [subprocess.Popen([DPGNN, "ingest", "-f", "synthetic", "--out", str(out),
                               "-o", "num_nodes=20000", "--seed", str(i)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i in range(3)]
    results = [(p.wait(120), *p.communicate()) for p in procs]
    winners = [i for i, (rc, _, _) in enumerate(results) if rc == 0]
    assert len(winners) == 1, results
    for i, (rc, so, se) in enumerate(results):
        if i in winners:
            assert so.startswith(f"wrote {out}")
            continue
        assert rc != 0 and "wrote" not in so
        line = _one_error_line(se)
        assert ("is being written by another process (pid" in line
                or "already exists" in line), line
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["source"]["options"]["seed"] == winners[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds"]
    check = runner.invoke(app, ["datasets", str(out), "--json"])
    assert check.exit_code == 0, check.output


# --- fault 4 ----------------------------------------------------------------------------


@pytest.mark.parametrize(("args", "needle"), [
    (["-f", "synthetic", "-o", "num_nodes=abc"],
     "error: --option num_nodes='abc': Input should be a valid integer"),
    (["-f", "synthetic", "-o", "avg_degree=-1"], "avg_degree=-1"),
    (["-f", "synthetic", "-o", "colour=red"], "unknown option 'colour'"),
    (["-f", "tu", "--source", "SRC", "-o", "seed=1.5"], "seed=1.5"),
    (["-f", "facebook100", "--source", "SRC", "--min-class-size", "0"], "min_class_size=0"),
])
def test_ingest_bad_options_one_line(tmp_path: Path, args: list[str], needle: str) -> None:
    args = [a.replace("SRC", str(tmp_path)) for a in args]
    r = runner.invoke(app, ["ingest", *args, "--out", str(tmp_path / "out")])
    assert r.exit_code == 1
    assert needle in _one_error_line(r.output)
    assert "'>=' not supported" not in r.output


# --- fault 5 ----------------------------------------------------------------------------


@pytest.mark.parametrize(("edges", "needles"), [
    ("src,dst\nalice,bob\nbob,carol\nalice,bob\n", ["alice -> bob", "line 4"]),
    ("src,dst\nalice,bob\ncarol,carol\n", ["'carol'", "line 3"]),
])
def test_ingest_edge_errors_show_user_ids(tmp_path: Path, edges: str,
                                          needles: list[str]) -> None:
    e, n = _tables(tmp_path, edges)
    r = runner.invoke(app, ["ingest", "-f", "csv", "--source", str(e), "--nodes", str(n),
                            "--id-col", "id", "--relabel", "--out", str(tmp_path / "out")])
    assert r.exit_code == 1
    line = _one_error_line(r.output)
    for needle in needles:
        assert needle in line, line


# --- fault 6 ----------------------------------------------------------------------------


def _enospc(*_a: object, **_k: object) -> None:
    raise OSError(errno.ENOSPC, "No space left on device")


def _erofs(*_a: object, **_k: object) -> None:
    raise OSError(errno.EROFS, "Read-only file system")


@pytest.mark.parametrize("case", ["under-a-file", "read-only-folder", "disk-full",
                                  "read-only-fs"])
def test_ingest_unwritable_target_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           case: str) -> None:
    reason = {"under-a-file": "Not a directory", "read-only-folder": "Permission denied",
              "disk-full": "No space left on device", "read-only-fs": "Read-only file system"}
    out = tmp_path / "ds"
    if case == "under-a-file":
        (tmp_path / "afile").write_text("")
        out = tmp_path / "afile" / "sub" / "ds"
    elif case == "read-only-folder":
        if os.geteuid() == 0:
            pytest.skip("root ignores permissions (the under-a-file case covers root)")
        (tmp_path / "ro").mkdir(mode=0o555)
        out = tmp_path / "ro" / "ds"
    else:
        import pyarrow.parquet as pq
        monkeypatch.setattr(pq, "write_table", _enospc if case == "disk-full" else _erofs)
    r = runner.invoke(app, ["ingest", "-f", "synthetic", "-o", "num_nodes=50", "--out", str(out)])
    assert r.exit_code == 1, r.output
    line = _one_error_line(r.output)
    assert line.startswith(f"error: cannot write {out}: ") and reason[case] in line, line
    assert not out.exists()
    left = [p.name for p in (tmp_path.rglob(".*") if tmp_path.is_dir() else [])]
    assert not [n for n in left if ".tmp-" in n or n.endswith(".lock")], left


def test_ingest_with_home_at_a_regular_file_one_line(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    home.write_text("")
    monkeypatch.setenv("DPGNN_HOME", str(home))  # in process: the home is read per command
    r = runner.invoke(app, ["ingest", "-f", "synthetic", "-o", "num_nodes=50",
                            "--out", str(home / "ds")])
    assert r.exit_code == 1
    assert "error:" not in r.stdout
    line = _one_error_line(r.stderr)
    assert line.startswith(f"error: cannot write {home / 'ds'}: Not a directory")
