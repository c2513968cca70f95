"""``dpgnn run auto``'s choice (dpgnn_core/methods/auto.py): a function of what the level
makes public and of the accounted noisy mean degree only, one rule table that reads exact
degrees only where the structure is public, the ε of the choice and the method adding up
to the user's, the statistic's sensitivity brute-forced, and the decisions the measured
evidence asks for."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from dpgnn_core.data.store import write_dataset
from dpgnn_core.data.synthetic import csbm
from dpgnn_core.methods.auto import (
    LEVELS,
    PUBLIC_STRUCTURE,
    RULES,
    AutoRequest,
    PublicInputs,
    choose,
    public_inputs,
    resolve,
)
from dpgnn_core.methods.catalog import CATALOG
from dpgnn_core.methods.preflight import release_levels

#: The release levels that bound what each requested level protects (DP-MLP's node level
#: covers a node's features and label, and reads no edge).
COVERS = {"node": {"node"}, "k_neighbor": {"k_neighbor", "node"},
          "node_feature": {"node_feature", "node"}, "edge": {"edge"}}
REQUESTS = {"node": {"max_degree": 60}, "k_neighbor": {"k": 1}, "node_feature": {},
            "edge": {}}


def _request(level: str, epsilon: float) -> AutoRequest:
    return AutoRequest(level=level, epsilon=epsilon, **REQUESTS[level])


def test_the_table_reads_degrees_only_where_the_structure_is_public() -> None:
    for level in LEVELS:
        rules = [r for r in RULES if r.level == level]
        assert rules, level
        last = rules[-1]  # every level ends with a rule that always holds
        assert last.min_epsilon == 0 and not last.reads_degrees() and last.max_k is None
        assert last.max_feature_dim is None
    assert {r.level for r in RULES if r.reads_degrees()} <= set(PUBLIC_STRUCTURE)
    # the noisy statistic is defined (and accounted) at the levels that protect edges
    assert {r.level for r in RULES if r.reads_noisy_degree()} <= {"node", "k_neighbor"}
    assert all(not r.reads_noisy_degree() for r in RULES if r.level == "edge")
    assert all(r.method in CATALOG for r in RULES)


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("epsilon", [1.0, 4.0, 8.0, 16.0])
@pytest.mark.parametrize("median", [2.0, 3.0, 64.0])
def test_every_choice_protects_at_least_the_level_asked(level: str, epsilon: float,
                                                        median: float) -> None:
    """The chosen spec's release bounds the requested unit at the requested ε."""
    from dpgnn_core.methods.auto import spec_for

    degrees = {"median_degree": median, "mean_degree": median} \
        if level in PUBLIC_STRUCTURE else {"noisy_mean_degree": median}
    x = PublicInputs(level=level, epsilon=epsilon, feature_dim=1433, num_nodes=2708,
                     num_train=2033, **{k: v for k, v in REQUESTS[level].items()},
                     **degrees)
    choice = choose(x)
    spec = spec_for(_request(level, epsilon), choice)
    assert spec.epsilon == epsilon
    ((released, _),) = release_levels(spec)
    assert released in COVERS[level], (level, choice.method, released)
    assert choice.epsilon_choice == 0.0


