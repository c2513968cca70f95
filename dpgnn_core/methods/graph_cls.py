"""Private graph classification (Mueller et al.): one graph is one record.

DP-SGD / DP-Adam over Poisson-sampled training graphs, per-graph clipping to C and noise
std z·C (the noise multiplier times the clipping norm: the authors' code added the
multiplier alone, which understates ε), privacy by the Poisson-subsampled Gaussian at graph
level under add/remove; δ = 1 / (10 N) by default (N training graphs; the paper used
1 / N, which allows leaking a whole graph). The non-private model runs the same path
without noise or clipping. Graphs are padded into dense per-graph batches, so per-graph
gradients are exact (:mod:`dpgnn_core.training.per_sample`).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from dpgnn_core.data.graph import SPLIT_NAMES, GraphData
from dpgnn_core.errors import DataError
from dpgnn_core.graph.subgraphs import Subgraphs, build_batch
from dpgnn_core.methods._private import (
    PrivateResult,
    poisson_plan,
    resolve_row_plan,
)
from dpgnn_core.methods.contract import Fitted, Implementation
from dpgnn_core.methods.private_run import PrivateRun
from dpgnn_core.models.graph_gnn import GraphGNN
from dpgnn_core.privacy import Ledger
from dpgnn_core.privacy.randomness import Randomness
from dpgnn_core.specs import GraphClsSpec
from dpgnn_core.training.device import resolve_device
from dpgnn_core.training.dp_sgd import Clipping, PoissonSampler, train_steps
from dpgnn_core.training.loop import seeded
from dpgnn_core.training.metrics import classification_metrics
from dpgnn_core.training.per_sample import group_noise_stds

GraphClsResult = PrivateResult[GraphGNN]


def graph_records(data: GraphData) -> Subgraphs:
    """Every graph as one record (nodes and edges by graph), in the form the dense batch
    builder reads."""
    if data.graph_id is None or data.graph_y is None:
        raise DataError("graph classification needs graph_id and graph labels",
                        field="task", value=data.task)
    gid = np.asarray(data.graph_id)
    order = np.argsort(gid, kind="stable").astype(np.int64)
    counts = np.bincount(gid, minlength=data.num_graphs)
    offsets = np.zeros(data.num_graphs + 1, np.int64)
    np.cumsum(counts, out=offsets[1:])
    ei = np.asarray(data.edge_index)
    eg = gid[ei[0]]
    if (eg != gid[ei[1]]).any():
        k = int(np.flatnonzero(eg != gid[ei[1]])[0])
        raise DataError("an edge joins two graphs", field="edge_index",
                        value=[int(ei[0, k]), int(ei[1, k])])
    eorder = np.argsort(eg, kind="stable")
    eoffsets = np.zeros(data.num_graphs + 1, np.int64)
    np.cumsum(np.bincount(eg, minlength=data.num_graphs), out=eoffsets[1:])
    roots = np.where(counts > 0, order[np.minimum(offsets[:-1], max(0, len(order) - 1))], -1)
    return Subgraphs(roots=roots.astype(np.int64), offsets=offsets, nodes=order,
                     edge_offsets=eoffsets, edges=np.ascontiguousarray(ei[:, eorder]),
                     occurrence_bound=1, sampling_scheme="poisson")


def check_graph_task(data: GraphData, spec: GraphClsSpec) -> np.ndarray:
    """Refuse what cannot be trained; return the training graphs' ids."""
    if data.task != "graph" or data.graph_y is None or data.graph_split is None:
        raise DataError("graph classification needs a graph dataset", field="task",
                        value=data.task)
    gy = np.asarray(data.graph_y)
    bad = (gy < 0) | (gy >= data.num_classes)
    if bad.any():
        raise DataError(f"graph labels must lie in 0..{data.num_classes - 1}",
                        field="graph_y", value=int(gy[bad][0]))
    sizes = np.bincount(np.asarray(data.graph_id), minlength=data.num_graphs)
    if (sizes == 0).any():
        raise DataError("graphs with zero nodes cannot be classified (the TU loader drops "
                        "and counts them)", field="graph_id",
                        value=int(np.flatnonzero(sizes == 0)[0]))
    train = np.flatnonzero(np.asarray(data.graph_split) == 0)
    if spec.batch_size is not None and spec.batch_size > train.shape[0]:
        raise DataError(f"batch size {spec.batch} exceeds the {train.shape[0]} training "
                        "graphs", field="batch_size", value=spec.batch)
    missing = sorted(set(gy[np.asarray(data.graph_split) == 2]) - set(gy[train]))
    if missing:
        warnings.warn(f"classes {missing} occur in test but not in training: the model "
                      "cannot predict them (their recall is 0)", stacklevel=3)
    return train


def ledger_for(spec: GraphClsSpec, num_train: int) -> Callable[[float], Ledger]:
    """z ↦ the ledger: T Poisson-subsampled Gaussian steps at graph level."""
    return poisson_plan(spec, num_train, "graph", "DP-SGD over graphs")


def build_model(spec: GraphClsSpec, in_dim: int, num_classes: int) -> GraphGNN:
    return GraphGNN(spec.conv, in_dim, num_classes, spec.hidden, spec.layers, spec.pool,
                    spec.norm)


