"""The per-dataset privacy budget in the pipeline: the release gate every training task
hands its fit, and what the flows record after a run (re-use of a cached release).

The store is ``$DPGNN_HOME/budget.sqlite`` (:class:`dpgnn_core.budget.BudgetStore`). A task
that computes something private (``train``, a staged method's gated stages such as GAP's
``gap_encoder``, ``gap_aggregate`` and ``gap_classifier``) runs its core call inside
:func:`gate_for` and hands the gate to the fit (``Method.fit(..., gate=gate)``; a stage's
engine, :class:`~dpgnn_core.methods.private_run.PrivateRun`): the fit's engine calls the
gate with its calibrated plan before its first release, and the gate reserves that plan
against the dataset's budget in one transaction, refusing
(:class:`~dpgnn_core.budget.BudgetExceeded`) before anything private is computed. The
first trained step (or the PMA release) makes the reservation spent for good; a task that
fails before that gives it back. A cached task never runs, so a cache hit costs nothing:
the flow records it as a re-use (:func:`account_after`).

One release, one reservation: a task adopts another's reservation only when its flow hands
it the same explicit owner token (:func:`new_owner`): GAP's and ProGAP's stages are
separate tasks of one flow run and share the reservation of the whole plan; the candidates
of a private selection are covered by the selection's one reservation of the tuning total.
Any other task is its own release and is checked and charged, even with the plan of
another task of the same flow run (a sweep listing a seed twice).

A resumed run is the same release: a training's checkpoints carry its reservation (the
record and a token, :mod:`dpgnn_core.budget.resume`), and a rerun that resumes from one
adopts that reservation instead of reserving the plan again, while holding the checkpoint
folder's lock (a run still training from it cannot be adopted from).
"""

from __future__ import annotations

import fcntl
import logging
import math
import os
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from dpgnn_core.budget import BudgetStore, Charge, default_store_path
from dpgnn_core.errors import PrivacyError
from dpgnn_core.io import sha256_json
from dpgnn_core.privacy.events import Ledger
from dpgnn_core.privacy.report import PrivacyReport
from dpgnn_core.privacy.units import UNIT_WORDS, group_size
from tasks.config import project_dir
from tasks.refs import DatasetRef

log = logging.getLogger("dpgnn.budget")


def store() -> BudgetStore:
    """The budget store of the project home."""
    return BudgetStore(default_store_path(project_dir()))


def plan_key(dataset: Mapping[str, Any], spec: Any) -> str:
    """What identifies one run's plan: the dataset's content and the whole spec."""
    s = spec.model_dump(mode="json") if hasattr(spec, "model_dump") else dict(spec)
    return sha256_json({"dataset": dataset["content_sha256"], "spec": s})[:32]


#: The command-line flag that lets a non-private run release on a dataset with a budget.
ALLOW_NON_PRIVATE_FLAG = "--allow-non-private-release"


class NonPrivateRefused(PrivacyError):
    """A non-private release on a dataset with a finite budget, without the override."""


class LostReleaseError(PrivacyError):
    """A cached private release is missing or changed: remaking it is a new release."""


def _budget_of(s: BudgetStore, dataset: Mapping[str, Any]) -> Any:
    """The dataset's budget (by its content, else by its folder: a new version of a folder
    shares the folder's budget), or None when the store has none for it."""
    bid = s.budget_id(str(dataset["content_sha256"]))
    if bid is None and dataset.get("path"):
        try:
            bid = s.resolve(str(dataset["path"]))
        except PrivacyError:
            bid = None
    return s.summary(bid).budget if bid is not None else None