@pytest.mark.parametrize(("level", "epsilon", "extra", "method"), [
    # schools (mean degree > 40): DPDGC-NDP at ε = 16; Cora (3.9) DP-MLP; below 16 DP-MLP
    ("node", 16.0, {"noisy_mean_degree": 45.0}, "dpdgc-ndp"),
    ("node", 16.0, {"noisy_mean_degree": 3.9}, "dp-mlp"),
    ("node", 16.0, {}, "dp-mlp"),  # the statistic not bought: the floor
    ("node", 8.0, {"noisy_mean_degree": 45.0}, "dp-mlp"),
    ("node", 4.0, {"noisy_mean_degree": 45.0}, "dp-mlp"),
    ("k_neighbor", 4.0, {"k": 1, "noisy_mean_degree": 45.0}, "dpdgc-kndp"),
    ("k_neighbor", 4.0, {"k": 1, "noisy_mean_degree": 3.9}, "dp-mlp"),
    ("k_neighbor", 16.0, {"k": 2, "noisy_mean_degree": 45.0}, "dp-mlp"),
    ("k_neighbor", 2.0, {"k": 1, "noisy_mean_degree": 45.0}, "dp-mlp"),
    # Cora: median degree 3, 1433 features; DP-MLP wins at ε = 4, DPDGC-FDP at 8
    ("node_feature", 4.0, {"median_degree": 3.0, "feature_dim": 1433}, "dp-mlp"),
    ("node_feature", 8.0, {"median_degree": 3.0, "feature_dim": 1433}, "dpdgc-fdp"),
    # a citation graph of median degree 2, 3703 features (issue 49): DP-MLP at 4 and 8
    ("node_feature", 8.0, {"median_degree": 2.0, "feature_dim": 3703}, "dp-mlp"),
    # a school (median degree 29-70): DPDGC-FDP from ε = 4, DP-MLP below
    ("node_feature", 4.0, {"median_degree": 64.0, "feature_dim": 4693}, "dpdgc-fdp"),
    ("node_feature", 2.0, {"median_degree": 64.0, "feature_dim": 4693}, "dp-mlp"),
    # a sparse CSBM graph with few features: DP-GCN
    ("node_feature", 4.0, {"median_degree": 3.0, "feature_dim": 32}, "dp-gcn"),
    ("edge", 1.0, {}, "progap-edp"),
])
def test_the_rule_follows_the_measured_evidence(level: str, epsilon: float,
                                                extra: dict[str, float], method: str) -> None:
    fields = {"feature_dim": 1433, **extra}
    if level == "node":
        fields["max_degree"] = 168
    x = PublicInputs(level=level, epsilon=epsilon, num_nodes=2708, num_train=2033,
                     **fields)  # type: ignore[arg-type]
    choice = choose(x)
    assert choice.method == method
    if method == "dpdgc-ndp":
        assert choice.options == {"max_degree": 168}
    if method == "dpdgc-kndp":
        assert choice.options == {"k": 1}


def _folders(tmp_path: Path) -> tuple[Path, Path, Path, Path]:
    """A dataset; the same with other labels, features and edges (what node level
    protects); the same with other labels and features only (what node_feature level
    protects); the same with a far denser structure."""
    base = csbm(num_nodes=200, avg_degree=3, feature_dim=16, seed=5)
    rng = np.random.default_rng(0)  # input data, not noise
    records = dataclasses.replace(base, y=rng.permutation(base.y),
                                  x=rng.normal(size=base.x.shape).astype(np.float32))
    everything = dataclasses.replace(
        records, edge_index=np.ascontiguousarray(base.edge_index[:, ::2][:, :-10]))
    dense = dataclasses.replace(base, edge_index=csbm(num_nodes=200, avg_degree=40,
                                                      feature_dim=16, seed=5).edge_index)
    out = []
    for name, data in (("a", base), ("b", everything), ("c", records), ("dense", dense)):
        write_dataset(data, tmp_path / name)
        out.append(tmp_path / name)
    return out[0], out[1], out[2], out[3]


class Stub:
    """A noisy statistic's release that returns a fixed count and counts its calls."""

    def __init__(self, count: float) -> None:
        self.count, self.plans = count, []  # type: list[object]

    def __call__(self, plan: object) -> tuple[float, bool]:
        self.plans.append(plan)
        return self.count, False


