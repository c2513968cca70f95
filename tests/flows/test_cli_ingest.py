"""`dpgnn ingest`'s loader flags are generated from the loaders' option models (issue 27
§4): one flag per option of any loader, the old flag names kept, a flag of another format
refused in one line."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import pytest

from dpgnn_core.data.catalog import option_models
from flows.cli import app
from tests.flows.clirunner import CliRunner, click_command

runner = CliRunner()
#: The command's own options.
GENERAL = {"--format", "-f", "--out", "--source", "--name", "--overwrite", "--no-overwrite",
           "--option", "-o", "--json", "--help"}
#: Every flag `dpgnn ingest` had before the flags were generated (README, docs, tests).
OLD_FLAGS = {"--nodes", "--seed", "--disjoint", "--no-disjoint", "--remove-self-loops",
             "--no-remove-self-loops", "--dedupe-edges", "--no-dedupe-edges",
             "--min-class-size", "--fingerprint-merge", "--no-fingerprint-merge", "--src-col",
             "--dst-col", "--id-col", "--label-col", "--feature-cols", "--split-col",
             "--undirected", "--no-undirected", "--relabel", "--no-relabel",
             "--allow-no-edges", "--no-allow-no-edges"}


@functools.cache
def _ingest_params() -> Any:
    return click_command(app).commands["ingest"].params  # type: ignore[attr-defined]


def _flags() -> set[str]:
    return {o for p in _ingest_params() for o in (*p.opts, *p.secondary_opts)} | {"--help"}


def test_ingest_options_are_the_union_of_the_loader_option_specs() -> None:
    fields = {f for m in option_models().values() for f in m.model_fields}
    expected = {"--dedupe-edges" if f == "dedupe" else f"--{f.replace('_', '-')}"
                for f in fields}
    given = {p.opts[0] for p in _ingest_params()} - GENERAL
    assert given == expected
    assert {p.name for p in _ingest_params()} - {"format", "out", "source", "name",
                                                  "overwrite", "option", "as_json"} == fields


def test_the_old_flags_keep_their_names() -> None:
    assert OLD_FLAGS | GENERAL <= _flags()


def test_help_names_each_options_formats() -> None:
    r = runner.invoke(app, ["ingest", "--help"], env={"COLUMNS": "1000"})
    assert r.exit_code == 0, r.output
    lines = {line.split()[1]: line for line in r.output.splitlines()
             if len(line.split()) > 1 and line.split()[1].startswith("--")}
    assert "drop classes smaller than this" in lines["--min-class-size"]
    assert "(formats: facebook100)" in lines["--min-class-size"]
    assert "(formats: tu, dgl, csv, parquet)" in lines["--dedupe-edges"]
    assert "(every format)" in lines["--disjoint"]
    assert "synthetic kind=er_graphs: train, val and test graph counts" in lines["--split"]
    assert "ogb: the split scheme" in lines["--split"]


def _manifest(tmp_path: Path, out: str, *args: str) -> dict[str, Any]:
    r = runner.invoke(app, ["ingest", "-f", "synthetic", "--out", str(tmp_path / out),
                            "--json", *args])
    assert r.exit_code == 0, r.output
    return dict(json.loads(r.stdout))


@pytest.mark.parametrize(("flags", "options"), [
    (["--num-nodes", "200", "--homophily", "0.5", "--fractions", "0.5,0.25,0.25"],
     ["num_nodes=200", "homophily=0.5", "fractions=[0.5,0.25,0.25]"]),
    (["--kind", "er_graphs", "--num-graphs", "30", "--split", "20,5,5", "--p", "0.1,0.4"],
     ["kind=er_graphs", "num_graphs=30", "split=[20,5,5]", "p=[0.1,0.4]"]),
])
def test_a_flag_is_its_option(tmp_path: Path, flags: list[str], options: list[str]) -> None:
    by_flag = _manifest(tmp_path, "flag", *flags)
    by_option = _manifest(tmp_path, "opt", *[a for o in options for a in ("-o", o)])
    assert by_flag["content_sha256"] == by_option["content_sha256"]
    assert by_flag["ingest"]["spec"] == by_option["ingest"]["spec"]


@pytest.mark.parametrize(("args", "line"), [
    (["-f", "synthetic", "--min-class-size", "5"],
     "--min-class-size does not apply to --format synthetic (it applies to facebook100)"),
    (["-f", "synthetic", "-o", "kind=er_graphs", "--homophily", "0.5"],
     "--homophily does not apply to --format synthetic kind=er_graphs (it applies to "
     "synthetic)"),
    (["-f", "ogb", "--source", "SRC", "--seed", "1"], "--seed does not apply to --format ogb"),
    (["-f", "planetoid", "--source", "SRC", "--remove-self-loops"],
     "--remove-self-loops does not apply to --format planetoid"),
])
def test_a_flag_of_another_format_is_one_line(tmp_path: Path, args: list[str],
                                              line: str) -> None:
    args = [a.replace("SRC", str(tmp_path)) for a in args]
    r = runner.invoke(app, ["ingest", *args, "--out", str(tmp_path / "out")])
    lines = [x for x in r.output.splitlines() if x.strip()]
    assert r.exit_code == 2 and len(lines) == 1, r.output
    assert lines[0].startswith(f"error: {line}")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("fmt", "given", "opts", "expected"), [
    ("tu", {"disjoint": False, "dedupe": True}, {}, {"dedupe": True}),  # --no-disjoint
    ("tu", {"disjoint": False}, {"disjoint": True}, {"disjoint": False}),  # flag wins
    ("ogb", {"one_hot": False}, {}, {"one_hot": False}),
    ("ogb", {"one_hot": True}, {}, {}),
    ("planetoid", {"dedupe": False}, {}, {}),  # --no-dedupe-edges: nothing to refuse
    ("csv", {"feature_cols": "a, b,", "nodes": "n.csv"}, {},
     {"feature_cols": ["a", "b"], "nodes": "n.csv"}),
    ("dgl", {"features": "feat,deg"}, {}, {"features": ["feat", "deg"]}),
    ("synthetic", {"fractions": "0.5,0.25,0.25", "seed": 3}, {"num_nodes": 50},
     {"fractions": [0.5, 0.25, 0.25], "seed": 3, "num_nodes": 50}),
    ("synthetic", {"split": "6,2,2"}, {"kind": "er_graphs"}, {"kind": "er_graphs",
                                                              "split": [6, 2, 2]}),
    ("planetoid", {"seed": 4}, {"fractions": [0.5, 0.25, 0.25]},
     {"fractions": [0.5, 0.25, 0.25], "seed": 4}),  # once dropped silently
])
def test_loader_kwargs(fmt: str, given: dict[str, Any], opts: dict[str, Any],
                       expected: dict[str, Any]) -> None:
    from flows.cli.ingest import loader_kwargs

    assert loader_kwargs(fmt, given, opts) == expected
