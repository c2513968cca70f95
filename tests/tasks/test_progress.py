"""Live progress: plain lines (rate-limited, with step/total, loss, ε spent and an ETA), the
rich display on a terminal, ε in the step records of private fits (never under-reported),
and the stage callbacks of subgraph sampling and GAP's PMA."""

from __future__ import annotations

import io
import itertools
import re
from typing import Any

import numpy as np
import pytest

from dpgnn_core.data.store import write_dataset
from dpgnn_core.data.synthetic import csbm
from dpgnn_core.methods.private_run import PrivateRun, epsilon_per_step
from dpgnn_core.methods.registry import get
from dpgnn_core.privacy import make_accountant
from tasks import progress as prog
from tasks.ingest import dataset_summary  # imports Prefect (its logging set-up) at collection
from tasks.progress import Progress, Throttle, format_duration, format_epsilon, status
from tasks.train import train

DATA = csbm(num_nodes=600, feature_signal=3.0, seed=1)
LINE = re.compile(r"^(?P<label>[\w-]+): step (?P<done>\d+)/(?P<total>\d+) \((?P<pct>\d+)%\) "
                  r"(?:loss (?P<loss>\S+) )?eps (?P<eps>[\d.e+-]+)/(?P<target>\S+) "
                  r"elapsed (?P<elapsed>\S+) eta (?P<eta>\S+)$")


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(autouse=True)
def _no_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(prog.ENV, raising=False)


# --- rate limiting and formatting ------------------------------------------------------


def test_throttle_every_tenth_or_ten_seconds_with_a_fake_clock() -> None:
    clock = FakeClock()
    t = Throttle(100, clock, fraction=0.1, seconds=10.0, min_seconds=1.0)
    assert not t.due(1)  # the first report starts the clock
    clock.now = 0.5
    assert not t.due(12)  # 10 % done, but within a second of the start
    clock.now = 1.0
    assert t.due(12)
    t.emitted(1.0, 12)
    clock.now = 5.0
    assert not t.due(15)  # neither 10 % more nor 10 s
    clock.now = 11.0
    assert t.due(15)  # 10 s since the last line
    t.emitted(11.0, 15)
    clock.now = 12.0
    assert not t.due(24) and t.due(25)  # 10 % more than at the last line
    assert t.due(100) and not t.due(100)  # the end, exactly once


def test_plain_lines_follow_the_clock_not_the_step_rate() -> None:
    clock, out = FakeClock(), io.StringIO()
    with Progress("run", 1000, stream=out, clock=clock, mode="plain") as p:
        for i in range(1, 1001):  # 1000 steps of 50 ms: 10 % is 5 s, so 10 % rules
            clock.now += 0.05
            p.update(i, loss=1.0)
    lines = out.getvalue().splitlines()
    assert [int(re.search(r"step (\d+)/", x).group(1)) for x in lines] == \
        list(range(100, 1001, 100))
    clock, out = FakeClock(), io.StringIO()
    with Progress("run", 100, stream=out, clock=clock, mode="plain") as p:
        for i in range(1, 101):  # 100 steps of 1 s: a line every 10 s
            clock.now += 1.0
            p.update(i)
    done = [int(re.search(r"step (\d+)/", x).group(1)) for x in out.getvalue().splitlines()]
    assert done == list(range(10, 101, 10))
    assert "eta 1m30s" in out.getvalue().splitlines()[0]  # 90 steps left at 1 s each


def test_formatting_rounds_epsilon_up() -> None:
    assert format_epsilon(2.1) == "2.10" and format_epsilon(2.1001) == "2.11"
    assert format_epsilon(0.0) == "0.00" and format_epsilon(float("inf")) == "inf"
    assert [format_duration(s) for s in (0.4, 59, 61, 3725, None)] == \
        ["0s", "59s", "1m01s", "1h02m", "?"]


def test_epsilon_per_step_is_the_next_computed_value_and_never_decreases() -> None:
    assert epsilon_per_step([(2, 1.0), (4, 2.0)], 4) == [1.0, 1.0, 2.0, 2.0]
    assert epsilon_per_step([(1, 0.5), (2, 0.4), (3, 0.6)], 3) == [0.5, 0.5, 0.6]
    assert epsilon_per_step([], 3) == []


def test_mode_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    assert prog.resolve_mode(stream=io.StringIO()) == "plain"
    assert prog.resolve_mode(stream=Tty()) == "rich"
    monkeypatch.setenv(prog.ENV, "plain")
    assert prog.resolve_mode(stream=Tty()) == "plain"
    monkeypatch.setenv(prog.ENV, "off")
    out = io.StringIO()
    with Progress("run", 10, stream=out) as p, status("working…", stream=out):
        p.update(10, loss=1.0)
        p.stage("a stage", 1, 1)
    assert out.getvalue() == ""


