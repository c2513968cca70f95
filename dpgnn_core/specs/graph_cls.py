"""The spec of private graph classification (:mod:`dpgnn_core.methods.graph_cls`)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from dpgnn_core.specs.base import PrivateSpec, link
from dpgnn_core.specs.entry import Entry


class GraphClsSpec(PrivateSpec):
    """Private graph classification (Mueller et al.): one graph is one record; DP-SGD /
    DP-Adam over Poisson-sampled graphs with per-graph clipping.

    Args:
        conv (str): ``gcn``, ``sage`` or ``gat``. (default: ``gcn``)
        layers (int): message-passing layers, 2-4. (default: 3)
        hidden (int): width. (default: 64)
        pool (str): ``mean`` or ``max``. (default: ``mean``)
        norm (str): ``none``, ``instance`` or ``batch`` (refused under DP).
            (default: ``none``)
        optimizer (str): ``adam`` or ``sgd``. (default: ``adam``)
        batch_size (int): expected graphs per step; the Poisson rate is m / N.
            (default: min(64, N/4))
        steps (int): steps T. (default: 150)
        lr (float): learning rate. (default: 3e-2)
        clip (float): per-graph clipping norm C. (default: 1.0)

    The defaults were swept on MUTAG and PROTEINS at ε = 10 (benchmarks/RESULTS.md,
    "Defaults that work"): a higher learning rate was what lifted MUTAG off the majority
    class; full batches did as well as a quarter on MUTAG but cost ~14 s a step on
    PROTEINS (890 graphs) on CPU, so the batch stays a quarter of the training graphs, at
    most 64.
        epsilon (float, optional): target ε; :obj:`None` trains without privacy.
        delta (float, optional): δ; 1 / (10 N) (N training graphs) by default, like the
            node methods (the paper's 1 / N allows leaking a whole graph).
        eval_every (int): steps between val / test evaluations logged per "epoch";
            N / m (one expected pass) when omitted.
    """

    implied: ClassVar[tuple[str, ...]] = ("conv",)
    explains: ClassVar[bool] = True
    method: Literal["graph-gcn", "graph-sage", "graph-gat", "dp-graph-gcn", "dp-graph-sage",
                    "dp-graph-gat"]
    conv: Literal["gcn", "sage", "gat"] = "gcn"
    layers: int = Field(3, ge=2, le=4)
    hidden: int = Field(64, ge=1)
    pool: Literal["mean", "max"] = "mean"
    norm: Literal["none", "instance", "batch"] = "none"
    optimizer: Literal["adam", "sgd"] = "adam"
    default_batch: ClassVar[int] = 64
    batch_size: int | None = Field(None, ge=1)
    steps: int = Field(150, ge=1)
    lr: float = Field(3e-2, gt=0)
    eval_every: int | None = Field(None, ge=1)

    @model_validator(mode="before")
    @classmethod
    def _name(cls, data: Any) -> Any:
        def name(d: dict[str, Any]) -> str:
            prefix = "dp-graph" if d.get("epsilon") is not None else "graph"
            return f"{prefix}-{d.get('conv', 'gcn')}"
        return link(data, name, lambda m: {"conv": m.rsplit("-", 1)[1]})

    @model_validator(mode="after")
    def _budget_matches_name(self) -> GraphClsSpec:
        if self.method.startswith("dp-") and self.epsilon is None:
            raise ValueError(f"{self.method} trains privately: give epsilon (or use "
                             f"graph-{self.conv} for the non-private model)")
        if not self.method.startswith("dp-") and self.epsilon is not None:
            raise ValueError(f"{self.method} is not private: drop epsilon (or use "
                             f"dp-graph-{self.conv})")
        if self.norm == "batch" and self.epsilon is not None:  # before any work: the model
            # check (Opacus's validator) came only after Prefect started and the data loaded
            raise ValueError(f"norm 'batch' is not private: BatchNorm mixes the graphs of a "
                             f"batch, so one graph's gradient depends on the others; use "
                             f"--norm instance or none (batch only for graph-{self.conv}, "
                             "without DP)")
        return self


_GRAPH = Entry(name="graph-gcn", family="graph-cls", spec_type=GraphClsSpec,
               module="dpgnn_core.methods.graph_cls", task="graph", private=False,
               protection="nothing (non-private)",
               extra_metrics=("sensitivity", "specificity"), canary=("graph", "add/remove"),
               releases=("graph", "add_remove"))
#: The catalogue's "graph-cls" family: dp-graph-* and graph-* of gcn, sage and gat. A
#: graph's prediction reads that graph only: one graph changes the count by <= 1.
ENTRIES = tuple(e for c in ("gcn", "sage", "gat") for e in (
    replace(_GRAPH.named(f"dp-graph-{c}", {"conv": c}), private=True,
            protection="graph; add/remove", explains=True, score_sensitivity=1.0,
            private_selection=True),
    _GRAPH.named(f"graph-{c}", {"conv": c})))
