"""The staged compositions (GAP, ProGAP, DPDGC): the :class:`Stage` contract each declares,
the in-memory runner (:func:`run_in_memory`), and what they share: the graph their private
aggregation reads (:func:`prepare_graph`, the node-level degree check), one noise scale for
the whole composition (:func:`solve_composition`), the plan to the fit's engine before a
stage's private computation (:func:`gate_plan`) and what the privacy report says about the release
(:func:`release_report`).

A staged method declares its stages (:class:`Staged`): a calibration, then, for the
calibrated noise scale z, stages in order, each naming the earlier stages it reads. A stage
computes values (each named by the file it is written to), privacy events and JSON info from
what it reads; the last one composes the run (its ledger, report and history). Two runners
run any declaration: :func:`run_in_memory` (the library, the registry) passes the values
themselves; ``tasks/staged.py`` runs each stage as a cached task that writes its values to
files and passes references. Neither knows a method's stages; no method calls a runner.
"""

from __future__ import annotations

import contextlib
import math
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np
import torch

from dpgnn_core.data.graph import GraphData
from dpgnn_core.errors import DataError
from dpgnn_core.graph.gap_degree import check_degree_bound
from dpgnn_core.methods.private_run import PrivateRun
from dpgnn_core.privacy import Ledger, PrivacyError, calibrate_noise, make_accountant
from dpgnn_core.privacy.randomness import Randomness
from dpgnn_core.specs import DpdgcSpec, GapSpec, ProgapSpec
from dpgnn_core.training.checkpoint import suspended

#: Largest noise multiplier the calibrations of GAP, ProGAP and DPDGC accept: beyond it every
#: release is noise, so a budget that needs more is refused with the smallest ε reached at
#: this noise.
MAX_NOISE = 1e3

#: The spec of a staged composition whose plan goes to the budget keeper
#: (:func:`gate_plan`, :func:`admit_plan`).
StagedSpec = GapSpec | ProgapSpec | DpdgcSpec


def degree_check_note(method: str) -> str:
    """The ledger's note on the data-dependent degree check of a node-level method
    (GAP-NDP, ProGAP-NDP, DPDGC-NDP): one bit about the private graph, not accounted."""
    return (f"{method} degree check: the run proceeds only if every degree is within "
            "max_degree D and refuses otherwise, so whether it ran reveals whether the "
            "private graph's maximum degree is <= D (one bit, not accounted)")


def prepare_graph(data: GraphData, spec: GapSpec | ProgapSpec
                  ) -> tuple[np.ndarray, dict[str, Any]]:
    """The edges PMA aggregates over: all of them. At node level the graph must already
    have every degree within D (:func:`~dpgnn_core.graph.gap_degree.check_degree_bound`
    refuses it otherwise, naming D but not the graph's degrees); no edge is dropped."""
    ei = np.asarray(data.edge_index)
    info: dict[str, Any] = {"edges_before": int(ei.shape[1]), "directed": is_directed(data)}
    if spec.level == "node":
        assert spec.max_degree is not None
        check_degree_bound(ei, data.num_nodes, spec.max_degree, directed=is_directed(data))
        if data.meta.get("cleaning", {}).get("degree_bound"):
            warnings.warn("this dataset was degree-bounded by GAP's edge sampler (by the "
                          "removed `dpgnn materialize --sampler gap-degree`): node-level "
                          "privacy holds for the bounded graph, not for the graph it was "
                          "sampled from",
                          stacklevel=2)
            info["bounded_by_sampler"] = True
    if ei.shape[1] == 0:
        raise DataError("no edge left to aggregate over", field="edge_index", value=0)
    info["edges_after"] = int(ei.shape[1])
    return ei, info


def is_directed(data: GraphData) -> bool:
    """The manifest flag ``directed``, never inferred from the edges: a symmetric edge list
    flagged directed is still a directed graph (one record = one directed edge)."""
    return bool(data.directed)


def solve_composition(spec: GapSpec | ProgapSpec, make: Callable[[float], Ledger],
                      delta: float, report: dict[str, Any], what: str) -> float:
    """The common noise scale z of a staged composition (GAP, ProGAP) calibrated to
    ``spec.epsilon`` at ``delta`` (0 for a non-private level), with the budget fields added
    to ``report``.

    Raises:
        PrivacyError: no noise up to :data:`MAX_NOISE` reaches the target (``what`` names
            the composition).
    """
    if spec.level == "none":
        report.update({"epsilon": math.inf, "noise_multiplier": 0.0})
        return 0.0
    assert spec.epsilon is not None
    try:
        cal = calibrate_noise(make, spec.epsilon, delta, make_accountant(spec.accountant),
                              max_noise=MAX_NOISE)
    except PrivacyError as e:
        raise PrivacyError(f"{what}: {e}") from e
    report.update({"epsilon": cal.epsilon, "target_epsilon": spec.epsilon,
                   "noise_multiplier": cal.noise_multiplier, "accountant": spec.accountant})
    return cal.noise_multiplier


