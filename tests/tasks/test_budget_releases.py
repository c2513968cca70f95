"""One release, one reservation (issue 26 §4-§6, task side): a task adopts another's
reservation only with the owner token its flow handed to both (a staged run's stages, a
private selection's candidates); two tasks of one flow run with the same plan are two
releases; a selection's record names the candidate it released; a non-private release on a
budgeted dataset is refused unless allowed, and then recorded."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dpgnn_core.budget import BudgetExceeded, Charge
from dpgnn_core.data.synthetic import csbm
from dpgnn_core.methods.registry import get
from dpgnn_core.privacy.report import PrivacyReport
from tasks import budget as tb
from tasks.budget import TaskGate, gate_for, store


def _dataset(seed: int) -> tuple[Any, dict[str, Any]]:
    data = csbm(num_nodes=200, seed=seed)
    ref = {"path": f"/nowhere/rel-{seed}", "name": f"rel-{seed}",
           "content_sha256": f"{seed:064x}"}
    return data, ref


def _spec() -> Any:
    return get("dp-mlp").spec(epsilon=2.0, steps=6, batch_size=32, hidden=8, device="cpu")


def _counted(ref: dict[str, Any]) -> list[Any]:
    s = store()
    return [r for r in s.summary(s.resolve(ref["content_sha256"])).records
            if r.status in ("reserved", "spent")]


@pytest.fixture(autouse=True)
def _own_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DPGNN_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(tb, "flow_run_id", lambda: "flowrun1")  # every gate: one flow run


@pytest.fixture(scope="module")
def planned() -> Any:
    """The ledger dp-mlp's spec reserves (trained once, outside any gate)."""
    data, _ = _dataset(300)
    return get("dp-mlp").fit(data, _spec()).ledger


def _budget_for_one(ref: dict[str, Any], ledger: Any) -> None:
    """A budget whose privacy filter admits one release of ``ledger`` and not two."""
    from dpgnn_core.privacy.odometer import Filter

    def admits(eps: float, n: int) -> bool:
        return Filter.register(eps, 1e-4).check([Charge(ledger)] * n, "node").admits

    lo, hi = 0.01, 100.0  # the smallest budget that admits one, to 1e-4
    while hi - lo > 1e-4:
        mid = 0.5 * (lo + hi)
        lo, hi = (lo, mid) if admits(mid, 1) else (mid, hi)
    assert not admits(hi * 1.05, 2)
    store().set_budget(ref["content_sha256"], ref["name"], ref["path"], epsilon=hi * 1.05,
                       delta=1e-4)


def test_a_point_listed_twice_in_one_flow_run_is_two_releases_each_charged(
        planned: Any) -> None:
    """The first run of the plan is training (spent, its release not yet written); the
    second task of the same flow run with the same plan must not adopt it: under a budget
    that fits one release it is refused before any step."""
    data, ref = _dataset(301)
    method, spec = get("dp-mlp"), _spec()
    _budget_for_one(ref, planned)
    with gate_for(ref, method.name, spec) as gate:  # type: ignore[arg-type]
        method.fit(data, spec, gate=gate)  # not finished: no release id
    assert len(_counted(ref)) == 1
    steps: list[int] = []
    with pytest.raises(BudgetExceeded), \
            gate_for(ref, method.name, spec) as gate:  # type: ignore[arg-type]
        method.fit(data, spec, on_step=lambda t, r: steps.append(t), gate=gate)
    assert steps == [] and len(_counted(ref)) == 1


def test_without_a_budget_two_runs_of_one_plan_are_two_records(planned: Any) -> None:
    _, ref = _dataset(302)
    info = {"epsilon": 2.0, "delta": 1e-4}
    for _ in range(2):
        TaskGate(ref, "dp-mlp", _spec()).before_release(planned, info)  # type: ignore[arg-type]
    assert len(_counted(ref)) == 2