def admit_non_private(dataset: Mapping[str, Any], method: str, *, allowed: bool,
                      what: str = "") -> dict[str, Any]:
    """Admit a release made without privacy (a baseline, ``--non-private``, gap-inf,
    progap-inf, graph classification's non-private twin) on ``dataset``, before it trains
    (or is re-used from the cache: publishing it again is a release too).

    A non-private release has no finite ε: under a finite budget it is charged ∞, that is
    refused, unless ``allowed`` (the user's :data:`ALLOW_NON_PRIVATE_FLAG`); then it is
    recorded in the odometer (status ``non-private``, outside every finite guarantee) and
    the returned tags say so on the MLflow run. A dataset without a budget is not touched
    (docs/privacy.md, "One release, one charge").

    Args:
        dataset (Mapping): the dataset's summary (``content_sha256``, ``name``, ``path``).
        method (str): the non-private method (recorded).
        allowed (bool): the override was given.
        what (str, optional): what is released, in words, for the messages.
            (default: ``""``: the method's run)

    Returns:
        dict: MLflow tags of the recorded override (empty when nothing was recorded).

    Raises:
        NonPrivateRefused: a finite budget and no override.
    """
    s = store()
    budget = _budget_of(s, dataset)
    if budget is None or budget.epsilon is None:
        return {}
    what = what or f"{method} is not private"
    if not allowed:
        raise NonPrivateRefused(
            f"dataset {dataset['name']} has a privacy budget (ε = {budget.epsilon:g} at δ = "
            f"{budget.delta:g}): {what}, so its release has no finite ε and is charged ∞, "
            f"which the budget refuses. Nothing was trained. Pass {ALLOW_NON_PRIVATE_FLAG} "
            "to release it anyway (recorded in the odometer and on the MLflow run)")
    note = (f"released without privacy by {ALLOW_NON_PRIVATE_FLAG}: {what}; no finite "
            "guarantee of this budget covers it")
    rid = s.record(str(dataset["content_sha256"]), str(dataset["name"]),
                   str(dataset["path"]), Charge(None), status="non-private", method=method,
                   run_id=flow_run_id(), release_id=None, delta=None, epsilon=None,
                   note=note)
    log.warning(note)
    return {"dpgnn.non_private_release": f"allowed by {ALLOW_NON_PRIVATE_FLAG}; recorded "
                                         f"in the odometer (record {rid})"}


def lost_plan(method: str, dataset_name: str, hit: tuple[int, str],
              where: str = "") -> LostReleaseError:
    """The refusal to train again a plan already released on the dataset (odometer record
    and release id ``hit``) whose cached result is gone: a new release with fresh noise,
    charged again (issue 48 §4). ``where``: what of the cache is missing, when known."""
    record, release = hit
    why = where or ("the cache or the artifacts under the project home moved or deleted, "
                    "or a cache of another code version")
    return LostReleaseError(
        f"{method}: this spec was already released on dataset {dataset_name} "
        f"(odometer record {record}, release {release[:12]}) but its cached result is "
        f"missing ({why}): training it again would be a new release with fresh noise, "
        "charged again to the dataset's budget. Nothing was trained. Restore the cache, or "
        "rerun with --refresh to spend it again")


def released_plan(dataset: Mapping[str, Any], spec: Any) -> tuple[int, str] | None:
    """(odometer record, release id) of ``spec``'s plan already released on ``dataset`` in
    its current epoch, or None (also for a spec without a target ε: nothing to release)."""
    if getattr(spec, "epsilon", None) is None:
        return None
    return store().released_plan(str(dataset["content_sha256"]), plan_key(dataset, spec))


def _in_cached_task() -> bool:
    """Whether this code runs in a Prefect task that may hit its cache (not one run with
    ``refresh_cache``: ``--refresh``, a private selection's candidate, a retraining)."""
    try:
        from prefect.context import TaskRunContext

        ctx = TaskRunContext.get()
    except Exception:  # outside Prefect (a library caller): no cache to lose
        return False
    return ctx is not None and not getattr(ctx.task, "refresh_cache", False)


def _checkpointer() -> Any:
    """The enclosing training's checkpointer, if any (imported late: it needs torch)."""
    from dpgnn_core.training import checkpoint

    return checkpoint.current()


class UnitNotBounded(PrivacyError):
    """A private release that bounds nothing about a unit the dataset's budget protects
    (GAP-EDP's edge guarantee under a budget of nodes): refused before anything starts."""


