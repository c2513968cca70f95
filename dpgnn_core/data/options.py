"""Typed specs of each loader's options, checked before anything is read.

Every loader's keyword options (what ``dpgnn ingest -o KEY=VALUE`` and its flags pass) are
described by a pydantic model with types and bounds. Integers and booleans are strict (no
``"10"`` for 10, no ``1`` for true): a value that is not what the option means is an error,
never a guess. Unknown option names are refused with the list of valid ones.

Which format takes which model is the loader catalogue's (:mod:`dpgnn_core.data.catalog`,
which also checks options against them). The models are also the command line's:
``dpgnn ingest`` has one ``--flag`` per option of any model
(:func:`~dpgnn_core.data.catalog.option_models`), with the help of the model's ``Args:``
docstring, named ``--<option>`` unless a :class:`Flag` says otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


@dataclass(frozen=True)
class Flag:
    """Option metadata: its ``dpgnn ingest`` flag when that is not ``--<option>``.

    Args:
        name (str): the flag, e.g. ``--dedupe-edges``.
    """

    name: str


Frac = Annotated[float, Field(ge=0, le=1)]
Seed = Annotated[int, Field(ge=0)]
Fractions = Annotated[tuple[Frac, Frac, Frac], Field(strict=False)]


class _Options(BaseModel):
    """Options of every loader.

    Args:
        disjoint (bool): inductive variant: remove every edge between different splits
            (node datasets). (default: False)
        allow_no_edges (bool): ingest a graph with no edges (else an error); the
            manifest's ``cleaning`` record keeps a warning. (default: False)
    """

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)

    #: Inductive variant: remove every edge between different splits (node datasets).
    disjoint: bool = False
    #: Ingest a graph with no edges (with a warning in the manifest) instead of refusing it.
    allow_no_edges: bool = False


class _SplitFractions(_Options):
    """Options of the loaders that split at random.

    Args:
        fractions (tuple, optional): train, val and test fractions of a random split
            (summing to 1); each loader's own split or default fractions when omitted.
        seed (int): seed of the split (and of the synthetic generators). (default: 0)
    """

    fractions: Fractions | None = None
    seed: Seed = 0

    @field_validator("fractions")
    @classmethod
    def _sum_to_one(cls, v: tuple[float, float, float] | None
                    ) -> tuple[float, float, float] | None:
        if v is not None and abs(sum(v) - 1) > 1e-6:
            raise ValueError("train, val and test fractions must sum to 1")
        return v


def refuse_beyond_memory(options: BaseModel, need: float, what: str) -> None:
    """Raise, naming the option furthest above its default, when generating ``what``
    needs more than ``need`` bytes and that exceeds this machine's memory (a lower bound:
    nothing that could fit is refused)."""
    from dpgnn_core.environment import physical_memory

    memory = physical_memory()
    if not memory or need <= memory:
        return
    fields = type(options).model_fields

    def ratio(name: str) -> float:
        value, default = getattr(options, name), fields[name].default
        return float(value) / float(default) if isinstance(value, int | float) and \
            isinstance(default, int | float) and default else 0.0

    culprit = max((f for f in fields if f != "seed"), key=ratio)
    raise ValueError(f"--option {culprit}={getattr(options, culprit)!r}: generating {what} "
                     f"needs at least {need / 2**30:,.1f} GiB of memory, more than this "
                     f"machine's {memory / 2**30:,.1f} GiB")


class CsbmOptions(_SplitFractions):
    """:func:`~dpgnn_core.data.synthetic.csbm`.

    Args:
        kind (str): the synthetic generator: ``csbm`` (a contextual stochastic block
            model, node classification) or ``er_graphs`` (Erdős-Rényi graphs, graph
            classification). (default: csbm)
        num_nodes (int): nodes. (default: 3000)
        num_classes (int): classes. (default: 5)
        feature_dim (int): feature dimension. (default: 32)
        avg_degree (float): expected directed degree before deduplication. (default: 10)
        homophily (float): probability that an edge stays in its source's class.
            (default: 0.8)
        feature_signal (float): norm of the class means relative to unit noise; 0 gives
            features with no signal. (default: 1.0)
        power_law (float, optional): Pareto exponent > 2 of the degree weights; uniform
            weights when omitted.
        partition_nodes (int, optional): write the dataset as partitions of this many
            nodes, drawn block by block (edges partitioned by destination; another
            realisation than the single-file graph of the same seed); one file per table
            when omitted.
        feature_kind (str): ``gaussian`` (class means plus unit noise) or ``bag_of_words``
            (sparse binary word presence over a vocabulary of ``feature_dim`` words, each
            node's words from a background mixed with its class topic, like a citation
            graph's). (default: gaussian)
        words (float): with bag_of_words, the mean number of words drawn per node.
            (default: 32)
        class_share (float): with bag_of_words, the class topic's weight in each word's
            distribution (the feature signal). (default: 0.15)
    """

    kind: Literal["csbm"] = "csbm"
    num_nodes: Annotated[int, Field(ge=2)] = 3000
    num_classes: Annotated[int, Field(ge=2)] = 5
    feature_dim: Annotated[int, Field(ge=1)] = 32
    avg_degree: Annotated[float, Field(gt=0)] = 10.0
    homophily: Frac = 0.8
    feature_signal: Annotated[float, Field(ge=0)] = 1.0
    power_law: Annotated[float, Field(gt=2)] | None = None
    partition_nodes: Annotated[int, Field(ge=1)] | None = None
    feature_kind: Literal["gaussian", "bag_of_words"] = "gaussian"
    words: Annotated[float, Field(gt=0)] = 32.0
    class_share: Frac = 0.15

    @model_validator(mode="after")
    def _fits_memory(self) -> CsbmOptions:
        """Refuse a graph that clearly cannot be generated here (``num_nodes=1e12`` was a
        raw MemoryError, ``avg_degree=1e12`` ran without end): its features (4 bytes ×
        ``num_nodes`` × ``feature_dim``) and its drawn edge keys (8 bytes × ``num_nodes``
        × ``avg_degree``) must fit the machine's memory (with ``partition_nodes``, one
        block's)."""
        n = min(self.num_nodes, self.partition_nodes or self.num_nodes)
        refuse_beyond_memory(self, 4.0 * n * self.feature_dim + 8.0 * n * self.avg_degree,
                             f"a graph of {self.num_nodes} nodes, average degree "
                             f"{self.avg_degree:g} and {self.feature_dim} features")
        return self


class ErGraphsOptions(_Options):
    """:func:`~dpgnn_core.data.synthetic.er_graphs`.

    Args:
        num_graphs (int): graphs. (default: 1000)
        num_nodes (int): nodes per graph. (default: 20)
        p (tuple): edge probability of class 0 and of class 1. (default: 0.2,0.3)
        feature_dim (int): features. (default: 9)
        mean (tuple): feature mean of class 0 and of class 1. (default: 0.0,0.1)
        std (float): feature standard deviation. (default: 0.5)
        split (tuple): train, val and test graph counts. (default: 600,100,300)
        seed (int): seed of the generator. (default: 0)
    """

    kind: Literal["er_graphs"] = "er_graphs"
    num_graphs: Annotated[int, Field(ge=1)] = 1000
    num_nodes: Annotated[int, Field(ge=1)] = 20
    p: Annotated[tuple[Frac, Frac], Field(strict=False)] = (0.2, 0.3)
    feature_dim: Annotated[int, Field(ge=1)] = 9
    mean: Annotated[tuple[float, float], Field(strict=False)] = (0.0, 0.1)
    std: Annotated[float, Field(ge=0)] = 0.5
    split: Annotated[tuple[Annotated[int, Field(ge=0)], Annotated[int, Field(ge=0)],
                           Annotated[int, Field(ge=0)]], Field(strict=False)] = (600, 100, 300)
    seed: Seed = 0

    @model_validator(mode="after")
    def _fits_memory(self) -> ErGraphsOptions:
        """As :class:`CsbmOptions`: features (4 bytes × nodes × ``feature_dim``) and the
        edges of the denser class (16 bytes × ``num_graphs`` × ``num_nodes``² × p)."""
        nodes = float(self.num_graphs) * self.num_nodes
        refuse_beyond_memory(self, 4.0 * nodes * self.feature_dim
                             + 16.0 * nodes * self.num_nodes * min(self.p),
                             f"{self.num_graphs} graphs of {self.num_nodes} nodes and "
                             f"{self.feature_dim} features")
        return self


class PlanetoidOptions(_SplitFractions):
    """:func:`~dpgnn_core.data.loaders.load_planetoid`: the public split, or with
    ``fractions`` a random stratified train/val/test split of every labelled node."""


class Facebook100Options(_SplitFractions):
    """:func:`~dpgnn_core.data.loaders.load_facebook100`.

    Args:
        target (str): the column to predict: status, gender, major, minor, housing or
            year. (default: year)
        min_class_size (int): drop classes smaller than this. (default: 100)
        keep_isolated (bool): keep nodes without edges. (default: False)
    """

    target: Literal["status", "gender", "major", "minor", "housing", "year"] = "year"
    min_class_size: Annotated[int, Field(ge=1)] = 100
    keep_isolated: bool = False


class _Cleaning(_SplitFractions):
    """Options of the loaders whose raw edges may hold self-loops or duplicates.

    Args:
        remove_self_loops (bool): drop self-loops (else an error). (default: False)
        dedupe (bool): drop duplicate edges (else an error). (default: False)
    """

    remove_self_loops: bool = False
    dedupe: Annotated[bool, Flag("--dedupe-edges")] = False


class TuOptions(_Cleaning):
    """:func:`~dpgnn_core.data.loaders.load_tu`.

    Args:
        fingerprint_merge (bool): Fingerprint's 4-class Galton-Henry merge.
            (default: False)
    """

    fingerprint_merge: bool = False


class OgbOptions(_Options):
    """:func:`~dpgnn_core.data.loaders.load_ogbg`.

    Args:
        split (str): the split scheme's folder. (default: scaffold)
        one_hot (bool): one-hot the categorical atom and bond features with OGB's
            category counts; else keep the raw codes. (default: True)
    """

    split: Annotated[str, Field(min_length=1)] = "scaffold"
    one_hot: bool = True


Column = Annotated[str, Field(min_length=1)]


class DglOptions(_Cleaning):
    """:func:`~dpgnn_core.data.loaders.load_dgl`: node data names of the features (list,
    concatenated), labels and edge features, the key of graph labels.

    Args:
        features (list, optional): node data concatenated into the features.
            (default: feat)
        label (str): node data of the node labels. (default: label)
        graph_label (str): key of the graph labels. (default: label)
        edge_features (list, optional): edge data of the edge features.
        directed (bool): the graph is directed; else undirected, with a symmetric edge
            set (never inferred from the edges). (default: False)
    """

    features: Annotated[list[Column], Field(min_length=1)] | None = None
    label: Column = "label"
    graph_label: Column = "label"
    edge_features: Annotated[list[Column], Field(min_length=1)] | None = None
    directed: bool = False


class TabularOptions(_Cleaning):
    """:func:`~dpgnn_core.data.loaders.load_tabular` (plus ``nodes``, the node table).

    Args:
        nodes (str, optional): the node table (else ``nodes.*`` beside ``edges.*`` in the
            source folder).
        src_col (str): source column of the edge list. (default: src)
        dst_col (str): target column of the edge list. (default: dst)
        id_col (str): node id column of the node table. (default: node_id)
        label_col (str): label column. (default: label)
        feature_cols (list, optional): feature columns (default: every other numeric
            column).
        split_col (str, optional): column of train/val/test/unused (default: a random
            split).
        undirected (bool): add the reverse of each edge. (default: False)
        relabel (bool): map arbitrary node ids to 0..n-1. (default: False)
    """

    nodes: Column | None = None
    src_col: Column = "src"
    dst_col: Column = "dst"
    id_col: Column = "node_id"
    label_col: Column = "label"
    feature_cols: Annotated[list[Column], Field(min_length=1)] | None = None
    split_col: Column | None = None
    undirected: bool = False
    relabel: bool = False


def flag_of(model: type[BaseModel], option: str) -> str:
    """The ``dpgnn ingest`` flag of ``option``: a :class:`Flag` of the field, else
    ``--<option>`` with dashes."""
    for meta in model.model_fields[option].metadata:
        if isinstance(meta, Flag):
            return meta.name
    return "--" + option.replace("_", "-")
