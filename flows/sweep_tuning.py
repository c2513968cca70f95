"""The ``sweep`` flow's private selection (``selection = "private"``): plan, draw, train and
release the best candidate per (private method, ε); see :mod:`dpgnn_core.sweep_tuning` and
docs/privacy.md, "Private selection in sweeps".

The selection compares each candidate's *noisy* count of correct validation predictions
(:func:`dpgnn_core.sweep_tuning.noisy_count`, its event added to the candidate's ledger) for
methods that bound that count's sensitivity; for the others (DP-GNN, DRW) it compares the
noise-free validation accuracy and flags it (``SCORE_NOTE``).

What leaves this module: per (method, ε) the selected candidate's row (its ε the tuning
ε) and a ``best`` entry naming the mechanism. The other candidates, their number K and
their scores are returned to the flow only as ``withheld`` (the curator's, in memory): the
results table, best.json, the plots and MLflow never see them. The artifact cache,
Prefect's database (its task runs, with their times) and the budget store's record of which
plans the selection covers do hold every candidate (it is how they train); they are the
curator's storage and publishing them voids the bound (:data:`CURATOR_NOTE`, printed with
the sweep's results). Candidates train without progress output, their histories keep no
validation or test metric nor selection score (:func:`tasks.train.candidate_history`), and
the odometer's record of the selection names the released candidate, whichever finished
first.

Every time a selection publishes is its release moment (:func:`release_moment`, taken once
all candidates have finished): the released candidate's ``report.json``
``release.created`` and its files' modification times (:func:`tasks.train.stamp_release`),
the odometer's record (``BudgetStore.attach_selected``), the sweep's results files
(:func:`date_files`) and the MLflow runs' start, end and metric times
(:func:`tasks.tracking.log_sweep`). No published time is taken before the candidates
finished (the reservation's, a candidate's own), so no two published times span the
selection, whose duration grows with K.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from dpgnn_core.data.store import read_manifest
from dpgnn_core.privacy.events import Ledger, PrivacyError
from dpgnn_core.sweep_tuning import (
    CANDIDATES_NOTE,
    SCORE_NOTE,
    Draw,
    TuningPlan,
    candidate_spec,
    correct_count,
    draw,
    noisy_count,
    plan_private_selection,
    secret_generator,
    select,
    verify_candidate,
)
from dpgnn_core.sweeps import Point, SweepSpec
from tasks.budget import new_owner, store
from tasks.refs import ledger_of, report_of


class SelectionError(PrivacyError):
    """A private selection that cannot be released as planned."""


#: What the sweep says about the places that hold every candidate of a private selection.
CURATOR_NOTE = ("private selection: the candidates' number K is secret; their artifacts "
                "(the cache under $DPGNN_HOME/artifacts), Prefect's task runs and logs, and "
                "the budget store's record of the plans the selection covers are the "
                "curator's only: publishing them reveals K and voids the tuning bound. "
                "Candidates train without progress output; every time the selection publishes "
                "(report.json, the odometer's record, the results files, MLflow) is its "
                "release moment, but the sweep's wall time, seen by whoever watches it run, "
                "grows with K")


@dataclass
class PrivateSelection:
    """The private selections of one sweep run: started before the flow's other points are
    submitted (so everything trains together), finished after."""

    plans: list[TuningPlan]
    n_val: int = 0
    submitted: list[tuple[TuningPlan, list[tuple[Draw, Point, Any, Any]]]] = field(
        default_factory=list)
    records: list[int] = field(default_factory=list)  # each plan's odometer record
    attached: set[int] = field(default_factory=set)  # the records named at release

    def stopped(self) -> None:
        """Ctrl-C before the release moment: give back each record not yet named at its
        release (nothing of that selection was published; a rerun trains and selects
        afresh and is charged once). Issue 48 §4: the tuning was charged twice."""
        for record in self.records:
            if record not in self.attached:
                store().give_back_selection(record, "stopped (Ctrl-C) before its release "
                                            "moment: nothing of this selection released")

    @classmethod
    def start(cls, sweep_spec: SweepSpec, ds: Any, pts: list[Point],
              train_task: Any, evaluate_task: Any, context: Any = None,
              held: list[Any] | None = None) -> PrivateSelection:
        """Plan every (private method, ε) (before anything trains), draw its candidates
        with a secret generator and submit them: ``train_task`` with ``refresh_cache``
        (each candidate a fresh training, never a cached one), then ``evaluate_task``,
        both with the flow's run ``context`` (:func:`tasks.config.run_context`)."""
        manifest = read_manifest(ds["path"])
        n_train = int(manifest.get("split_counts", {}).get("train", 0))
        if n_train < 1:
            raise SelectionError("private selection needs training records")
        try:
            plans = plan_private_selection(sweep_spec, pts, n_train)
        except PrivacyError as e:
            raise SelectionError(str(e)) from e
        n_val = int(manifest.get("split_counts", {}).get("val", 0))
        if n_val < 1:
            raise SelectionError(f"{ds['path']}: private selection needs validation records "
                                 f"(split_counts.val = {n_val})")
        self = cls(plans, n_val)
        if held is not None:  # the flow's :func:`selections_stopped` (its records so far)
            held.append(self)
        fresh = train_task.with_options(refresh_cache=True)
        for plan in plans:
            owner = new_owner()  # the candidates' token: only they adopt the record
            rng = secret_generator()  # per selection; never stored, K never logged
            draws = draw(plan, rng)
            del rng
            specs: dict[int, Any] = {}
            points_: list[tuple[Draw, Point]] = []
            for d in draws:
                c = plan.candidates[d.index]
                spec = (candidate_spec(plan, d) if d.index not in specs
                        else specs[d.index].model_copy(update={"seed": d.seed}))
                specs.setdefault(d.index, spec)
                points_.append((d, Point(method=plan.method, config=c.config,
                                         config_id=c.config_id, epsilon=plan.target_epsilon,
                                         seed=d.seed, spec=spec)))
            self.records.append(reserve_tuning(ds, plan, [p.spec for _d, p in points_],
                                               owner))
            cands = []
            for i, (d, point) in enumerate(points_):  # distinct by index, never redrawn
                tf = fresh.submit(dataset=ds, spec=point.spec, context=context, owner=owner,
                                  candidate=f"{owner}:{i}")
                ef = evaluate_task.submit(dataset=ds, model=tf, context=context)
                cands.append((d, point, tf, ef))
            self.submitted.append((plan, cands))
        return self

    def finish(self) -> dict[str, Any]:
        """Wait for every candidate, check each trained as planned, and release the best
        per (method, ε), all at one release moment (:func:`release_moment`).

        Returns:
            dict: ``rows`` (the released candidates' rows), ``best`` (their entries),
            ``withheld`` (every other candidate's row, ``released: False``; curator only)
            and ``released_at`` (the release moment, a UTC datetime).
        """
        from prefect.futures import wait

        from tasks.train import stamp_release

        wait([f for _plan, cands in self.submitted for c in cands for f in c[2:]])
        at = release_moment()  # every candidate has finished: nothing later depends on K
        when = at.isoformat(timespec="seconds")
        rows: list[dict[str, Any]] = []
        best: list[dict[str, Any]] = []
        withheld: list[dict[str, Any]] = []
        for (plan, cands), record in zip(self.submitted, self.records, strict=True):
            done = [self._candidate(plan, *c) for c in cands]
            if not done:  # Poisson K = 0: the mechanism releases nothing
                self.attached.add(record)
                store().attach_selected(record, None, at=when)
                best.append(_nothing(plan))
                continue
            try:
                i = select([c[3] for c in done])
            except PrivacyError as e:
                raise SelectionError(f"{plan.method}: {e}") from e
            for j, (_p, r, led, _s, _r) in enumerate(done):
                if j != i:  # the curator's only: with each candidate's ledger
                    withheld.append({**r, "released": False, "ledger": led.to_dict()})
            _point, row, ledger, score, release = done[i]
            # the odometer names the released candidate; the record and the artifact are
            # dated at the release moment
            self.attached.add(record)
            store().attach_selected(record, release or None, at=when)
            stamp_release(row["artifacts_dir"], at)
            row = {**row, "epsilon_spent": plan.epsilon, "delta": plan.delta}
            rows.append(row)
            best.append(_released(plan, row, ledger, score, self.n_val))
        return {"rows": rows, "best": best, "withheld": withheld, "released_at": at}

    def _candidate(self, plan: TuningPlan, d: Draw, point: Point, tf: Any, ef: Any
                   ) -> tuple[Point, dict[str, Any], Ledger, float, str]:
        """One finished candidate, checked: its point, row, ledger (with the score's
        event when the score is private), score and release id."""
        from flows.sweep_rows import trained_row
        from tasks.cached import intact as _intact

        model: Any = tf.result()
        ev: Any = ef.result()
        if not (_intact(model) and _intact(ev)):
            raise SelectionError(f"{point.config_id}: a candidate's artifacts changed before "
                                 "selection; nothing is released")
        report = report_of(model)
        ledger = ledger_of(model)  # the train task's reference
        try:
            verify_candidate(plan, d, report, ledger)
        except PrivacyError as e:
            raise SelectionError(str(e)) from e
        row = trained_row(point, model, ev, str(tf.state.name))
        score = float(row["val_accuracy"])
        if plan.score is not None:  # the score is a private release of Q
            exact = correct_count(score, self.n_val)
            score, event = noisy_count(exact, plan.score)
            ledger = ledger.add(event)
            row = {**row, "val_accuracy": score / self.n_val}
        return point, row, ledger, score, str((report.release or {}).get("id") or "")


