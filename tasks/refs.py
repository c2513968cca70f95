"""The small, typed references tasks pass between each other (never tensors).

They are ``TypedDict``s: plain JSON on the wire (Prefect persists task results as JSON)
and checked by mypy at every task boundary. A reference names an artifact folder and the
sha256 of each file in it; a task that reads an artifact verifies those hashes first.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, TypedDict

from dpgnn_core.privacy.events import Ledger
from dpgnn_core.privacy.report import PrivacyReport


class FileInfo(TypedDict):
    """One file of an artifact folder."""

    sha256: str
    bytes: int


#: File name -> its hash and size.
Files = dict[str, FileInfo]


class DatasetRef(TypedDict):
    """An ingested dataset folder (``dataset_summary``, the ``ingest`` task)."""

    path: str
    name: str
    content_sha256: str
    task: str
    num_nodes: int
    num_edges: int
    num_classes: int
    feature_dim: int


class ArtifactRef(TypedDict):
    """An artifact folder written atomically by a task."""

    path: str
    files: Files


class ModelRef(ArtifactRef, total=False):
    """A trained model (the ``train`` task, or a staged method's last stage: GAP's
    ``gap_classifier``, ProGAP's ``progap_finish``, DPDGC's ``dpdgc_classifier``): the
    method's name, its spec, the dataset's sha256, the privacy report (private methods'
    paths: flows read it here, never from the artifact folder; the ledger of privacy events
    is in it, once) and, for GAP, ProGAP and DPDGC, the private aggregations it predicts
    from."""

    method: str
    spec: dict[str, Any]
    dataset: str
    report: dict[str, Any]
    aggregations: ArtifactRef
    metrics: dict[str, Any]  # a partitioned run's, computed block by block (metrics.json)
    release: dict[str, Any] | None  # a partitioned GAP run's PMA release (its row blocks)


def report_of(ref: Mapping[str, Any]) -> PrivacyReport:
    """The typed privacy report of a model reference: the core's
    :class:`~dpgnn_core.privacy.report.PrivacyReport`, rebuilt from the JSON a task returned
    (Prefect persists references as JSON), or a non-private report when the reference has
    none (a non-private method's path writes no report)."""
    found = ref.get("report")
    if found:
        return PrivacyReport.from_dict(found)
    return PrivacyReport(method=str(ref.get("method") or ""), private=False, epsilon=math.inf)


def ledger_of(ref: Mapping[str, Any] | None) -> Ledger:
    """The typed ledger of a model reference: its report's (the one place a reference
    carries it), or an empty ledger when the reference has none (non-private paths). The
    one way flows and tasks read a run's ledger."""
    found = report_of(ref).ledger if ref else None
    return found if found is not None else Ledger()


class EvalRef(ArtifactRef):
    """Metrics per split (the ``evaluate`` task)."""

    metrics: dict[str, dict[str, float | None]]


__all__ = ["ArtifactRef", "DatasetRef", "EvalRef", "FileInfo", "Files", "ModelRef", "ledger_of",
           "report_of"]
