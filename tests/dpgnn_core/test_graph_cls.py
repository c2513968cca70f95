"""Private graph classification: exact per-graph gradients, the ledger at graph level with
δ = 1/(10 N), learning on the paper's synthetic set, clinical metrics, bad input."""

from __future__ import annotations

import copy
import dataclasses

import numpy as np
import pytest
import torch

from dpgnn_core.data.synthetic import er_graphs
from dpgnn_core.errors import DataError
from dpgnn_core.graph.subgraphs import build_batch
from dpgnn_core.methods.graph_cls import (
    evaluate_graphs,
    graph_records,
    train_graph_classifier,
)
from dpgnn_core.models.graph_gnn import GraphGNN
from dpgnn_core.privacy import make_accountant
from dpgnn_core.specs import GraphClsSpec
from dpgnn_core.training.per_sample import PerSampleClipper, private_step

DATA = er_graphs(num_graphs=400, split=(240, 40, 120), seed=1)


@pytest.mark.parametrize(("conv", "norm", "pool"), [("gcn", "instance", "mean"),
                                                    ("sage", "none", "max"),
                                                    ("gat", "instance", "mean")])
def test_per_graph_gradients_are_exact(conv: str, norm: str, pool: str) -> None:
    torch.manual_seed(0)
    model = GraphGNN(conv, 9, 2, hidden=8, layers=2, pool=pool, norm=norm, heads=2)
    reference = copy.deepcopy(model)
    recs = graph_records(DATA)
    b = build_batch(recs, np.arange(10), DATA.x, normalisation="none")
    y = torch.from_numpy(DATA.graph_y[:10])
    clipper = PerSampleClipper(model)
    with clipper.capture():
        losses = torch.nn.functional.cross_entropy(model(b.x, b.adj, b.mask), y,
                                                   reduction="none")
        norms = private_step(clipper, losses, clips=[1e9], noise_stds=[0.0], denominator=1.0,
                             generator=None)
    expected_sum = {n: torch.zeros_like(p) for n, p in reference.named_parameters()}
    for k in range(10):
        reference.zero_grad()
        torch.nn.functional.cross_entropy(
            reference(b.x[k:k + 1], b.adj[k:k + 1], b.mask[k:k + 1]), y[k:k + 1]).backward()
        flat = torch.cat([p.grad.reshape(-1) for p in reference.parameters()])
        assert float(norms[0, k]) == pytest.approx(float(flat.norm()), rel=1e-4)
        for n, p in reference.named_parameters():
            expected_sum[n] += p.grad
    for n, p in model.named_parameters():
        torch.testing.assert_close(p.grad, expected_sum[n], rtol=1e-4, atol=1e-6)


def test_private_run_is_accounted_at_graph_level() -> None:
    r = train_graph_classifier(DATA, GraphClsSpec(epsilon=2.0, steps=40, batch_size=40,
                                                  device="cpu"))
    (event,) = r.ledger.events
    assert event.level == "graph" and event.sampling_rate == pytest.approx(40 / 240)
    assert r.report["delta"] == pytest.approx(1 / 2400)  # δ = 1/(10 N), like node methods
    assert make_accountant(r.report["accountant"]).epsilon(r.ledger, r.report["delta"]) <= 2.0
    assert r.report["noise_std"] == pytest.approx(r.report["noise_multiplier"] * 1.0)
    assert r.report["method"] == "dp-graph-gcn"
    logged = [h for h in r.history if "val_accuracy" in h]
    assert logged and {"test_roc_auc", "test_sensitivity", "test_specificity",
                       "test_f1_micro"} <= set(logged[-1])


def test_non_private_model_learns_the_synthetic_set() -> None:
    r = train_graph_classifier(DATA, GraphClsSpec(steps=200, device="cpu"))
    m = evaluate_graphs(r.model, DATA, "cpu")["test"]
    assert r.report["method"] == "graph-gcn" and r.ledger.events == ()
    assert m["accuracy"] > 0.85 and m["roc_auc"] > 0.9
    assert 0 <= m["sensitivity"] <= 1 and 0 <= m["specificity"] <= 1


def test_batchnorm_refused_under_dp_but_allowed_without() -> None:
    # refused by the spec itself (issue 48: before any work), as pydantic's ValueError
    with pytest.raises(ValueError, match="BatchNorm"):
        train_graph_classifier(DATA, GraphClsSpec(epsilon=1.0, norm="batch", steps=2,
                                                  device="cpu"))
    train_graph_classifier(DATA, GraphClsSpec(norm="batch", steps=2, device="cpu"))


