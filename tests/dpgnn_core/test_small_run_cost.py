"""What a small run need not pay for (issue 52 §7): the budget store keeps each post hoc
composition (a summary whose releases have not changed reads ε per unit back instead of
composing again, which imports dp-accounting and runs PLD; a new release composes
afresh); the run path imports no accountant library and the pre-flight no
pyarrow.dataset."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

import dpgnn_core.budget.compose_cache as cc
import dpgnn_core.budget.store as store_module
from dpgnn_core.budget import BudgetExceeded, BudgetStore, Charge
from dpgnn_core.privacy import GaussianEvent, Ledger, PoissonGaussianEvent

SHA = "c" * 64
DELTA = 1e-5


def _spend(s: BudgetStore, ledger: Ledger, run: str) -> None:
    s.mark_spent(s.reserve(SHA, "toy", None, Charge(ledger), method="m", run_id=run,
                           delta=DELTA, epsilon=None))


def _dp_sgd(z: float) -> Ledger:
    return Ledger().add(PoissonGaussianEvent(noise_multiplier=z, sampling_rate=0.05,
                                             steps=50, level="node"),
                        sampler_scheme="poisson")


def _count_compose(monkeypatch: pytest.MonkeyPatch, *modules: object) -> list[int]:
    """Count the calls of ``compose`` through the compose cache (and ``modules``' own)."""
    calls: list[int] = []
    real = cc.compose

    def counted(*a: object, **k: object) -> object:
        calls.append(1)
        return real(*a, **k)  # type: ignore[arg-type]

    for module in (cc, *modules):
        monkeypatch.setattr(module, "compose", counted)
    return calls


def test_a_summary_reads_its_composition_back_and_a_new_release_composes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    s = BudgetStore(tmp_path / "budget.sqlite")
    s.set_budget(SHA, "toy", None, epsilon=50.0, delta=DELTA)
    _spend(s, _dp_sgd(1.0), "a")
    real = cc.compose
    calls = _count_compose(monkeypatch)
    bid = s.resolve(SHA)
    first = s.summary(bid).spent
    assert len(calls) == 1 and first["node"].epsilon > 0
    again = BudgetStore(tmp_path / "budget.sqlite").summary(bid).spent  # another process
    assert len(calls) == 1 and again == first  # read back, the same figures
    _spend(s, _dp_sgd(2.0), "b")
    after = s.summary(bid).spent
    assert len(calls) == 2 and after["node"].epsilon > first["node"].epsilon
    assert after == real([r.charge for r in s.summary(bid).records], DELTA,
                         list(after))  # what composing gives


def test_a_refusal_run_again_composes_nothing_and_words_the_same_exact_figures(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A budget refusal's post hoc figures (spent, requested, cumulative) are each the
    exact composition of their releases, read back from the store's cache once composed:
    the same refused command again (issue 48: `dpgnn run` at ε = 50 on a budget of 3
    spent 3.3 s of CPU composing PLD three times for its message) composes nothing, and
    the RDP curve the decision computed is kept. The decision itself reads no cache."""
    path = tmp_path / "budget.sqlite"
    s = BudgetStore(path)
    s.set_budget(SHA, "toy", None, epsilon=3.0, delta=DELTA)
    _spend(s, _dp_sgd(2.0), "a")
    real = cc.compose
    calls = _count_compose(monkeypatch, store_module)
    big = Charge(_dp_sgd(0.4321))  # a curve no other test computes
    with sqlite3.connect(path) as db:
        curves = db.execute("SELECT COUNT(*) FROM rdp_cache").fetchone()[0]
    with pytest.raises(BudgetExceeded) as first:
        s.check(SHA, big)
    e = first.value
    before = [Charge(_dp_sgd(2.0))]
    assert e.spent == real(before, DELTA, ["node"])["node"].epsilon  # exact, not approx
    assert e.requested == real([big], DELTA, ["node"])["node"].epsilon
    assert e.cumulative == real([*before, big], DELTA, ["node"])["node"].epsilon
    assert e.cumulative > e.budget == 3.0
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT COUNT(*) FROM rdp_cache").fetchone()[0] > curves
    composed = len(calls)
    with pytest.raises(BudgetExceeded) as again:  # another process, the same command
        BudgetStore(path).check(SHA, big)
    assert str(again.value) == str(e) and len(calls) == composed
    with pytest.raises(BudgetExceeded) as again:  # the flow's reservation words it alike
        BudgetStore(path).reserve(SHA, "toy", None, big, method="m", run_id="b",
                                  delta=DELTA, epsilon=None)
    assert str(again.value) == str(e) and len(calls) == composed
    assert [r.status for r in s.summary(s.resolve(SHA)).records] == ["spent"]


def test_a_composition_of_other_code_is_not_read_back(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch
                                                      ) -> None:
    s = BudgetStore(tmp_path / "budget.sqlite")
    led = Ledger().add(GaussianEvent(noise_multiplier=3.0, count=2, level="edge"))
    _spend(s, led, "a")
    bid = s.resolve(SHA)
    key = cc.cache_key([Charge(led)], DELTA, ["edge"])
    assert s.summary(bid).spent["edge"].epsilon > 0
    monkeypatch.setattr(cc, "accounting_version", lambda: "other code")
    assert cc.cache_key([Charge(led)], DELTA, ["edge"]) != key


def test_the_run_path_imports_no_accountant_library() -> None:
    """Importing what a cached `dpgnn run` imports (the CLI, the flow, the budget tasks)
    leaves dp-accounting and scipy.stats out: they load only where a curve or a
    composition is computed."""
    code = ("import sys, flows.cli.execute, flows.pipeline, tasks.budget, "
            "dpgnn_core.budget, dpgnn_core.privacy.odometer; "
            "print([m for m in ('dp_accounting', 'scipy.stats') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=300)
    assert out.stdout.strip() == "[]", out.stderr[-2000:]


def test_the_pre_flight_reads_labels_without_pyarrow_dataset(tmp_path: Path) -> None:
    """A run's pre-flight (check 0: the folder verified, its labels and splits read) does
    not import pyarrow.dataset (about 0.4-1 s of CPU), and reads what read_table reads."""
    make = ("import sys; from dpgnn_core.data.ingest import ingest; "
            "from dpgnn_core.specs import IngestSpec; "
            "ingest(IngestSpec(format='synthetic', options={'num_nodes': 60}), sys.argv[1])")
    subprocess.run([sys.executable, "-c", make, str(tmp_path / "ds")], check=True,
                   capture_output=True, timeout=300)
    check = ("import sys, json; from dpgnn_core.data.store import verify_folder; "
             "m = json.load(open(sys.argv[1] + '/manifest.json')); "
             "labels, split = verify_folder(sys.argv[1], m); "
             "print('pyarrow.dataset' in sys.modules, len(labels), int(split.sum())); "
             "import pyarrow.parquet as pq; "
             "t = pq.read_table(sys.argv[1] + '/nodes.parquet', columns=['label', 'split']); "
             "print(t.column('label').to_pylist() == labels.tolist())")
    out = subprocess.run([sys.executable, "-c", check, str(tmp_path / "ds")],
                         capture_output=True, text=True, check=True, timeout=300)
    first, same = out.stdout.split("\n")[:2]
    assert first.split()[:2] == ["False", "60"], out.stderr[-2000:]
    assert same == "True"