def admit_units(dataset: Mapping[str, Any], method: str,
                levels: Sequence[tuple[str, str]]) -> None:
    """Refuse, before anything starts (the command line calls this before Prefect, the
    flows again), a private release whose events, at ``levels`` ((level, relation) pairs:
    :func:`dpgnn_core.methods.preflight.release_levels`), bound nothing about a unit the
    dataset's budget protects: such a release would be charged ε = ∞ for that unit, which
    no budget admits (docs/privacy.md, "Privacy budget across runs"). A dataset without a
    budget, or whose budget protects no unit yet (before its first release), is not
    touched; the budget's filter still checks every plan when it is reserved.

    Args:
        dataset (Mapping): the dataset's summary (``content_sha256``, ``name``).
        method (str): the method (named in the message).
        levels (sequence of tuple): the release's (level, relation) pairs; empty for a
            non-private run (:func:`admit_non_private` decides those).

    Raises:
        UnitNotBounded: naming the method, the unit and the dataset.
    """
    if not levels:
        return
    found = store().protected(str(dataset["content_sha256"]))
    if found is None:
        return
    budget, units = found
    for unit in units:
        unbounded = [f"{lv} ({rel.replace('_', '/')})" for lv, rel in levels
                     if not group_size(lv, rel, unit)]
        if unbounded:
            raise UnitNotBounded(
                f"{method} releases at level {', '.join(unbounded)}, which bounds nothing "
                f"about the protected unit {unit} ({UNIT_WORDS.get(unit, unit)}) of dataset "
                f"{dataset.get('name', '')}'s privacy budget (ε = {budget.epsilon:g} at δ = "
                f"{budget.delta:g}): no finite ε of this run covers one {unit}, so the "
                "budget refuses it. Nothing was trained. Choose a method whose protection "
                f"covers a {unit} (`dpgnn run --help`), or see `dpgnn budget show`")


def flow_run_id() -> str:
    """The Prefect flow run this code runs in ('' outside one)."""
    try:
        from prefect.runtime import flow_run

        return str(flow_run.id or "")
    except Exception:  # pragma: no cover - outside Prefect
        return ""


def new_owner() -> str:
    """A fresh owner token: what a flow hands to every task of one release (a staged run's
    stages, a private selection's candidates) so that they share one reservation."""
    return uuid.uuid4().hex


