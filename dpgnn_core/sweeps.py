"""Sweeps: a grid and/or random search over registered methods' options, ε values and
seeds, expanded into one spec per point; the results table; the best configuration per
(method, ε), chosen on validation only.

A sweep spec is a TOML/YAML/JSON mapping or a :class:`SweepSpec`::

    name = "cora-eps"
    dataset = "data/cora"
    epsilons = [1, 4, 8]
    seeds = [0, 1, 2]
    selection = "flagged"

    [[methods]]
    method = "dp-gcn"
    grid = {lr = [3e-3, 1e-2], max_degree = [3, 7]}
    fixed = {steps = 300}

    [[methods]]
    method = "gcn"            # a non-private reference: run once per seed, no ε

Every point is validated by its method's spec before anything runs: an option a method
does not take is an error naming it. Light to import (no torch).
"""

from __future__ import annotations

import itertools
import math
import random as _random
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from dpgnn_core.errors import DataError
from dpgnn_core.io import parse_mapping, sha256_json
from dpgnn_core.methods.catalog import is_private
from dpgnn_core.methods.catalog import spec_types as method_specs
from dpgnn_core.specs import IngestSpec, Spec, parse_spec
from dpgnn_core.specs.base import Seed


class RandomOption(BaseModel):
    """How a random search draws one option: ``choice`` from values, ``uniform`` or
    ``log_uniform`` in [low, high], ``int_uniform`` in {low, ..., high}."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    choice: list[Any] | None = None
    uniform: tuple[float, float] | None = None
    log_uniform: tuple[float, float] | None = None
    int_uniform: tuple[int, int] | None = None

    @model_validator(mode="after")
    def _one(self) -> RandomOption:
        given = [k for k in ("choice", "uniform", "log_uniform", "int_uniform")
                 if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError("give exactly one of choice, uniform, log_uniform, int_uniform")
        lo_hi = self.uniform or self.log_uniform or self.int_uniform
        if lo_hi is not None and not lo_hi[0] <= lo_hi[1]:
            raise ValueError(f"low > high in {lo_hi}")
        if self.log_uniform is not None and self.log_uniform[0] <= 0:
            raise ValueError("log_uniform needs low > 0")
        return self

    def draw(self, rng: _random.Random) -> Any:
        if self.choice is not None:
            return rng.choice(self.choice)
        if self.uniform is not None:
            return rng.uniform(*self.uniform)
        if self.log_uniform is not None:
            lo, hi = self.log_uniform
            return math.exp(rng.uniform(math.log(lo), math.log(hi)))
        assert self.int_uniform is not None
        return rng.randint(*self.int_uniform)


class MethodSearch(BaseModel):
    """One method's part of a sweep.

    Args:
        method (str): a registered method name (``dp-gcn``, ``gcn``, ...).
        fixed (dict): options every point of this method takes. (default: ``{}``)
        grid (dict): option -> list of values; every combination is a configuration.
            (default: ``{}``)
        random (dict): option -> :class:`RandomOption`; ``samples`` draws of them, each
            combined with every grid configuration. (default: ``{}``)
        samples (int): random draws (0 without ``random``). (default: 0)
    """

    model_config = ConfigDict(frozen=True, extra="forbid")
    method: str
    fixed: dict[str, Any] = Field(default_factory=dict)
    grid: dict[str, list[Any]] = Field(default_factory=dict)
    random: dict[str, RandomOption] = Field(default_factory=dict)
    samples: int = Field(0, ge=0)

    @model_validator(mode="after")
    def _check(self) -> MethodSearch:
        if self.method not in method_specs():
            raise ValueError(f"unknown method {self.method!r}; choose one of "
                             f"{', '.join(sorted(method_specs()))}")
        if self.random and self.samples == 0:
            raise ValueError(f"{self.method}: random options need samples >= 1")
        for k, values in self.grid.items():
            if not values:
                raise ValueError(f"{self.method}: grid option {k!r} has no values")
        return self

    @property
    def private(self) -> bool:
        return is_private(self.method)

    def configurations(self, rng: _random.Random) -> list[dict[str, Any]]:
        """The option sets of this method (without ε and seed), in a stable order."""
        keys = sorted(self.grid)
        grid = [dict(zip(keys, combo, strict=True))
                for combo in itertools.product(*(self.grid[k] for k in keys))] or [{}]
        draws = [{k: opt.draw(rng) for k, opt in sorted(self.random.items())}
                 for _ in range(self.samples)] or [{}]
        return [{**self.fixed, **g, **d} for g in grid for d in draws]


class TuningSpec(BaseModel):
    """The distribution of the number of candidates K of a private selection
    (``selection = "private"``; Papernot & Steinke 2022, :mod:`dpgnn_core.privacy.tuning`).

    ``kind``: ``geometric`` (the truncated negative binomial with η = 1),
    ``truncated_negative_binomial`` (give ``eta`` > -1) or ``poisson`` (μ >= 1). Give the
    spread either directly (``gamma`` in (0, 1), or ``mu``) or as ``expected_candidates``
    E[K] (γ solved from it); with neither, E[K] = the number of configurations of the
    method's search, at least 2 (:meth:`distribution`).

    Args:
        kind (str): ``geometric``, ``truncated_negative_binomial`` or ``poisson``.
            (default: ``geometric``)
        eta (float, optional): η, truncated negative binomial only.
        gamma (float, optional): γ, geometric or truncated negative binomial.
        mu (float, optional): μ, Poisson only.
        expected_candidates (float, optional): E[K] instead of γ or μ.
        score_share (float, optional): the part of the target ε the noisy validation score
            would spend alone (RDP, at the candidates' δ): it sets the score's noise; the
            training noise is then calibrated so that training and score together meet the
            target (:func:`dpgnn_core.sweep_tuning.plan_selection`). Only for methods whose
            score sensitivity is bounded. (default: :obj:`0.2`)
    """

    model_config = ConfigDict(frozen=True, extra="forbid")
    kind: Literal["geometric", "truncated_negative_binomial", "poisson"] = "geometric"
    eta: float | None = None
    gamma: float | None = None
    mu: float | None = None
    expected_candidates: float | None = None
    score_share: float = Field(default=0.2, gt=0.0, lt=1.0)

    @model_validator(mode="after")
    def _check(self) -> TuningSpec:
        if self.kind == "poisson":
            if self.eta is not None or self.gamma is not None:
                raise ValueError("eta and gamma are not parameters of the poisson tuning "
                                 "distribution")
            if self.mu is not None and self.expected_candidates is not None:
                raise ValueError("give mu or expected_candidates (= mu), not both")
        else:
            if self.mu is not None:
                raise ValueError(f"mu is a parameter of the poisson tuning distribution, "
                                 f"not of {self.kind}")
            if self.kind == "geometric" and self.eta not in (None, 1.0):
                raise ValueError("geometric is the truncated negative binomial with eta = 1; "
                                 "use kind = truncated_negative_binomial for another eta")
            if self.kind == "truncated_negative_binomial" and self.eta is None:
                raise ValueError("truncated_negative_binomial needs eta (> -1)")
            if self.gamma is not None and self.expected_candidates is not None:
                raise ValueError("give gamma or expected_candidates, not both")
        e = self.expected_candidates
        if e is not None and not (math.isfinite(e) and (e >= 1 if self.kind == "poisson"
                                                        else e > 1)):
            raise ValueError(f"expected_candidates must be a finite number "
                             f"{'>= 1' if self.kind == 'poisson' else '> 1'}, got {e!r}")
        try:  # the distribution's own checks (eta > -1, 0 < gamma < 1, mu >= 1)
            self.distribution(2)
        except Exception as err:  # PrivacyError: one line naming the parameter
            raise ValueError(f"tuning: {err}") from err
        return self

    def distribution(self, configurations: int) -> Any:
        """The :class:`~dpgnn_core.privacy.tuning.TuningDistribution` of K for a search of
        ``configurations`` configurations (the default E[K] is max(2, configurations))."""
        from dpgnn_core.privacy.tuning import TuningDistribution

        mean = (self.expected_candidates if self.expected_candidates is not None
                else float(max(2, configurations)))
        if self.kind == "poisson":
            return TuningDistribution.poisson(self.mu if self.mu is not None else mean)
        eta = 1.0 if self.eta is None else float(self.eta)
        if self.gamma is not None:
            return TuningDistribution.truncated_negative_binomial(eta, self.gamma)
        return TuningDistribution.truncated_negative_binomial(eta, _gamma_for_mean(eta, mean))


def _gamma_for_mean(eta: float, mean: float) -> float:
    """γ of the truncated negative binomial D_{η,γ} with E[K] = ``mean`` (> 1): 1/mean for
    η = 1, else a bisection on log γ (E[K] falls from ∞ to 1 as γ rises from 0 to 1)."""
    from dpgnn_core.privacy.tuning import TuningDistribution

    if eta == 1.0:
        return 1.0 / mean
    lo, hi = -745.0, 0.0  # log γ
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if mid in (lo, hi):
            break
        g = math.exp(mid)
        if g >= 1.0 or TuningDistribution.truncated_negative_binomial(eta, g).mean() < mean:
            hi = mid
        else:
            lo = mid
    return math.exp(hi) if math.exp(hi) < 1.0 else math.exp(lo)


class SweepSpec(BaseModel):
    """A sweep: methods and their search, ε values, seeds, dataset, selection mode.

    Args:
        name (str): the sweep's name (folder and MLflow parent run).
        dataset (str or IngestSpec): an ingested dataset folder, or what to ingest (a
            table ``format``, ``source``, ``options``, as ``dpgnn ingest`` takes them): the
            sweep command ingests it once into the project (``$DPGNN_HOME/datasets``) and
            reuses that folder on every rerun, so one spec file holds the whole experiment.
        methods (list of MethodSearch): what to run.
        epsilons (list of float): target ε of every private method's points (non-private
            methods run once per configuration and seed). (default: ``[]``)
        seeds (list of int): initialisation seeds; results are averaged over them.
            (default: ``[0]``)
        selection (str): ``flagged``: every point keeps its own ε, and the configuration
            chosen on validation lists "selected among n candidates on validation" as
            unaccounted; ``private``: Papernot & Steinke's accounted tuning (the chosen
            model's ε is the tuning mechanism's). (default: ``flagged``)
        search_seed (int): seeds the random search's draws of hyperparameters (public:
            they do not depend on the data). (default: 0)
        tuning (TuningSpec, optional): ``selection = "private"`` only: the distribution of
            the number of candidates K (default: geometric with E[K] = the number of
            configurations, at least 2). Private selection trains one initialisation per
            candidate (a secret seed each, :mod:`dpgnn_core.sweep_tuning`), not ``seeds``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    dataset: str | IngestSpec
    methods: list[MethodSearch] = Field(min_length=1)
    epsilons: list[float] = Field(default_factory=list)
    seeds: list[Seed] = Field(default_factory=lambda: [0], min_length=1)
    selection: Literal["flagged", "private"] = "flagged"
    search_seed: int = 0
    tuning: TuningSpec | None = None

    @model_validator(mode="after")
    def _check(self) -> SweepSpec:
        if self.tuning is not None and self.selection != "private":
            raise ValueError('tuning (the distribution of the number of candidates) applies '
                             'to selection = "private" only')
        if any(not (e > 0 and math.isfinite(e)) for e in self.epsilons):
            raise ValueError(f"epsilons must be finite numbers > 0, got {self.epsilons}")
        if any(m.private for m in self.methods) and not self.epsilons:
            private = [m.method for m in self.methods if m.private]
            raise ValueError(f"private methods {private} need epsilons")
        return self


