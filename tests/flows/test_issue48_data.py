"""Issue 48 §5, the data rows: a truncated OGB file, node ids above 2^63, a 1e308 cell, an
invalid manifest and ``server start --port 0`` are one line naming what is wrong."""

from __future__ import annotations

import gzip
import json
import shutil
import warnings
from pathlib import Path
from typing import Any

import pytest

from dpgnn_core.data.loaders import load_ogbg, load_tabular
from dpgnn_core.data.store import write_dataset
from dpgnn_core.data.synthetic import csbm
from dpgnn_core.errors import DataError
from flows.cli import app
from tests.flows.clirunner import CliRunner

runner = CliRunner()
BIG = ["9223372036854775809", "9223372036854775810", "9223372036854775811"]


def _one_error(r: Any, code: int) -> str:
    lines = [line for line in r.output.splitlines() if line.strip()]
    assert r.exit_code == code and len(lines) == 1 and lines[0].startswith("error: "), \
        r.output
    return str(lines[0])


def _truncated_ogb(shared: Path, tmp_path: Path) -> Path:
    src = shared / "ogbg_molbace"
    dst = tmp_path / "ogb"
    shutil.copytree(src, dst)
    for p in dst.rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    data = (src / "raw" / "edge.csv.gz").read_bytes()
    (dst / "raw" / "edge.csv.gz").write_bytes(data[:len(data) // 2])
    return dst


def test_a_truncated_ogb_file_is_named(shared: Path, tmp_path: Path) -> None:
    """Was ``error: aborted`` (gzip's EOFError, read by the framework as Ctrl-D)."""
    src = _truncated_ogb(shared, tmp_path)
    with pytest.raises(DataError, match=r"truncated file .*edge\.csv\.gz"):
        load_ogbg(src)
    r = runner.invoke(app, ["ingest", "--format", "ogb", "--source", str(src), "--out",
                            str(tmp_path / "ds")])
    line = _one_error(r, 1)
    assert "truncated file" in line and "edge.csv.gz" in line, line


@pytest.mark.parametrize("relabel", [True, False])
def test_node_ids_above_2_63_are_named_not_called_repeats(tmp_path: Path,
                                                         relabel: bool) -> None:
    (tmp_path / "e.csv").write_text(f"src,dst\n{BIG[0]},{BIG[1]}\n{BIG[1]},{BIG[2]}\n")
    (tmp_path / "n.csv").write_text("node_id,f1,label\n" + "".join(
        f"{b},{i},{i % 2}\n" for i, b in enumerate(BIG)))
    with pytest.raises(DataError, match=r"node ids beyond 2\^63 - 1 were read as "
                                        "floating-point numbers") as e:
        load_tabular(tmp_path / "e.csv", tmp_path / "n.csv", relabel=relabel)
    assert "not unique" not in str(e.value) and e.value.field == "node_id"


def test_a_cell_beyond_float32_is_named_without_warnings(tmp_path: Path) -> None:
    (tmp_path / "e.csv").write_text("src,dst\n0,1\n1,2\n")
    (tmp_path / "n.csv").write_text("node_id,f1,label\n0,1,0\n1,1e308,1\n2,3,0\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # numpy's RuntimeWarning came before the error
        with pytest.raises(DataError, match=r"beyond float32's range .*at line 3") as e:
            load_tabular(tmp_path / "e.csv", tmp_path / "n.csv")
    assert e.value.value == 1e308 and e.value.field == "f1"


@pytest.fixture
def bad_manifest(tmp_path: Path) -> Path:
    folder = tmp_path / "data" / "ds"
    write_dataset(csbm(num_nodes=60, seed=1), folder)
    (folder / "manifest.json").write_text('{"schema')
    return folder


def test_invalid_manifest_json_is_named(bad_manifest: Path) -> None:
    r = runner.invoke(app, ["run", "dp-mlp", "--epsilon", "1", "--dataset", str(bad_manifest)])
    line = _one_error(r, 2)
    assert "manifest is not valid JSON" in line and f"{bad_manifest}/manifest.json" in line
    r = runner.invoke(app, ["datasets", str(bad_manifest.parent)])
    assert r.exit_code == 0
    assert "warning: manifest is not valid JSON" in r.stderr \
        and f"{bad_manifest}/manifest.json" in r.stderr, r.output
    r = runner.invoke(app, ["datasets", str(bad_manifest.parent), "--json"])
    assert r.stdout.strip() == "" and "a run refuses it" in r.stderr
    json.dumps(r.stderr)


@pytest.mark.parametrize("port", ["0", "65536"])
def test_server_start_refuses_a_port_outside_1_65535(port: str,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """``--port 0`` hung 122 s, then said "not healthy"."""
    import flows.server

    def never(**kw: object) -> None:
        raise AssertionError("a server started")

    monkeypatch.setattr(flows.server, "start", never)
    r = runner.invoke(app, ["server", "start", "--port", port])
    assert "Invalid value for '--port'" in _one_error(r, 2)


def test_truncated_gzip_table_of_a_csv_ingest(tmp_path: Path) -> None:
    """The tabular reader (pyarrow) names a truncated ``.csv.gz`` too."""
    raw = "src,dst\n" + "".join(f"{i},{i + 1}\n" for i in range(3000))
    data = gzip.compress(raw.encode())
    (tmp_path / "e.csv.gz").write_bytes(data[:len(data) // 2])
    (tmp_path / "n.csv").write_text("node_id,f1,label\n0,1,0\n1,2,1\n")
    with pytest.raises(DataError, match=r"e\.csv\.gz"):
        load_tabular(tmp_path / "e.csv.gz", tmp_path / "n.csv")


def test_a_budget_store_database_error_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """A read-only home: ``budget show`` raised a raw ``OperationalError`` (and logged its
    traceback to /tmp). The store's own read is replaced here: as root (the test machine)
    a read-only folder is still writable."""
    import sqlite3

    import dpgnn_core.budget

    def readonly(*a: object, **k: object) -> None:
        raise sqlite3.OperationalError("attempt to write a readonly database")

    monkeypatch.setattr(dpgnn_core.budget.BudgetStore, "budget_ids", readonly)
    r = runner.invoke(app, ["budget", "show"])
    line = _one_error(r, 2)
    assert "cannot use the budget store" in line and "budget.sqlite" in line \
        and "attempt to write a readonly database" in line, line
