"""Sweeps without Prefect: point expansion, validation, aggregation, selection on
validation, spec files and plots."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path
from typing import Any

import pytest

from dpgnn_core import plots
from dpgnn_core.errors import DataError
from dpgnn_core.specs import IngestSpec
from dpgnn_core.sweeps import (
    MethodSearch,
    SweepSpec,
    aggregate,
    best_per_method_and_epsilon,
    duplicate_points,
    load_sweep_spec,
    markdown_table,
    points,
)

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _spec(**kw: Any) -> SweepSpec:
    return SweepSpec(**{"name": "t", "dataset": "ds", **kw})


# --- point expansion ----------------------------------------------------------------------


def test_grid_times_epsilons_times_seeds() -> None:
    sweep = _spec(epsilons=[1, 4], seeds=[0, 1, 2], methods=[
        {"method": "dp-mlp", "grid": {"lr": [1e-3, 1e-2], "hidden": [8, 16, 32]},
         "fixed": {"steps": 10}},
        {"method": "mlp", "grid": {"epochs": [5, 10]}}])
    pts = points(sweep)
    private = [p for p in pts if p.method == "dp-mlp"]
    reference = [p for p in pts if p.method == "mlp"]
    assert len(private) == 2 * 3 * 2 * 3  # grid (2 × 3) × ε (2) × seeds (3)
    assert len(reference) == 2 * 3  # grid × seeds: a non-private method gets no ε
    assert len(pts) == 36 + 6
    assert {p.epsilon for p in reference} == {None}
    assert all(getattr(p.spec, "epsilon", None) is None for p in reference)
    assert {p.epsilon for p in private} == {1.0, 4.0}
    # every point's spec is its method's, carrying the point's options, ε and seed
    for p in private:
        assert p.spec.method == "dp-mlp" and p.spec.steps == 10
        assert p.spec.epsilon == p.epsilon and p.spec.seed == p.seed
        assert p.spec.lr == p.config["lr"] and p.spec.hidden == p.config["hidden"]
    # one configuration id per grid cell, shared by its ε and seeds
    assert len({p.config_id for p in private}) == 6
    assert len({(p.config_id, p.epsilon, p.seed) for p in pts}) == len(pts)


@pytest.mark.parametrize(("kw", "distinct", "listed"), [
    ({"seeds": [0, 0]}, 2, 2),  # dp-mlp at ε = 1, mlp: each listed twice
    ({"seeds": [0, 1, 0]}, 4, 2),
    ({"seeds": [0], "grid": [1e-3, 1e-3, 1e-2]}, 3, 1),  # dp-mlp at lr = 1e-3
])
def test_a_point_listed_twice_runs_once_and_is_named(kw: dict[str, Any], distinct: int,
                                                     listed: int) -> None:
    """Trained twice, a repeated point would be two releases with fresh noise (each
    charged): it runs once, and the sweep says so."""
    grid = {"lr": kw["grid"]} if "grid" in kw else {}
    sweep = _spec(epsilons=[1], seeds=kw["seeds"], methods=[
        {"method": "dp-mlp", "grid": grid}, {"method": "mlp"}])
    pts = points(sweep)
    assert len(pts) == distinct
    keys = [(p.method, json.dumps(p.spec.model_dump(mode="json"), sort_keys=True))
            for p in pts]
    assert len(set(keys)) == len(keys)
    notes = duplicate_points(sweep)
    assert len(notes) == listed and all("runs once" in n for n in notes)
    assert any("dp-mlp" in n and "ε = 1" in n for n in notes)
    assert duplicate_points(_spec(epsilons=[1], methods=[{"method": "mlp"}])) == []


def test_random_search_is_reproducible_from_search_seed() -> None:
    def draw(search_seed: int) -> list[dict[str, Any]]:
        sweep = _spec(epsilons=[2], search_seed=search_seed, methods=[{
            "method": "dp-mlp", "samples": 5, "grid": {"hidden": [8, 16]},
            "random": {"lr": {"log_uniform": [1e-4, 1e-1]},
                       "clip": {"uniform": [0.5, 2.0]},
                       "layers": {"int_uniform": [1, 3]},
                       "batch_size": {"choice": [32, 64]}}}])
        return [p.config for p in points(sweep)]

    first, again, other = draw(7), draw(7), draw(8)
    assert len(first) == 2 * 5  # grid × samples (× 1 ε × 1 seed)
    assert first == again
    assert first != other
    for c in first:
        assert 1e-4 <= c["lr"] <= 1e-1 and 0.5 <= c["clip"] <= 2.0
        assert c["layers"] in (1, 2, 3) and c["batch_size"] in (32, 64)
    # the draws are combined with every grid cell
    assert {c["hidden"] for c in first} == {8, 16}


def test_random_options_need_samples_and_one_distribution() -> None:
    with pytest.raises(ValueError, match="samples"):
        MethodSearch(method="dp-mlp", random={"lr": {"uniform": [0.1, 0.2]}})
    with pytest.raises(ValueError, match="exactly one"):
        MethodSearch(method="dp-mlp", samples=1,
                     random={"lr": {"uniform": [0.1, 0.2], "choice": [1]}})
    with pytest.raises(ValueError, match="low > high"):
        MethodSearch(method="dp-mlp", samples=1, random={"lr": {"uniform": [0.2, 0.1]}})


def test_option_a_method_does_not_take_is_named() -> None:
    with pytest.raises(DataError) as e:
        points(_spec(epsilons=[1], methods=[{"method": "dp-mlp",
                                              "grid": {"max_degree": [3, 7]}}]))
    assert "dp-mlp does not take max_degree" in str(e.value)
    # an option implied by the method's name is not the method's to take either
    with pytest.raises(DataError, match="dp-gcn does not take conv"):
        points(_spec(epsilons=[1], methods=[{"method": "dp-gcn",
                                              "fixed": {"conv": "sage"}}]))


@pytest.mark.parametrize("key,value", [("epsilon", 3.0), ("seed", 5)])
def test_epsilon_and_seed_per_method_are_refused(key: str, value: Any) -> None:
    with pytest.raises(DataError) as e:
        points(_spec(epsilons=[1], methods=[{"method": "dp-mlp", "fixed": {key: value}}]))
    assert e.value.field == key and f"{key}s" in str(e.value)
    with pytest.raises(DataError) as e:
        points(_spec(epsilons=[1], methods=[{"method": "dp-mlp", "grid": {key: [value]}}]))
    assert e.value.field == key


def test_a_bad_value_names_the_field() -> None:
    with pytest.raises(DataError) as e:
        points(_spec(epsilons=[1], methods=[{"method": "dp-mlp", "grid": {"lr": [1e-2, -1.0]}}]))
    assert e.value.field == "lr" and e.value.value == -1.0
    assert str(e.value).startswith("dp-mlp: ") and "'lr'" in str(e.value)
    with pytest.raises(DataError) as e:
        points(_spec(methods=[{"method": "mlp", "fixed": {"epochs": 0}}]))
    assert e.value.field == "epochs"


def test_sweep_level_checks() -> None:
    with pytest.raises(ValueError, match="need epsilons"):
        _spec(methods=[{"method": "dp-mlp"}])
    with pytest.raises(ValueError, match="epsilons must be"):
        _spec(epsilons=[0], methods=[{"method": "dp-mlp"}])
    with pytest.raises(ValueError, match="unknown method"):
        _spec(methods=[{"method": "no-such-method"}])
    # a sweep of non-private methods alone needs no ε
    assert len(points(_spec(methods=[{"method": "mlp"}], seeds=[0, 1]))) == 2


# --- results --------------------------------------------------------------------------------


def _row(method: str, cid: str, eps: float | None, seed: int, val: float, test: float,
         **config: Any) -> dict[str, Any]:
    return {"method": method, "config_id": cid, "epsilon": eps, "seed": seed,
            "val_accuracy": val, "test_accuracy": test, "config": config}


def test_aggregate_mean_and_sample_std_by_hand() -> None:
    rows = [_row("dp-mlp", "a", 1.0, s, v, t, lr=0.1)
            for s, v, t in [(0, 0.50, 0.40), (1, 0.60, 0.44), (2, 0.70, 0.54)]]
    rows += [_row("dp-mlp", "a", 4.0, 0, 0.8, 0.75, lr=0.1),
             _row("mlp", "m", None, 0, 0.9, float("nan")),
             _row("mlp", "m", None, 1, 0.8, 0.85)]
    agg = {(a["method"], a["config_id"], a["epsilon"]): a for a in aggregate(rows)}
    assert len(agg) == 3
    a = agg[("dp-mlp", "a", 1.0)]
    assert a["seeds"] == 3 and a["config"] == {"lr": 0.1}
    assert a["val_accuracy_mean"] == pytest.approx(0.6)
    # sample std (n - 1): sqrt(((-.1)² + 0 + .1²) / 2) = 0.1
    assert a["val_accuracy_std"] == pytest.approx(0.1)
    assert a["test_accuracy_mean"] == pytest.approx((0.40 + 0.44 + 0.54) / 3)
    assert a["test_accuracy_std"] == pytest.approx(statistics.stdev([0.40, 0.44, 0.54]))
    one = agg[("dp-mlp", "a", 4.0)]  # one seed: std 0
    assert one["val_accuracy_std"] == 0.0 and one["test_accuracy_mean"] == pytest.approx(0.75)
    m = agg[("mlp", "m", None)]  # a NaN is left out of the mean, not propagated
    assert m["val_accuracy_mean"] == pytest.approx(0.85)
    assert m["test_accuracy_mean"] == pytest.approx(0.85) and m["test_accuracy_std"] == 0.0


def test_markdown_table_means_stds_and_the_chosen_row() -> None:
    rows = [_row("dp-mlp", "a", 4.0, s, v, t, lr=0.1)
            for s, v, t in [(0, 0.50, 0.40), (1, 0.60, 0.44), (2, 0.70, 0.54)]]
    rows += [_row("dp-mlp", "b", 4.0, s, 0.55, 0.9, lr=0.01) for s in range(3)]
    rows += [_row("mlp", "m", None, 0, 0.9, 0.8)]
    lines = markdown_table(rows).splitlines()
    assert lines[0].startswith("| method | options | ε | seeds |") and len(lines) == 5
    # sorted by method, ε, options; the chosen configuration (validation 0.60 > 0.55, even
    # though its test accuracy is lower) is starred
    assert lines[2] == "| dp-mlp | lr=0.01 | 4 | 3 | 0.550 ± 0.000 | 0.900 ± 0.000 |"
    assert lines[3] == "| dp-mlp * | lr=0.1 | 4 | 3 | 0.600 ± 0.100 | 0.460 ± 0.072 |"
    assert lines[4] == "| mlp * | defaults | ∞ (non-private) | 1 | 0.900 ± 0.000 | 0.800 ± 0.000 |"


def test_best_is_chosen_on_validation_never_on_test() -> None:
    # At ε = 1, config "hi-val" is better on validation and worse on test; at ε = 4 the
    # other way round. Selection must follow validation both times.
    rows = []
    for s in (0, 1):
        rows += [_row("dp-mlp", "hi-val", 1.0, s, 0.80, 0.30, lr=0.1),
                 _row("dp-mlp", "hi-test", 1.0, s, 0.60, 0.95, lr=0.01),
                 _row("dp-mlp", "lo-val", 1.0, s, 0.10, 0.99, lr=0.001),
                 _row("dp-mlp", "hi-test", 4.0, s, 0.50, 0.99, lr=0.01),
                 _row("dp-mlp", "hi-val", 4.0, s, 0.70, 0.20, lr=0.1),
                 _row("mlp", "m", None, s, 0.9, 0.9)]
    best = {(b["method"], b["epsilon"]): b for b in best_per_method_and_epsilon(rows)}
    assert set(best) == {("dp-mlp", 1.0), ("dp-mlp", 4.0), ("mlp", None)}
    assert best[("dp-mlp", 1.0)]["config_id"] == "hi-val"
    assert best[("dp-mlp", 1.0)]["candidates"] == 3
    assert best[("dp-mlp", 4.0)]["config_id"] == "hi-val"
    assert best[("dp-mlp", 4.0)]["candidates"] == 2
    assert best[("mlp", None)]["candidates"] == 1
    # a configuration without validation accuracy never beats one with it
    rows2 = [_row("dp-mlp", "nan", 1.0, 0, float("nan"), 1.0),
             _row("dp-mlp", "ok", 1.0, 0, 0.2, 0.1)]
    assert best_per_method_and_epsilon(rows2)[0]["config_id"] == "ok"
    rows2.reverse()
    assert best_per_method_and_epsilon(rows2)[0]["config_id"] == "ok"


# --- spec files -----------------------------------------------------------------------------

TOML = """
name = "cora-eps"
dataset = "data/cora"
epsilons = [1, 4]
seeds = [0, 1]

