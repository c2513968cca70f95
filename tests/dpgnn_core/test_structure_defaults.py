"""DP-GNN's defaults from the public structure (level ``node_feature``): the rule picks the
documented K and batch for given degree statistics, reads the degrees only where they are
public, and never overrides a value the spec gives."""

from __future__ import annotations

import numpy as np
import pytest

from dpgnn_core.data.synthetic import csbm
from dpgnn_core.methods.registry import get
from dpgnn_core.methods.structure_defaults import (
    StructureStats,
    choose,
    resolve,
    structure_stats,
)
from dpgnn_core.specs import DpgnnSpec


def _stats(median: float, n_train: int = 2000) -> StructureStats:
    return StructureStats(num_nodes=2 * n_train, num_train=n_train, mean_degree=median,
                          median_degree=median)


@pytest.mark.parametrize(("median", "n_train", "k", "batch"), [
    (0.0, 100, 1, 100), (3.0, 1499, 1, 1499), (3.0, 2033, 1, 2033), (71.0, 1450, 1, 1450),
    (20.0, 4999, 1, 4999), (2.0, 5000, 2, 5000), (1.0, 6000, 1, 6000),
    (66.0, 11902, 2, 11902), (66.0, 100_000, 2, 16384)])
def test_rule_picks_the_documented_values(median: float, n_train: int, k: int,
                                          batch: int) -> None:
    assert choose(_stats(median, n_train)) == {"max_degree": k, "batch_size": batch,
                                               "steps": 60, "lr": 2e-2}


def test_stats_are_exact_degree_statistics() -> None:
    # a path 0-1-2-3 plus an isolated node 4 (undirected: both directions stored)
    ei = np.array([[0, 1, 1, 2, 2, 3], [1, 0, 2, 1, 3, 2]])
    s = structure_stats(ei, 5, 3)
    assert (s.num_nodes, s.num_train, s.mean_degree, s.median_degree) == (5, 3, 1.2, 1.0)


@pytest.mark.parametrize("given", [
    {"max_degree": 3}, {"batch_size": 7}, {"steps": 11}, {"lr": 0.5},
    {"max_degree": 5, "batch_size": 9, "steps": 13, "lr": 0.1}])
def test_values_the_spec_gives_always_win(given: dict[str, float]) -> None:
    spec = DpgnnSpec(epsilon=4.0, **given)
    for stats in (_stats(2.0), _stats(80.0, 20_000)):  # whatever the rule would pick
        out, chosen = resolve(spec, stats.num_train, stats)
        for field, value in given.items():
            assert getattr(out, field) == value and getattr(chosen, field) == value
        assert set(chosen.given) == set(given) & {"max_degree", "batch_size"}


def test_spec_from_a_file_keeps_given_values_through_a_round_trip() -> None:
    from dpgnn_core.specs import parse_spec

    spec = parse_spec({"method": "dp-gcn", "epsilon": 4.0, "max_degree": 3})
    again = DpgnnSpec.model_validate_json(spec.model_dump_json())
    out, _ = resolve(again, 2000, _stats(2.0))
    assert out.max_degree == 3
    unset = DpgnnSpec.model_validate_json(DpgnnSpec(epsilon=4.0).model_dump_json())
    assert resolve(unset, 2000, _stats(2.0))[0].max_degree == 1


def test_level_node_reads_no_degrees() -> None:
    """At level ``node`` the edges are private: an unset K is 2 whatever the graph, and the
    rule needs no statistics (it is not given any)."""
    spec = DpgnnSpec(epsilon=4.0, level="node")
    out, chosen = resolve(spec, 500, None)
    assert (out.max_degree, out.batch_size, chosen.stats) == (2, 500, None)
    assert spec.degree_bound == 2  # plans without the graph too
    with pytest.raises(ValueError, match="max_degree is unset"):
        _ = DpgnnSpec(epsilon=4.0).degree_bound


