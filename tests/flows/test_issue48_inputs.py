"""Issue 48 §5, what the fault trial (benchmarks/RESULTS-history.md, tenth session) still
found raw: each is one ``error:`` line naming the option, file or value, before any work."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from flows.cli import app
from tests.flows.clirunner import CliRunner, one_error_line

runner = CliRunner()


@pytest.mark.parametrize(("args", "says"), [
    # numpy RuntimeWarnings, then "ValueError: cannot convert float NaN to integer"
    (["epsilon", "--noise-multiplier", "inf"], "--noise-multiplier inf: must be a finite"),
    (["epsilon", "--noise-multiplier", "1", "--steps", "0"], "--steps 0: must be an integer"),
    (["epsilon", "--noise-multiplier", "1", "--delta", "nan"], "--delta nan: must be in"),
    (["calibrate", "--epsilon", "inf"], "--epsilon inf: must be a finite number > 0"),
    (["calibrate", "--epsilon", "1", "--steps", "-1"], "--steps -1: must be an integer"),
])
def test_privacy_options_are_named(args: list[str], says: str) -> None:
    r = runner.invoke(app, ["privacy", args[0], "--mechanism", "gaussian", *args[1:]])
    line = one_error_line(r.output)
    assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 1, r.output
    assert line.startswith(f"error: {says}"), line


@pytest.mark.parametrize(("options", "names"), [
    (["num_nodes=1000000000000"], "--option num_nodes=1000000000000: generating a graph"),
    (["num_nodes=300", "avg_degree=1e12"], "--option avg_degree=1000000000000.0: "),
    (["kind=\"er_graphs\"", "num_graphs=1000000000000"], "--option num_graphs="),
])
def test_a_synthetic_graph_beyond_memory_is_refused_up_front(
        tmp_path: Path, options: list[str], names: str) -> None:
    """Was a raw MemoryError (num_nodes) or ran without end (avg_degree)."""
    args = [a for o in options for a in ("-o", o)]
    r = runner.invoke(app, ["--home", str(tmp_path / "home"), "ingest", "--format",
                            "synthetic", *args, "--out", str(tmp_path / "x")])
    line = one_error_line(r.output)
    assert r.exit_code == 1 and line.startswith(f"error: {names}"), r.output
    assert "GiB of memory, more than this machine's" in line
    assert not (tmp_path / "x").exists()


_EDGES = "src,dst\n" + "".join(f"{i},{(i + 1) % 30}\n" for i in range(30))


def _nodes(label: Any = lambda i: str(i % 2)) -> str:
    return "id,label,f1\n" + "".join(f"{i},{label(i)},{i * 0.1:.2f}\n" for i in range(30))


@pytest.mark.parametrize(("edges", "nodes", "says"), [
    # was "'utf-8' codec can't decode byte 0x8b in position 1" (no file named)
    (gzip.compress(_EDGES.encode()), _nodes().encode(),
     "error: gzip-compressed data in a file named edges.csv: name it edges.csv.gz"),
    # was a parse error quoting the raw bytes over two lines
    (bytes(range(256)) * 8, _nodes().encode(), "error: binary data, not a text table"),
    (bytes(range(1, 256)) * 8, _nodes().encode(), "error: cannot read table: CSV parse"),
    # was "found type double [..., value 'double']"
    ((_EDGES + "1.5,2\n").encode(), _nodes().encode(),
     "error: node id 1.5 is not an integer (at line 32)"),
    # was accepted, the classes stored as "b'caf\\xe9'" and "b'x'"
    (_EDGES.encode(), _nodes(lambda i: "caf\xe9" if i < 15 else "x").encode("latin-1"),
     "error: not UTF-8 text: line 2 holds byte 0xe9 at column 6"),
])
def test_a_csv_table_that_is_not_what_it_seems_is_one_line(
        tmp_path: Path, edges: bytes, nodes: bytes, says: str) -> None:
    (tmp_path / "edges.csv").write_bytes(edges)
    (tmp_path / "nodes.csv").write_bytes(nodes)
    r = runner.invoke(app, ["--home", str(tmp_path / "home"), "ingest", "--format", "csv",
                            "--source", str(tmp_path / "edges.csv"), "--nodes",
                            str(tmp_path / "nodes.csv"), "--id-col", "id", "--out",
                            str(tmp_path / "out")])
    line = one_error_line(r.output)
    assert r.exit_code == 1 and len(r.output.strip().splitlines()) == 1, r.output
    assert line.startswith(says) and "[file " in line, line
    assert "edges.csv" in line or "nodes.csv" in line


def test_utf8_labels_are_read_as_text(tmp_path: Path) -> None:
    from dpgnn_core.data.store import read_manifest

    (tmp_path / "edges.csv").write_text(_EDGES)
    (tmp_path / "nodes.csv").write_text(_nodes(lambda i: "café" if i < 15 else "x"),
                                        encoding="utf-8")
    r = runner.invoke(app, ["--home", str(tmp_path / "home"), "ingest", "--format", "csv",
                            "--source", str(tmp_path / "edges.csv"), "--nodes",
                            str(tmp_path / "nodes.csv"), "--id-col", "id", "--out",
                            str(tmp_path / "out")])
    assert r.exit_code == 0, r.output
    assert "café" in json.dumps(read_manifest(tmp_path / "out"), ensure_ascii=False)


@pytest.mark.parametrize("name", ["../../evil", "a/b", "..", "a\\b", " ", "x\ny"])
def test_a_dataset_name_with_a_path_in_it_is_refused(tmp_path: Path, name: str) -> None:
    """``--name ../../evil`` was accepted (a sweep's ingested dataset is stored in a
    folder named after it)."""
    r = runner.invoke(app, ["--home", str(tmp_path / "home"), "ingest", "--format",
                            "synthetic", "-o", "num_nodes=50", "--name", name, "--out",
                            str(tmp_path / "out")])
    line = one_error_line(r.output)
    assert r.exit_code == 1 and line.startswith(f"error: --name {name!r}: a dataset name"), \
        r.output
    assert not (tmp_path / "out").exists()
