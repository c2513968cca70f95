"""DPDGC (Chien et al., NeurIPS 2023): differentially private decoupled graph convolution,
at edge level (``dpdgc-edp``), node level (``dpdgc-ndp``), k-neighbour level
(``dpdgc-kndp``), ``node_feature`` level (``dpdgc-fdp``: structure public) and without
privacy (``dpdgc-inf``).

The messages are the paper's trained adjacency embeddings (``messages="adjacency"``,
below) or the training nodes' one-hot labels (``messages="labels"``: no encoder, ``hops``
private hops; :mod:`dpgnn_core.methods.dpdgc_messages` and docs/privacy.md, "DPDGC's label
messages").

The graph enters through one place only, the aggregation of learned node embeddings:

1. **Adjacency encoder**: one embedding row :math:`w_j \\in \\mathbb R^h` per node
   (a linear layer over rows of A, no bias), each row projected to L2 norm at most 1. It
   is trained on the training nodes' adjacency rows :math:`a_i` (the senders to i) and
   labels through a fixed random head R (public, from the seed):
   :math:`\\ell_i = \\mathrm{CE}((a_i W) R, y_i)`. At a private level by noisy *full-batch*
   gradient descent: each record's gradient :math:`a_i \\otimes g_i` (norm
   :math:`\\sqrt{|a_i|}\\,\\|g_i\\|`, exact) is clipped to C, summed over the training
   nodes, and Gaussian noise of std :math:`z_A \\Delta_A` is added (``adj_steps``
   Gaussian releases, no sampling).
2. **Aggregation** (one hop, one release): :math:`\\tilde H = \\mathrm{clip}_c(A W) +
   \\mathcal N(0, (z_H \\Delta_H)^2 I)`.
3. **Classifier**: an MLP on each node's own features and its row of :math:`\\tilde H`
   (a feature branch and an aggregation branch, concatenated, then a head). Adam with
   dropout where the features and labels are public (edge level, ∞); DP-Adam over
   Poisson-sampled rows at node and k-neighbour level.

After the calibration of one noise scale for the whole composition, each is a stage
(:mod:`dpgnn_core.methods.dpdgc_stages`, ``STAGED``) with the privacy events of what it
releases, as GAP's: the library and the ``train`` task run them in memory
(:func:`train_dpdgc`), the pipeline as one cached task each (``tasks/staged.py``), all
stages of a run under one budget reservation.

Sensitivities (derived in docs/privacy.md, section "DPDGC"; checked by brute force in
tests/dpgnn_core/test_dpdgc.py), rows of W of norm <= 1, C the clipping norm:

=============  ======================================  ===============================
level          aggregation :math:`\\Delta_H`             adjacency encoder :math:`\\Delta_A`
=============  ======================================  ===============================
edge           1 (directed), √2 (undirected)           2C (directed), 4C (undirected)
node (D)       :math:`\\sqrt{\\min(c,D)^2 + D}` undir.    (2D + 1) C
k-neighbour    :math:`\\sqrt{\\min(2c,k)^2 + k}` undir.   2(k + 1) C
=============  ======================================  ===============================

(directed: :func:`aggregation_sensitivity`). The classifier's DP-Adam is add/remove of one
record (the node's features, label and its row of the release), as GAP's.

Inference reads only the released :math:`\\tilde H` and each node's own features: at edge
level (features public) every prediction is post-processing; at node and k-neighbour level
node v's own prediction also reads v's own features un-noised (the per-node statement
GAP-NDP makes; docs/privacy.md).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import Tensor

from dpgnn_core.data.graph import GraphData
from dpgnn_core.errors import DataError
from dpgnn_core.graph.gap_degree import check_degree_bound
from dpgnn_core.methods._private import check_node_task, check_weak_budget, guarantee_scope
from dpgnn_core.methods._staged import MAX_NOISE, Staged, run_in_memory
from dpgnn_core.methods.contract import Fitted, aggregating
from dpgnn_core.methods.dpdgc_encoder import clipped_gradient_sum as clipped_gradient_sum
from dpgnn_core.methods.dpdgc_encoder import encoder_sensitivity as encoder_sensitivity
from dpgnn_core.methods.dpdgc_encoder import fit_adjacency_encoder as fit_adjacency_encoder
from dpgnn_core.methods.dpdgc_encoder import project_rows as project_rows
from dpgnn_core.methods.dpdgc_encoder import random_head as random_head
from dpgnn_core.methods.dpdgc_messages import (
    aggregation_sensitivity,  # the tests and docs name it here; its check is registered
    classifier_inputs,
    hop_deltas,
    label_sensitivity,
    level_defaults_used,
)
from dpgnn_core.methods.dpdgc_stages import DEGREE_CHECK_NOTE as DEGREE_CHECK_NOTE
from dpgnn_core.methods.dpdgc_stages import agg_width as agg_width
from dpgnn_core.methods.dpdgc_stages import aggregate as aggregate
from dpgnn_core.methods.dpdgc_stages import dpdgc_stages as dpdgc_stages
from dpgnn_core.methods.dpdgc_stages import fit_classifier as fit_classifier
from dpgnn_core.methods.dpdgc_stages import label_messages as label_messages
from dpgnn_core.methods.dpdgc_stages import ledger_for as ledger_for
from dpgnn_core.methods.dpdgc_stages import training_hops as training_hops
from dpgnn_core.methods.private_run import PrivateRun
from dpgnn_core.models.dpdgc import DpdgcClassifier
from dpgnn_core.privacy import Ledger, PrivacyError, calibrate_noise, make_accountant
from dpgnn_core.privacy.randomness import Randomness
from dpgnn_core.privacy.report import PrivacyReport
from dpgnn_core.specs import DpdgcSpec
from dpgnn_core.specs.base import degree_alternatives
from dpgnn_core.training.device import resolve_device
from dpgnn_core.training.metrics import metrics_by_split

# The adjacency encoder (its sensitivity, gradient sum and training) lives in
# methods/dpdgc_encoder.py, the plan and the stages in methods/dpdgc_stages.py, the messages'
# sensitivities in methods/dpdgc_messages.py; their names stay importable from here.

# --- the recipe ------------------------------------------------------------------------


def _private(spec: DpdgcSpec) -> bool:
    return spec.level != "none"


def _delta(spec: DpdgcSpec, n_train: int) -> float:
    return spec.delta if spec.delta is not None else 1.0 / (10 * n_train)


def calibrate_composition(spec: DpdgcSpec, make: Callable[[float], Ledger], delta: float
                          ) -> Any:
    """The :class:`~dpgnn_core.privacy.calibrate.Calibration` of a private ``spec``'s
    composition ``make`` (:func:`ledger_for`) to its target ε at ``delta``: what
    :func:`calibrate` and the early plan both calibrate with.

    Raises:
        PrivacyError: no noise up to :data:`~dpgnn_core.methods._staged.MAX_NOISE` reaches
            the target.
    """
    assert spec.epsilon is not None
    try:
        return calibrate_noise(make, spec.epsilon, delta, make_accountant(spec.accountant),
                               max_noise=MAX_NOISE)
    except PrivacyError as e:
        raise PrivacyError(f"DPDGC-{spec.level} composition (adjacency encoder, aggregation"
                           f", classifier): {e}") from e


def calibrate(data: GraphData, spec: DpdgcSpec) -> tuple[Ledger, float, dict[str, Any]]:
    """The common noise scale z, the run's planned ledger and the privacy report; checks
    the input (and, at node level, the degree bound) before anything trains.

    Raises:
        DataError: not single-label node classification, no training labels, a batch too
            large, a degree above D (node level), or no edge.
        PrivacyError: a budget no noise up to :data:`~dpgnn_core.methods._staged.MAX_NOISE`
            reaches.
    """
    n_train = check_node_task(data, spec, spec.method)
    ei = np.asarray(data.edge_index)
    if ei.shape[1] == 0:
        raise DataError("DPDGC aggregates over the edges: the graph has none",
                        field="edge_index", value=0)
    directed = bool(data.directed)
    if spec.level == "node":
        assert spec.max_degree is not None
        check_degree_bound(ei, data.num_nodes, spec.max_degree, directed=directed,
                           method=spec.method, instead=degree_alternatives(spec))
    delta = _delta(spec, n_train)
    make = ledger_for(spec, n_train)
    report: dict[str, Any] = {
        "method": spec.method, "private": _private(spec), "level": spec.level,
        "delta": delta, "steps": spec.steps, "adj_steps": spec.adj_steps, "unaccounted": [],
        "budget_split": list(spec.budget_split), "directed": directed,
        "messages": spec.messages, "hops": spec.hops, "row_clip": spec.row_clip,
        "structure_defaults": level_defaults_used(spec),
        **Randomness.for_spec(spec).describe()}
    if not _private(spec):
        report.update({"epsilon": math.inf, "noise_multiplier": 0.0, "protects": "nothing"})
        return Ledger(), 0.0, report
    cal = calibrate_composition(spec, make, delta)
    z = cal.noise_multiplier
    opts = {"max_degree": spec.max_degree, "k": spec.k}
    d_hops = hop_deltas(spec, directed)
    d_a = encoder_sensitivity(spec.level, directed, spec.clip, **opts)
    report.update({"epsilon": cal.epsilon, "target_epsilon": spec.epsilon,
                   "noise_multiplier": z, "accountant": spec.accountant,
                   "aggregation_sensitivity": d_hops[0],
                   "aggregation_noise_std": z * spec.budget_split[1] * d_hops[0],
                   "hop_sensitivities": d_hops,
                   "hop_noise_stds": [z * spec.budget_split[1] * d for d in d_hops],
                   **({"encoder_sensitivity": d_a,
                       "encoder_noise_std": z * spec.budget_split[0] * d_a}
                      if spec.messages == "adjacency" else {}),
                   "protects": _protects(spec, directed),
                   "inference": "transductive: predictions read the released aggregation "
                                "and each node's own features (no extra budget)"})
    planned = make(z)
    report.update(guarantee_scope(planned))
    report["warnings"] = check_weak_budget(spec.epsilon, delta, n_train)
    report["unaccounted"] = list(planned.unaccounted)
    return planned, z, report


def _protects(spec: DpdgcSpec, directed: bool) -> str:
    unit = "one directed edge" if directed else "one undirected edge (both directions)"
    own = ("Predictions: node v's prediction also reads v's own features, not noised; the "
           "predictions of every other node are post-processing of the private outputs and "
           "their own features, so they are protected against v")
    return {
        "edge": f"the embeddings W, the aggregation, the classifier and every prediction "
                f"against adding or removing {unit}; node features and labels are public",
        "node": "W, the aggregation and the classifier against adding or removing one node "
                "with its features, label and edges, on graphs whose every "
                f"{'in + out degree' if directed else 'degree'} is <= {spec.max_degree} (a "
                f"graph beyond it is refused, which reveals that bit). {own}",
        "k_neighbor": "W, the aggregation and the classifier against adding or removing one "
                      "node's features and label and / or up to k = "
                      f"{spec.k} of its edges (no degree bound; k >= 1 includes one edge). "
                      f"{own}",
        "node_feature": "the released messages and the classifier against adding or "
                        "removing one node's features and label; the graph structure is "
                        f"public (edges and degrees are read without noise). {own}",
    }[spec.level]


def train_dpdgc(data: GraphData, spec: DpdgcSpec, run: PrivateRun | None = None
                ) -> tuple[DpdgcClassifier, Tensor, Ledger, dict[str, Any],
                           list[dict[str, Any]]]:
    """Calibrate, then adjacency encoder -> aggregation -> classifier
    (:func:`~dpgnn_core.methods.dpdgc_stages.dpdgc_stages`, in memory, through the fit's
    engine ``run``: the budget keeper, the steps; a bare one by default); the ledger is the
    composition of the events each stage returned (and equals the calibrated plan).
    Returns the classifier (with the embeddings W attached), the released hops ``[n, hops,
    width]``, the ledger, the report and the history.

    Raises:
        DataError: not single-label node classification, no training labels, a batch too
            large, a degree above D (node level), or no edge.
        PrivacyError: a budget too small for the composition (names the smallest ε).
    """
    out = run_in_memory(STAGED, data, spec, run)
    final = out["train"]
    assert final.report is not None
    return (final.values["model.pt"], out["aggregate"].values["aggregations.pt"],
            final.report["ledger"], final.report, final.values["history.json"])


def evaluate_dpdgc(classifier: DpdgcClassifier, aggregations: Tensor, data: GraphData,
                   device: str = "auto") -> dict[str, dict[str, float]]:
    """Metrics per split from each node's features and the released aggregation."""
    dev = resolve_device(device)
    clf = classifier.to(dev).eval()
    with torch.no_grad():
        xh = classifier_inputs(torch.tensor(data.x, device=dev), aggregations.to(dev))
        logits = clf(xh).cpu().numpy()
    return metrics_by_split(data, logits)


