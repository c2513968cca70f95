"""`dpgnn run METHOD` offers exactly the spec fields that METHOD uses (issue 27 §4): the
spec's ``applies_when`` says which names of a shared spec class (GAP's levels, DRW's
variants) use a field; an option of another name is one clear error line."""

from __future__ import annotations

import typing
from typing import Any

import pytest

from dpgnn_core.distributed import PARTITIONED_FAMILIES
from dpgnn_core.methods.catalog import CATALOG
from flows.cli import app
from tests.flows.clirunner import CliRunner, click_command

runner = CliRunner()
#: The run's own options (beside the spec's), on every method.
GENERAL = {"--dataset", "--config", "--set", "--tracking-uri", "--experiment", "--refresh",
           "--json", "--help"}
#: Spec fields that only a private name offers.
PRIVACY = {"epsilon", "delta", "accountant", "noise_multiplier", "clip",
           "insecure_reproducible_noise", "log_raw_loss", "allow_large_delta"}


def _flag(field: str) -> str:
    return f"--{field.replace('_', '-')}"


def _click_app() -> Any:
    return click_command(app)


def _command_options(group: str, name: str) -> set[str]:
    command = _click_app().commands[group].commands[name]
    return {o for p in command.params for o in p.opts if o.startswith("--")} | {"--help"}


def _spec_options(name: str) -> set[str]:
    """The spec fields of ``name`` that it uses, read from its spec class."""
    e = CATALOG[name]
    spec = e.spec_type
    out = set()
    for field in spec.model_fields:
        if field == "method" or field in spec.implied or (
                not e.private and field in PRIVACY):
            continue
        conditions = spec.applies_when.get(field, {})
        if all(e.fixed.get(k) in values for k, values in conditions.items()):
            out.add(_flag(field))
    return out


def _help_options(output: str) -> set[str]:
    import re

    return set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", output))


@pytest.mark.parametrize("name", sorted(CATALOG))
def test_run_help_lists_exactly_the_methods_spec_options(name: str) -> None:
    e = CATALOG[name]
    spec = e.spec_type
    general = set(GENERAL)
    if e.private and spec.has_non_private_mode:
        general.add("--non-private")
    if spec.explains:
        general.add("--explain-graphs")
    if not e.private or spec.has_non_private_mode or spec.explains:
        general.add("--allow-non-private-release")
    if e.family in PARTITIONED_FAMILIES:
        general |= {"--workers", "--worker-memory", "--dask-address"}
    assert _command_options("run", name) == _spec_options(name) | general
    r = runner.invoke(app, ["run", name, "--help"], env={"COLUMNS": "400"})
    assert r.exit_code == 0, r.output
    listed = {o for o in _help_options(r.output) if o in _command_options("run", name)}
    assert listed == _command_options("run", name)


@pytest.mark.parametrize(("name", "has", "lacks"), [
    ("gap-inf", {"--hops", "--epochs", "--batch-size", "--lr"},
     {"--max-degree", "--row-clip", "--budget-split", "--steps", "--clip", "--epsilon"}),
    ("gap-ndp", {"--max-degree", "--row-clip", "--budget-split", "--steps", "--clip"},
     {"--epochs", "--noise-multiplier"}),
    ("gap-edp", {"--epochs", "--row-clip", "--epsilon"},
     {"--max-degree", "--budget-split", "--steps", "--clip", "--noise-multiplier"}),
    ("progap-inf", {"--stages", "--epochs"}, {"--max-degree", "--row-clip", "--steps"}),
    ("progap-ndp", {"--max-degree", "--row-clip", "--steps", "--clip"}, {"--epochs"}),
    ("dpdgc-kndp", {"--k", "--steps", "--adj-steps", "--budget-split"},
     {"--max-degree", "--epochs", "--adj-epochs"}),
    ("dpdgc-inf", {"--epochs", "--adj-epochs"},
     {"--k", "--max-degree", "--adj-steps", "--budget-split", "--clip", "--steps"}),
    ("drw-gcn", {"--walk-length"}, {"--restarts", "--resample-every"}),
    ("drw-r-sage", {"--restarts"}, {"--resample-every"}),
    ("drw-d-gcn", {"--restarts", "--resample-every"}, set()),
    ("dp-gcn", {"--max-degree", "--steps", "--clip", "--level"}, {"--conv"}),
    ("graph-gcn", {"--steps", "--batch-size", "--pool"}, {"--clip", "--epsilon", "--conv"}),
    ("dp-graph-gat", {"--steps", "--clip", "--epsilon"}, {"--conv"}),
])
def test_run_help_per_name(name: str, has: set[str], lacks: set[str]) -> None:
    r = runner.invoke(app, ["run", name, "--help"], env={"COLUMNS": "400"})
    assert r.exit_code == 0, r.output
    listed = _help_options(r.output)
    assert has <= listed, has - listed
    assert not lacks & listed, lacks & listed


@pytest.mark.parametrize(("group", "args", "option", "takers"), [
    ("run", ["gap-inf", "--max-degree", "3"], "--max-degree", "gap-ndp"),
    ("run", ["gap-inf", "--row-clip", "1"], "--row-clip", "gap-edp, gap-ndp"),
    ("run", ["gap-edp", "--epsilon", "1", "--steps", "3"], "--steps", "gap-ndp"),
    ("run", ["drw-gcn", "--epsilon", "1", "--restarts", "2"], "--restarts", "drw-r-gcn"),
    ("audit", ["gap-edp", "--epsilon", "1", "--max-degree", "3"], "--max-degree", "gap-ndp"),
])
def test_option_of_another_name_is_one_line(tmp_path: Any, group: str, args: list[str],
                                            option: str, takers: str) -> None:
    r = runner.invoke(app, [group, *args, "--dataset", str(tmp_path)])
    lines = [line for line in r.output.splitlines() if line.strip()]
    assert r.exit_code == 2 and len(lines) == 1, r.output
    assert lines[0].startswith(f"error: {option} does not apply to {args[0]} ")
    assert takers in lines[0] and f"{group} {args[0]} --help" in lines[0]


def test_option_of_another_name_from_a_set_or_file(tmp_path: Any) -> None:
    r = runner.invoke(app, ["run", "gap-inf", "--set", "max_degree=3", "--dataset",
                            str(tmp_path)])
    lines = [line for line in r.output.splitlines() if line.strip()]
    assert r.exit_code == 2 and len(lines) == 1, r.output
    assert "gap-inf does not take max_degree" in lines[0]


@pytest.mark.parametrize("name", sorted(CATALOG))
def test_applies_when_names_real_fields_and_values(name: str) -> None:
    """A misspelt field, implied field or value would hide an option from every name."""
    spec = CATALOG[name].spec_type
    for field, conditions in spec.applies_when.items():
        assert field in spec.model_fields, field
        for key, values in conditions.items():
            assert key in spec.implied, key
            allowed = typing.get_args(spec.model_fields[key].annotation)
            assert set(values) <= set(allowed), (field, key, values)