#: The sweep of ``dpgnn demo`` (``make demo``) on the embedded graph (the dataset is filled
#: in): three private methods at three ε with their default options, and the non-private
#: references; one seed, so it finishes in a few minutes on 2 cores.
DEMO_SWEEP: dict[str, Any] = {
    "name": "demo",
    "epsilons": [1.0, 4.0, 8.0],
    "seeds": [0],
    "methods": [{"method": "dp-gcn"},
                {"method": "gap-edp"},
                {"method": "dp-mlp"},
                {"method": "gcn"}, {"method": "mlp"}],
}


def load_sweep_spec(path: str | Path) -> SweepSpec:
    """Read a sweep spec file (TOML, YAML or JSON by suffix); a relative ``dataset`` folder
    or ingest ``source`` is taken relative to the current folder.

    Raises:
        DataError: the file cannot be read or does not validate (one line naming the file
            and the offending field).
    """
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise DataError(f"cannot read the sweep spec: {e.strerror or e}", path=path) from e
    try:
        data = parse_mapping(text, path.suffix)
    except Exception as e:  # the parsers' own errors name line and column
        reason = " ".join(str(e).split())  # PyYAML's message spans lines (a caret)
        raise DataError(f"cannot parse the sweep spec: {reason}", path=path) from e
    if not isinstance(data, dict):
        raise DataError("a sweep spec is a mapping", path=path)
    try:
        return SweepSpec(**data)
    except ValidationError as e:
        errors = e.errors()
        # ``dataset`` is a folder or an ingest table: name the failure of the form given
        # (not "should be a valid string" for a table), without pydantic's union tags.
        def tag(loc: Any) -> str:  # pydantic's name of the union member, or ""
            return str(loc[1]) if len(loc) > 1 and loc[0] == "dataset" else ""

        as_table = not isinstance(data.get("dataset"), str)
        first = next((x for x in errors if tag(x.get("loc", ()))
                      and (tag(x["loc"]) != "str") == as_table), errors[0])
        loc = first.get("loc", ())
        where = ".".join(str(p) for i, p in enumerate(loc) if not (i == 1 and tag(loc)))
        raise DataError(str(first.get("msg", e)).removeprefix("Value error, "), path=path,
                        field=where or None, value=first.get("input")
                        if where else None) from e


