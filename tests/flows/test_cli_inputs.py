"""Issue 33 §7: what a user reads of bad input and of the dataset listing. ``--config`` that
does not parse or is not there names the file; a text cell in a ``--feature-cols`` column
names its line and value; a csv/parquet dataset is named after ``--out``; ``--format
parquet`` given CSV files is refused; piped ``dpgnn datasets`` prints whole names and paths
and warns about a folder a run would refuse."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dpgnn_core.data.loaders import load_tabular
from dpgnn_core.errors import DataError
from flows.cli import app
from tests.flows.clirunner import CliRunner

runner = CliRunner()
EDGES = "src,dst\n0,1\n1,2\n2,3\n3,4\n4,5\n5,0\n"
NODES = "node_id,f1,f2,label\n0,1,0,0\n1,2,1,1\n2,3,0,0\n3,4,1,1\n4,5,0,0\n5,6,1,1\n"


def _one_error(r: Any, code: int) -> str:
    lines = [line for line in r.output.splitlines() if line.strip()]
    assert r.exit_code == code and len(lines) == 1 and lines[0].startswith("error: "), \
        r.output
    return str(lines[0])


def _raw(tmp: Path, nodes: str = NODES) -> tuple[Path, Path]:
    (tmp / "edges.csv").write_text(EDGES)
    (tmp / "nodes.csv").write_text(nodes)
    return tmp / "edges.csv", tmp / "nodes.csv"


def _ingest(edges: Path, nodes: Path, out: Path, *extra: str) -> Any:
    return runner.invoke(app, ["ingest", "--format", "csv", "--source", str(edges),
                               "--nodes", str(nodes), "--out", str(out), *extra])


@pytest.mark.parametrize(("text", "says"), [
    ('epsilon = 4\nsteps = ', "cannot parse the spec file: Invalid value (at end of document)"),
    (None, "cannot read the spec file: No such file or directory"),
])
def test_config_errors_name_the_file(tmp_path: Path, text: str | None, says: str) -> None:
    config = tmp_path / "bad.toml"
    if text is not None:
        config.write_text(text)
    r = runner.invoke(app, ["run", "dp-mlp", "--config", str(config), "--dataset",
                            str(tmp_path)])
    line = _one_error(r, 2)
    assert says in line and f"[file {config}]" in line, line
    assert "[Errno" not in line


def test_a_text_cell_in_a_named_feature_column_names_line_and_value(tmp_path: Path) -> None:
    edges, nodes = _raw(tmp_path, NODES.replace("3,4,1,1", "3,four,1,1"))
    with pytest.raises(DataError, match=r"holds text \(1 text cells, 5 numbers, the first "
                                        r"text at line 5\)") as e:
        load_tabular(edges, nodes, feature_cols=["f1", "f2"])
    assert e.value.field == "f1" and e.value.value == "four"


def test_a_csv_dataset_is_named_after_its_folder(tmp_path: Path) -> None:
    edges, nodes = _raw(tmp_path)
    r = _ingest(edges, nodes, tmp_path / "data" / "karate", "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout.splitlines()[-1])["name"] == "karate"
    r = _ingest(edges, nodes, tmp_path / "data" / "k2", "--name", "club", "--json")
    assert json.loads(r.stdout.splitlines()[-1])["name"] == "club"


def test_format_parquet_given_csv_files_is_refused(tmp_path: Path) -> None:
    edges, nodes = _raw(tmp_path)
    r = runner.invoke(app, ["ingest", "--format", "parquet", "--source", str(edges),
                            "--nodes", str(nodes), "--out", str(tmp_path / "ds")])
    line = _one_error(r, 1)
    assert "--format parquet, but this file is a CSV file by its name; pass --format csv" \
        in line and str(edges) in line, line
    assert not (tmp_path / "ds").exists()


def test_piped_listing_is_whole_and_warns_about_refused_folders(tmp_path: Path) -> None:
    edges, nodes = _raw(tmp_path)
    root = tmp_path / "a-rather-long-folder-name-for-datasets"
    for name in ("first-dataset-with-a-long-name", "second-dataset-with-a-long-name"):
        assert _ingest(edges, nodes, root / name).exit_code == 0
    manifest = root / "second-dataset-with-a-long-name" / "manifest.json"
    m = json.loads(manifest.read_text())
    manifest.write_text(json.dumps({**m, "directed": False}))
    r = runner.invoke(app, ["datasets", str(root)])
    assert r.exit_code == 0, r.output
    for name in ("first-dataset-with-a-long-name", "second-dataset-with-a-long-name"):
        assert name in r.stdout and str(root / name) in r.stdout, r.stdout
    assert "…" not in r.stdout
    assert "second-dataset-with-a-long-name (refused)" in r.stdout
    warnings = [x for x in r.stderr.splitlines() if x.startswith("warning:")]
    assert len(warnings) == 1 and "manifest edited after ingest" in warnings[0], r.stderr
    listed = runner.invoke(app, ["datasets", str(root), "--json"])
    rows = {Path(json.loads(x)["path"]).name: json.loads(x)
            for x in listed.stdout.splitlines() if x.startswith("{")}
    assert "problem" in rows["second-dataset-with-a-long-name"]
    assert "problem" not in rows["first-dataset-with-a-long-name"]
