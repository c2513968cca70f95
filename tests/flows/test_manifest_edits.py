"""Issue 33 §2: an edit of any key of a dataset's ``manifest.json`` is refused, with the one
``error:`` line a tampered Parquet file gets, before Prefect starts: ``directed`` (which
decides DP-GNN's node level and GAP's / DPDGC's edge sensitivity), ``num_classes`` and
every other key. A dataset is ingested with the real ``dpgnn ingest``, its manifest edited
as a user would, and ``dpgnn run`` tried."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dpgnn_core.data.store import manifest_digest, read_dataset
from dpgnn_core.errors import DataError
from flows.cli import app
from tests.flows.clirunner import CliRunner

runner = CliRunner()


@pytest.fixture(scope="module")
def ingested(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny undirected dataset from a CSV edge list and node table, by ``dpgnn ingest``."""
    root = tmp_path_factory.mktemp("raw")
    edges = root / "edges.csv"
    nodes = root / "nodes.csv"
    edges.write_text("src,dst\n" + "".join(f"{i},{(i + 1) % 40}\n" for i in range(40)))
    nodes.write_text("node_id,label,f0,f1\n" + "".join(
        f"{i},{i % 2},{i / 40:.3f},{(i * 7 % 40) / 40:.3f}\n" for i in range(40)))
    out = root / "ds"
    r = runner.invoke(app, ["ingest", "--format", "csv", "--source", str(edges), "--nodes",
                            str(nodes), "--undirected", "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert json.loads((out / "manifest.json").read_text())["directed"] is False
    return out


@pytest.fixture
def dataset(ingested: Path, tmp_path: Path) -> Path:
    """A fresh copy of the ingested folder for one test to edit."""
    import shutil

    return Path(shutil.copytree(ingested, tmp_path / "ds"))


def _edit(folder: Path, key: str, value: Any) -> None:
    path = folder / "manifest.json"
    manifest = json.loads(path.read_text())
    assert key in manifest and manifest[key] != value, (key, manifest.get(key))
    manifest[key] = value
    path.write_text(json.dumps(manifest, indent=2))


def _one_error(r: Any) -> str:
    lines = [line for line in r.output.splitlines() if line.strip()]
    assert r.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error: "), r.output
    return str(lines[0])


def _run(dataset: Path, *method: str) -> Any:
    return runner.invoke(app, ["run", *(method or ("dp-mlp", "--epsilon", "4")),
                               "--dataset", str(dataset)])


#: An edit of every key a manifest holds (manifest_sha256 itself aside): each is refused.
EDITS: list[tuple[str, Any]] = [
    ("directed", True), ("num_classes", 5), ("name", "other"), ("task", "graph"),
    ("multi_label", True), ("num_graphs", 3), ("edge_feature_dim", 2),
    ("dpgnn_version", "9.9"), ("split", {"scheme": "hand-made"}),
    ("source", {"path": "/elsewhere"}), ("cleaning", {}),
    ("ingest", {"spec": {}, "source_sha256": None}),
]


def test_every_key_is_listed(ingested: Path) -> None:
    """EDITS covers every key ingest writes, so a new key cannot go unchecked here."""
    keys = set(json.loads((ingested / "manifest.json").read_text()))
    covered = {k for k, _ in EDITS} | {"num_nodes", "num_edges", "feature_dim",
                                       "split_counts", "files", "content_sha256",
                                       "manifest_sha256", "schema_version"}
    assert keys <= covered, keys - covered


@pytest.mark.parametrize(("key", "value"), [("directed", True), ("num_classes", 5),
                                            ("name", "other")])
def test_a_manifest_edit_is_refused_before_prefect(dataset: Path, started: list[Any],
                                                   key: str, value: Any) -> None:
    _edit(dataset, key, value)
    line = _one_error(_run(dataset))
    assert "manifest was edited after ingest" in line, line
    assert f"file {dataset}/manifest.json" in line, line
    assert not started


def test_every_key_edit_is_refused(dataset: Path) -> None:
    """Each key of EDITS, edited alone, is refused by what the pre-flight runs
    (:func:`verify_folder`, in process: the CLI's line is the test above's)."""
    from dpgnn_core.data.store import verify_folder

    original = (dataset / "manifest.json").read_text()
    for key, value in EDITS:
        (dataset / "manifest.json").write_text(original)
        _edit(dataset, key, value)
        with pytest.raises(DataError) as e:
            verify_folder(dataset, json.loads((dataset / "manifest.json").read_text()))
        assert e.value.message.startswith("manifest was edited after ingest"), (key, e.value)
        assert e.value.path == str(dataset / "manifest.json"), (key, e.value)


def test_directed_edit_cannot_buy_dp_gcn_node_level(dataset: Path,
                                                    started: list[Any]) -> None:
    """The issue's case: undirected data flagged directed would get DP-GNN's node level."""
    level = ("dp-gcn", "--epsilon", "4", "--level", "node", "--steps", "2")
    assert "only sound on directed" in _one_error(_run(dataset, *level))
    _edit(dataset, "directed", True)
    line = _one_error(_run(dataset, *level))
    assert "manifest was edited after ingest" in line and "manifest_sha256" in line, line
    assert not started


def test_refused_like_a_tampered_parquet_file(dataset: Path, started: list[Any]) -> None:
    """The same shape of line: ``error: <what> [file <path>, field <f>, value <v>]``."""
    _edit(dataset, "num_classes", 3)
    edited = _one_error(_run(dataset))
    raw = bytearray((dataset / "features.parquet").read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    (dataset / "features.parquet").write_bytes(bytes(raw))
    tampered = _one_error(_run(dataset))
    for line in (edited, tampered):
        assert " [file " in line and ", field '" in line and ", value '" in line, line
    assert not started


def test_loading_refuses_an_edit_too(dataset: Path) -> None:
    """Every reader, not only the CLI's pre-flight (a flow started from Python)."""
    read_dataset(dataset)
    _edit(dataset, "directed", True)
    with pytest.raises(DataError, match="manifest was edited") as e:
        read_dataset(dataset)
    assert e.value.field == "manifest_sha256"


@pytest.mark.parametrize(("key", "value", "says"), [
    ("num_classes", 1, "the labels reach 1"),
    ("multi_label", True, "single labels"),
    ("edge_feature_dim", 4, "edges.parquet holds 0"),
    ("num_nodes", 39, "nodes.parquet holds 40 rows"),
])
def test_what_the_files_state_is_rederived(dataset: Path, started: list[Any], key: str,
                                           value: Any, says: str) -> None:
    """An editor who recomputes manifest_sha256 still cannot state what the files
    contradict."""
    _edit(dataset, key, value)
    path = dataset / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["manifest_sha256"] = manifest_digest(manifest)
    path.write_text(json.dumps(manifest))
    line = _one_error(_run(dataset))
    assert f"it says {key} = {value}" in line and says in line, line
    assert not started


def test_a_manifest_without_its_hash_asks_for_a_reingest(dataset: Path,
                                                        started: list[Any]) -> None:
    """A folder ingested before manifest_sha256 existed: refused, with what to do."""
    path = dataset / "manifest.json"
    manifest = json.loads(path.read_text())
    del manifest["manifest_sha256"]
    path.write_text(json.dumps(manifest))
    line = _one_error(_run(dataset))
    assert "has no manifest_sha256" in line and "--overwrite" in line, line
    assert not started


def test_budget_commands_refuse_an_edited_manifest(dataset: Path, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """``dpgnn budget set`` (which reads the folder's manifest for its sha256 and name)
    refuses an edited manifest as ``dpgnn run`` does, and sets nothing."""
    monkeypatch.setenv("DPGNN_HOME", str(tmp_path / "home"))
    _edit(dataset, "name", "other")
    r = runner.invoke(app, ["budget", "set", str(dataset), "--epsilon", "4",
                                  "--delta", "1e-5"])
    lines = [line for line in r.output.splitlines() if line.strip()]
    assert r.exit_code != 0 and len(lines) == 1 and lines[0].startswith("error: "), r.output
    assert "manifest edited after ingest" in lines[0] and "manifest.json" in lines[0]
    assert not (tmp_path / "home" / "budget.db").exists() or "other" not in runner.invoke(
        app, ["budget", "show"]).output
