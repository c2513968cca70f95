"""The DGL backend of the subgraph models' sparse inference (DGL's GraphConv / SAGEConv /
GINConv loaded with the trained weights) gives PyG's logits, to 1e-5."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dpgnn_core.data.synthetic import csbm
from dpgnn_core.methods.registry import get
from dpgnn_core.models.subgraph_gnn import SubgraphGNN, sparse_logits
from dpgnn_core.specs import DpgnnSpec, DrwSpec

pytest.importorskip("dgl", reason="the dgl extra: pip install 'dpgnn[dgl]' (make test "
                    "installs it)")

GRAPH = csbm(num_nodes=300, num_classes=3, feature_dim=10, avg_degree=6, seed=5)


def _directed_with_isolated() -> tuple[torch.Tensor, torch.Tensor]:
    """One direction of each edge, and the last 20 nodes without any edge: zero in-degrees
    (an empty mean is 0 on both paths)."""
    ei = GRAPH.edge_index
    keep = (ei[0] < ei[1]) & (ei[0] < 280) & (ei[1] < 280)
    return torch.from_numpy(GRAPH.x), torch.from_numpy(np.ascontiguousarray(ei[:, keep]))


@pytest.mark.parametrize("conv", ["gcn", "sage", "gin"])
@pytest.mark.parametrize("layers", [1, 3])
@pytest.mark.parametrize("graph", ["undirected", "directed"])
def test_dgl_logits_equal_pyg(conv: str, layers: int, graph: str) -> None:
    x, ei = ((torch.from_numpy(GRAPH.x), torch.from_numpy(GRAPH.edge_index))
             if graph == "undirected" else _directed_with_isolated())
    torch.manual_seed(layers)
    model = SubgraphGNN(conv, GRAPH.num_features, 3, hidden=24, layers=layers, gin_eps=0.4,
                        activation="elu").eval()
    for p in model.parameters():  # weights away from their initialisation
        p.data.add_(0.1 * torch.randn_like(p))
    with torch.no_grad():
        pyg = sparse_logits(model, x, ei, "pyg")
        dgl = sparse_logits(model, x, ei, "dgl")
    torch.testing.assert_close(dgl, pyg, rtol=1e-5, atol=1e-5)
    assert pyg.std() > 0.01  # not a trivial (constant) output


@pytest.mark.parametrize(("method", "spec_type", "options"), [
    ("dp-sage", DpgnnSpec, {"max_degree": 3}),
    ("drw-gcn", DrwSpec, {"walk_length": 3}),
])
def test_backend_is_chosen_by_the_spec_through_the_registry(
        monkeypatch: pytest.MonkeyPatch, method: str, spec_type: type, options: dict) -> None:
    from dpgnn_core.models import subgraph_gnn

    calls: list[str] = []
    for name, fn in list(subgraph_gnn.SPARSE_BACKENDS.items()):
        monkeypatch.setitem(subgraph_gnn.SPARSE_BACKENDS, name,
                            lambda *a, _n=name, _f=fn: calls.append(_n) or _f(*a))
    m = get(method)
    spec = m.spec(epsilon=4.0, steps=5, batch_size=32, hidden=16, device="cpu",
                  backend="pyg", **options)
    fitted = m.fit(GRAPH, spec)
    pyg = m.evaluate(fitted.model, GRAPH, spec)
    dgl_spec = m.spec(epsilon=4.0, steps=5, batch_size=32, hidden=16, device="cpu",
                      backend="dgl", **options)
    assert isinstance(dgl_spec, spec_type)
    assert calls == ["pyg"]
    dgl = m.evaluate(fitted.model, GRAPH, dgl_spec)
    assert calls == ["pyg", "dgl"]
    m.evaluate(fitted.model, GRAPH, spec.model_copy(update={"backend": "auto"}))
    assert calls == ["pyg", "dgl", "dgl"]  # auto: DGL, installed here and faster
    for split in ("train", "val", "test"):
        assert dgl[split]["accuracy"] == pytest.approx(pyg[split]["accuracy"], abs=1e-9)


def test_gat_has_no_dgl_backend() -> None:
    with pytest.raises(ValueError, match="backend 'dgl' runs gcn, sage and gin"):
        DpgnnSpec(conv="gat", epsilon=1.0, backend="dgl")


@pytest.mark.parametrize(("conv", "device", "installed", "expected"), [
    ("gcn", "cpu", True, "dgl"),
    ("gin", "cpu", True, "dgl"),
    ("gat", "cpu", True, "pyg"),  # no DGL layer for this attention
    ("sage", "meta", True, "pyg"),  # not the CPU: the extra is DGL's CPU build
    ("sage", "cpu", False, "pyg"),  # DGL not installed
])
def test_auto_backend(monkeypatch: pytest.MonkeyPatch, conv: str, device: str,
                      installed: bool, expected: str) -> None:
    from dpgnn_core.models import subgraph_gnn

    monkeypatch.setattr(subgraph_gnn, "dgl_available", lambda: installed)
    assert subgraph_gnn.resolve_backend("auto", conv, torch.device(device)) == expected
    assert subgraph_gnn.resolve_backend("pyg", conv, torch.device(device)) == "pyg"