def release_moment() -> datetime:
    """Now, in UTC, to the second (the resolution of every published time): the one time
    every record of a private selection carries."""
    return datetime.now(UTC).replace(microsecond=0)


def date_files(paths: Iterable[str | Path], at: datetime) -> None:
    """Set the modification time of ``paths`` (files written after a private selection
    released, such as the sweep's table and plots) and of their folders to ``at``."""
    ts = at.timestamp()
    folders = set()
    for p in map(Path, paths):
        os.utime(p, (ts, ts))
        folders.add(p.parent)
    for f in folders:
        os.utime(f, (ts, ts))


def tuning_charge(plan: TuningPlan) -> Any:
    """The odometer's charge of one private selection: the tuning mechanism's RDP curve
    (Papernot & Steinke, from the pointwise maximum of the configurations' planned curves,
    as the plan is calibrated), at the candidates' unit and relation, so it composes with
    every other release like a ledger. Its total-variation term is 0: the candidates are
    i.i.d. draws, none redrawn (:func:`dpgnn_core.sweep_tuning.draw`), so what runs is the
    mechanism the curve is for."""
    from dpgnn_core.budget import Charge, Curve
    from dpgnn_core.privacy.odometer import ORDERS
    from dpgnn_core.privacy.tuning import TuningRdpAccountant

    events = [e for led in plan.ledgers() for e in led.events]
    units = sorted({e.level for e in events})
    relations = sorted({e.relation for e in events})
    if len(units) != 1 or len(relations) != 1:
        raise SelectionError(f"{plan.method}: candidates' ledgers mix units {units} or "
                             f"relations {relations}")
    rdp = TuningRdpAccountant(plan.distribution, ORDERS).rdp(plan.ledgers())
    return Charge(curve=Curve(units[0], relations[0], tuple(float(o) for o in ORDERS),
                              tuple(float(v) for v in rdp), 0.0, plan.epsilon,
                              plan.delta))