class TaskGate:
    """A :class:`~dpgnn_core.privacy.gate.ReleaseGate` over the project's budget store
    for one task of one run.

    Args:
        dataset (DatasetRef): the dataset whose budget the task spends from.
        method (str): the method's name (recorded).
        spec (Any): the task's spec (with the dataset, the plan's key).
        owner (str, optional): the release's owner token (:func:`new_owner`), shared by
            the tasks of one release only; without one the task is its own release.
            (default: :obj:`None`)
    """

    def __init__(self, dataset: DatasetRef, method: str, spec: Any,
                 owner: str | None = None, *, trains_on_it: bool = True) -> None:
        self.ds = dataset
        # The plan key names the budget's dataset and the spec; a training on other data
        # charged to it (an audit's canary datasets) shares the key of a run on the
        # dataset itself, so only a training on the dataset checks for a lost release.
        self.trains_on_it = trains_on_it
        self.method = method
        self.key = plan_key(dataset, spec)
        self.owner = owner
        # The stage tasks of one staged run share this key (their flow hands them one
        # owner token); any other gate has a key of its own.
        self.run_key = f"{flow_run_id() or '-'}:{self.key}:{owner or uuid.uuid4().hex}"
        self.insecure = bool(getattr(spec, "insecure_reproducible_noise", False))
        self.record_id: int | None = None
        self.adopted = False  # the reservation belongs to an earlier stage or a selection
        self.resumed = False  # the reservation a resumed checkpoint carried (own)
        self.was_released = False
        self.store = store()
        self._plan: tuple[Ledger, dict[str, Any]] | None = None
        self._lock: int | None = None
        self._looked = False

    def _charge(self, ledger: Ledger, info: Mapping[str, Any]
                ) -> tuple[Charge, Any, str]:
        """What the plan ``ledger`` is charged: its ledger, or ∞ with insecure noise."""
        if self.insecure:  # noise recomputable from the stored seed: no bound holds
            ((unit, rel),) = {(e.level, e.relation) for e in ledger.events}
            return (Charge(fixed=(math.inf, 0.0, unit, rel)), math.inf,
                    "insecure reproducible noise: the noise can be recomputed from the "
                    "stored seed, so this release has no finite epsilon")
        return Charge(ledger), info.get("epsilon"), ""

    def admit(self, ledger: Ledger, info: Mapping[str, Any]) -> None:
        """Check the plan against the budget without reserving it (a stage that releases
        nothing private is about to train: :meth:`dpgnn_core.methods.private_run.
        PrivateRun.admit`)."""
        if self.record_id is not None or self.store.find_reservation(
                self.ds["content_sha256"], self.run_key, self.key, self.owner) is not None:
            return  # already reserved for this release
        self.store.check(self.ds["content_sha256"], self._charge(ledger, info)[0])

    def before_release(self, ledger: Ledger, info: Mapping[str, Any]) -> None:
        if self.record_id is not None:
            return
        self._plan = (ledger, dict(info))
        found = self.store.find_reservation(self.ds["content_sha256"], self.run_key,
                                            self.key, self.owner)
        if found is not None:  # GAP's earlier stage in this run, or a private selection
            self.record_id, self.adopted = found, True
        elif not self._resume():  # a resumed checkpoint's reservation: charged once
            self._refuse_remake()
            self._reserve(ledger, info)
        self._carry()

    def _refuse_remake(self) -> None:
        """Inside a cached task that was not asked to recompute (no ``--refresh``), a plan
        the odometer already recorded as released means its cached result is gone (the
        cache and the artifacts moved or deleted, or another code version's cache):
        training it again would be a new release, charged again, without a word (issue 48
        §4). Refused (:class:`LostReleaseError`) before anything is reserved."""
        if not self.trains_on_it or not _in_cached_task():
            return
        hit = self.store.released_plan(self.ds["content_sha256"], self.key)
        if hit is None:
            return
        raise lost_plan(self.method, self.ds["name"], hit)

    def _reserve(self, ledger: Ledger, info: Mapping[str, Any]) -> None:
        charge, eps, note = self._charge(ledger, info)
        self.record_id = self.store.reserve(
            self.ds["content_sha256"], self.ds["name"], self.ds["path"], charge,
            method=self.method, run_id=self.run_key, delta=info.get("delta"),
            epsilon=eps, plan_key=self.key, note=note)

    def _hold(self, folder: Any) -> bool:
        """Hold the checkpoint folder's lock for the task (False: another live training
        holds it; its reservation is neither carried nor adopted here)."""
        if self._lock is not None:
            return True
        try:
            folder.mkdir(parents=True, exist_ok=True)
            fd = os.open(folder / ".reservation.lock", os.O_CREAT | os.O_RDWR, 0o600)
        except OSError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return False
        self._lock = fd
        return True

    def _carry(self) -> None:
        """Have the training's checkpoints carry this reservation, so that a rerun resuming
        from one continues this release (never a private selection's record)."""
        ckpt = _checkpointer()
        if ckpt is None or self.record_id is None or not self._hold(ckpt.folder):
            return
        token = self.store.carrier(self.record_id)
        if token is not None:
            ckpt.carry = {"record": self.record_id, "token": token}

    def _resume(self) -> bool:
        """Adopt the reservation of the checkpoint this training will resume from."""
        ckpt = _checkpointer()
        found = ckpt.carried() if ckpt is not None else None
        if ckpt is None or found is None or not self._hold(ckpt.folder):
            return False
        carry, step = found
        try:
            rid, token = int(carry["record"]), str(carry["token"])
        except (KeyError, TypeError, ValueError):
            return False
        new = self.store.adopt_carried(
            self.ds["content_sha256"], rid, token, self.key, self.run_key,
            f"resumed from step {step} (run {self.run_key.split(':', 1)[0]}): the same "
            "release, its plan charged once")
        if new is None:
            return False
        self.record_id, self.resumed = rid, True
        ckpt.carry, ckpt.carried_over = {"record": rid, "token": new}, True
        log.info("resuming from step %d: the reservation %d its checkpoint carries "
                 "covers this run (charged once)", step, rid)
        return True

    def close(self) -> None:
        if self._lock is not None:
            os.close(self._lock)
            self._lock = None

    def _stage_record(self) -> None:
        """A task that computes nothing private but trains on its run's release (GAP-EDP's
        classifier): its checkpoints carry the run's reservation too, and a resumed one
        adopts it, so the release it finishes is named on it (not recorded late)."""
        self._looked = True
        found = self.store.find_reservation(self.ds["content_sha256"], self.run_key,
                                            self.key, self.owner)
        if found is not None:
            self.record_id, self.adopted = found, True
        elif not self._resume():
            return
        self._carry()

    def released(self) -> None:
        if self.record_id is None and not self._looked:
            self._stage_record()
        if self.record_id is not None and not self.was_released:
            self.was_released = True
            ckpt = _checkpointer()
            if self.resumed and self._plan is not None and not (ckpt and ckpt.resumed_from):
                # The checkpoint carried a reservation but the training started afresh
                # (a checkpoint of another shape): a new release, checked and charged.
                self.resumed = False
                if ckpt is not None:
                    ckpt.carried_over = False
                self._reserve(*self._plan)
            if not self.adopted:
                self.store.mark_spent(self.record_id)

    def finish(self, report: PrivacyReport | None, ledger: Ledger | None) -> None:
        """The task wrote its artifact: the release is spent, with its id and actual
        ledger (the composed ledger of the run for GAP's classifier)."""
        release = (report.release if report is not None else None) or {}
        spent = None if report is None or math.isinf(report.epsilon) else report.epsilon
        if self.record_id is None:  # no private computation in this task (GAP-EDP's
            found = self.store.find_reservation(  # classifier): name the release on the
                self.ds["content_sha256"], self.run_key, self.key,  # run's reservation
                self.owner)
            if found is not None and release.get("id"):
                self.store.attach_release(found, str(release["id"]))
            return
        if self.adopted:  # an adopted reservation: attach the id, keep its charge
            if release.get("id"):
                self.store.attach_release(self.record_id, str(release["id"]))
            return
        self.was_released = True
        self.store.mark_spent(self.record_id, release_id=release.get("id"),
                              ledger=ledger if ledger is not None and ledger.entries else None,
                              epsilon=None if self.insecure else spent)

    def failed(self, error: BaseException) -> None:
        if self.record_id is not None and not self.was_released and not self.adopted \
                and not self.resumed:
            self.store.release_unused(self.record_id, f"failed before any release: "
                                      f"{type(error).__name__}: {error}"[:500])


