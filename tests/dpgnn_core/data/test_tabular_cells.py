"""Issue 29 §1: what a text cell in a feature column and a blank, NaN or text label become
is said (the manifest's cleaning record, the ingest line), and what cannot be meant is
refused: a numeric column with a stray text cell, a fractional or mixed label."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from dpgnn_core.data.loaders import load_tabular
from dpgnn_core.data.store import write_dataset
from dpgnn_core.errors import DataError

EDGES = "src,dst\n0,1\n1,2\n2,3\n3,4\n4,5\n5,0\n"


def _nodes(tmp: Path, rows: list[str], header: str = "node_id,f1,f2,label") -> Path:
    (tmp / "e.csv").write_text(EDGES)
    (tmp / "n.csv").write_text(header + "\n" + "".join(f"{r}\n" for r in rows))
    return tmp / "n.csv"


def _load(tmp: Path, **kw: object):  # type: ignore[no-untyped-def]
    return load_tabular(tmp / "e.csv", tmp / "n.csv", fractions=(1.0, 0.0, 0.0), **kw)


def test_numeric_column_with_a_text_cell_is_refused(tmp_path: Path) -> None:
    _nodes(tmp_path, ["0,1.5,1,0", "1,2.5,0,1", "2,oops,1,0", "3,4.5,0,1", "4,1,1,0",
                      "5,2,0,1"])
    with pytest.raises(DataError, match=r"mixes numbers and text \(5 numbers, 1 text cells, "
                                        r"the first at line 4\)") as e:
        _load(tmp_path)
    assert e.value.field == "f1" and e.value.value == "oops"


def test_text_column_is_left_out_and_said(tmp_path: Path) -> None:
    rows = [f"{i},{i * 0.5},name{i},{i % 2}" for i in range(6)]
    _nodes(tmp_path, rows, header="node_id,f1,name,label")
    d = _load(tmp_path)
    assert d.num_features == 1
    assert d.meta["cleaning"]["dropped_columns"] == {"name": "text"}
    assert "column 'name' (text) not used as a feature" in d.meta["cleaning"]["notes"]


@pytest.mark.parametrize(("labels", "y", "said"), [
    (["0", "1", "", "1", "NaN", "0"], [0, 1, -1, 1, -1, 0], "2 empty or NaN cells"),
    (["1.0", "3.0", "", "3.0", "1.0", "10.0"], [0, 1, -1, 1, 0, 2], "1 empty or NaN cells"),
    (["cat", "dog", "", "nan", "NA", "cat"], [0, 1, -1, -1, -1, 0], "3 empty or 'NA'/'nan' "
                                                                    "cells -> unlabelled"),
])
def test_blank_nan_and_text_labels_are_said(tmp_path: Path, labels: list[str], y: list[int],
                                            said: str) -> None:
    _nodes(tmp_path, [f"{i},{i},{i % 2},{lab}" for i, lab in enumerate(labels)])
    d = _load(tmp_path)
    assert d.y.tolist() == y
    notes = d.meta["cleaning"]["notes"]
    assert any(said in n for n in notes), notes
    record = d.meta["cleaning"]["labels"]
    assert record["missing_cells"] + record["nan_cells"] == y.count(-1)


def test_text_classes_are_listed(tmp_path: Path) -> None:
    _nodes(tmp_path, [f"{i},{i},{i % 2},{lab}" for i, lab in
                      enumerate(["dog", "cat", "dog", "emu", "cat", "dog"])])
    d = _load(tmp_path)
    assert "label: 3 text classes ('cat'->0, 'dog'->1, 'emu'->2)" in d.meta["cleaning"]["notes"]
    assert d.meta["cleaning"]["labels"]["kind"] == "text"


def test_parquet_float_nan_label_is_unlabelled_not_a_class(tmp_path: Path) -> None:
    pq.write_table(pa.table({"src": [0, 1], "dst": [1, 2]}), tmp_path / "e.parquet")
    pq.write_table(pa.table({"node_id": [0, 1, 2, 3], "f": [1.0, 2.0, 3.0, 4.0],
                             "label": [0.0, float("nan"), 1.0, 1.0]}), tmp_path / "n.parquet")
    d = load_tabular(tmp_path / "e.parquet", tmp_path / "n.parquet", fractions=(1.0, 0, 0))
    assert d.y.tolist() == [0, -1, 1, 1] and d.num_classes == 2
    assert d.meta["cleaning"]["labels"] == {"kind": "number", "missing_cells": 0,
                                            "nan_cells": 1}


@pytest.mark.parametrize(("labels", "match", "value"), [
    (["0", "1", "two", "1", "0", "1"], "label column mixes numbers and text", "two"),
    (["0", "1", "0.5", "1", "0", "1"], "label is not a class", 0.5),
    (["0", "1", "-1", "1", "0", "1"], "label is not a class", -1),
])
def test_labels_that_cannot_be_meant_are_refused(tmp_path: Path, labels: list[str],
                                                 match: str, value: object) -> None:
    _nodes(tmp_path, [f"{i},{i},{i % 2},{lab}" for i, lab in enumerate(labels)])
    with pytest.raises(DataError, match=match) as e:
        _load(tmp_path)
    assert e.value.field == "label" and "line 4" in str(e.value)


def test_ingest_line_and_manifest_say_it(tmp_path: Path) -> None:
    from flows.cli import app

    rows = [f"{i},{i * 0.5},name{i},{lab}" for i, lab in
            enumerate(["a", "b", "", "a", "b", "a"])]
    nodes = _nodes(tmp_path, rows, header="node_id,f1,name,label")
    r = CliRunner().invoke(app, ["ingest", "--format", "csv", "--source",
                                 str(tmp_path / "e.csv"), "--nodes", str(nodes), "--out",
                                 str(tmp_path / "ds")])
    assert r.exit_code == 0, r.output
    line = r.output.strip().splitlines()[-1]
    assert line.startswith(f"wrote {tmp_path / 'ds'}")
    assert "column 'name' (text) not used as a feature" in line
    assert "label: 1 empty cells -> unlabelled" in line
    assert "label: 2 text classes ('a'->0, 'b'->1)" in line
    import json

    manifest = json.loads((tmp_path / "ds" / "manifest.json").read_text())
    assert manifest["cleaning"]["dropped_columns"] == {"name": "text"}
    assert manifest["cleaning"]["labels"]["missing_cells"] == 1


def test_written_dataset_keeps_the_record(tmp_path: Path) -> None:
    _nodes(tmp_path, [f"{i},{i},{i % 2},{lab}" for i, lab in
                      enumerate(["0", "", "1", "1", "0", "1"])])
    m = write_dataset(_load(tmp_path), tmp_path / "ds")
    assert m["cleaning"]["labels"]["missing_cells"] == 1
    assert np.isfinite(m["num_classes"])