class Point(BaseModel):
    """One run of a sweep: its method's validated spec and where it sits in the search."""

    model_config = ConfigDict(frozen=True)
    method: str
    config: dict[str, Any]
    config_id: str
    epsilon: float | None
    seed: int
    spec: Any  # the method's spec (dpgnn_core.specs.AnySpec)


def _config_id(method: str, config: Mapping[str, Any]) -> str:
    if not config:
        return method
    return method + "[" + ",".join(f"{k}={config[k]}" for k in sorted(config)) + "]"


def points(sweep: SweepSpec) -> list[Point]:
    """Every distinct point of ``sweep``, each spec validated by its method. A point listed
    more than once (a repeated seed, ``seeds = [0, 0]``, or a repeated grid value) runs once:
    trained twice it would be two private releases with fresh noise, each charged; the
    duplicates are named by :func:`duplicate_points`.

    Raises:
        DataError: an option a method does not take, or an invalid value (naming the
            method, the option and the value).
    """
    return _distinct(_all_points(sweep))[0]


def duplicate_points(sweep: SweepSpec) -> list[str]:
    """One line per point of ``sweep`` listed more than once (what :func:`points` drops)."""
    return _distinct(_all_points(sweep))[1]


def _distinct(pts: list[Point]) -> tuple[list[Point], list[str]]:
    seen: dict[str, int] = {}
    out: list[Point] = []
    for p in pts:
        key = sha256_json({"method": p.method, "spec": p.spec.model_dump(mode="json")})
        if key not in seen:
            out.append(p)
        seen[key] = seen.get(key, 0) + 1
    notes = []
    for p in out:
        n = seen[sha256_json({"method": p.method, "spec": p.spec.model_dump(mode="json")})]
        if n > 1:
            eps = "" if p.epsilon is None else f", ε = {p.epsilon:g}"
            notes.append(f"point {p.config_id}{eps}, seed {p.seed} is listed {n} times (a "
                         "repeated seed or grid value): it runs once (each further run "
                         "would be a new release, charged again)")
    return out, notes