@pytest.mark.parametrize(("second", "records"), [("tok", 1), ("other", 2), (None, 2)])
def test_stages_share_a_reservation_only_by_their_owner_token(
        planned: Any, second: str | None, records: int) -> None:
    _, ref = _dataset(303)
    info = {"epsilon": 2.0, "delta": 1e-4}
    first = TaskGate(ref, "gap-edp", _spec(), owner="tok")  # type: ignore[arg-type]
    first.before_release(planned, info)
    later = TaskGate(ref, "gap-edp", _spec(), owner=second)  # type: ignore[arg-type]
    later.before_release(planned, info)
    assert len(_counted(ref)) == records
    assert later.adopted == (records == 1)


def test_selection_record_is_adopted_by_its_candidates_and_names_the_released_one(
        planned: Any) -> None:
    """Candidates (the selection's token) adopt its record; the one that finishes first
    does not name it: the selection attaches the candidate it released."""
    from tasks.budget import plan_key

    _, ref = _dataset(304)
    specs = [_spec().model_copy(update={"seed": s}) for s in (11, 12)]
    s = store()
    rid = s.reserve(ref["content_sha256"], ref["name"], ref["path"],
                    Charge(fixed=(3.0, 1e-5, "node", "add_remove")),
                    method="dp-mlp (private selection)", run_id="flowrun1:tuning:tok",
                    delta=1e-5, epsilon=3.0, covers=[plan_key(ref, sp) for sp in specs])
    s.mark_spent(rid)
    updated = s.summary(s.resolve(ref["content_sha256"])).records[0]
    gates = [TaskGate(ref, "dp-mlp", sp, owner="tok") for sp in specs]  # type: ignore[arg-type]
    for g, release in zip(gates, ("first-to-finish", "selected"), strict=True):
        g.before_release(planned, {"epsilon": 1.0, "delta": 1e-5})
        assert g.adopted and g.record_id == rid
        g.finish(PrivacyReport.from_dict({"release": {"id": release}}), planned)
    outsider = TaskGate(ref, "dp-mlp", specs[0])  # type: ignore[arg-type]
    outsider.before_release(planned, {"epsilon": 1.0, "delta": 1e-5})
    assert not outsider.adopted  # a covered plan without the token: its own release
    (rec, _own) = _counted(ref)
    assert rec.id == rid and rec.release_id is None  # no candidate names it
    s.attach_selected(rid, "selected", at="2030-01-02T03:04:05+00:00")
    (rec, _own) = _counted(ref)
    assert rec.release_id == "selected"
    # dated at the release moment, not at the reservation (issue 33 §3: the two together
    # span the selection, whose duration grows with K)
    assert updated.created != rec.created == "2030-01-02T03:04:05+00:00"
    s.attach_selected(rid, "another", at="2031-01-01T00:00:00+00:00")
    assert _counted(ref)[0].release_id == "selected"  # named once


def test_non_private_release_on_a_budgeted_dataset_is_refused_unless_allowed() -> None:
    from tasks.budget import NonPrivateRefused, admit_non_private

    _, ref = _dataset(305)
    assert admit_non_private(ref, "gcn", allowed=False) == {}  # no budget: untouched
    assert store().budget_id(ref["content_sha256"]) is None
    store().set_budget(ref["content_sha256"], ref["name"], ref["path"], epsilon=8.0,
                       delta=1e-5)
    with pytest.raises(NonPrivateRefused, match="--allow-non-private-release"):
        admit_non_private(ref, "gcn", allowed=False)
    s = store()
    assert s.summary(s.resolve(ref["content_sha256"])).records == []
    tags = admit_non_private(ref, "gcn", allowed=True)
    (rec,) = s.summary(s.resolve(ref["content_sha256"])).records
    assert rec.status == "non-private" and rec.method == "gcn"
    assert "--allow-non-private-release" in rec.note
    assert f"record {rec.id}" in tags["dpgnn.non_private_release"]


def test_a_new_version_of_a_budgeted_folder_is_budgeted_too() -> None:
    from tasks.budget import NonPrivateRefused, admit_non_private

    _, ref = _dataset(306)
    store().set_budget(ref["content_sha256"], ref["name"], ref["path"], epsilon=8.0,
                       delta=1e-5)
    newer = {**ref, "content_sha256": f"{307:064x}"}  # re-ingested into the same folder
    with pytest.raises(NonPrivateRefused):
        admit_non_private(newer, "mlp", allowed=False)