#: The gates of this process's tasks now running (:func:`give_back_live`).
_LIVE: set[TaskGate] = set()


def give_back_live(why: str) -> None:
    """The process is about to end at once (``os._exit``: the Prefect server died, the disk
    filled up): give back the reservation of every running task that released nothing yet,
    as a failure would (issue 48 §4: such a run was charged again on its rerun). A task
    that trained a step keeps its reservation, which its checkpoint carries to the rerun.
    Best effort: a store that cannot be written leaves the reservation counted."""
    for gate in list(_LIVE):
        try:
            gate.failed(RuntimeError(why))
        except Exception:  # ending anyway; counted is the safe side
            log.warning("could not give back reservation %s", gate.record_id)


@contextmanager
def gate_for(dataset: DatasetRef, method: str, spec: Any, owner: str | None = None, *,
             trains_on_it: bool = True) -> Iterator[TaskGate]:
    """A :class:`TaskGate` for a task's core call, which hands it to the fit (its engine
    reserves through it, and tells it of every release: a trained step makes the
    reservation spent); a failure before the first release gives the reservation back.
    ``owner``, ``trains_on_it`` (False: the training data is not ``dataset`` itself): see
    :class:`TaskGate`."""
    gate = TaskGate(dataset, method, spec, owner, trains_on_it=trains_on_it)
    _LIVE.add(gate)
    try:
        yield gate
    except BaseException as e:
        gate.failed(e)
        raise
    finally:
        _LIVE.discard(gate)
        gate.close()


def account_after(dataset: Mapping[str, Any], report: PrivacyReport, method: str,
                  ledger: Ledger | None, reading: bool = True) -> dict[str, Any]:
    """After a run: record a cached release it re-used (costs nothing; a release never
    recorded before, e.g. made before the store existed, is recorded as spent now) and
    return the odometer reading: ``dataset_epsilon_spent`` (the run's unit, cumulative,
    after this run), ``dataset_epsilon_by_unit``, the budget and what remains (unless
    ``reading`` is False: a sweep reads the odometer once, after its last point)."""
    if not report.private:
        return {}
    s = store()
    sha = str(dataset["content_sha256"])
    rid = str((report.release or {}).get("id") or "")
    out: dict[str, Any] = {}
    if rid and not s.known_release(sha, rid):  # cached, and never recorded: a late record
        s.record(sha, str(dataset["name"]), str(dataset["path"]),
                 Charge(ledger if ledger is not None and ledger.events else None),
                 status="spent", method=method, run_id=flow_run_id(), release_id=rid,
                 delta=report.delta, epsilon=report.epsilon,
                 note="recorded late: a release made before it was recorded here")
        out["budget_note"] = ("this run's release was not in the budget store (made before "
                              "it, or under another home): recorded as spent now")
        log.warning(out["budget_note"])
    elif rid and not s.recorded_in_run(sha, rid, flow_run_id()):
        s.record(sha, str(dataset["name"]), str(dataset["path"]), Charge(None),
                 status="reuse", method=method, run_id=flow_run_id(), release_id=rid,
                 delta=report.delta, epsilon=0.0,
                 note="re-used the cached release: no new privacy cost")
    return {**out, **(odometer(sha, report.level, report.relation)
                       if reading else {})}


