"""Ingest guards in the core: target lock, stale temp folders, typed loader options,
empty edge lists, user ids and file lines in edge errors."""

from __future__ import annotations

import multiprocessing as mp
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dpgnn_core import io
from dpgnn_core.data.clean import clean_edges
from dpgnn_core.data.ingest import load_from_spec
from dpgnn_core.data.loaders import load_tabular
from dpgnn_core.errors import DataError
from dpgnn_core.specs import IngestSpec

# --- fault 2: one writer per target -----------------------------------------------------


def _hold(path: str, ready: Any, release: Any) -> None:
    with io.atomic_dir(path) as tmp:
        (tmp / "a.txt").write_text("first")
        ready.set()
        release.wait(30)


def _try(path: str, overwrite: bool, q: Any) -> None:
    try:
        with io.atomic_dir(path, overwrite=overwrite) as tmp:
            (tmp / "a.txt").write_text("second")
        q.put("ok")
    except Exception as e:
        q.put(f"{type(e).__name__}: {e}")


@pytest.mark.parametrize("overwrite", [False, True])
def test_second_writer_fails_while_target_is_being_written(tmp_path: Path,
                                                           overwrite: bool) -> None:
    ctx = mp.get_context("spawn")
    target = tmp_path / "ds"
    ready, release, q = ctx.Event(), ctx.Event(), ctx.Queue()
    holder = ctx.Process(target=_hold, args=(str(target), ready, release))
    holder.start()
    try:
        assert ready.wait(60)
        others = [ctx.Process(target=_try, args=(str(target), overwrite, q)) for _ in range(2)]
        for p in others:
            p.start()
        msgs = [q.get(timeout=60) for _ in others]
        for p in others:
            p.join(30)
    finally:
        release.set()
        holder.join(30)
    assert holder.exitcode == 0
    for m in msgs:
        assert f"is being written by another process (pid {holder.pid})" in m, m
    assert (target / "a.txt").read_text() == "first"
    # Nothing left beside it: no temp folder, no lock file.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds"]


def test_target_created_by_someone_else_meanwhile_is_not_replaced(tmp_path: Path) -> None:
    target = tmp_path / "ds"
    with pytest.raises(FileExistsError, match="already exists"):
        with io.atomic_dir(target) as tmp:
            (tmp / "mine.txt").write_text("new")
            target.mkdir()  # appeared after the first existence check
            (target / "theirs.txt").write_text("old")
    assert [p.name for p in target.iterdir()] == ["theirs.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds"]


# --- fault 3: stale temp folders of dead writers ---------------------------------------


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_stale_temp_folders_of_dead_writers_are_removed(tmp_path: Path) -> None:
    target = tmp_path / "ds"
    dead, live = _dead_pid(), os.getppid()
    stale = [tmp_path / f".ds.tmp-{io.HOST_TAG}-{dead}-deadbeef",
             tmp_path / f".ds.old-{io.HOST_TAG}-{dead}-deadbeef"]
    kept = [tmp_path / f".ds.tmp-{io.HOST_TAG}-{live}-0badcafe",  # a live writer's
            tmp_path / f".ds.tmp-otherhost-{dead}-0badcafe",  # another machine's
            tmp_path / ".ds.tmp-1234abcd",  # an old-style name: writer unknown
            tmp_path / f".dsx.tmp-{io.HOST_TAG}-{dead}-deadbeef"]  # another target's
    for d in stale + kept:
        d.mkdir()
        (d / "big.parquet").write_bytes(b"x" * 100)
    with io.atomic_dir(target) as tmp:
        assert tmp.name.startswith(f".ds.tmp-{io.HOST_TAG}-{os.getpid()}-")
        (tmp / "f").write_text("new")
    for d in stale:
        assert not d.exists(), d
    for d in kept:
        assert d.is_dir(), d
    assert (target / "f").read_text() == "new"


# --- fault 4: typed loader options ------------------------------------------------------


@pytest.mark.parametrize(("fmt", "options", "needles"), [
    ("synthetic", {"num_nodes": "abc"},
     ["--option num_nodes='abc'", "valid integer", "(synthetic loader)"]),
    ("synthetic", {"num_nodes": True}, ["num_nodes=True", "valid integer"]),
    ("synthetic", {"homophily": 1.5}, ["homophily=1.5", "less than or equal to 1"]),
    ("synthetic", {"power_law": 1.5}, ["power_law=1.5", "greater than 2"]),
    ("synthetic", {"num_nodez": 10}, ["unknown option 'num_nodez'", "num_nodes",
                                      "(synthetic loader)"]),
    ("synthetic", {"kind": "er_graphs", "p": [0.2, 2]}, ["p=[0.2, 2]",
                                                          "(synthetic er_graphs loader)"]),
    ("synthetic", {"kind": "nope"}, ["kind='nope'", "csbm", "er_graphs"]),
    ("facebook100", {"min_class_size": "big"}, ["min_class_size='big'", "valid integer",
                                                "(facebook100 loader)"]),
    ("tu", {"fractions": [0.5, "x", 0.2]}, ["fractions=[0.5, 'x', 0.2]", "(tu loader)"]),
    ("csv", {"undirected": "yes"}, ["undirected='yes'", "valid boolean", "(csv loader)"]),
    ("csv", {"seed": -1}, ["seed=-1", "greater than or equal to 0"]),
    ("planetoid", {"split": 1}, ["unknown option 'split'", "fractions", "(planetoid loader)"]),
    ("planetoid", {"fractions": [0.5, 0.2, 0.2]}, ["fractions", "sum to 1",
                                                    "(planetoid loader)"]),
    ("ogb", {"one_hot": 1}, ["one_hot=1", "valid boolean", "(ogb loader)"]),
])
def test_bad_loader_options_are_refused_before_loading(
        tmp_path: Path, fmt: str, options: dict[str, Any], needles: list[str]) -> None:
    source = None if fmt == "synthetic" else str(tmp_path)  # an empty folder: never read
    spec = IngestSpec(format=fmt, source=source, options=options)
    with pytest.raises(DataError) as err:
        load_from_spec(spec)
    msg = str(err.value)
    assert "\n" not in msg
    for needle in needles:
        assert needle in msg, msg


