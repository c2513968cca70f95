"""Typed specs of each loader's options, checked before anything is read.

Every loader's keyword options (what ``dpgnn ingest -o KEY=VALUE`` and its flags pass) are
described by a pydantic model with types and bounds. Integers and booleans are strict (no
``"10"`` for 10, no ``1`` for true): a value that is not what the option means is an error,
never a guess. Unknown option names are refused with the list of valid ones.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from dpgnn_core.errors import DataError

Frac = Annotated[float, Field(ge=0, le=1)]
Seed = Annotated[int, Field(ge=0)]
Fractions = Annotated[tuple[Frac, Frac, Frac], Field(strict=False)]


class _Options(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)

    #: Inductive variant: remove every edge between different splits (node datasets).
    disjoint: bool = False
    #: Ingest a graph with no edges (with a warning in the manifest) instead of refusing it.
    allow_no_edges: bool = False


class _SplitFractions(_Options):
    fractions: Fractions | None = None
    seed: Seed = 0

    @field_validator("fractions")
    @classmethod
    def _sum_to_one(cls, v: tuple[float, float, float] | None
                    ) -> tuple[float, float, float] | None:
        if v is not None and abs(sum(v) - 1) > 1e-6:
            raise ValueError("train, val and test fractions must sum to 1")
        return v


class CsbmOptions(_SplitFractions):
    """:func:`~dpgnn_core.data.synthetic.csbm`."""

    kind: Literal["csbm"] = "csbm"
    num_nodes: Annotated[int, Field(ge=2)] = 3000
    num_classes: Annotated[int, Field(ge=2)] = 5
    feature_dim: Annotated[int, Field(ge=1)] = 32
    avg_degree: Annotated[float, Field(gt=0)] = 10.0
    homophily: Frac = 0.8
    feature_signal: Annotated[float, Field(ge=0)] = 1.0
    power_law: Annotated[float, Field(gt=2)] | None = None


class ErGraphsOptions(_Options):
    """:func:`~dpgnn_core.data.synthetic.er_graphs`."""

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


class PlanetoidOptions(_SplitFractions):
    """:func:`~dpgnn_core.data.loaders.load_planetoid`: the public split, or with
    ``fractions`` a random stratified train/val/test split of every labelled node."""


class Facebook100Options(_SplitFractions):
    """:func:`~dpgnn_core.data.loaders.load_facebook100`."""

    target: Literal["status", "gender", "major", "minor", "housing", "year"] = "year"
    min_class_size: Annotated[int, Field(ge=1)] = 100
    keep_isolated: bool = False


class TuOptions(_SplitFractions):
    """:func:`~dpgnn_core.data.loaders.load_tu`."""

    fingerprint_merge: bool = False
    remove_self_loops: bool = False
    dedupe: bool = False


class OgbOptions(_Options):
    """:func:`~dpgnn_core.data.loaders.load_ogbg`."""

    split: Annotated[str, Field(min_length=1)] = "scaffold"
    one_hot: bool = True


Column = Annotated[str, Field(min_length=1)]


class DglOptions(_SplitFractions):
    """:func:`~dpgnn_core.data.loaders.load_dgl`: node data names of the features (list,
    concatenated), labels and edge features, the key of graph labels."""

    features: Annotated[list[Column], Field(min_length=1)] | None = None
    label: Column = "label"
    graph_label: Column = "label"
    edge_features: Annotated[list[Column], Field(min_length=1)] | None = None
    remove_self_loops: bool = False
    dedupe: bool = False
    #: The graph is directed (else undirected, with a symmetric edge set); never inferred.
    directed: bool = False


class TabularOptions(_SplitFractions):
    """:func:`~dpgnn_core.data.loaders.load_tabular` (plus ``nodes``, the node table)."""

    nodes: Column | None = None
    src_col: Column = "src"
    dst_col: Column = "dst"
    id_col: Column = "node_id"
    label_col: Column = "label"
    feature_cols: Annotated[list[Column], Field(min_length=1)] | None = None
    split_col: Column | None = None
    undirected: bool = False
    relabel: bool = False
    remove_self_loops: bool = False
    dedupe: bool = False


LOADER_OPTIONS: dict[str, type[_Options]] = {
    "planetoid": PlanetoidOptions, "facebook100": Facebook100Options, "tu": TuOptions,
    "ogb": OgbOptions, "dgl": DglOptions, "csv": TabularOptions, "parquet": TabularOptions,
}
SYNTHETIC_OPTIONS: dict[str, type[_Options]] = {"csbm": CsbmOptions,
                                                "er_graphs": ErGraphsOptions}


def _option_error(text: str, *, field: str, value: Any) -> DataError:
    err = DataError(text)  # the text already names the option and its value
    err.field, err.value = field, value
    return err


def validate_options(fmt: str, options: dict[str, Any]) -> dict[str, Any]:
    """Check ``options`` against the typed spec of ``fmt``'s loader.

    Returns:
        dict: the options given (only those), with values in their declared types (a JSON
        list for a tuple option becomes a tuple, an integer for a float option a float).

    Raises:
        DataError: one line naming the option, its value, what is wrong and the loader.
    """
    if fmt == "synthetic":
        kind = options.get("kind", "csbm")
        if kind not in SYNTHETIC_OPTIONS:
            raise _option_error(
                f"--option kind={kind!r}: must be one of {sorted(SYNTHETIC_OPTIONS)} "
                "(synthetic loader)", field="kind", value=kind)
        model = SYNTHETIC_OPTIONS[kind]
        loader = "synthetic" if kind == "csbm" else f"synthetic {kind}"
    elif fmt in LOADER_OPTIONS:
        model, loader = LOADER_OPTIONS[fmt], fmt
    else:
        raise _option_error(f"unknown format {fmt!r}", field="format", value=fmt)
    valid = sorted(model.model_fields)
    for key in options:
        if key not in model.model_fields:
            raise _option_error(
                f"unknown option {key!r} ({loader} loader); valid options: {', '.join(valid)}",
                field=key, value=options[key])
    try:
        checked = model.model_validate(options)
    except ValidationError as e:
        first = e.errors()[0]
        loc = first.get("loc") or ()
        key = str(loc[0]) if loc else ""
        msg = str(first.get("msg", e)).removeprefix("Value error, ")
        if key in options:
            raise _option_error(f"--option {key}={options[key]!r}: {msg} ({loader} loader)",
                                field=key, value=options[key]) from None
        raise _option_error(f"{msg} ({loader} loader)", field="options",
                            value=options) from None
    out: dict[str, Any] = {k: getattr(checked, k) for k in options}
    return out