def test_bad_input() -> None:
    with pytest.raises(DataError, match="exceeds"):
        train_graph_classifier(DATA, GraphClsSpec(batch_size=1000, device="cpu"))
    gy = DATA.graph_y.copy()
    gy[0] = 5
    with pytest.raises(DataError, match="graph labels"):
        train_graph_classifier(dataclasses.replace(DATA, graph_y=gy), GraphClsSpec())
    empty = dataclasses.replace(DATA, graph_y=np.append(DATA.graph_y, 0),
                                graph_split=np.append(DATA.graph_split, np.int8(0)))
    with pytest.raises(DataError, match="zero nodes"):
        train_graph_classifier(empty, GraphClsSpec())
    only_test = DATA.graph_y.copy()
    only_test[np.flatnonzero(DATA.graph_split == 2)[0]] = 2
    three = dataclasses.replace(DATA, graph_y=only_test, num_classes=3)
    with pytest.warns(UserWarning, match="occur in test but not in training"):
        train_graph_classifier(three, GraphClsSpec(steps=2, device="cpu"))


@pytest.mark.parametrize("conv", ["gcn", "sage", "gat"])
@pytest.mark.parametrize(("norm", "pool"), [("instance", "mean"), ("none", "max")])
def test_dense_and_sparse_paths_agree(conv: str, norm: str, pool: str) -> None:
    torch.manual_seed(0)
    model = GraphGNN(conv, 9, 2, hidden=8, layers=3, pool=pool, norm=norm, heads=2).eval()
    recs = graph_records(DATA)
    ids = np.arange(6)
    b = build_batch(recs, ids, DATA.x, normalisation="none")
    dense = model(b.x, b.adj, b.mask)
    nodes = np.concatenate([recs.subgraph(int(i))[0] for i in ids])
    local = {int(v): j for j, v in enumerate(nodes)}
    edges = np.concatenate([recs.subgraph(int(i))[1] for i in ids], axis=1)
    ei = torch.tensor([[local[int(s)] for s in edges[0]], [local[int(d)] for d in edges[1]]])
    batch = torch.from_numpy(np.asarray(DATA.graph_id)[nodes])
    sparse = model.forward_sparse(torch.from_numpy(DATA.x[nodes]), ei, batch)
    torch.testing.assert_close(dense, sparse, rtol=1e-4, atol=1e-5)


def test_explanations_compare_edge_sets() -> None:
    from dpgnn_core.methods.explain import compare, edge_iou, explain

    assert edge_iou({(0, 1)}, {(0, 1), (1, 2)}) == 0.5 and edge_iou(set(), set()) == 1.0
    model = train_graph_classifier(DATA, GraphClsSpec(steps=20, device="cpu")).model
    ids = np.flatnonzero(DATA.graph_split == 2)[:2]
    a = explain(model, DATA, ids, epochs=5)
    again = explain(model, DATA, ids, epochs=5)
    assert all(np.array_equal(x["mask"], y["mask"]) for x, y in zip(a, again, strict=True))
    for e in a:
        assert e["mask"].shape == (e["edge_index"].shape[1],)
        assert e["edges"] == {tuple(p) for p in e["edge_index"][:, e["mask"] >= 0.2].T}
    same = compare(a, a)
    assert same["iou_private_nonprivate"] == 1.0
    original = {tuple(p) for p in a[0]["edge_index"].T}
    assert same["graphs"][0]["iou_original_private"] == pytest.approx(
        len(a[0]["edges"]) / len(original))


def test_train_until_the_budget_is_spent() -> None:
    r = train_graph_classifier(DATA, GraphClsSpec(epsilon=3.0, noise_multiplier=1.5,
                                                  batch_size=40, device="cpu",
                                                  eval_every=10**6))
    t = r.report["steps"]
    assert len(r.history) == t > 0 and r.report["noise_multiplier"] == 1.5
    acc = make_accountant(r.report["accountant"])
    from dpgnn_core.methods.graph_cls import ledger_for

    spec = GraphClsSpec(epsilon=3.0, batch_size=40)
    over = ledger_for(spec.model_copy(update={"steps": t + 1}), 240)(1.5)
    assert r.report["epsilon"] <= 3.0 < acc.epsilon(over, r.report["delta"])