def test_planning_without_the_graph_is_refused_not_guessed() -> None:
    """A plan made from N_train alone (the registry's ledger_for, private selection) cannot
    know the K the run will choose: refused with one clear PrivacyError (which private
    selection reports as its own error), never planned with a stand-in K."""
    from dpgnn_core.errors import PrivacyError
    from dpgnn_core.sweep_tuning import plan_selection
    from dpgnn_core.sweeps import TuningSpec

    spec = get("dp-gcn").spec(epsilon=4.0, accountant="rdp")
    with pytest.raises(PrivacyError, match="max_degree is unset"):
        get("dp-gcn").ledger_for(spec, 200)
    with pytest.raises(PrivacyError, match="give max_degree"):
        plan_selection("dp-gcn", 4.0, [({}, "c0", spec)], 200,
                       TuningSpec().distribution(1))
    fixed = get("dp-gcn").spec(epsilon=4.0, accountant="rdp", max_degree=1)
    assert get("dp-gcn").ledger_for(fixed, 200)(1.0).entries[0].event.max_degree == 1
    with pytest.raises(ValueError, match="public degrees"):
        resolve(DpgnnSpec(epsilon=4.0), 500, None)


@pytest.mark.parametrize(("num_nodes", "avg_degree", "k"), [(300, 3, 1), (300, 20, 1),
                                                            (300, 1, 1)])
def test_fit_trains_and_accounts_with_the_chosen_k(num_nodes: int, avg_degree: int,
                                                   k: int) -> None:
    """The K the rule picks is the K that samples, trains and is accounted (old default:
    K = 2 on every graph)."""
    data = csbm(num_nodes=num_nodes, avg_degree=avg_degree, feature_dim=8, seed=3)
    m = get("dp-gcn")
    spec = m.spec(epsilon=8.0, steps=3, hidden=8, device="cpu")
    fitted = m.fit(data, spec)
    chosen = fitted.report.structure_defaults
    assert chosen is not None
    assert chosen["max_degree"] == k and chosen["given"] == []
    assert chosen["batch_size"] == int(data.mask("train").sum())
    assert chosen["stats"]["median_degree"] == float(np.median(np.bincount(
        data.edge_index[1], minlength=data.num_nodes)))
    event = fitted.ledger.entries[0].event
    assert event.max_degree == k and event.marked == 1 + k
    assert fitted.report.details["occurrence_bound"] == 1 + k


def test_large_training_set_gets_k_2() -> None:
    """The other side of the rule on a real fit: 5000 training nodes, median degree 3."""
    from dpgnn_core.methods.dp_gnn import resolve_for_data

    data = csbm(num_nodes=10_100, avg_degree=3, feature_dim=4, seed=3)
    spec, chosen = resolve_for_data(DpgnnSpec(epsilon=8.0), data,
                                    int(data.mask("train").sum()))
    assert (spec.max_degree, chosen.max_degree) == (2, 2)
    assert chosen.stats is not None and chosen.stats.num_train >= 5000


@pytest.mark.parametrize("change", ["huge_features", "other_label", "zero_features"])
def test_replacing_a_training_nodes_data_does_not_change_the_choice(change: str) -> None:
    """Under ``node_feature`` neighbouring datasets differ in one training node's features and
    label: the rule must read neither (docs/privacy.md), so its values are the same."""
    import dataclasses

    from dpgnn_core.methods.dp_gnn import resolve_for_data

    data = csbm(num_nodes=200, avg_degree=3, feature_dim=4, seed=5)
    v = int(np.flatnonzero(data.mask("train"))[0])
    x, y = data.x.copy(), np.array(data.y, copy=True)
    if change == "huge_features":
        x[v] = 1e9
    elif change == "zero_features":
        x[v] = 0.0
    else:
        y[v] = (y[v] + 1) % data.num_classes
    other = dataclasses.replace(data, x=x, y=y)
    n = int(data.mask("train").sum())
    spec = DpgnnSpec(epsilon=4.0)
    assert resolve_for_data(spec, data, n) == resolve_for_data(spec, other, n)