# --- fault 1: no edges ------------------------------------------------------------------


def _nodes(tmp_path: Path) -> Path:
    p = tmp_path / "nodes.csv"
    p.write_text("node_id,label,f\n" + "".join(f"{i},{i % 2},{i}.0\n" for i in range(8)))
    return p


@pytest.mark.parametrize("kind", ["csv-header-only", "parquet-no-rows", "synthetic"])
def test_graph_without_edges_is_refused_unless_allowed(tmp_path: Path, kind: str) -> None:
    if kind == "synthetic":
        spec_kw: dict[str, Any] = {"format": "synthetic",
                                   "options": {"num_nodes": 4, "num_classes": 2,
                                               "avg_degree": 0.01}}
        where = "synthetic"
    else:
        nodes = _nodes(tmp_path)
        if kind == "csv-header-only":
            edges = tmp_path / "edges.csv"
            edges.write_text("src,dst\n")
        else:
            import pyarrow as pa
            import pyarrow.parquet as pq
            edges = tmp_path / "edges.parquet"
            pq.write_table(pa.table({"src": pa.array([], pa.int64()),
                                     "dst": pa.array([], pa.int64())}), edges)
        spec_kw = {"format": kind.split("-")[0], "source": str(edges),
                   "options": {"nodes": str(nodes)}}
        where = str(edges)
    with pytest.raises(DataError, match="no edges") as err:
        load_from_spec(IngestSpec(**spec_kw))
    assert where in str(err.value) and "--allow-no-edges" in str(err.value)
    spec_kw["options"] = {**spec_kw["options"], "allow_no_edges": True}
    data = load_from_spec(IngestSpec(**spec_kw))
    assert data.num_edges == 0
    assert any("no edges" in w for w in data.meta["cleaning"]["warnings"])


# --- fault 5: user ids and file lines in edge errors ------------------------------------


def _named_graph(tmp_path: Path, edge_rows: list[str], suffix: str = ".csv") -> tuple[Path,
                                                                                        Path]:
    nodes = tmp_path / "nodes.csv"
    nodes.write_text("user,label,f\nalice,0,1\nbob,1,2\ncarol,0,3\ndave,1,4\n")
    edges = tmp_path / f"edges{suffix}"
    text = "src,dst\n" + "".join(r + "\n" for r in edge_rows)
    if suffix == ".csv":
        edges.write_text(text)
    else:
        import pyarrow.csv as pacsv
        import pyarrow.parquet as pq
        (tmp_path / "e.csv").write_text(text)
        pq.write_table(pacsv.read_csv(tmp_path / "e.csv"), edges)
    return edges, nodes


@pytest.mark.parametrize(("rows", "where", "needles"), [
    # line 1 is the header; the duplicate is on line 4, the first copy on line 2
    (["alice,bob", "bob,carol", "alice,bob"], "line", ["alice -> bob", "line 4", "line 2"]),
    (["alice,bob", "", "carol,carol"], "line", ["node 'carol'", "line 4"]),  # blank line 3
    (["alice,bob", "bob,carol", "alice,bob"], "row", ["alice -> bob", "row 3", "row 1"]),
    (["alice,bob", "dave,dave"], "row", ["node 'dave'", "row 2"]),
])
def test_edge_errors_name_user_ids_and_file_lines(tmp_path: Path, rows: list[str], where: str,
                                                  needles: list[str]) -> None:
    edges, nodes = _named_graph(tmp_path, rows, ".csv" if where == "line" else ".parquet")
    with pytest.raises(DataError) as err:
        load_tabular(edges, nodes, id_col="user", relabel=True)
    msg = str(err.value)
    for needle in needles:
        assert needle in msg, msg


def test_missing_endpoint_names_the_file_line(tmp_path: Path) -> None:
    edges, nodes = _named_graph(tmp_path, ["alice,bob", "bob,zoe"])
    with pytest.raises(DataError, match="line 3") as err:
        load_tabular(edges, nodes, id_col="user", relabel=True)
    assert "'zoe'" in str(err.value)


def test_clean_edges_without_names_keeps_ids() -> None:
    ei = np.array([[0, 1, 0], [1, 2, 1]], dtype=np.int64)
    with pytest.raises(DataError, match="0 -> 1"):
        clean_edges(ei, 3)
    out, counts, _ = clean_edges(ei, 3, dedupe=True)
    assert counts["duplicate_edges"] == 1 and out.shape == (2, 2)