def test_the_choice_reads_nothing_the_level_protects(tmp_path: Path) -> None:
    """Other labels, features and edges leave the choice at node, k-neighbour and edge
    level unchanged but through the accounted statistic (they are what those levels
    protect: with the statistic's release fixed, the choice is the same); labels and
    features leave node_feature's unchanged, while its public structure does change it.
    Removing the files a level protects does not stop the choice: they are never
    opened."""
    a, b, c, dense = _folders(tmp_path)
    for level in ("node", "k_neighbor", "edge"):
        for eps in (2.0, 4.0, 16.0):
            req = _request(level, eps)
            sa, sb = Stub(300.0), Stub(300.0)
            ca, cb = resolve(req, a, release=sa)[1], resolve(req, b, release=sb)[1]
            assert ca == cb
            assert sa.plans == sb.plans  # the same release, planned from public inputs
            assert "median_degree" not in ca.inputs
    for eps in (2.0, 4.0, 8.0, 16.0):
        req = _request("node_feature", eps)
        assert resolve(req, a)[1] == resolve(req, c)[1]
    sparse = resolve(_request("node_feature", 4.0), a)[1]
    assert sparse.method == "dp-gcn"  # 16 features, median degree < 10
    assert resolve(_request("node_feature", 4.0), dense)[1].method == "dpdgc-fdp"
    # labels and features never opened at node_feature; nothing but the manifest elsewhere
    manifest = json.loads((a / "manifest.json").read_text())
    (a / "nodes.parquet").unlink()
    (a / "features.parquet").unlink(missing_ok=True)
    assert choose(public_inputs(_request("node_feature", 4.0), manifest, a)) == sparse
    (a / "edges.parquet").unlink()
    for level in ("node", "k_neighbor", "edge"):
        for eps in (2.0, 4.0, 16.0):
            req = _request(level, eps)
            assert resolve(req, a, release=Stub(300.0))[1] == \
                resolve(req, b, release=Stub(300.0))[1]


@pytest.mark.parametrize(("level", "epsilon", "bought"), [
    ("node", 16.0, True), ("node", 8.0, False), ("k_neighbor", 4.0, True),
    ("k_neighbor", 2.0, False), ("node_feature", 16.0, False), ("edge", 16.0, False)])
def test_the_statistic_is_bought_only_where_the_rule_reads_it_and_adds_up(
        tmp_path: Path, level: str, epsilon: float, bought: bool) -> None:
    """Where the first rule that holds on public inputs reads the noisy mean degree, it is
    released once; its (ε_c, δ_c) and the method's (ε_m, δ_m) add up to the user's
    (ε, δ) exactly (basic composition), ε_c is the Gaussian's ε at δ_c, and the method's
    spec carries (ε_m, δ_m). Elsewhere nothing is spent and the method runs at ε."""
    from dpgnn_core.privacy import Ledger
    from dpgnn_core.privacy import epsilon as eps_of

    write_dataset(csbm(num_nodes=2000, avg_degree=40, feature_dim=8, seed=2), tmp_path / "d")
    req = AutoRequest(level=level, epsilon=epsilon, delta=1e-5,
                      **({"max_degree": 200} if level == "node" else {}))
    stub = Stub(40_000.0)  # mean degree 40: dense
    spec, choice = resolve(req, tmp_path / "d", release=stub)
    assert len(stub.plans) == int(bought)
    if not bought:
        assert choice.epsilon_choice == 0 and spec.epsilon == epsilon
        return
    (plan,) = stub.plans
    assert choice.method in ("dpdgc-ndp", "dpdgc-kndp")
    assert choice.inputs["noisy_mean_degree"] == pytest.approx(40.0)
    assert choice.epsilon_choice + choice.method_epsilon == pytest.approx(epsilon, abs=1e-12)
    assert choice.delta_choice + choice.method_delta == pytest.approx(1e-5, abs=1e-18)
    assert spec.epsilon == choice.method_epsilon and spec.delta == choice.method_delta
    assert choice.epsilon_choice == pytest.approx(
        eps_of(Ledger().add(plan.event()), plan.delta, accountant="pld"))  # type: ignore[attr-defined]
    assert 0 < choice.epsilon_choice <= 0.1 * epsilon


