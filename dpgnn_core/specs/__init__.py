"""Frozen specifications passed between the CLI, flows, tasks and the core library.

Specs are pydantic models (validated, hashable through ``cache_key()``), so a flow can take
them as parameters, Prefect can validate them and cache keys can hash them.

One module per method family, beside what they share (import every spec from here,
``from dpgnn_core.specs import GapSpec``; the modules are where each one is written):

* :mod:`~dpgnn_core.specs.base`: :class:`Spec`, :class:`PrivateSpec` (the fields of every
  private method), :class:`LargeBatchDefaults` and the validator keeping ``method`` and the
  fields its name implies in step;
* :mod:`~dpgnn_core.specs.ingest`: :class:`IngestSpec` and the demo's embedded dataset;
* :mod:`~dpgnn_core.specs.baseline`: :class:`TrainSpec` (the non-private baselines);
* :mod:`~dpgnn_core.specs.subgraph`: :class:`SubgraphSpec` and its two families,
  :class:`DpgnnSpec` and :class:`DrwSpec`;
* :mod:`~dpgnn_core.specs.dp_mlp`: :class:`DpMlpSpec`;
* :mod:`~dpgnn_core.specs.gap`: :class:`GapSpec` and :class:`ProgapSpec` (level defaults,
  the edge-level mini-batch and the node-level refusals they share);
* :mod:`~dpgnn_core.specs.graph_cls`: :class:`GraphClsSpec`;
* :mod:`~dpgnn_core.specs.dpdgc`: :class:`DpdgcSpec`;

and here, every method's spec as one union (:data:`AnySpec`, :func:`parse_spec`), and the
catalogue: :data:`CATALOGUE`, every shipped method's
:class:`~dpgnn_core.specs.entry.Entry` (each spec module's ``ENTRIES``, written beside its
spec), the explicit list the method catalogue and registry read. A new family's spec module
adds its class to :data:`AnySpec` (mypy's union below) and its entries to
:data:`CATALOGUE`; a spec class defined outside this package joins :func:`parse_spec` once
its module is imported, and the catalogue by
:func:`dpgnn_core.methods.catalog.add` (docs/adding-a-method.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Union

from pydantic import Field, TypeAdapter

from dpgnn_core.specs import baseline, dp_mlp, dpdgc, gap, graph_cls, subgraph
from dpgnn_core.specs.base import LargeBatchDefaults, PrivateSpec, Spec, spec_classes
from dpgnn_core.specs.baseline import Method, TrainSpec
from dpgnn_core.specs.dp_mlp import DpMlpSpec
from dpgnn_core.specs.dpdgc import DpdgcSpec
from dpgnn_core.specs.entry import Entry
from dpgnn_core.specs.gap import (
    EDGE_BATCH,
    EDGE_BATCHES_PER_EPOCH,
    GapSpec,
    ProgapSpec,
    edge_batch_for,
)
from dpgnn_core.specs.graph_cls import GraphClsSpec
from dpgnn_core.specs.ingest import DEMO_INGEST, DEMO_METHODS, IngestFormat, IngestSpec
from dpgnn_core.specs.subgraph import DpgnnSpec, DrwSpec, SubgraphSpec

__all__ = [
    "CATALOGUE",
    "DEMO_INGEST",
    "DEMO_METHODS",
    "EDGE_BATCH",
    "EDGE_BATCHES_PER_EPOCH",
    "AnySpec",
    "DpMlpSpec",
    "DpdgcSpec",
    "DpgnnSpec",
    "DrwSpec",
    "Entry",
    "GapSpec",
    "GraphClsSpec",
    "IngestFormat",
    "IngestSpec",
    "LargeBatchDefaults",
    "Method",
    "PrivateSpec",
    "ProgapSpec",
    "Spec",
    "SubgraphSpec",
    "TrainSpec",
    "edge_batch_for",
    "parse_spec",
    "spec_classes",
]

#: Every shipped method's catalogue entry, family by family, in the order the CLI lists them:
#: the explicit list :mod:`dpgnn_core.methods.catalog` reads (a new family adds its own).
CATALOGUE: tuple[Entry, ...] = (*baseline.ENTRIES, *subgraph.DPGNN_ENTRIES,
                                *subgraph.DRW_ENTRIES, *dp_mlp.ENTRIES, *gap.GAP_ENTRIES,
                                *gap.PROGAP_ENTRIES, *graph_cls.ENTRIES, *dpdgc.ENTRIES)

#: Every method's spec, told apart by ``method`` (its registered name): one spec object,
#: from Python, a TOML/YAML/JSON file or CLI options, selects the method. Made of every spec
#: class of the catalogue.
if TYPE_CHECKING:  # what mypy sees: the classes written here (the union is made at import)
    AnySpec = Annotated[TrainSpec | DpgnnSpec | DrwSpec | DpMlpSpec | GapSpec | ProgapSpec
                        | GraphClsSpec | DpdgcSpec, Field(discriminator="method")]
else:
    AnySpec = Annotated[Union[tuple(dict.fromkeys(e.spec_type for e in CATALOGUE))],  # noqa: UP007
                        Field(discriminator="method")]
_ADAPTERS: dict[tuple[type[Spec], ...], TypeAdapter[Any]] = {}


def parse_spec(data: dict[str, Any]) -> Spec:
    """Validate a spec given as a mapping with a ``method`` key (e.g. ``{"method":
    "dp-gcn", "epsilon": 4}``): the discriminated union of every spec class defined so far
    picks the spec class; fields the method does not take are refused."""
    if "method" not in data:
        raise ValueError("a spec needs a 'method' (e.g. dp-gcn, drw-gcn, gap-edp, gcn)")
    classes = tuple(spec_classes())
    if classes not in _ADAPTERS:
        union: Any = Annotated[Union[classes],  # noqa: UP007 (a union made at run time)
                               Field(discriminator="method")]
        _ADAPTERS[classes] = TypeAdapter(union)
    spec: Spec = _ADAPTERS[classes].validate_python(data)
    return spec
