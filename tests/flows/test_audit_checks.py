"""Issue 29: `dpgnn audit` bounds --canaries up front by the memory they need (§2), and says
what its printed lower bound means against the largest its guesses can show (§5)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dpgnn_core.audit.bounds import largest_lower_bound, one_run_audit
from dpgnn_core.audit.canaries import (
    canary_bytes,
    insert_edge_canaries,
    insert_node_canaries,
    max_canaries,
)
from dpgnn_core.data.store import write_dataset
from dpgnn_core.data.synthetic import csbm
from flows.cli import app
from flows.cli import audit as audit_cli
from tests.flows.clirunner import CliRunner


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    write_dataset(csbm(num_nodes=200, seed=1), tmp_path / "ds")
    return tmp_path / "ds"


@pytest.mark.parametrize(("args", "kind"), [
    (["dp-mlp", "--epsilon", "1"], "node"),
    (["gap-edp", "--epsilon", "1"], "edge"),
])
def test_too_many_canaries_refused_before_prefect(dataset: Path, args: list[str], kind: str,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    import flows.audit

    def never(**kw: object) -> None:
        raise AssertionError("the flow started")

    monkeypatch.setattr(flows.audit, "audit", never)
    monkeypatch.setattr(audit_cli, "memory_bytes", lambda: 4 << 30)  # edge canaries: 5 GB
    r = CliRunner().invoke(app, ["audit", args[0], "--dataset", str(dataset), *args[1:],
                                 "--canaries", "10000000"])
    lines = [line for line in r.output.splitlines() if line.strip()]
    assert r.exit_code == 2 and len(lines) == 1, r.output
    assert lines[0].startswith(f"error: --canaries 10000000: the audited data with 10000000 "
                               f"{kind} canaries needs about")
    most = int(lines[0].rsplit("use at most ", 1)[1].split()[0])
    limit = 2 << 30  # half of the 4 GiB
    assert canary_bytes(kind, most, 200, 32) <= limit < canary_bytes(kind, most + 1, 200, 32)


@pytest.mark.parametrize("m", [1, 7, 60])
def test_canary_bytes_covers_what_insertion_builds(m: int) -> None:
    data = csbm(num_nodes=200, seed=1)
    out, can = insert_node_canaries(data, m, rng=np.random.default_rng(m))
    assert out.x.nbytes + can.features.nbytes <= canary_bytes("node", m, 200, 32)
    out, can = insert_edge_canaries(data, m, rng=np.random.default_rng(m))
    assert out.x.nbytes <= canary_bytes("edge", m, 200, 32)


def test_max_canaries_is_the_largest_within_the_limit() -> None:
    for kind in ("node", "edge", "star", "graph"):
        most = max_canaries(kind, 1 << 30, 2708, 1433, degree=5)
        assert canary_bytes(kind, most, 2708, 1433, 5) <= 1 << 30
        assert canary_bytes(kind, most + 1, 2708, 1433, 5) > 1 << 30


def _summary(m: int, r: int, v: int, delta: float = 1e-5) -> dict[str, Any]:
    bound = one_run_audit(m, r, v, delta)
    return {"method": "dp-mlp", "dataset": "d", "audit": "one-run", "m": m, "canaries": "node",
            "relation": "add/remove", "reported_epsilon": 1.0, "delta": delta,
            "epsilon_lower": bound.epsilon_lower, "confidence": bound.confidence,
            "correct": v, "guesses": r, "counts": dict(bound.counts), "refuted": False,
            "threat_model": "t", "histogram": "h.png", "audit_json": "a.json",
            "seconds": 1.0}


def test_largest_bound_is_all_guesses_right() -> None:
    top = largest_lower_bound("one-run", {"m": 200, "r": 100, "v": 3}, 1e-5)
    assert top == one_run_audit(200, 100, 100, 1e-5).epsilon_lower
    assert 3.0 < top < 4.0  # the 3.47-ish ceiling of 100 guesses
    assert largest_lower_bound("one-run", {"m": 2000, "r": 1000, "v": 0}, 1e-5) > top
    assert largest_lower_bound("multi-run", {"tp": 10, "fn": 5, "fp": 5, "tn": 10}) == \
        largest_lower_bound("multi-run", {"tp": 15, "fn": 0, "fp": 0, "tn": 15})


@pytest.mark.parametrize(("v", "needle"), [
    (100, "every guess right: {top} is the largest bound 100 guesses can show"),
    (50, "0: the guesses did no better than chance can at this confidence, so nothing is "
         "refuted; 100 guesses can show at most ε ≥ {top}"),
    (80, "the largest bound 100 guesses can show is {top}"),
])
def test_audit_summary_says_what_the_bound_means(v: int, needle: str,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    summary = _summary(200, 100, v)
    top = largest_lower_bound("one-run", summary["counts"], 1e-5)
    audit_cli._print(summary)
    out = capsys.readouterr().out.splitlines()
    assert out[2].startswith("audited   ε ≥ ")
    assert needle.format(top=f"{top:.4g}") in out[3]



@pytest.mark.parametrize("method", ["gap-edp", "progap-edp", "dpdgc-edp", "dpdgc-kndp"])
def test_edge_canaries_count_the_trainings_copies(method: str,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 33 §5: on Cora's shape (2,708 nodes, 1,433 features) with 24 GiB, 300,000 edge
    canaries add 600,000 nodes: their insertion alone fits in half the memory (6.9 GB), but
    the training holds several copies of the audited features (measured six, see
    :data:`~dpgnn_core.audit.canaries.EDGE_TRAINING_COPIES`) and reached 9.3 GB in 45 s
    before it was stopped: refused up front now, naming a count that fits."""
    from dpgnn_core.audit.canaries import plan_audit
    from dpgnn_core.errors import DpgnnError
    from dpgnn_core.methods.registry import get

    monkeypatch.setattr(audit_cli, "memory_bytes", lambda: 24 << 30)
    spec = get(method).spec(epsilon=1.0, **({"k": 1} if method == "dpdgc-kndp" else {}))
    plan = plan_audit(method, spec)
    assert plan.kind == "edge"
    cora = {"num_nodes": 2708, "feature_dim": 1433}
    with pytest.raises(DpgnnError, match=r"--canaries 300000: .* use at most \d+ canaries"):
        audit_cli._check_canary_memory(plan, 300000, cora)
    audit_cli._check_canary_memory(plan, 20000, cora)  # 0.24 GB a copy: admitted