[[methods]]
method = "dp-mlp"
grid = {lr = [3e-3, 1e-2]}
fixed = {steps = 30}

[[methods]]
method = "mlp"
"""

YAML = """
name: cora-eps
dataset: data/cora
epsilons: [1, 4]
seeds: [0, 1]
methods:
  - method: dp-mlp
    grid: {lr: [0.003, 0.01]}
    fixed: {steps: 30}
  - method: mlp
"""


@pytest.mark.parametrize("suffix", [".toml", ".yaml", ".yml", ".json"])
def test_load_spec_files(tmp_path: Path, suffix: str) -> None:
    expected = SweepSpec(name="cora-eps", dataset="data/cora", epsilons=[1, 4], seeds=[0, 1],
                         methods=[{"method": "dp-mlp", "grid": {"lr": [3e-3, 1e-2]},
                                   "fixed": {"steps": 30}}, {"method": "mlp"}])
    text = {".toml": TOML, ".yaml": YAML, ".yml": YAML,
            ".json": json.dumps(expected.model_dump(mode="json"))}[suffix]
    path = tmp_path / f"sweep{suffix}"
    path.write_text(text)
    spec = load_sweep_spec(path)
    assert spec == expected
    assert len(points(spec)) == 2 * 2 * 2 + 2


@pytest.mark.parametrize("name,text,says", [
    ("broken.toml", "name = \n", "cannot parse"),
    ("broken.yaml", "name: [unclosed\n", "cannot parse"),
    ("broken.json", "{\"name\": ", "cannot parse"),
    ("list.json", "[1, 2]", "a sweep spec is a mapping"),
    ("fields.toml", "name = \"x\"\ndataset = \"d\"\nepsilons = [1]\n"
     "[[methods]]\nmethod = \"dp-mlp\"\nbogus = 1\n", "Extra inputs"),
    ("eps.toml", "name = \"x\"\ndataset = \"d\"\n[[methods]]\nmethod = \"dp-mlp\"\n",
     "need epsilons"),
    ("missing.toml", None, "cannot read"),
])
def test_a_bad_spec_file_is_one_line_naming_the_file(tmp_path: Path, name: str,
                                                     text: str | None, says: str) -> None:
    path = tmp_path / name
    if text is not None:
        path.write_text(text)
    with pytest.raises(DataError) as e:
        load_sweep_spec(path)
    msg = str(e.value)
    assert "\n" not in msg and says in msg and f"file {path}" in msg
    assert e.value.path == str(path)


def test_dataset_may_be_an_ingest_table(tmp_path: Path) -> None:
    path = tmp_path / "s.toml"
    path.write_text('name = "x"\nepsilons = [1]\n[dataset]\nformat = "planetoid"\n'
                    'source = "raw/Cora"\noptions = {fractions = [0.75, 0.1, 0.15]}\n'
                    '[[methods]]\nmethod = "dp-mlp"\n')
    spec = load_sweep_spec(path)
    assert isinstance(spec.dataset, IngestSpec)
    assert spec.dataset.options == {"fractions": [0.75, 0.1, 0.15]}
    assert len(points(spec)) == 1


@pytest.mark.parametrize("table,field,says", [
    ('format = "nope"\nsource = "a"', "dataset.format", "'planetoid'"),
    ('format = "planetoid"', "dataset", "needs a source path"),
    ('format = "planetoid"\nsource = "a"\nbogus = 1', "dataset.bogus", "Extra inputs"),
])
def test_a_bad_ingest_table_names_its_field(tmp_path: Path, table: str, field: str,
                                            says: str) -> None:
    path = tmp_path / "s.toml"
    path.write_text(f'name = "x"\n[dataset]\n{table}\n[[methods]]\nmethod = "mlp"\n')
    with pytest.raises(DataError) as e:
        load_sweep_spec(path)
    assert e.value.field == field and says in str(e.value)
    assert "valid string" not in str(e.value)  # not the folder form's complaint


def test_a_bad_field_in_a_spec_file_is_named(tmp_path: Path) -> None:
    path = tmp_path / "s.toml"
    path.write_text("name = \"x\"\ndataset = \"d\"\nseeds = []\n[[methods]]\nmethod = \"mlp\"\n")
    with pytest.raises(DataError) as e:
        load_sweep_spec(path)
    assert e.value.field == "seeds"


# --- plots ----------------------------------------------------------------------------------


def _sweep_rows() -> list[dict[str, Any]]:
    rows = []
    for s in (0, 1):
        for eps in (1.0, 4.0, 8.0):
            for lr in (1e-3, 1e-2):
                v = 0.5 + 0.04 * math.log(eps) + (0.05 if lr == 1e-2 else 0) + 0.01 * s
                rows.append(_row("dp-mlp", f"dp-mlp[lr={lr}]", eps, s, v, v - 0.02, lr=lr))
        rows.append(_row("mlp", "mlp", None, s, 0.9, 0.88 + 0.01 * s))
    return rows


def test_plots_write_png(tmp_path: Path) -> None:
    rows = _sweep_rows()
    pu = plots.privacy_utility(rows, tmp_path / "pu.png", title="t")
    assert pu == tmp_path / "pu.png" and pu.read_bytes()[:8] == PNG_MAGIC
    hp = plots.hyperparameters(rows, tmp_path / "hp.png")
    assert hp == tmp_path / "hp.png" and hp.read_bytes()[:8] == PNG_MAGIC
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hp.png", "pu.png"]  # no temp left


def test_hyperparameter_plot_is_none_when_nothing_varies(tmp_path: Path) -> None:
    rows = [r for r in _sweep_rows() if r["config"].get("lr") in (None, 1e-2)]
    assert plots.hyperparameters(rows, tmp_path / "hp.png") is None
    assert not (tmp_path / "hp.png").exists()
    # the privacy-utility plot is still drawn, also with only non-private references
    only_ref = [r for r in rows if r["epsilon"] is None]
    path = plots.privacy_utility(only_ref, tmp_path / "pu.png")
    assert path.read_bytes()[:8] == PNG_MAGIC


def test_hyperparameter_plot_takes_list_and_mixed_option_values(tmp_path: Path) -> None:
    """A GAP budget split is a list, and a grid may mix numbers with None: the sweep's
    results must still be written (this crashed after every point had run)."""
    rows = [_row("gap-edp", f"c{i}", 4.0, 0, 0.5 + 0.1 * i, 0.5, budget_split=split,
                 max_degree=d)
            for i, (split, d) in enumerate([([0.5, 0.5], None), ([0.2, 0.8], 10),
                                            ([0.5, 0.5], 10)])]
    path = plots.hyperparameters(rows, tmp_path / "hp.png")
    assert path is not None and path.read_bytes()[:8] == PNG_MAGIC


def test_hyperparameter_plot_shows_a_default_beside_set_values(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch
                                                               ) -> None:
    """A method swept against its defaults (an option unset in one configuration): the
    panel is categorical with a "default" tick and every point on it (a log axis for lr
    used to hide the set value and place "None" at 1)."""
    rows = [_row("drw-gcn", "drw-gcn", 8.0, 0, 0.32, 0.3),
            _row("drw-gcn", "drw-gcn[lr=0.02]", 8.0, 0, 0.59, 0.6, lr=0.02)]
    drawn: list[Any] = []
    real_save = plots._save

    def keep(plt: Any, fig: Any, path: Any) -> Any:
        drawn.append(fig)
        return real_save(plt, fig, path)

    monkeypatch.setattr(plots, "_save", keep)
    assert plots.hyperparameters(rows, tmp_path / "hp.png") is not None
    (ax,) = [a for a in drawn[0].axes if a.get_title() == "drw-gcn: lr"]
    assert ax.get_xscale() == "linear"
    assert [t.get_text() for t in ax.get_xticklabels()] == ["0.02", "default"]
    (line,) = ax.get_lines()
    assert list(line.get_ydata()) == [0.59, 0.32]
