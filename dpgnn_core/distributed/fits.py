"""The methods that train from a partitioned dataset, as the registry fits them
(:meth:`dpgnn_core.methods.registry.Method.fit_with`): GAP (every level) and
DP-MLP. A fit here returns the contract's :class:`~dpgnn_core.methods.contract.Fitted`,
with the metrics per split computed block by block in ``extra["metrics"]`` (the
partitioned path has no in-memory graph to evaluate on afterwards)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dpgnn_core.distributed import PARTITIONED_FAMILIES
from dpgnn_core.errors import DataError
from dpgnn_core.methods.private_run import PrivateRun
from dpgnn_core.privacy.report import PrivacyReport


@dataclass(frozen=True)
class Partitions:
    """A partitioned dataset as a fit's ``data``: the Dask client whose workers read it,
    its folder, its manifest (checked: :func:`~dpgnn_core.data.partitioned.
    verify_partitioned`) and a folder for the run's block files (X(0), PMA's release)."""

    client: Any
    path: Path
    manifest: dict[str, Any]
    workdir: Path

    @property
    def name(self) -> str:
        return str(self.manifest["name"])

    @property
    def num_features(self) -> int:
        return int(self.manifest["feature_dim"])

    @property
    def num_classes(self) -> int:
        return int(self.manifest["num_classes"])


def _gap(data: Partitions, spec: Any, run: PrivateRun) -> Any:
    from dpgnn_core.distributed.gap import train_gap_partitioned
    from dpgnn_core.methods.contract import Fitted

    r = train_gap_partitioned(data.client, data.path, spec, data.workdir, run,
                              overwrite=True, manifest=data.manifest)
    return Fitted(r.classifier, r.ledger, PrivacyReport.from_dict(r.report), r.history,
                  {"metrics": r.metrics, "release": {"path": str(r.release.folder),
                                                     "files": dict(r.release.files)}})


def _dp_mlp(data: Partitions, spec: Any, run: PrivateRun) -> Any:
    from dpgnn_core.distributed.training import (
        evaluate_dp_mlp_partitioned,
        train_dp_mlp_partitioned,
    )
    from dpgnn_core.methods.contract import Fitted

    r, rows = train_dp_mlp_partitioned(data.client, data.path, spec, run,
                                       manifest=data.manifest)
    return Fitted(r.model, r.ledger, PrivacyReport.from_dict(r.report), r.history,
                  {"metrics": evaluate_dp_mlp_partitioned(r.model, rows, data.num_classes)})


#: The families with a partitioned path, by the registry's family name.
FITS: dict[str, Callable[[Partitions, Any, PrivateRun], Any]] = {"gap": _gap, "dp-mlp": _dp_mlp}
assert tuple(FITS) == PARTITIONED_FAMILIES


def fit_for(family: str, method: str, data: Partitions
            ) -> Callable[[Partitions, Any, PrivateRun], Any]:
    """The partitioned fit of ``family``; a method without one is refused in one line."""
    if family not in FITS:
        raise DataError(f"{method} does not train from a partitioned dataset yet (the "
                        f"families that do: {', '.join(PARTITIONED_FAMILIES)})",
                        path=data.path / "manifest.json", field="layout", value="partitioned")
    return FITS[family]
