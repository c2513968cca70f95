"""The canary table (issue 27 §5): one module per canary kind, each a row of
``CANARY_KINDS`` that ``insert_canaries`` and ``score_canaries`` read, no import circle
between the audit and a kind, and the old names still importable from
``dpgnn_core.audit.canaries``."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from typing import get_args

import numpy as np
import pytest

import dpgnn_core.audit.canaries as canaries
from dpgnn_core.audit.canary_record import CanaryKind, Kind
from dpgnn_core.data.synthetic import csbm, er_graphs

KIND_MODULES = ["node_canaries", "edge_canaries", "star_canaries", "node_edge_canaries",
                "graph_canaries"]


@pytest.fixture(scope="module")
def data():
    return csbm(num_nodes=120, num_classes=3, feature_dim=8, avg_degree=4, seed=0)


def test_every_kind_has_one_row():
    assert set(canaries.CANARY_KINDS) == set(get_args(Kind))
    assert all(isinstance(row, CanaryKind) for row in canaries.CANARY_KINDS.values())
    # every kind's default threat model is stated
    assert set(get_args(Kind)) <= set(canaries.THREAT_MODELS)


@pytest.fixture(scope="module")
def audit_after_each_kind():
    """One fresh interpreter imports the kinds' modules one after another and notes, after
    each, whether the audit (``dpgnn_core.audit.canaries``) is loaded. Until a kind loads it,
    each kind is imported exactly as in a process of its own (what an earlier kind loaded
    did not load the audit either); one process instead of one per kind."""
    code = ("import importlib, json, sys\n"
            "seen = {}\n"
            f"for m in {KIND_MODULES!r}:\n"
            "    importlib.import_module('dpgnn_core.audit.' + m)\n"
            "    seen[m] = 'dpgnn_core.audit.canaries' in sys.modules\n"
            "print(json.dumps(seen))\n")
    r = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("module", KIND_MODULES)
def test_a_kind_imports_without_the_audit(module, audit_after_each_kind):
    """A kind's module needs the record, never the audit that reads the table (the old
    ``canaries`` <-> ``graph_canaries`` circle)."""
    assert audit_after_each_kind[module] is False


def _plan(kind, relation="add/remove", attack="default", degree=0):
    return canaries.AuditPlan(method="m", family="f", kind=kind, relation=relation,
                              attack=attack, threat_model="t", degree=degree)


def test_insert_and_score_read_the_table(monkeypatch, data):
    seen = []
    row = CanaryKind(
        insert=lambda plan, d, m, scale, rng, inc: seen.append(("insert", m, scale)) or (d, None),
        score=lambda plan, model, extra, d, can, spec: seen.append(("score",)) or np.zeros(3))
    monkeypatch.setitem(canaries.CANARY_KINDS, "node", row)
    out, _ = canaries.insert_canaries(_plan("node"), data, 5, scale=2.0)
    assert out is data
    assert canaries.score_canaries(_plan("node"), None, {}, data, None, None).shape == (3,)
    assert seen == [("insert", 5, 2.0), ("score",)]


@pytest.mark.parametrize(("kind", "direct"), [
    ("node", lambda d, rng: canaries.insert_node_canaries(d, 12, relation="replace-one",
                                                          scale=3.0, rng=rng)),
    ("edge", lambda d, rng: canaries.insert_edge_canaries(d, 12, rng=rng)),
    ("star", lambda d, rng: canaries.insert_star_canaries(d, 12, 3, rng=rng)),
    ("node-edges", lambda d, rng: canaries.insert_node_edge_canaries(d, 12, scale=3.0,
                                                                     rng=rng)),
])
def test_a_row_inserts_what_its_function_inserts(data, kind, direct):
    """The table passes the plan's relation, degree and scale through unchanged."""
    if kind == "node-edges":
        data = dataclasses.replace(data, directed=True)
    plan = _plan(kind, relation="replace-one" if kind == "node" else "add/remove", degree=3)
    got, can = canaries.insert_canaries(plan, data, 12, scale=3.0,
                                        rng=np.random.default_rng(4))
    ref, ref_can = direct(data, np.random.default_rng(4))
    assert can.kind == kind == ref_can.kind and can.relation == ref_can.relation
    for f in ("x", "y", "split", "edge_index"):
        np.testing.assert_array_equal(getattr(got, f), getattr(ref, f))
    for f in ("included", "features", "labels", "pairs", "node_ids", "leaves"):
        np.testing.assert_array_equal(getattr(can, f), getattr(ref_can, f))


def test_graph_row_inserts_graph_canaries():
    from dpgnn_core.audit.graph_canaries import insert_graph_canaries

    graphs = er_graphs(num_graphs=20, num_nodes=5, split=(12, 4, 4), seed=0)
    got, can = canaries.insert_canaries(_plan("graph"), graphs, 6, scale=2.0,
                                        rng=np.random.default_rng(1))
    ref, ref_can = insert_graph_canaries(graphs, 6, scale=2.0, rng=np.random.default_rng(1))
    assert can.kind == "graph"
    np.testing.assert_array_equal(got.x, ref.x)
    np.testing.assert_array_equal(can.included, ref_can.included)


@pytest.mark.parametrize(("name", "module"), [
    ("insert_node_canaries", "node_canaries"), ("score_node_canaries", "node_canaries"),
    ("insert_edge_canaries", "edge_canaries"), ("score_edge_canaries", "edge_canaries"),
    ("score_edge_canaries_reproduced_noise", "edge_canaries"),
    ("insert_star_canaries", "star_canaries"), ("score_star_canaries", "star_canaries"),
    ("insert_node_edge_canaries", "node_edge_canaries"),
    ("score_node_edge_canaries", "node_edge_canaries"),
    ("Canaries", "canary_record"), ("secret_generator", "canary_record"),
])
def test_the_old_names_are_the_kinds(name, module):
    import importlib

    assert getattr(canaries, name) is getattr(
        importlib.import_module(f"dpgnn_core.audit.{module}"), name)
    assert name in canaries.__all__