def build_dpdgc(spec: DpdgcSpec, in_dim: int, num_classes: int) -> DpdgcClassifier:
    """The (untrained) classifier ``spec`` describes; loading a state dict that holds
    released embeddings W attaches them (:meth:`~dpgnn_core.models.dpdgc.DpdgcClassifier.
    load_state_dict`)."""
    return DpdgcClassifier(in_dim, agg_width(spec, num_classes), spec.hidden, num_classes,
                           spec.dropout)


# --- the implementation (the catalogue's "dpdgc" family) ----------------------------------
def _fit(data: GraphData, spec: DpdgcSpec, run: PrivateRun) -> Fitted:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
        clf, h, ledger, report, history = train_dpdgc(data, spec, run)
    return Fitted(clf, ledger, PrivacyReport.from_dict(report), history, {"aggregations": h})


from dpgnn_core.methods.brute_force import dpdgc_labels  # noqa: E402
from dpgnn_core.methods.brute_force.dpdgc import checks  # noqa: E402

STAGED = Staged("dpdgc", calibrate, dpdgc_stages)
IMPLEMENTATION = aggregating(
    "DPDGC", fit=_fit, ledger_for=ledger_for, build=build_dpdgc, evaluate=evaluate_dpdgc,
    sensitivity=(dpdgc_labels.check(label_sensitivity), *checks(
        aggregation_sensitivity, encoder_sensitivity, clipped_gradient_sum,
        random_head(3, 3, 1).double())), staged=STAGED)