def test_every_possible_outcome_is_checked_before_the_statistic_is_bought(
        tmp_path: Path) -> None:
    """A pre-flight that refuses one of the methods the statistic could pick stops the run
    before the statistic is released."""
    write_dataset(csbm(num_nodes=2000, avg_degree=40, feature_dim=8, seed=2), tmp_path / "d")
    checked: list[str] = []

    def check(spec: object) -> None:
        checked.append(spec.method)  # type: ignore[attr-defined]
        if spec.method == "dpdgc-kndp":  # type: ignore[attr-defined]
            raise ValueError("refused")

    stub = Stub(40_000.0)
    with pytest.raises(ValueError, match="refused"):
        resolve(AutoRequest(level="k_neighbor", epsilon=4.0), tmp_path / "d",
                release=stub, check=check)
    assert stub.plans == [] and "dpdgc-kndp" in checked


def test_a_statistic_too_dear_is_not_bought(tmp_path: Path) -> None:
    """D close to N makes the statistic cost more than a tenth of ε: nothing is
    released, the public inputs decide (DP-MLP), and the choice says why."""
    write_dataset(csbm(num_nodes=100, seed=3), tmp_path / "d")
    stub = Stub(1.0)
    _, choice = resolve(AutoRequest(level="node", epsilon=16.0, max_degree=99),
                        tmp_path / "d", release=stub)
    assert stub.plans == [] and choice.method == "dp-mlp" and choice.epsilon_choice == 0
    assert choice.statistic is not None and choice.statistic["bought"] is False


def test_a_graph_beyond_d_is_refused_before_the_statistic(tmp_path: Path) -> None:
    """The statistic's sensitivity D holds only within the bound: a graph with a degree
    above D is refused (the node-level methods' check), nothing drawn."""
    from dpgnn_core.errors import DataError

    write_dataset(csbm(num_nodes=2000, avg_degree=40, feature_dim=8, seed=2), tmp_path / "d")
    with pytest.raises(DataError, match="at most D = 50"):
        resolve(AutoRequest(level="node", epsilon=16.0, max_degree=50), tmp_path / "d")


def test_the_edge_count_sensitivity_survives_its_brute_force() -> None:
    from dpgnn_core.methods.brute_force.auto_degree import CHECKS
    from dpgnn_core.privacy.sensitivity import verify

    for check in CHECKS:
        cases = verify(check)
        assert any(case.tight for case, _ in cases)


def test_an_understated_sensitivity_fails_the_brute_force() -> None:
    """The brute force can fail: the node level's bound stated as D - 1 is refused."""
    from dpgnn_core.methods.brute_force.auto_degree import CHECKS
    from dpgnn_core.privacy.events import PrivacyError
    from dpgnn_core.privacy.sensitivity import SensitivityCheck, verify

    node = CHECKS[0]
    low = SensitivityCheck(node.released, lambda **a: node.sensitivity(**a) - 1, node.cases)
    with pytest.raises(PrivacyError, match="below the change"):
        verify(low)


@pytest.mark.parametrize(("fields", "message"), [
    ({"level": "nodes", "epsilon": 4}, "--level 'nodes': choose one of node, k_neighbor"),
    ({"level": "node", "epsilon": 4}, "--level node needs --max-degree"),
    ({"level": "edge", "epsilon": 4, "max_degree": 5}, "--max-degree 5 applies to --level "
                                                       "node only"),
    ({"level": "node_feature", "epsilon": 4, "k": 2}, "--k 2 applies to --level k_neighbor"),
    ({"level": "edge", "epsilon": float("inf")}, "--epsilon inf: give a finite"),
    ({"level": "node", "epsilon": 4, "max_degree": 0}, "--max-degree 0: give a bound"),
])
def test_a_bad_request_is_one_line(fields: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match="^" + message.replace("(", r"\(")) as e:
        AutoRequest(**fields)  # type: ignore[arg-type]
    assert "\n" not in str(e.value)