def test_a_selection_candidate_keeps_no_validation_or_test_metric(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """dp-graph-* evaluates while it trains; a private selection's candidate (whose folder
    best.json may name) must not store the exact validation score the selection releases
    only with noise, nor print per-candidate progress."""
    import json

    from dpgnn_core.data.store import read_manifest, write_dataset
    from dpgnn_core.data.synthetic import er_graphs
    from dpgnn_core.specs import GraphClsSpec
    from tasks.train import _train

    write_dataset(er_graphs(num_graphs=80, split=(40, 20, 20), seed=3), tmp_path / "g")
    m = read_manifest(tmp_path / "g")
    ref = {"path": str(tmp_path / "g"), "name": "g", "content_sha256": m["content_sha256"]}
    spec = GraphClsSpec(conv="gcn", epsilon=5.0, steps=4, batch_size=20, eval_every=2,
                        device="cpu")
    import tasks.progress

    lines: list[str] = []
    monkeypatch.setenv("DPGNN_PROGRESS", "plain")
    monkeypatch.setattr(tasks.progress, "emit", lambda line, stream=None: lines.append(line))
    cand = _train(ref, spec, candidate="tok:0")  # type: ignore[arg-type]
    quiet = list(lines)
    plain = _train(ref, spec.model_copy(update={"seed": 1}))  # type: ignore[arg-type]
    loud = lines[len(quiet):]
    hist = json.loads((Path(cand["path"]) / "history.json").read_text())
    ref_hist = json.loads((Path(plain["path"]) / "history.json").read_text())
    assert any(k.startswith("val_") for r in ref_hist for k in r)  # what it would keep
    assert hist and not any(k.startswith(("val_", "test_")) for r in hist for k in r)
    assert "epsilon_spent" in hist[-1] and "train_loss" not in hist[-1]  # private: no raw loss
    assert quiet == [] and any("step 4/4" in x for x in loud)


@pytest.mark.slow
def test_candidates_drawn_alike_are_two_trainings(tmp_path: Path) -> None:
    """Issue 33 §3: two candidates drawn with the same configuration and seed were
    redrawn (a total-variation term in the charge); now they are two trainings kept apart
    by their index in the draw (artifact folder, cache key, checkpoints)."""
    from dpgnn_core.data.store import read_manifest, write_dataset
    from tasks._cache import inputs_and_code
    from tasks.train import _train, checkpoint_dir

    write_dataset(csbm(num_nodes=120, seed=4), tmp_path / "d")
    m = read_manifest(tmp_path / "d")
    ref = {"path": str(tmp_path / "d"), "name": "d", "content_sha256": m["content_sha256"]}
    spec = _spec()
    a = _train(ref, spec, candidate="tok:0")  # type: ignore[arg-type]
    b = _train(ref, spec, candidate="tok:1")  # type: ignore[arg-type]
    plain = _train(ref, spec)  # type: ignore[arg-type]
    assert len({a["path"], b["path"], plain["path"]}) == 3
    assert a["report"]["release"]["id"] != b["report"]["release"]["id"]
    assert all(Path(r["path"], "model.pt").is_file() for r in (a, b))
    assert checkpoint_dir("train", ref["content_sha256"], spec, {"candidate": "tok:0"}) != \
        checkpoint_dir("train", ref["content_sha256"], spec, {"candidate": "tok:1"})
    key = inputs_and_code("train")
    assert key(None, {"dataset": ref, "spec": spec, "candidate": "tok:0"}) != key(
        None, {"dataset": ref, "spec": spec, "candidate": "tok:1"})


def test_a_candidate_history_keeps_no_selection_score() -> None:
    """Issue 33 §3: ``select_on_validation`` writes ``selection_score`` (a noise-free
    validation accuracy, dpgnn_core.training.dp_sgd) into the history; a candidate's
    history drops it as it drops val_/test_ metrics."""
    from tasks.train import candidate_history

    history = [{"step": 2, "epsilon_spent": 0.5, "selection_score": 0.75},
               {"step": 4, "epsilon_spent": 0.9, "selection_score": 0.8, "val_acc": 0.8}]
    assert candidate_history(history) == [{"step": 2, "epsilon_spent": 0.5},
                                          {"step": 4, "epsilon_spent": 0.9}]