def test_status_and_stages_in_plain_mode() -> None:
    clock, out = FakeClock(), io.StringIO()
    with status("running x on y…", stream=out, clock=clock), \
            Progress("ingest demo", stream=out, clock=clock) as p:
        with p.span("loading synthetic data"):
            clock.now += 3
        p.stage("building subgraphs", 0, 100)
        for i in range(10, 101, 10):
            clock.now += 0.5
            p.stage("building subgraphs", i, 100)
    lines = out.getvalue().splitlines()
    assert lines[0] == "running x on y…"
    assert lines[1:3] == ["ingest demo: loading synthetic data…",
                          "ingest demo: loading synthetic data done in 3s"]
    assert lines[3] == "ingest demo: building subgraphs…"
    assert lines[4].startswith("ingest demo: building subgraphs 20/100 (20%) elapsed 1s")
    assert lines[-2] == "ingest demo: building subgraphs done in 5s"
    assert lines[-1] == "running x on y: done in 8s"
    out = io.StringIO()
    with pytest.raises(RuntimeError), status("running x…", stream=out, clock=clock), \
            Progress("x", 10, stream=out, clock=clock) as p:
        p.update(3)
        raise RuntimeError
    assert out.getvalue().splitlines()[-2:] == ["x: failed at step 3/10 after 0s",
                                                "running x: failed after 0s"]


def test_points_reporter_for_sweeps() -> None:
    out = io.StringIO()
    with Progress("sweep", 4, unit="point", stream=out, min_seconds=0) as p:
        for _ in range(4):
            p.advance()
    assert [x.split(" elapsed")[0] for x in out.getvalue().splitlines()] == [
        "sweep: point 1/4 (25%)", "sweep: point 2/4 (50%)", "sweep: point 3/4 (75%)",
        "sweep: point 4/4 (100%)"]


# --- private fits ----------------------------------------------------------------------


def _records(on_step: Any, into: list[dict[str, float]]) -> Any:
    def call(step: int, rec: dict[str, float]) -> None:
        into.append(dict(rec))
        on_step(step, rec)
    return call


def test_plain_lines_of_a_private_run_never_under_report_epsilon() -> None:
    method = get("dp-mlp")
    spec = method.spec(epsilon=4.0, steps=60, batch_size=32, hidden=16, device="cpu")
    out, recs = io.StringIO(), []
    with Progress("dp-mlp", spec.steps, stream=out, min_seconds=0, target_epsilon=4.0,
                  mode="plain") as p:
        fitted = method.fit(DATA, spec, on_step=_records(p.on_step(), recs))
    lines = [LINE.match(x) for x in out.getvalue().splitlines()]
    assert lines and all(lines), out.getvalue()
    assert [int(m["done"]) for m in lines][-1] == 60 and {m["total"] for m in lines} == {"60"}
    shown = [float(m["eps"]) for m in lines]
    assert all(a <= b for a, b in itertools.pairwise(shown))
    final = fitted.report.epsilon
    assert final <= shown[-1] < final + 0.01  # rounded up, never below
    assert all(m["target"] == "4.00" and m["eta"] != "" for m in lines)
    # no raw loss on the private batch in the line (nor in the records it reads)
    assert all(m["loss"] is None for m in lines) and not any("train_loss" in r for r in recs)
    # Every step's record carries an upper bound on ε spent by then (PLD: 20 points).
    eps = [r["epsilon"] for r in recs]
    assert len(eps) == 60 and eps[-1] == pytest.approx(final)
    assert all(a <= b for a, b in itertools.pairwise(eps))
    acc, n = make_accountant(spec.accountant), int(DATA.mask("train").sum())
    for t in (1, 4):  # between the computed points (every 3 steps)
        exact = acc.epsilon(method.ledger_for(spec.model_copy(update={"steps": t}), n)(
            fitted.report.noise_multiplier), fitted.report.delta)
        assert eps[t - 1] >= exact - 1e-9
    # The history is as before: epsilon_spent at the curve's points, no per-step ε.
    assert "epsilon" not in fitted.history[0]
    assert [h["step"] for h in fitted.history if "epsilon_spent" in h] == \
        [t for t, _ in fitted.report.epsilon_by_step]
    assert fitted.history[-1]["epsilon_spent"] == pytest.approx(final)


def test_dpgnn_reports_sampling_stages_and_epsilon_every_step() -> None:
    method = get("dp-gcn")
    spec = method.spec(epsilon=4.0, steps=20, batch_size=32, hidden=16, max_degree=3,
                       device="cpu", accountant="rdp")
    stages: list[tuple[str, int, int]] = []
    recs: list[dict[str, float]] = []

    def on_step(step: int, rec: dict[str, float]) -> None:
        recs.append(rec)

    fitted = method.fit(DATA, spec, on_step=on_step, progress=lambda *a: stages.append(a))
    assert ("sampling edge lists", 0, 1) in stages and ("sampling edge lists", 1, 1) in stages
    built = [d for s, d, _ in stages if s == "building subgraphs"]
    total = next(t for s, _, t in stages if s == "building subgraphs")
    assert built[0] == 0 and built[-1] == total and built == sorted(built)
    curve = dict(fitted.report.epsilon_by_step)  # RDP: every step
    assert [r["epsilon"] for r in recs] == [curve[t] for t in range(1, 21)]