def release_report(data: GraphData, spec: GapSpec | ProgapSpec, parameters: str,
                   own_input: str, aggregation: str) -> dict[str, Any]:
    """What a GAP-style report says about its release: directedness, row clipping, the
    randomness, what is protected at the spec's level and how inference spends nothing.
    ``parameters`` names the private modules, ``own_input`` what of node v's own data its
    prediction reads un-noised, ``aggregation`` the aggregations (for the inductive case)."""
    directed = is_directed(data)
    inductive = bool(data.meta.get("split", {}).get("inductive", False))
    unit = "one directed edge" if directed else "one undirected edge (both directions)"
    return {
        "row_clip": spec.row_clip, "directed": directed,
        "selection": ("the weights of the best validation epoch (validation labels are not "
                      "protected at this level; the release is read as post-processing)"
                      if spec.selection == "best-val" else "the last step's weights"),
        **Randomness.for_spec(spec).describe(),
        "protects": {
            "edge": f"aggregations X(1..K), parameters and predictions against adding or "
                    f"removing {unit} (graph flagged {'directed' if directed else 'undirected'}"
                    "); node features and labels are not protected",
            "node": f"{parameters} and the released aggregations "
                    "X(1..K) against adding or removing one node with its edges, on graphs "
                    f"whose every {'in + out degree' if directed else 'degree'} is <= "
                    f"{spec.max_degree} (a graph beyond it is refused, which reveals that "
                    "bit). Predictions: node v's prediction also reads v's own features "
                    f"through {own_input}, which is not noised; the predictions of all "
                    "nodes other than v are post-processing of the private outputs and "
                    "their own data, so they are protected against v (a joint-DP-style, "
                    "per-node statement), v's own prediction is not",
            "none": "nothing"}[spec.level],
        "inference": (
            f"inductive: {aggregation} once on the whole disjoint graph, i.e. separately on "
            "the training and test graphs (parallel composition): no extra budget"
            if inductive else "transductive: test nodes reuse the cached private "
            "aggregations (no extra budget)")}


def gate_plan(run: PrivateRun, spec: StagedSpec, plan: Ledger, n_train: int
              ) -> None:
    """The whole calibrated ``plan`` of a staged run to its engine's budget keeper
    (:meth:`PrivateRun.reserve`), before a stage's private computation (a second call in
    one run reserves nothing more)."""
    run.reserve(plan, _plan_info(spec, n_train))


def admit_plan(run: PrivateRun, spec: StagedSpec, plan: Ledger, n_train: int
               ) -> None:
    """The whole calibrated ``plan`` to the budget keeper's check, before a stage that
    releases nothing private trains (the edge level's encoder or first stage): a plan the
    budget refuses is refused before any stage runs (:meth:`PrivateRun.admit`); nothing
    is reserved until the first private computation."""
    run.admit(plan, _plan_info(spec, n_train))


def _plan_info(spec: StagedSpec, n_train: int) -> dict[str, Any]:
    delta = spec.delta if spec.delta is not None else 1.0 / (10 * n_train)
    return {"method": spec.method, "epsilon": spec.epsilon, "delta": delta}


# --- the stage contract ------------------------------------------------------------------
_EMPTY: Mapping[str, Any] = MappingProxyType({})


@dataclass(frozen=True)
class StageContext:
    """What a runner hands a stage besides what it reads: the data, the spec and the fit's
    engine (:class:`~dpgnn_core.methods.private_run.PrivateRun`: the budget keeper, the
    steps of a training stage, the progress of an aggregation)."""

    data: GraphData
    spec: Any
    run: PrivateRun = field(default_factory=PrivateRun)


@dataclass(frozen=True)
class StageOutput:
    """What a stage computed.

    Attributes:
        values (Mapping): each value by the file a cached run writes it to (the suffix
            says how: ``.pt`` a module's weights or a tensor, ``.npy`` an array, ``.json``
            JSON); a stage that reads it gets the value (in memory) or the file's content.
        events (Ledger): the privacy events of what it released.
        info (Mapping): JSON the stages that read it see (and its artifact's manifest).
        manifest (Mapping): JSON for its artifact's manifest only.
        report (dict, optional): the last stage's: the run's privacy report (its
            ``ledger`` the composed ledger).
    """

    values: Mapping[str, Any] = field(default_factory=dict)
    events: Ledger = field(default_factory=Ledger)
    info: Mapping[str, Any] = field(default_factory=dict)
    manifest: Mapping[str, Any] = field(default_factory=dict)
    report: dict[str, Any] | None = None


#: A stage's computation: ``(context, reads) -> output``; ``reads`` maps each argument of
#: :attr:`Stage.reads` to the output of the stage it names (a list for a tuple of names,
#: None for None).
StageRun = Callable[[StageContext, Mapping[str, Any]], StageOutput]


