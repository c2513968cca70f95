"""DGL interop (the optional ``dgl`` extra, which ``make test`` installs): the dataset format
to and from ``DGLGraph`` both ways, files of ``dgl.save_graphs`` through the loader, GAP's
release as a DGL graph, and the clear error when DGL is absent."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from dpgnn_core.data.graph import GraphData
from dpgnn_core.data.ingest import load_from_spec
from dpgnn_core.data.store import read_dataset, write_dataset
from dpgnn_core.data.synthetic import csbm, er_graphs
from dpgnn_core.errors import DataError, MissingExtraError
from dpgnn_core.interop import dgl as interop
from dpgnn_core.specs import DpgnnSpec, IngestSpec

needs_dgl = pytest.mark.skipif(importlib.util.find_spec("dgl") is None,
                               reason="the dgl extra: pip install 'dpgnn[dgl]' (make test "
                               "installs it)")


def _sorted_edges(d: GraphData) -> tuple[np.ndarray, np.ndarray | None]:
    order = np.lexsort((d.edge_index[1], d.edge_index[0]))
    return d.edge_index[:, order], None if d.edge_attr is None else d.edge_attr[order]


def _assert_same(a: GraphData, b: GraphData) -> None:
    assert (a.task, a.num_classes, a.directed) == (b.task, b.num_classes, b.directed)
    np.testing.assert_array_equal(a.x, b.x)
    np.testing.assert_array_equal(a.y, b.y)
    np.testing.assert_array_equal(a.split, b.split)
    for u, v in zip(_sorted_edges(a), _sorted_edges(b), strict=True):
        np.testing.assert_array_equal(u, v)
    for field in ("graph_id", "graph_y", "graph_split"):
        u, v = getattr(a, field), getattr(b, field)
        assert (u is None) == (v is None)
        if u is not None:
            np.testing.assert_array_equal(u, v)


def _node_data(directed: bool) -> GraphData:
    d = csbm(num_nodes=150, num_classes=3, feature_dim=6, avg_degree=5, seed=1)
    d.split[:4] = 3  # some unused nodes
    if directed:  # keep one direction of each pair: a directed graph
        keep = d.edge_index[0] < d.edge_index[1]
        d.edge_index, d.directed = np.ascontiguousarray(d.edge_index[:, keep]), True
    rng = np.random.default_rng(0)
    d.edge_attr = rng.normal(size=(d.num_edges, 2)).astype(np.float32)
    return d


@needs_dgl
@pytest.mark.parametrize("directed", [False, True])
def test_node_dataset_round_trip(directed: bool) -> None:
    d = _node_data(directed)
    g = interop.to_dgl(d)
    assert g.num_nodes() == d.num_nodes and g.num_edges() == d.num_edges
    assert int(g.ndata["train_mask"].sum()) == int((d.split == 0).sum())
    back = interop.from_dgl(g, name=d.name, edge_features=["feat"], directed=d.directed)
    _assert_same(back, d)


@needs_dgl
def test_graph_dataset_round_trip_through_save_graphs(tmp_path: Path) -> None:
    import dgl

    d = er_graphs(num_graphs=30, num_nodes=8, split=(18, 6, 6), seed=2)
    graphs, labels = interop.to_dgl_graphs(d)
    assert len(graphs) == 30 and [g.num_nodes() for g in graphs] == [8] * 30
    assert labels["label"].tolist() == d.graph_y.tolist()
    _assert_same(interop.from_dgl(graphs, labels), d)
    dgl.save_graphs(str(tmp_path / "g.bin"), graphs, labels)
    again = load_from_spec(IngestSpec(format="dgl", source=str(tmp_path / "g.bin")))
    _assert_same(again, d)
    assert again.meta["source"]["format"] == "dgl"
    assert again.meta["split"]["scheme"] == "dgl-masks"


@needs_dgl
def test_loader_reads_features_by_name_and_writes_a_dataset(tmp_path: Path) -> None:
    import dgl

    d = _node_data(directed=False)
    g = interop.to_dgl(d)
    g.ndata["degree"] = g.in_degrees().float()
    g.ndata["cls"] = g.ndata.pop("label")
    dgl.save_graphs(str(tmp_path / "cora.bin"), [g])
    spec = IngestSpec(format="dgl", source=str(tmp_path / "cora.bin"),
                      options={"features": ["feat", "degree"], "label": "cls"})
    data = load_from_spec(spec)
    np.testing.assert_array_equal(data.x[:, :6], d.x)
    np.testing.assert_array_equal(data.x[:, 6], np.bincount(d.edge_index[1],
                                                            minlength=d.num_nodes))
    np.testing.assert_array_equal(data.y, d.y)
    write_dataset(data, tmp_path / "ds")
    back = read_dataset(tmp_path / "ds")
    np.testing.assert_array_equal(back.split, d.split)
    assert back.name == "cora"


@needs_dgl
@pytest.mark.parametrize(("change", "needle", "field"), [
    ("no_feature", "no node data 'missing'", "missing"),
    ("two_masks", "in two split masks", "val_mask"),
    ("float_labels", "labels must be integers", "label"),
    ("self_loop", "self-loop", None),
])
def test_loader_refuses_bad_files(tmp_path: Path, change: str, needle: str,
                                  field: str | None) -> None:
    import dgl

    g = interop.to_dgl(_node_data(directed=False))
    options: dict[str, object] = {}
    if change == "no_feature":
        options["features"] = ["feat", "missing"]
    elif change == "two_masks":
        g.ndata["val_mask"][torch.nonzero(g.ndata["train_mask"])[0]] = True
    elif change == "float_labels":
        g.ndata["label"] = g.ndata["label"].float()
    else:
        g = dgl.add_edges(g, torch.tensor([3]), torch.tensor([3]))
    path = tmp_path / "g.bin"
    dgl.save_graphs(str(path), [g])
    with pytest.raises(DataError, match=needle) as err:
        load_from_spec(IngestSpec(format="dgl", source=str(path), options=options))
    assert err.value.path == str(path)
    if field is not None:
        assert err.value.field == field
    if change == "self_loop":  # removed (and counted) when asked, as in every loader
        options["remove_self_loops"] = True
        data = load_from_spec(IngestSpec(format="dgl", source=str(path), options=options))
        assert data.meta["cleaning"]["self_loops"] == 1


@needs_dgl
@pytest.mark.parametrize("task", ["node", "graph"])
@pytest.mark.parametrize("option", [None, False, True])
def test_directed_comes_from_the_option_not_the_edges(tmp_path: Path, task: str,
                                                      option: bool | None) -> None:
    """``directed`` is the ingest option (default undirected), whatever the edges' symmetry
    (itself private: one edge would flip it): a symmetric graph said to be directed is
    directed; an asymmetric one is refused as undirected, naming the option, and read as
    directed when the option says so."""
    import dgl

    if task == "node":
        sym = _node_data(directed=False)
        sym.edge_attr = None
        graphs, labels = [interop.to_dgl(sym)], None
    else:
        graphs, labels = interop.to_dgl_graphs(er_graphs(num_graphs=6, num_nodes=6,
                                                         split=(4, 1, 1), seed=3))
    options = {} if option is None else {"directed": option}
    path = tmp_path / "sym.bin"
    dgl.save_graphs(str(path), graphs, labels)
    data = load_from_spec(IngestSpec(format="dgl", source=str(path), options=options))
    assert data.directed is bool(option)  # symmetric edges, yet directed when said so
    assert data.meta["source"]["options"]["directed"] is bool(option)
    first = graphs[0]
    s, t = (int(v) for v in first.edges()[0][:1].tolist() + first.edges()[1][:1].tolist())
    graphs[0] = dgl.remove_edges(first, first.edge_ids(torch.tensor([t]), torch.tensor([s])))
    dgl.save_graphs(str(path), graphs, labels)
    spec = IngestSpec(format="dgl", source=str(path), options=options)
    if option:
        assert load_from_spec(spec).directed is True
    else:
        with pytest.raises(DataError, match="-o directed=true") as err:
            load_from_spec(spec)
        assert err.value.field == "directed" and err.value.path == str(path)


@needs_dgl
def test_several_graphs_need_graph_labels(tmp_path: Path) -> None:
    d = er_graphs(num_graphs=4, num_nodes=5, split=(2, 1, 1))
    graphs, _ = interop.to_dgl_graphs(d)
    with pytest.raises(DataError, match="4 graphs but no graph label 'label'"):
        interop.from_dgl(graphs, {"other": torch.zeros(4)})


@needs_dgl
def test_release_export_has_node_data_and_no_edges(tmp_path: Path) -> None:
    import dgl

    xs = torch.randn(40, 3, 5)
    path = interop.save_release_dgl(tmp_path / "release.bin", xs)
    (g,), labels = dgl.load_graphs(str(path))
    assert g.num_nodes() == 40 and g.num_edges() == 0  # GAP's edges stay private
    torch.testing.assert_close(g.ndata["agg"], xs)
    torch.testing.assert_close(g.ndata["agg_2"], xs[:, 1])
    assert labels["hops"].tolist() == [3]
    assert [p.name for p in tmp_path.iterdir()] == ["release.bin"]  # no temp file left


@pytest.mark.parametrize("call", ["import", "loader", "backend"])
def test_missing_dgl_names_the_install_command(monkeypatch: pytest.MonkeyPatch,
                                               tmp_path: Path, call: str) -> None:
    """Without DGL (simulated: ``import dgl`` fails), every DGL path raises one error that
    names the extra's install command; the core imports and runs without it."""
    monkeypatch.setitem(sys.modules, "dgl", None)  # `import dgl` raises ImportError
    (tmp_path / "g.bin").write_bytes(b"x")
    with pytest.raises(MissingExtraError, match=r"pip install 'dpgnn\[dgl\]'") as err:
        if call == "import":
            interop.import_dgl()
        elif call == "loader":
            load_from_spec(IngestSpec(format="dgl", source=str(tmp_path / "g.bin")))
        else:
            from dpgnn_core.methods.registry import get

            get("dp-gcn").preflight(DpgnnSpec(epsilon=1.0, backend="dgl"),
                                    {"task": "node", "split_counts": {"train": 10}})
    assert "dgl==1.1.3" in str(err.value)
    # The default backend needs no DGL.
    from dpgnn_core.methods import preflight

    preflight.check_backend(DpgnnSpec(epsilon=1.0))


def test_without_dgl_auto_inference_falls_back_to_pyg(monkeypatch: pytest.MonkeyPatch) -> None:
    from dpgnn_core.models import subgraph_gnn

    d = csbm(num_nodes=60, feature_dim=4, num_classes=2, avg_degree=3, seed=0)
    model = subgraph_gnn.SubgraphGNN("gcn", 4, 2, hidden=8)
    x, ei = torch.from_numpy(d.x), torch.from_numpy(d.edge_index)
    monkeypatch.setitem(sys.modules, "dgl", None)
    subgraph_gnn.dgl_available.cache_clear()
    try:
        assert not subgraph_gnn.dgl_available()
        torch.testing.assert_close(subgraph_gnn.sparse_logits(model, x, ei),  # auto
                                   model.forward_sparse(x, ei))
        with pytest.raises(MissingExtraError, match=r"pip install 'dpgnn\[dgl\]'"):
            subgraph_gnn.sparse_logits(model, x, ei, "dgl")
    finally:
        subgraph_gnn.dgl_available.cache_clear()
