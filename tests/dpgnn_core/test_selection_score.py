"""The private selection score (dpgnn_core.sweep_tuning): its sensitivity per method family
on adversarial neighbouring datasets, its event in every candidate's ledger, its noise."""

from __future__ import annotations

import dataclasses
import functools
import secrets
from typing import Any

import numpy as np
import pytest
import torch

from dpgnn_core import sweep_tuning as st
from dpgnn_core.data.graph import GraphData
from dpgnn_core.data.synthetic import csbm, er_graphs
from dpgnn_core.methods.registry import METHODS, get
from dpgnn_core.privacy.accountants import RdpAccountant
from dpgnn_core.privacy.events import GaussianEvent, Ledger, PrivacyError
from dpgnn_core.privacy.report import PrivacyReport
from dpgnn_core.privacy.tuning import tuning_epsilon
from dpgnn_core.sweeps import SweepSpec, points


def _count(method: str, model: torch.nn.Module, data: GraphData, spec: Any) -> int:
    """The exact number of correct validation predictions, through the method's own
    evaluation (what the sweep reads)."""
    acc = get(method).evaluate(model, data, spec)["val"]["accuracy"]
    return st.correct_count(acc, data.split_counts()["val"])


def _mlp(data: GraphData, seed: int) -> tuple[torch.nn.Module, Any]:
    from dpgnn_core.models.mlp import MLP

    torch.manual_seed(seed)
    spec = get("dp-mlp").spec(epsilon=1.0, hidden=8, device="cpu")
    return MLP(data.num_features, 8, data.num_classes, spec.layers, dropout=0.0).eval(), spec


def _remove_node(data: GraphData, v: int) -> GraphData:
    """``data`` without node v and its edges (add/remove's neighbour)."""
    keep = np.ones(data.num_nodes, bool)
    keep[v] = False
    new = np.cumsum(keep) - 1
    ei = data.edge_index[:, keep[data.edge_index[0]] & keep[data.edge_index[1]]]
    return dataclasses.replace(data, x=data.x[keep], y=data.y[keep], split=data.split[keep],
                               edge_index=np.ascontiguousarray(new[ei]))


@pytest.mark.slow  # > 4 s of CPU (make test-fast leaves it out)
def test_dp_mlp_count_changes_by_at_most_one_and_reaches_it() -> None:
    """Every neighbour of a small dataset under add/remove (remove any node) and
    replace-one (any node's features and label replaced by adversarial values): the
    exact count of correct validation predictions of a fixed model changes by at most the
    registered sensitivity 1, and by exactly 1 for some neighbour (so a smaller claimed
    bound would fail)."""
    data = csbm(num_nodes=40, num_classes=3, feature_dim=4, seed=3)
    model, spec = _mlp(data, 0)
    base = _count("dp-mlp", model, data, spec)
    rng = np.random.default_rng(0)
    diffs = []
    for v in range(data.num_nodes):
        diffs.append(abs(_count("dp-mlp", model, _remove_node(data, v), spec) - base))
        for _ in range(3):
            x, y = data.x.copy(), data.y.copy()
            x[v] = rng.normal(0, 50, size=x.shape[1])  # far out: any prediction
            for label in range(data.num_classes):
                y[v] = label
                d2 = dataclasses.replace(data, x=x, y=y.copy())
                diffs.append(abs(_count("dp-mlp", model, d2, spec) - base))
    assert max(diffs) == get("dp-mlp").score_sensitivity == 1.0


