"""DP-MLP trained from a partitioned dataset (issue 51 §3): the single-process trainer
(:func:`~dpgnn_core.methods.dp_mlp.fit_dp_mlp`) on a
:class:`~dpgnn_core.distributed.rows.PartitionedRows` source, with the single-process
calibration (:func:`~dpgnn_core.methods.dp_mlp.plan_dp_mlp`): the same spec gives the
same ledger, noise and report; only where the rows come from differs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dpgnn_core.data.partitioned import verify_partitioned
from dpgnn_core.distributed.rows import AsTensor, FeatureRows, PartitionedRows
from dpgnn_core.errors import DataError
from dpgnn_core.methods.dp_mlp import DpMlpResult, fit_dp_mlp, plan_dp_mlp
from dpgnn_core.methods.private_run import PrivateRun
from dpgnn_core.models.mlp import MLP
from dpgnn_core.privacy.randomness import Randomness
from dpgnn_core.specs import DpMlpSpec
from dpgnn_core.training.device import resolve_device


def check_partitioned_task(dataset: str | Path, manifest: dict[str, Any], spec: Any,
                           method: str) -> int:
    """:func:`~dpgnn_core.methods._private.check_node_task` from a partitioned dataset's
    manifest (its labels are checked by the workers when the rows are counted); the
    number of training nodes."""
    where = Path(dataset) / "manifest.json"
    if manifest.get("task") != "node" or manifest.get("multi_label"):
        raise DataError(f"{method} classifies nodes with single labels", path=where,
                        field="task", value=manifest.get("task"))
    n_train = int(manifest["split_counts"]["train"])
    if n_train == 0:
        raise DataError("the dataset has no training node", path=where, field="split",
                        value="train")
    if spec.batch_size is not None and spec.batch_size > n_train:
        raise DataError(f"batch size {spec.batch} exceeds the {n_train} training nodes",
                        field="batch_size", value=spec.batch)
    return n_train


def train_dp_mlp_partitioned(client: Any, dataset: str | Path, spec: DpMlpSpec,
                             run: PrivateRun | None = None,
                             *, manifest: dict[str, Any] | None = None
                             ) -> tuple[DpMlpResult, PartitionedRows]:
    """DP-MLP on a partitioned dataset: the folder checked (every partition hashed by the
    workers) and the plan calibrated before any row is read; then DP-Adam on Poisson
    batches drawn by every partition (:class:`PartitionedRows`). Returns the result (its
    ledger and report are the single-process run's for the same spec) and the source,
    which evaluates the model (:meth:`PartitionedRows.metrics`)."""
    manifest = manifest or verify_partitioned(dataset, client)
    n_train = check_partitioned_task(dataset, manifest, spec, "DP-MLP")
    spec, ledger, z, report = plan_dp_mlp(spec, n_train, run)
    randomness = Randomness.for_spec(spec)
    source = PartitionedRows(client, dataset, manifest, FeatureRows(), AsTensor(),
                             resolve_device(spec.device), randomness, "dp-mlp")
    if source.num_rows != n_train:
        raise DataError(f"the node partitions hold {source.num_rows} training nodes",
                        path=Path(dataset) / "manifest.json", field="split_counts.train",
                        value=n_train)
    result = fit_dp_mlp(source, spec, (ledger, z, report), int(manifest["feature_dim"]),
                        int(manifest["num_classes"]), randomness, run)
    return result, source


def evaluate_dp_mlp_partitioned(model: MLP, source: PartitionedRows, num_classes: int
                                ) -> dict[str, dict[str, float]]:
    """Metrics per split from node features alone, block by block on the workers."""
    return source.metrics(model, AsTensor(), num_classes)