@contextmanager
def selections_stopped(held: list[PrivateSelection]) -> Iterator[None]:
    """Around a sweep's selections: on Ctrl-C, each selection in ``held`` gives back the
    records it has not named at a release (:meth:`PrivateSelection.stopped`)."""
    try:
        yield
    except KeyboardInterrupt:
        for selection in held:
            selection.stopped()
        raise


def reserve_tuning(ds: Any, plan: TuningPlan, specs: list[Any], owner: str) -> int:
    """Charge the dataset's budget the selection's tuning mechanism once (its RDP curve,
    :func:`tuning_charge`), covering every candidate's training, before any trains;
    refused (``BudgetExceeded``) when it does not fit. The charge is the same whatever K
    was drawn (even K = 0): the odometer must not reveal K. Only tasks given ``owner``
    (the candidates) adopt the record; its release is named, and the record dated, at the
    selection's release moment (:meth:`~dpgnn_core.budget.BudgetStore.attach_selected`)."""
    from tasks.budget import flow_run_id, plan_key, store

    s = store()
    rid = s.reserve(ds["content_sha256"], ds["name"], ds["path"], tuning_charge(plan),
                    method=f"{plan.method} (private selection)",
                    run_id=f"{flow_run_id() or '-'}:tuning:{owner}", delta=plan.delta,
                    epsilon=plan.epsilon,
                    note=f"tuning mechanism of a private selection at target ε = "
                         f"{plan.target_epsilon:g} (its RDP curve), covering its candidates",
                    covers=[plan_key(ds, sp) for sp in specs])
    s.mark_spent(rid)  # the secret draw has happened: spent whatever follows
    return rid


def _entry(plan: TuningPlan) -> dict[str, Any]:
    return {"method": plan.method, "epsilon": plan.target_epsilon, "selection": "private",
            "candidates": len(plan.candidates), "epsilon_spent": plan.epsilon,
            "delta": plan.delta, "report": plan.report_line(), "tuning": plan.describe()}


def _released(plan: TuningPlan, row: dict[str, Any], ledger: Ledger, score: float,
              n_val: int) -> dict[str, Any]:
    """The selected candidate's entry. With a private score its validation accuracy is the
    released noisy count over the (public) number of validation records, its ledger has the
    score's event, and the score is not flagged."""
    flags = list(ledger.unaccounted)
    out = {**_entry(plan), "config_id": row["config_id"], "config": row["config"],
           "seeds": 1, "seed": row["seed"], "noise_multiplier": row["noise_multiplier"],
           "val_accuracy_mean": row["val_accuracy"], "val_accuracy_std": 0.0,
           "test_accuracy_mean": row["test_accuracy"], "test_accuracy_std": 0.0,
           "artifacts_dir": row["artifacts_dir"], "ledger": ledger.to_dict()}
    if plan.score is None:
        return {**out, "unaccounted": [*flags, SCORE_NOTE, CANDIDATES_NOTE]}
    return {**out, "val_score": {"noisy_correct": score, "n_val": n_val,
                                 "noise_std": plan.score.noise_std,
                                 "note": "validation accuracy = a noisy count of correct "
                                         "predictions / n_val (a private release, in the "
                                         "tuning epsilon; it may fall outside [0, 1])"},
            "unaccounted": [*flags, CANDIDATES_NOTE]}


def _nothing(plan: TuningPlan) -> dict[str, Any]:
    return {**_entry(plan), "config_id": "(nothing released: K = 0)", "config": {},
            "seeds": 0, "val_accuracy_mean": math.nan, "val_accuracy_std": math.nan,
            "test_accuracy_mean": math.nan, "test_accuracy_std": math.nan,
            "unaccounted": []}
