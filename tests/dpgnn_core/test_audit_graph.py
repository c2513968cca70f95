"""Graph canaries (dpgnn_core.audit.graph_canaries) for private graph classification:
power (the non-private classifier gives a large ε lower bound), soundness (DP-SGD over
graphs keeps the bound below the reported ε), and hygiene (excluded canary graphs absent
from the training data, secret bits, scoring on the graph that was trained on)."""

from __future__ import annotations

import warnings
from dataclasses import replace

import numpy as np
import pytest
import torch

from dpgnn_core.audit.canaries import audit, insert_node_canaries
from dpgnn_core.audit.graph_canaries import (
    canary_graph_edges,
    canary_logits,
    insert_graph_canaries,
    score_graph_canaries,
)
from dpgnn_core.data.synthetic import csbm, er_graphs
from dpgnn_core.data.validate import validate_graph_data
from dpgnn_core.errors import DataError
from dpgnn_core.methods import graph_cls
from dpgnn_core.methods.registry import get

M = 200  # canaries per audit: r = 100 guesses, all correct gives about 3.1 at delta ~ 6e-4


@pytest.fixture(scope="module")
def data():
    return er_graphs(num_graphs=100, num_nodes=10, split=(60, 20, 20), seed=0)


def _audit(name, data, m=M, **opts):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return audit(name, data, get(name).spec(device="cpu", **opts), m=m)


@pytest.mark.parametrize("name", ["graph-gcn", "graph-sage"])
def test_non_private_control_has_power(data, name):
    res = _audit(name, data)
    assert res.kind == "graph" and res.relation == "add/remove"
    assert res.reported_epsilon == float("inf")
    assert res.r == M // 2 and res.v >= res.r - 2
    assert res.epsilon_lower > 2.5, res.to_dict()


@pytest.mark.parametrize("epsilon", [1.0, 2.0])
def test_private_run_stays_below_reported_epsilon(data, epsilon):
    res = _audit("dp-graph-gcn", data, epsilon=epsilon)
    assert res.reported_epsilon == pytest.approx(epsilon, rel=1e-3)
    assert res.report is not None
    assert res.report.protects.startswith("model parameters against adding or removing "
                                          "one graph")
    assert res.epsilon_lower < res.reported_epsilon, res.to_dict()
    assert res.scores.shape == (M,) and res.included.shape == (M,)


def test_excluded_canary_graphs_are_not_in_the_training_data(data):
    n, d, g = data.num_nodes, data.num_features, data.num_graphs
    out, can = insert_graph_canaries(data, 50, nodes=3)
    validate_graph_data(out)
    inc = can.included
    k = int(inc.sum())
    assert 0 < k < 50  # probability 2 * 2**-50 of failing
    assert can.kind == "graph" and can.relation == "add/remove"
    assert out.num_graphs == g + k and out.num_nodes == n + 3 * k
    assert out.num_features == d + 50
    assert (can.node_ids[~inc] == -1).all()
    ids = can.node_ids[inc]
    np.testing.assert_array_equal(ids, g + np.arange(k))
    np.testing.assert_array_equal(out.graph_y[ids], can.labels[inc])
    assert (out.graph_split[ids] == 0).all() and (out.split[n:] == 0).all()
    # each included canary: 3 nodes with its own Dirac row, a triangle, nothing else
    for i in np.flatnonzero(inc):
        nodes = np.flatnonzero(out.graph_id == can.node_ids[i])
        assert nodes.shape == (3,)
        np.testing.assert_array_equal(out.x[nodes], np.repeat(can.features[i:i + 1], 3, 0))
        own = np.isin(out.edge_index, nodes)
        assert (own[0] == own[1]).all() and own[0].sum() == 6
    # an excluded canary's feature column is zero on every node: no row, no label, no edge
    assert not out.x[:, d + np.flatnonzero(~inc)].any()
    assert out.x[:, d + np.flatnonzero(inc)].any(0).all()
    np.testing.assert_array_equal(out.x[:n, :d], data.x)
    np.testing.assert_array_equal(out.edge_index[:, :data.num_edges], data.edge_index)
    assert out.num_edges == data.num_edges + 6 * k


def test_edge_attributes_follow_the_canary_edges(data):
    base = er_graphs(num_graphs=10, num_nodes=5, split=(6, 2, 2), seed=1)
    base.edge_attr = np.ones((base.num_edges, 2), np.float32)
    out, can = insert_graph_canaries(base, 8, nodes=2)
    validate_graph_data(out)
    assert out.edge_attr.shape == (out.num_edges, 2)
    assert not out.edge_attr[base.num_edges:].any()
    assert out.num_edges == base.num_edges + 2 * int(can.included.sum())


