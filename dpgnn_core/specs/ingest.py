"""What to ingest (:class:`IngestSpec`), and the embedded dataset of ``dpgnn demo``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, field_validator, model_validator

from dpgnn_core.data.catalog import format_names, loader_of
from dpgnn_core.specs.base import Spec

if TYPE_CHECKING:  # a name of the loader catalogue (a literal mypy cannot see)
    IngestFormat = str
else:  # the catalogue's formats, in its order
    IngestFormat = Literal[format_names()]


class IngestSpec(Spec):
    """What to ingest and how.

    Args:
        format (str): a format of the loader catalogue (:mod:`dpgnn_core.data.catalog`),
            e.g. ``planetoid``, ``csv`` or ``synthetic``.
        source (str, optional): raw folder or file (not used by ``synthetic``).
        name (str, optional): dataset name; inferred from the files when omitted.
        options (dict, optional): loader keyword arguments (see each loader's docstring).
    """

    format: IngestFormat
    source: str | None = None
    name: str | None = None
    options: dict[str, Any] = Field(default_factory=dict)

    @field_validator("name")
    @classmethod
    def _plain_name(cls, v: str | None) -> str | None:
        """A dataset name names a folder of the project (a sweep's ingested dataset, the
        budget's record): no path separator, no ``.`` or ``..``, no control character, not
        blank (``--name ../../evil`` was accepted)."""
        if v is None:
            return v
        if not v.strip() or v.strip(".") == "" or "/" in v or "\\" in v \
                or any(not c.isprintable() for c in v):
            raise ValueError("a dataset name names a folder: no '/' or '\\', not '.' or "
                             "'..', no control character, not blank")
        return v

    @model_validator(mode="after")
    def _need_source(self) -> IngestSpec:
        if loader_of(self.format).needs_source and not self.source:
            raise ValueError(f"ingest format {self.format!r} needs a source path")
        return self


#: The embedded default dataset of ``dpgnn demo`` and the scheduled deployments: a
#: contextual stochastic block model generated from a seed (nothing to download).
DEMO_INGEST = IngestSpec(format="synthetic", name="csbm-demo",
                         options={"num_nodes": 3000, "num_classes": 5, "feature_dim": 32,
                                  "avg_degree": 10, "homophily": 0.8, "feature_signal": 1.0,
                                  "seed": 0})
#: The methods ``dpgnn demo`` runs on it.
DEMO_METHODS = ("gcn", "mlp")