def odometer(sha256: str, level: Any = None, relation: Any = None) -> dict[str, Any]:
    """The dataset's odometer now: post hoc ε spent per unit (and of the unit of ``level``
    under ``relation``: DP-GNN's node level, replace-one, is unit ``node_row``), budget,
    remaining."""
    from dpgnn_core.privacy.odometer import source_unit

    s = store()
    bid = s.budget_id(sha256)
    if bid is None:
        return {}
    summary = s.summary(bid)
    by_unit = {u: v.epsilon for u, v in summary.spent.items()}
    unit = (source_unit(level, relation if isinstance(relation, str) else "add_remove")[0]
            if isinstance(level, str) else None)
    stated = {u for r in summary.records if r.status in ("reserved", "spent")
              for u in r.charge.units()}  # the units releases were made at
    out: dict[str, Any] = {
        "dataset_epsilon_spent": by_unit.get(unit) if unit else
        max((e for u, e in by_unit.items() if u in stated), default=0.0),
        "dataset_epsilon_by_unit": by_unit, "dataset_epsilon_delta": summary.delta}
    if summary.void_since is not None:  # a release without privacy: ∞ for every unit
        out["dataset_epsilon_spent"] = math.inf
        out["dataset_guarantee_void"] = summary.void_note()
    b = summary.budget
    if b.epsilon is not None:
        out["dataset_budget"] = {"epsilon": b.epsilon, "delta": b.delta,
                                 "remaining": {u: summary.remaining(u) for u in by_unit},
                                 "protected": sorted(summary.filter),
                                 "filter_used": {u: math.inf if summary.void_since
                                                 is not None else f.fits  # void: no bound
                                                 for u, f in summary.filter.items()}}
    return out


def budget_tags(budget: dict[str, Any]) -> dict[str, str]:
    """MLflow tags of the dataset's odometer after a run: cumulative ε of the run's unit
    (and of every unit), the budget and what remains."""
    if not budget:
        return {}
    by_unit = budget.get("dataset_epsilon_by_unit", {})
    d = budget.get("dataset_epsilon_delta")
    void = budget.get("dataset_guarantee_void")
    tags = {"dpgnn.dataset_epsilon_spent": f"{budget['dataset_epsilon_spent']:.4g}"
            + (f" at δ = {d:.3g}" if d else "") + (f" ({void})" if void else ""),
            "dpgnn.dataset_epsilon_by_unit": ", ".join(f"{u}: {e:.4g}"
                                                       for u, e in by_unit.items())}
    if budget.get("dataset_budget"):
        b = budget["dataset_budget"]
        tags["dpgnn.dataset_budget"] = (f"ε = {b['epsilon']:.4g} at δ = {b['delta']:.3g}; "
                                        "remaining " + ", ".join(
                                            _remaining(u, r, b) for u, r in
                                            b["remaining"].items()))
    return tags


def _remaining(unit: str, remaining: float, budget: dict[str, Any]) -> str:
    """One unit of the budget tag: ``not protected`` for a unit the budget does not cover
    (it is not used up: it is not bounded); for a protected unit, the post hoc figure and
    the filter's reading, which is what admits runs."""
    used = budget.get("filter_used", {})
    if "protected" in budget and unit not in budget["protected"]:
        return f"{unit}: not protected"
    if unit not in used:
        return f"{unit}: {remaining:.4g}"
    if math.isinf(used[unit]):  # a release without privacy: the filter bounds nothing
        return f"{unit}: none (VOID: no guarantee since a release without privacy)"
    return (f"{unit}: {remaining:.4g} post hoc (filter at {100 * used[unit]:.4g} % of its "
            "bound; the filter, not the post hoc figure, decides admission)")


__all__ = ["ALLOW_NON_PRIVATE_FLAG", "LostReleaseError", "NonPrivateRefused", "TaskGate",
           "account_after", "admit_non_private", "budget_tags", "flow_run_id", "gate_for",
           "give_back_live", "new_owner", "odometer", "plan_key", "store"]