@pytest.mark.parametrize("nodes,edges", [(1, 0), (2, 2), (4, 8)])
def test_canary_graph_shape(nodes, edges):
    e = canary_graph_edges(nodes)
    assert e.shape == (edges, 2)
    if edges:
        assert int(e.max()) + 1 == nodes
        assert set(map(tuple, e.tolist())) == set(map(tuple, e[:, ::-1].tolist()))


def test_inclusion_bits_do_not_follow_the_seed(data):
    a = _audit("graph-gcn", data, m=64, seed=3, steps=5)
    b = _audit("graph-gcn", data, m=64, seed=3, steps=5)
    assert not np.array_equal(a.included, b.included)
    _, c1 = insert_graph_canaries(data, 64)
    _, c2 = insert_graph_canaries(data, 64)
    assert not np.array_equal(c1.included, c2.included)
    # a caller's generator makes them reproducible (the tests' own choice, never the seed)
    _, r1 = insert_graph_canaries(data, 64, rng=np.random.default_rng(7))
    _, r2 = insert_graph_canaries(data, 64, rng=np.random.default_rng(7))
    np.testing.assert_array_equal(r1.included, r2.included)
    # the multi-run audit forces the bits; the rest of the canary is the same draw
    forced = np.arange(64) % 2 == 0
    _, f = insert_graph_canaries(data, 64, rng=np.random.default_rng(7), included=forced)
    np.testing.assert_array_equal(f.included, forced)
    np.testing.assert_array_equal(f.labels, r1.labels)


def test_scores_are_the_loss_on_the_trained_graph(data):
    """The attacker's canary graph is the graph the model trained on: its logits equal the
    model's on the included canary as stored in the training data."""
    out, can = insert_graph_canaries(data, 20, rng=np.random.default_rng(0), nodes=5)
    spec = get("graph-gcn").spec(device="cpu", steps=3)
    model = graph_cls.train_graph_classifier(out, spec).model
    inc = np.flatnonzero(can.included)
    ref = graph_cls.predict(model, out, graph_cls.graph_records(out), can.node_ids[inc],
                            model.head2.weight.device)
    np.testing.assert_allclose(canary_logits(model, can).numpy()[inc], ref, rtol=1e-5,
                               atol=1e-5)
    # the score is the cross-entropy, logit-scaled: log((1 - p) / p) = log(expm1(CE))
    scores = score_graph_canaries(model, can)
    logp = ref - np.log(np.exp(ref).sum(1, keepdims=True))
    ce = -logp[np.arange(inc.size), can.labels[inc]]
    np.testing.assert_allclose(scores[inc], np.log(np.expm1(ce)), rtol=1e-4, atol=1e-4)


def test_scores_do_not_tie_where_the_loss_rounds_to_zero(data):
    """Two confident predictions (margins 60 and 70) both have cross-entropy 0.0 in float64;
    the logit-scaled score still tells them apart, in the same order."""
    _, can = insert_graph_canaries(data, 1, rng=np.random.default_rng(0), nodes=1)
    can = replace(can, labels=np.zeros(1, np.int64))
    scores, losses = [], []
    for margin in (60.0, 70.0):
        model = graph_cls.build_model(get("graph-gcn").spec(), data.num_features + 1, 2)
        with torch.no_grad():
            for p in model.parameters():
                p.zero_()
            model.head2.bias[0] = margin  # logits (margin, 0) whatever the input
        logits = canary_logits(model, can).double()
        losses.append(float(torch.nn.functional.cross_entropy(logits, torch.zeros(1).long())))
        scores.append(float(score_graph_canaries(model, can)[0]))
    assert losses == [0.0, 0.0]
    np.testing.assert_allclose(scores, [-60.0, -70.0])


def test_refuses_what_it_cannot_audit(data):
    node_data = csbm(num_nodes=50, num_classes=2, feature_dim=4, seed=0)
    with pytest.raises(DataError, match="graph-classification data"):
        insert_graph_canaries(node_data, 10)
    with pytest.raises(DataError, match="at least one canary"):
        insert_graph_canaries(data, 0)
    with pytest.raises(DataError, match="at least one node"):
        insert_graph_canaries(data, 5, nodes=0)
    _, node_can = insert_node_canaries(node_data, 5)
    model = graph_cls.build_model(get("graph-gcn").spec(), data.num_features + 5, 2)
    with pytest.raises(DataError, match="not graph canaries"):
        score_graph_canaries(model, node_can)
    norm = graph_cls.build_model(get("graph-gcn").spec(norm="instance"),
                                 data.num_features + 5, 2)
    _, can = insert_graph_canaries(data, 5)
    with pytest.raises(DataError, match="instance norm"):
        score_graph_canaries(norm, can)
    with pytest.raises(DataError, match="instance norm"):  # before training
        audit("graph-gcn", data, get("graph-gcn").spec(norm="instance", steps=10**6), m=5)