def test_graph_classification_count_changes_by_at_most_one() -> None:
    from dpgnn_core.methods.graph_cls import build_model

    data = er_graphs(num_graphs=24, num_nodes=6, split=(8, 10, 6), seed=1)
    spec = get("dp-graph-gcn").spec(epsilon=1.0, hidden=8, device="cpu")
    torch.manual_seed(0)
    model = build_model(spec, data.num_features, data.num_classes).eval()
    base = _count("dp-graph-gcn", model, data, spec)
    assert data.graph_id is not None and data.graph_y is not None
    assert data.graph_split is not None
    rng = np.random.default_rng(1)
    diffs = []
    for g in range(data.num_graphs):
        nodes = data.graph_id == g
        removed = data.graph_split.copy()
        removed[g] = 3  # the graph leaves the validation set (its removal, for the count)
        diffs.append(abs(_count("dp-graph-gcn", model,
                                dataclasses.replace(data, graph_split=removed), spec) - base))
        for _ in range(3):
            x = data.x.copy()
            x[nodes] = rng.normal(0, 30, size=(int(nodes.sum()), x.shape[1]))
            for label in range(data.num_classes):
                gy = data.graph_y.copy()
                gy[g] = label
                d2 = dataclasses.replace(data, x=x, graph_y=gy)
                diffs.append(abs(_count("dp-graph-gcn", model, d2, spec) - base))
    assert max(diffs) == get("dp-graph-gcn").score_sensitivity == 1.0


def _star(leaves: int) -> GraphData:
    """A hub (node 0, a training node) joined to ``leaves`` validation nodes."""
    rng = np.random.default_rng(0)
    src = np.r_[np.zeros(leaves, np.int64), np.arange(1, leaves + 1)]
    dst = np.r_[np.arange(1, leaves + 1), np.zeros(leaves, np.int64)]
    return GraphData(name="star", task="node",
                     x=rng.normal(size=(leaves + 1, 4)).astype(np.float32),
                     edge_index=np.stack([src, dst]), y=np.zeros(leaves + 1, np.int64),
                     split=np.r_[0, np.ones(leaves)].astype(np.int8), num_classes=3)


@pytest.mark.parametrize("method", ["dp-gcn", "drw-gcn"])
def test_graph_methods_count_is_not_bounded_by_one(method: str) -> None:
    """On a star, replacing the hub's features (one node, under node_feature) flips the
    prediction of every validation leaf: the count changes by the number of leaves. So no
    bound of 1 holds for methods that predict on the full graph, and none is claimed."""
    from dpgnn_core.methods._subgraph import build_subgraph_model

    leaves = 12
    data = _star(leaves)
    spec = get(method).spec(epsilon=1.0, hidden=8, layers=1, device="cpu")
    torch.manual_seed(0)
    model = build_subgraph_model(spec, 4, 3).eval()
    rng = np.random.default_rng(2)
    for _ in range(200):  # a direction whose two ends predict different classes
        d = rng.normal(size=4).astype(np.float32)
        ends = []
        for sign in (1.0, -1.0):
            x = data.x.copy()
            x[0] = sign * 1e4 * d
            with torch.no_grad():
                ends.append((x, model.forward_sparse(torch.tensor(x), torch.tensor(
                    data.edge_index))[1:].argmax(1).numpy()))
        (xa, pa), (xb, pb) = ends
        if len(set(pa)) == 1 and len(set(pb)) == 1 and pa[0] != pb[0]:
            break
    else:
        pytest.fail("no direction found")
    y = np.full(leaves + 1, int(pa[0]), np.int64)
    a = _count(method, model, dataclasses.replace(data, x=xa, y=y), spec)
    b = _count(method, model, dataclasses.replace(data, x=xb, y=y), spec)
    assert (a, b) == (leaves, 0)  # one node's features moved the count by every leaf
    assert get(method).score_sensitivity is None


def test_families_claim_a_score_sensitivity_only_where_derived() -> None:
    claimed = {n for n, m in METHODS.items() if m.score_sensitivity is not None}
    assert claimed == {"dp-mlp", "dp-graph-gcn", "dp-graph-sage", "dp-graph-gat"}


@functools.cache  # a frozen plan, only read: the default one is planned once per process
def _plan(method: str = "dp-mlp", share: float = 0.2, **fixed: Any) -> st.TuningPlan:
    sw = SweepSpec(name="t", dataset="/none", epsilons=[2.0], selection="private",
                   tuning={"score_share": share}, methods=[
                       {"method": method, "grid": {"steps": [20, 300]},
                        "fixed": {"batch_size": 16, **fixed}}])
    (p,) = st.plan_private_selection(sw, points(sw), 200)
    return p


