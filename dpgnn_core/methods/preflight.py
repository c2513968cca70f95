"""What a spec and a dataset's manifest alone can refuse, before any work starts.

:meth:`Method.preflight <dpgnn_core.methods.registry.Method.preflight>` runs these checks;
the command line runs them before Prefect starts, so a bad run fails in well under a second
with one line. This module is light on purpose: it imports neither torch nor the
accountants (torch only for ``device='cuda'``, the edge list only for GAP-NDP).

The checks, in order:

1. the dataset's task is the method's (node or graph classification);
2. single labels, for every method but the non-private full-batch baselines;
3. training records exist (nodes, or graphs for graph classification);
4. a set ``batch_size`` fits in them (unset, it adapts to the data);
5. the requested device exists, and the requested backend's library loads (``backend='dgl'``
   needs the optional DGL extra: the error names its install command);
6. the method family's own checks (:data:`FAMILY_CHECKS`, keyed by spec type): DP-GNN's
   level ``node`` needs a directed dataset; GAP-NDP needs every degree within ``D``.

BatchNorm, which mixes the examples of a batch, is refused when the model is built
(:func:`~dpgnn_core.training.dp_sgd.check_dp_compatible`): no spec option adds it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from dpgnn_core.errors import DataError, DeviceError, PrivacyError
from dpgnn_core.specs import DpdgcSpec, DpgnnSpec, GapSpec, ProgapSpec, TrainSpec

_KINDS = {"node": "node classification", "graph": "graph classification"}


def task_of(spec: Any) -> str:
    """The task (``node`` or ``graph`` classification) of ``spec``'s method, from the
    method catalogue."""
    from dpgnn_core.methods.catalog import entry

    return entry(spec.method).task


def _where(manifest: Mapping[str, Any]) -> str | None:
    path = manifest.get("path")
    return f"{path}/manifest.json" if path else None


def check_data(spec: Any, manifest: Mapping[str, Any]) -> None:
    """Checks 1-4 of the module docstring.

    Raises:
        DataError: naming the manifest, the field and the value.
    """
    where, task, name = _where(manifest), manifest.get("task"), spec.method
    want = task_of(spec)
    if task != want:
        raise DataError(f"{name} is a {_KINDS[want]} method, but this dataset is a "
                        f"{_KINDS.get(str(task), str(task))} dataset", path=where,
                        field="task", value=task)
    if not isinstance(spec, TrainSpec) and manifest.get("multi_label"):
        raise DataError(f"{name} trains on single labels; this dataset is multi-label "
                        "(the non-private baselines mlp, gcn, sage take it)", path=where,
                        field="multi_label", value=True)
    records = "graphs" if want == "graph" else "nodes"
    n_train = int(manifest.get("split_counts", {}).get("train", 0))
    if n_train == 0:
        raise DataError(f"the dataset has no training {records[:-1]}", path=where,
                        field="split_counts.train", value=n_train)
    batch = getattr(spec, "batch_size", None)
    if batch is not None and batch > n_train:
        raise DataError(f"batch size {batch} exceeds the {n_train} training {records}; "
                        "leave --batch-size unset to adapt it to the data, or give at most "
                        f"{n_train}", path=where, field="batch_size", value=batch)


def check_device(spec: Any) -> None:
    """``device='cuda'`` needs a CUDA device (torch imported only then).

    Raises:
        DeviceError: no CUDA device.
    """
    if getattr(spec, "device", "auto") != "cuda":
        return
    import torch

    if not torch.cuda.is_available():
        raise DeviceError("--device cuda: torch sees no CUDA device (use --device auto, "
                          "which takes CUDA when present, or --device cpu)")


def check_backend(spec: Any) -> None:
    """``backend='dgl'`` needs DGL (imported only then), and the CPU: the extra installs
    DGL's CPU build.

    Raises:
        MissingExtraError: DGL is not installed or does not load; names the install command.
        DeviceError: ``backend='dgl'`` with ``device='cuda'``.
    """
    if getattr(spec, "backend", "pyg") != "dgl":
        return
    if getattr(spec, "device", "auto") == "cuda":
        raise DeviceError("--backend dgl runs on the CPU only (the dgl extra is DGL's CPU "
                          "build); use --backend auto or pyg with --device cuda")
    from dpgnn_core.interop.dgl import import_dgl

    import_dgl()


def dpgnn_level(spec: DpgnnSpec, manifest: Mapping[str, Any]) -> None:
    """Refuse DP-GNN at level ``node`` (a node with its edges) on an undirected dataset:
    there one node's edges change its neighbours' keep probabilities and over-K drops, and
    so subgraphs that never hold it; no occurrence bound covers that (docs/privacy.md).
    Decided from the dataset's ``directed`` flag (its manifest), never from the edges.

    Raises:
        PrivacyError: level ``node`` on an undirected dataset.
    """
    if spec.level == "node" and not manifest.get("directed", False):
        raise PrivacyError(
            "level 'node' (a node with its edges) is only sound on directed datasets; "
            f"{manifest.get('name', 'this dataset')!r} is undirected (manifest.json: "
            "directed = false): one node's edges change the sampled subgraphs of its "
            "neighbours. Use level 'node_feature' (features and labels, structure public)")


def gap_degree(spec: GapSpec | ProgapSpec, manifest: Mapping[str, Any]) -> None:
    """GAP-NDP's (and ProGAP-NDP's) degree bound, from the dataset's edge list (read
    without the rest of the dataset): the refusal training would make, before anything starts.

    Raises:
        DataError: a degree above ``max_degree`` (naming the observed maximum).
    """
    if spec.level != "node" or not manifest.get("path"):
        return
    from dpgnn_core.data.store import read_edges
    from dpgnn_core.graph.gap_degree import check_degree_bound

    assert spec.max_degree is not None  # the spec requires it at node level
    ei, _ = read_edges(manifest["path"])
    check_degree_bound(ei, int(manifest["num_nodes"]), spec.max_degree,
                       directed=bool(manifest.get("directed", False)))


def dpdgc_degree(spec: DpdgcSpec, manifest: Mapping[str, Any]) -> None:
    """DPDGC-NDP's degree bound: the refusal training would make
    (:func:`dpgnn_core.methods.dpdgc.check_degree`, naming D only), from the edge list,
    before anything starts.

    Raises:
        DataError: a degree above ``max_degree``.
    """
    if spec.level != "node" or not manifest.get("path"):
        return
    from dpgnn_core.data.store import read_edges
    from dpgnn_core.methods.dpdgc import check_degree

    assert spec.max_degree is not None  # the spec requires it at node level
    ei, _ = read_edges(manifest["path"])
    check_degree(ei, int(manifest["num_nodes"]), spec.max_degree,
                 directed=bool(manifest.get("directed", False)))


#: A method family's own checks, by spec type.
FAMILY_CHECKS: dict[type, Callable[[Any, Mapping[str, Any]], None]] = {
    DpgnnSpec: dpgnn_level,
    GapSpec: gap_degree,
    ProgapSpec: gap_degree,
    DpdgcSpec: dpdgc_degree,
}


def check(spec: Any, manifest: Mapping[str, Any]) -> None:
    """Every check of the module docstring, in order. A ``path`` key in ``manifest`` (the
    dataset folder) is named in the errors and lets GAP-NDP read the edge list.

    Raises:
        DataError, DeviceError, PrivacyError, MissingExtraError: one line naming what is
            wrong.
    """
    check_data(spec, manifest)
    check_device(spec)
    check_backend(spec)
    family = FAMILY_CHECKS.get(type(spec))
    if family is not None:
        family(spec, manifest)
