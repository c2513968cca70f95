"""`dpgnn ingest --format dgl` on files written by DGL, and `dpgnn export-dgl`'s refusals."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from dpgnn_core.data.store import read_dataset
from dpgnn_core.data.synthetic import csbm, er_graphs
from flows.cli import app
from tests.flows.clirunner import CliRunner

runner = CliRunner()


def test_ingest_dgl_node_and_graph_files(tmp_path: Path) -> None:
    dgl = pytest.importorskip("dgl", reason="the dgl extra (make test installs it)")
    from dpgnn_core.interop.dgl import to_dgl, to_dgl_graphs

    node = csbm(num_nodes=120, num_classes=3, feature_dim=5, avg_degree=4, seed=3)
    g = to_dgl(node)
    g.ndata["extra"] = g.ndata["feat"][:, :2] * 2
    dgl.save_graphs(str(tmp_path / "node.bin"), [g])
    r = runner.invoke(app, ["ingest", "--format", "dgl", "--source", str(tmp_path / "node.bin"),
                            "--out", str(tmp_path / "ds-node"), "--json",
                            "-o", 'features=["feat","extra"]'])
    assert r.exit_code == 0, r.output
    manifest = json.loads(r.stdout)
    assert (manifest["task"], manifest["num_nodes"], manifest["feature_dim"]) == ("node", 120, 7)
    assert manifest["source"]["format"] == "dgl" and manifest["ingest"]["spec"]["format"] == "dgl"
    back = read_dataset(tmp_path / "ds-node")
    np.testing.assert_array_equal(back.split, node.split)
    np.testing.assert_array_equal(back.x[:, 5:], node.x[:, :2] * 2)

    graphs = er_graphs(num_graphs=20, num_nodes=6, split=(12, 4, 4), seed=1)
    dgl.save_graphs(str(tmp_path / "graphs.bin"), *to_dgl_graphs(graphs))
    r = runner.invoke(app, ["ingest", "--format", "dgl", "--source",
                            str(tmp_path / "graphs.bin"), "--out", str(tmp_path / "ds-g"),
                            "--json"])
    assert r.exit_code == 0, r.output
    manifest = json.loads(r.stdout)
    assert (manifest["task"], manifest["num_graphs"]) == ("graph", 20)
    assert manifest["split_counts"] == {"train": 12, "val": 4, "test": 4, "unused": 0}

    # A feature name the file lacks: one line naming the file and the field; nothing written.
    r = runner.invoke(app, ["ingest", "--format", "dgl", "--source", str(tmp_path / "node.bin"),
                            "--out", str(tmp_path / "bad"), "-o", 'features=["nope"]'])
    assert r.exit_code == 1
    assert "no node data 'nope'" in r.output and "node.bin" in r.output
    assert not (tmp_path / "bad").exists()


def test_ingest_dgl_without_dgl_names_the_install_command(monkeypatch: pytest.MonkeyPatch,
                                                          tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "dgl", None)  # as if the extra were not installed
    (tmp_path / "g.bin").write_bytes(b"\0")
    r = runner.invoke(app, ["ingest", "--format", "dgl", "--source", str(tmp_path / "g.bin"),
                            "--out", str(tmp_path / "out")])
    assert r.exit_code == 1
    assert "pip install 'dpgnn[dgl]'" in r.output
    assert not (tmp_path / "out").exists()


def test_export_dgl_refuses_a_run_without_released_node_data(tmp_path: Path) -> None:
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "manifest.json").write_text(json.dumps({"kind": "dpgnn"}))
    r = runner.invoke(app, ["export-dgl", str(tmp_path / "run"), "--out",
                            str(tmp_path / "x.bin")])
    assert r.exit_code == 2 and "only GAP runs release node data" in r.output
    assert not (tmp_path / "x.bin").exists()
