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

and here, every method's spec as one union (:data:`AnySpec`, :func:`parse_spec`).
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, TypeAdapter

from dpgnn_core.specs.base import LargeBatchDefaults, PrivateSpec, Spec
from dpgnn_core.specs.baseline import Method, TrainSpec
from dpgnn_core.specs.dp_mlp import DpMlpSpec
from dpgnn_core.specs.dpdgc import DpdgcSpec
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

__all__ = ["DEMO_INGEST", "DEMO_METHODS", "EDGE_BATCH", "EDGE_BATCHES_PER_EPOCH", "AnySpec",
           "DpMlpSpec", "DpdgcSpec", "DpgnnSpec", "DrwSpec", "GapSpec", "GraphClsSpec",
           "IngestFormat", "IngestSpec", "LargeBatchDefaults", "Method", "PrivateSpec",
           "ProgapSpec", "Spec", "SubgraphSpec", "TrainSpec", "edge_batch_for",
           "method_specs", "parse_spec"]

#: Every method's spec, told apart by ``method`` (its registered name): one spec object,
#: from Python, a TOML/YAML/JSON file or CLI options, selects the method.
AnySpec = Annotated[TrainSpec | DpgnnSpec | DrwSpec | DpMlpSpec | GapSpec | ProgapSpec
                    | GraphClsSpec | DpdgcSpec, Field(discriminator="method")]
_ANY = TypeAdapter(AnySpec)


def parse_spec(data: dict[str, Any]) -> Spec:
    """Validate a spec given as a mapping with a ``method`` key (e.g. ``{"method":
    "dp-gcn", "epsilon": 4}``): the discriminated union picks the spec class; fields the
    method does not take are refused."""
    if "method" not in data:
        raise ValueError("a spec needs a 'method' (e.g. dp-gcn, drw-gcn, gap-edp, gcn)")
    spec: Spec = _ANY.validate_python(data)
    return spec


def method_specs() -> dict[str, type[Spec]]:
    """Every registered name and its spec class (from the method catalogue, light: no
    torch), for the CLI's per-method commands."""
    from dpgnn_core.methods.catalog import spec_types

    return spec_types()