def _all_points(sweep: SweepSpec) -> list[Point]:
    """Every point of ``sweep`` as listed, duplicates included.

    Raises:
        DataError: an option a method does not take, or an invalid value (naming the
            method, the option and the value).
    """
    rng = _random.Random(sweep.search_seed)
    out: list[Point] = []
    for search in sweep.methods:
        spec_type = method_specs()[search.method]
        allowed = set(spec_type.model_fields) - {"method", *spec_type.implied}
        for config in search.configurations(rng):
            wrong = sorted(set(config) - allowed)
            if wrong:
                raise DataError(f"{search.method} does not take {', '.join(wrong)}",
                                field="methods", value=search.method)
            for k in ("epsilon", "seed"):
                if k in config:
                    raise DataError(f"set {k} at the sweep level ({k}s), not per method",
                                    field=k, value=config[k])
            for eps in (sweep.epsilons if search.private else [None]):
                for seed in sweep.seeds:
                    data = {**config, "method": search.method, "seed": seed,
                            **({"epsilon": eps} if eps is not None else {})}
                    try:
                        spec: Spec = parse_spec(data)
                    except ValidationError as e:
                        first = e.errors()[0]
                        raise DataError(
                            f"{search.method}: {first.get('msg')}", field=".".join(
                                str(p) for p in first.get("loc", ())[1:]) or None,
                            value=first.get("input")) from e
                    out.append(Point(method=search.method, config=config,
                                     config_id=_config_id(search.method, config),
                                     epsilon=eps, seed=seed, spec=spec))
    return out


