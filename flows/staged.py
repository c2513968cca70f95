"""The staged runners: a method whose catalogue entry names ``staged`` runs as that
runner's cached stages (GAP: calibrate, graph, encoder, aggregations, classifier; ProGAP:
its stages in turn), not as one ``train`` task. The name is data; this mapping is the one
place it becomes code (no module is loaded by name).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dpgnn_core.privacy import PrivacyReport
from tasks import gap, progap
from tasks.refs import DatasetRef

#: A staged runner: ``(dataset, spec, refresh, states) -> (model reference, report)``; it
#: records each stage's cache state in ``states``.
StagedRunner = Callable[[DatasetRef, Any, bool, dict[str, str]],
                        tuple[dict[str, Any], PrivacyReport]]

#: The catalogue's ``staged`` name -> its runner.
STAGED_RUNNERS: dict[str, StagedRunner] = {"gap": gap.run_stages, "progap": progap.run_stages}