def test_every_candidate_ledger_holds_the_score_and_the_target_holds() -> None:
    plan = _plan()
    assert plan.score is not None
    rdp = RdpAccountant()
    for c in plan.candidates:
        scores = [e for e in c.ledger.events if isinstance(e, GaussianEvent)]
        assert [e.description for e in scores] == [st.SCORE_EVENT]
        assert (scores[0].level, scores[0].relation) == ("node", "add_remove")
    # the score alone spends its share of the target (feasible side)
    alone = rdp.epsilon(plan.score.ledger(), plan.delta)
    assert 0.2 * 2.0 * (1 - 1e-3) < alone <= 0.2 * 2.0
    d, dc = plan.distribution, plan.delta
    # the tuning ε of the candidates' ledgers (training + score) meets the target ...
    assert plan.epsilon == tuning_epsilon(plan.ledgers(), d, dc) <= 2.0
    # ... and would be understated without the score's event
    training = [Ledger(c.ledger.entries[:-1]) for c in plan.candidates]
    assert tuning_epsilon(training, d, dc) < 0.98 * plan.epsilon
    # the score costs training noise: more with a larger share
    z = [c.noise_multiplier for c in plan.candidates]
    z_small = [c.noise_multiplier for c in _plan(share=0.05).candidates]
    assert all(a > b for a, b in zip(z, z_small, strict=True))


def test_graph_cls_score_is_at_graph_level_and_graph_methods_have_none() -> None:
    g = _plan("dp-graph-gcn")
    assert g.score is not None and (g.score.level, g.score.relation) == ("graph",
                                                                         "add_remove")
    p = _plan("dp-gcn", max_degree=2)
    assert p.score is None
    assert not any(isinstance(e, GaussianEvent) for c in p.candidates for e in c.ledger.events)
    assert "unaccounted" in p.report_line() and "noisy" in g.report_line()


def test_verify_candidate_needs_the_score_in_the_plan() -> None:
    from dpgnn_core.methods.private_run import PrivateRun

    plan = _plan()
    c = plan.candidates[0]
    spec = st.candidate_spec(plan, st.Draw(0, 7))
    make = get("dp-mlp").ledger_for(c.spec, 200)
    ledger, _z, raw = PrivateRun().calibrate(spec, 200, make, method="dp-mlp", protects="x")
    report = PrivacyReport.from_dict(raw)
    st.verify_candidate(plan, st.Draw(0, 7), report, ledger)  # training + planned score
    less = dataclasses.replace(plan, score=dataclasses.replace(
        plan.score, noise_multiplier=0.5 * plan.score.noise_multiplier))  # type: ignore[arg-type]
    with pytest.raises(PrivacyError):  # a noisier-than-planned release is refused
        st.verify_candidate(less, st.Draw(0, 7), report, ledger)


def test_noisy_count_noise_and_secret_source(monkeypatch: pytest.MonkeyPatch) -> None:
    score = st.ScorePlan(1.0, 3.0, "node", "add_remove", 0.2)
    gen = torch.Generator().manual_seed(0)
    draws = np.array([st.noisy_count(10, score, gen)[0] for _ in range(4000)])
    assert abs(draws.mean() - 10) < 4 * 3.0 / np.sqrt(4000)
    assert draws.std() == pytest.approx(3.0, rel=0.05)
    _value, event = st.noisy_count(10, score)
    assert event == score.event() and event.noise_multiplier == 3.0
    calls: list[int] = []
    monkeypatch.setattr(secrets, "randbits", lambda bits: calls.append(bits) or 5)
    a, _ = st.noisy_count(10, score)
    b, _ = st.noisy_count(10, score)
    assert calls == [64, 64] and a == b  # the default source is secrets alone
    for bad in (-1, 2.5):
        with pytest.raises(PrivacyError):
            st.noisy_count(bad, score)  # type: ignore[arg-type]


def test_correct_count() -> None:
    assert st.correct_count(7 / 9, 9) == 7 and st.correct_count(0.0, 3) == 0
    for acc, n in [(0.5, 9), (1.2, 5), (-0.2, 5)]:
        with pytest.raises(PrivacyError):
            st.correct_count(acc, n)