def test_chunked_subgraph_sampling_gives_the_same_subgraphs() -> None:
    from dpgnn_core.graph.dpgnn_sampler import sample_edgelists, sample_subgraphs

    train = DATA.mask("train")
    sampled = sample_edgelists(DATA.edge_index, DATA.num_nodes, train, 4,
                               np.random.default_rng(0))
    calls: list[tuple[str, int, int]] = []
    whole = sample_subgraphs(sampled, DATA.num_nodes, train, 2, 4)
    chunked = sample_subgraphs(sampled, DATA.num_nodes, train, 2, 4,
                               progress=lambda *a: calls.append(a))
    for f in ("roots", "offsets", "nodes", "edge_offsets", "edges"):
        assert np.array_equal(getattr(whole, f), getattr(chunked, f)), f
    assert len(calls) > 20 and calls[-1] == ("building subgraphs", 2 * int(train.sum()),
                                             2 * int(train.sum()))


def test_drw_and_gap_report_their_stages_and_epsilon() -> None:
    from dpgnn_core.graph.random_walk import drw
    from dpgnn_core.methods import gap

    calls: list[tuple[str, int, int]] = []
    drw(DATA.edge_index, DATA.num_nodes, DATA.mask("train"), 3, rng=0,
        progress=lambda *a: calls.append(a))
    assert calls == [("random walks", 0, 1), ("random walks", 1, 1)]

    method = get("gap-edp")
    spec = method.spec(epsilon=4.0, epochs=5, encoder_epochs=3, hops=2, hidden=16,
                       encoder_dim=8, device="cpu", accountant="rdp")
    recs: list[dict[str, float]] = []
    fitted = method.fit(DATA, spec, on_step=lambda s, r: recs.append(r))
    n_train = int(DATA.mask("train").sum())
    steps = gap.module_steps(spec, n_train)  # 5 epochs of batches
    enc = gap.module_steps(spec, n_train, "encoder")  # 3 epochs of the same batches
    assert steps > 5 and enc * 5 == steps * 3
    assert len(recs) == enc + steps  # encoder steps, then classifier steps
    assert [r["epsilon"] for r in recs[:enc]] == [0.0] * enc  # PMA not released yet
    assert recs[enc]["epsilon"] > 0
    assert recs[-1]["epsilon"] == pytest.approx(fitted.report.epsilon)
    hops: list[tuple[str, int, int]] = []
    enc = gap.GapEncoder(DATA.num_features, 16, 8, DATA.num_classes)
    gap.aggregate(DATA, DATA.edge_index, enc, spec, 1.0,
                  PrivateRun(progress=lambda *a: hops.append(a)))
    assert hops == [("PMA hops", 0, 2), ("PMA hops", 1, 2), ("PMA hops", 2, 2)]


def test_train_task_writes_progress_lines_when_piped(tmp_path: Any,
                                                    capsys: pytest.CaptureFixture[str],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(prog.ENV, "plain")
    write_dataset(DATA, tmp_path / "ds")
    spec = get("dp-mlp").spec(epsilon=2.0, steps=30, batch_size=32, hidden=8, device="cpu",
                              accountant="rdp")
    ref = train.fn(dataset_summary(tmp_path / "ds"), spec)
    lines = [LINE.match(x) for x in capsys.readouterr().err.splitlines()]
    last = [m for m in lines if m][-1]
    assert (last["label"], last["done"], last["total"], last["target"]) == \
        ("dp-mlp", "30", "30", "2.00")
    assert float(last["eps"]) >= ref["report"]["epsilon"]
    assert last["loss"] is None  # a private run shows no raw loss unless log_raw_loss


# --- the terminal ----------------------------------------------------------------------


def test_rich_mode_draws_bars_and_stages_without_crashing() -> None:
    from rich.console import Console

    buf = io.StringIO()
    console = Console(file=buf, force_terminal=True, width=100)
    with status("running dp-gcn on data…", mode="rich", console=console):
        with Progress("dp-gcn", 40, mode="rich", console=console, target_epsilon=4) as p:
            p.stage("building subgraphs", 0, 10)
            p.stage("building subgraphs", 10, 10)
            for i in range(1, 41):
                p.update(i, loss=1.5 - i / 100, epsilon=i / 10)
        with Progress("sweep", 3, unit="point", mode="rich", console=console) as s:
            s.advance()
    text = buf.getvalue()
    assert "dp-gcn" in text and "step 40/40 (100%)" in text and "ε 4.00/4.00" in text
    assert "building subgraphs" in text and "point 1/3" in text
    assert prog._DISPLAY._progress is None  # the shared display stopped with its last user