@dataclass(frozen=True)
class Stage:
    """One stage of a staged method: what it reads, computes and writes.

    Args:
        name (str): its name in the run (the pipeline's cache state: ``encoder``,
            ``stage1``; the last stage is ``train``).
        kind (str): what it computes: its cache key's and artifact folder's namespace
            (``gap_encoder``).
        run (StageRun): the computation.
        reads (Mapping, optional): argument -> the earlier stage it reads (a name, a tuple
            of names, or None). (default: none)
        params (Mapping, optional): JSON parameters beside the dataset, the spec and what
            it reads (``z``, ``stage``): with them, its cache key. (default: none)
        folder (tuple, optional): what names its artifact folder beside the dataset and
            the files it reads. (default: the spec and ``params``)
        gated (bool, optional): it computes something private: it runs under the budget
            keeper's gate and its events travel with it. (default: :obj:`False`)
        steps (callable, optional): a training stage's optimisation steps for ``n``
            training records: its engine reports its steps; it gets a checkpoint.
            (default: :obj:`None`)
        label (str, optional): its name on the progress display. (default: ``name``)
        step_releases (bool, optional): each training step is a release (it changes what
            the run publishes): the step marks the reservation spent. (default: :obj:`True`)
        resumable (bool, optional): in one process it may resume from a checkpoint; False
            when it trains on a release a rerun redraws (a cached run keys its checkpoint
            on the stored release instead). (default: :obj:`True`)
        aggregates (bool, optional): it reports progress per hop (``progress``).
            (default: :obj:`False`)
    """

    name: str
    kind: str
    run: StageRun
    reads: Mapping[str, str | tuple[str, ...] | None] = field(default_factory=dict)
    params: Mapping[str, Any] = field(default_factory=dict)
    folder: tuple[Any, ...] | None = None
    gated: bool = False
    steps: Callable[[int], int] | None = None
    label: str = ""
    step_releases: bool = True
    resumable: bool = True
    aggregates: bool = False


@dataclass(frozen=True)
class Staged:
    """A staged method's declaration.

    Args:
        family (str): the catalogue's family (the saved model's kind).
        calibrate (callable): ``(data, spec) -> (planned ledger, z, report)``: checks the
            input and calibrates the composition's one noise scale z.
        stages (callable): ``(spec, z) -> stages``, in order; the last composes the run.
    """

    family: str
    calibrate: Callable[[GraphData, Any], tuple[Ledger, float, dict[str, Any]]]
    stages: Callable[[Any, float], tuple[Stage, ...]]

    def calibration(self) -> Stage:
        """The first stage: its info holds ``z``, the ``planned`` ledger (JSON), the
        ``report`` and ``num_train``."""
        def run(ctx: StageContext, reads: Mapping[str, Any]) -> StageOutput:
            planned, z, report = self.calibrate(ctx.data, ctx.spec)
            return StageOutput(info={"z": z, "planned": planned.to_dict(), "report": report,
                                     "num_train": int(ctx.data.mask("train").sum())})
        return Stage("calibrate", f"{self.family}_calibrate", run)


@dataclass(frozen=True)
class Calibration:
    """A calibration stage's info, typed."""

    planned: Ledger
    z: float
    report: dict[str, Any]
    num_train: int

    @classmethod
    def of(cls, out: StageOutput) -> Calibration:
        i = out.info
        return cls(Ledger.from_dict(i["planned"]), float(i["z"]), dict(i["report"]),
                   int(i["num_train"]))


def pick(outputs: Mapping[str, Any], source: str | tuple[str, ...] | None) -> Any:
    """What a stage reads from ``outputs`` (by stage name): one, a list, or None."""
    if source is None:
        return None
    if isinstance(source, tuple):
        return [outputs[s] for s in source]
    return outputs[source]


def module(value: Any, build: Callable[[], torch.nn.Module]) -> Any:
    """A module read from an earlier stage: itself (in memory), or ``build()`` with the
    weights its file held."""
    if isinstance(value, torch.nn.Module):
        return value
    out = build()
    out.load_state_dict(value)
    return out


def run_in_memory(staged: Staged, data: GraphData, spec: Any, run: PrivateRun | None = None
                  ) -> dict[str, StageOutput]:
    """Every stage of ``staged`` in memory, in order, all through the one engine ``run``
    (a bare one by default): the outputs by stage name (the last one's report is the
    run's). A stage that may not resume runs without checkpoints."""
    run = run or PrivateRun()
    outputs = {"calibrate": staged.calibration().run(StageContext(data, spec), _EMPTY)}
    for stage in staged.stages(spec, float(outputs["calibrate"].info["z"])):
        reads = {arg: pick(outputs, src) for arg, src in stage.reads.items()}
        ctx = StageContext(data, spec, run)
        with contextlib.nullcontext() if stage.resumable else suspended():
            outputs[stage.name] = stage.run(ctx, reads)
    return outputs


def _graph(ctx: StageContext, reads: Mapping[str, Any]) -> StageOutput:
    ei, info = prepare_graph(ctx.data, ctx.spec)
    return StageOutput({"edge_index.npy": ei}, info={"graph": info})


def graph_stage(family: str, spec: GapSpec | ProgapSpec) -> Stage:
    """The graph stage of GAP and ProGAP (:func:`prepare_graph`): ``edge_index.npy``, with
    what was checked on it in ``graph``; its folder is named by the level and D only (no
    edge is sampled, so nothing here depends on a seed)."""
    return Stage("graph", f"{family}_graph", _graph,
                 folder=({"level": spec.level, "max_degree": spec.max_degree},))