# --- results ------------------------------------------------------------------------------

#: Columns of the results table, one row per point.
COLUMNS = ("method", "config_id", "epsilon", "seed", "epsilon_spent", "delta", "level",
           "val_accuracy", "test_accuracy", "private", "cache", "artifacts_dir",
           "mlflow_run_id", "config")


def aggregate(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Mean and (sample) standard deviation over seeds of validation and test accuracy,
    per (method, configuration, ε)."""
    groups: dict[tuple[str, str, float | None], list[Mapping[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["method"], r["config_id"], r["epsilon"]), []).append(r)
    out = []
    for (method, cid, eps), rs in groups.items():
        rec: dict[str, Any] = {"method": method, "config_id": cid, "epsilon": eps,
                               "seeds": len(rs), "config": rs[0]["config"]}
        for k in ("val_accuracy", "test_accuracy"):
            vals = [float(r[k]) for r in rs if r.get(k) is not None
                    and not math.isnan(float(r[k]))]
            rec[f"{k}_mean"] = sum(vals) / len(vals) if vals else math.nan
            rec[f"{k}_std"] = (math.sqrt(sum((v - rec[f"{k}_mean"]) ** 2 for v in vals)
                                         / (len(vals) - 1)) if len(vals) > 1 else 0.0)
        out.append(rec)
    return out


def best_per_method_and_epsilon(rows: Sequence[Mapping[str, Any]]
                                ) -> list[dict[str, Any]]:
    """The configuration with the best mean validation accuracy per (method, ε): chosen on
    validation only, never on test. Each carries ``candidates``, the number of
    configurations it was chosen among (what selection read)."""
    best: dict[tuple[str, float | None], dict[str, Any]] = {}
    counts: dict[tuple[str, float | None], int] = {}
    for rec in aggregate(rows):
        key = (rec["method"], rec["epsilon"])
        counts[key] = counts.get(key, 0) + 1
        score = rec["val_accuracy_mean"]
        if key not in best or (not math.isnan(score) and (
                math.isnan(best[key]["val_accuracy_mean"])
                or score > best[key]["val_accuracy_mean"])):
            best[key] = rec
    return [{**rec, "candidates": counts[key]} for key, rec in best.items()]


def selection_note(candidates: int) -> str:
    """What choosing among ``candidates`` configurations on validation reads, unaccounted
    (``selection = "flagged"``)."""
    return (f"selected among {candidates} candidate configurations on validation accuracy "
            "(reads validation labels of every candidate, without noise)")


def markdown_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """The sweep's results as a Markdown table (what benchmarks/RESULTS.md quotes): one line
    per (method, configuration, ε), mean ± sample std over seeds of validation and test
    accuracy; ``*`` marks the configuration chosen on validation for its (method, ε).
    Sorted by method, ε, then configuration."""
    chosen = {(b["method"], b["epsilon"], b["config_id"])
              for b in best_per_method_and_epsilon([r for r in rows if not r.get("refused")])}
    refused = {(r["method"], r["config_id"], r["epsilon"]) for r in rows if r.get("refused")}

    def cell(rec: Mapping[str, Any], k: str) -> str:
        m, s = rec[f"{k}_mean"], rec[f"{k}_std"]
        if math.isnan(m) and (rec["method"], rec["config_id"], rec["epsilon"]) in refused:
            return "refused (budget)"
        return "-" if math.isnan(m) else f"{m:.3f} ± {s:.3f}"

    def options(config: Mapping[str, Any]) -> str:
        shown = {k: v for k, v in sorted(config.items()) if k != "method"}
        return ", ".join(f"{k}={v}" for k, v in shown.items()) or "defaults"

    lines = ["| method | options | ε | seeds | val accuracy | test accuracy |",
             "|---|---|---|---|---|---|"]
    recs = sorted(aggregate(rows), key=lambda r: (
        r["method"], math.inf if r["epsilon"] is None else r["epsilon"],
        options(r["config"])))
    for rec in recs:
        star = " *" if (rec["method"], rec["epsilon"], rec["config_id"]) in chosen else ""
        eps = "∞ (non-private)" if rec["epsilon"] is None else f"{rec['epsilon']:g}"
        lines.append(f"| {rec['method']}{star} | {options(rec['config'])} | {eps} | "
                     f"{rec['seeds']} | {cell(rec, 'val_accuracy')} | "
                     f"{cell(rec, 'test_accuracy')} |")
    return "\n".join(lines) + "\n"