def predict(model: GraphGNN, data: GraphData, records: Subgraphs, ids: np.ndarray,
            device: torch.device, chunk: int = 512) -> np.ndarray:
    """Logits of graphs ``ids``."""
    out = []
    model.eval()
    with torch.no_grad():
        for s in range(0, len(ids), chunk):
            b = build_batch(records, ids[s:s + chunk], data.x, normalisation="none")
            out.append(model(b.x.to(device), b.adj.to(device), b.mask.to(device)).cpu())
    return torch.cat(out).numpy() if out else np.zeros((0, data.num_classes), np.float32)


def evaluate_graphs(model: GraphGNN, data: GraphData, device: str = "auto",
                    records: Subgraphs | None = None) -> dict[str, dict[str, float]]:
    """Accuracy, F1, ROC AUC (micro for multi-class), sensitivity, specificity per split."""
    dev = resolve_device(device)
    records = records or graph_records(data)
    model = model.to(dev)
    gs, gy = np.asarray(data.graph_split), np.asarray(data.graph_y)
    out = {}
    for code, name in enumerate(SPLIT_NAMES[:3]):
        ids = np.flatnonzero(gs == code)
        out[name] = classification_metrics(gy[ids], predict(model, data, records, ids, dev),
                                           data.num_classes)
    return out


def train_graph_classifier(data: GraphData, spec: GraphClsSpec,
                           run: PrivateRun | None = None) -> GraphClsResult:
    """Train ``spec`` through the fit's engine ``run`` (a bare one by default); see the
    module docstring.

    Raises:
        DataError: not a graph dataset, labels out of range, an empty graph, a batch larger
            than the training set.
        PrivacyError: BatchNorm under DP, or a budget too small (names the smallest ε).
    """
    train = check_graph_task(data, spec)
    n_train = int(train.shape[0])
    spec = resolve_row_plan(spec, n_train, ledger_for)
    run = run or PrivateRun()
    ledger, z, report = run.calibrate(
        spec, n_train, ledger_for(spec, n_train), method=f"dp-graph-{spec.conv}",
        protects="model parameters against adding or removing one graph (its nodes, edges, "
        "features and label)")
    private = spec.epsilon is not None
    report["method"] = f"dp-graph-{spec.conv}" if private else f"graph-{spec.conv}"
    report["num_train"] = n_train
    records = graph_records(data)
    device = resolve_device(spec.device)
    randomness = Randomness.for_spec(spec)
    report.update(randomness.describe())
    gen = randomness.torch_generator("batches")
    noise_gen = randomness.torch_generator("noise", device)
    gy = torch.from_numpy(np.array(data.graph_y, dtype=np.int64))  # a writable copy
    every = spec.eval_every or max(1, n_train // spec.batch)
    with seeded(spec.seed, device):
        model = build_model(spec, data.num_features, data.num_classes).to(device)
        opt = (torch.optim.Adam(model.parameters(), lr=spec.lr) if spec.optimizer == "adam"
               else torch.optim.SGD(model.parameters(), lr=spec.lr))
        sampler = PoissonSampler(n_train, spec.batch / n_train, gen)

        def step_losses() -> tuple[torch.Tensor, float]:
            model.train()
            pick = (sampler.sample() if private else
                    torch.randperm(n_train, generator=gen)[: spec.batch]).numpy()
            ids = train[pick]
            if len(ids) == 0:  # an empty Poisson batch: the noise is still added
                return torch.zeros(0, device=device), 0.0
            b = build_batch(records, ids, data.x, normalisation="none")
            logits = model(b.x.to(device), b.adj.to(device), b.mask.to(device))
            losses = torch.nn.functional.cross_entropy(logits, gy[ids].to(device),
                                                       reduction="none")
            return losses, float(losses.detach().mean())

        def log(step: int, rec: dict[str, float]) -> None:
            if step % every == 0 or step == spec.steps:
                for split, m in evaluate_graphs(model, data, spec.device, records).items():
                    if split != "train":
                        rec.update({f"{split}_{k}": v for k, v in m.items()})
            if run.on_step is not None:
                run.on_step(step, rec)

        clipping = None
        if private:
            stds = group_noise_stds(z, 1.0, [spec.clip])
            clipping = Clipping((spec.clip,), tuple(stds), float(spec.batch))
            report["noise_std"] = stds[0]
        history = train_steps(model, opt, spec.steps, step_losses, clipping=clipping,
                              generator=noise_gen, on_step=log,
                              log_raw_loss=spec.log_raw_loss)
    return GraphClsResult(model=model.eval(), ledger=ledger, report=report, history=history)


# --- the implementation (the catalogue's "graph-cls" family: dp-graph-*, graph-*) ---------
def _fit(data: GraphData, spec: GraphClsSpec, run: PrivateRun) -> Fitted:
    from dpgnn_core.privacy.report import PrivacyReport

    r = train_graph_classifier(data, spec, run)
    return Fitted(r.model, r.ledger, PrivacyReport.from_dict(r.report), r.history)


def _evaluate(model: torch.nn.Module, data: GraphData, spec: GraphClsSpec,
              extra: Any) -> dict[str, dict[str, float]]:
    return evaluate_graphs(model, data, spec.device)  # type: ignore[arg-type]


from dpgnn_core.methods.brute_force import rows  # noqa: E402

IMPLEMENTATION = Implementation(
    fit=_fit, ledger_for=ledger_for, build=build_model, evaluate=_evaluate,
    sensitivity=(rows.check("graph classification's clipped gradient sum over graphs "
                            "(add/remove one graph: one record)"),))
