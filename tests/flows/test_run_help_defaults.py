"""`dpgnn run NAME --help` states the defaults a run of NAME uses (issue 52 §5: DPDGC's help
said hops default to 2 at k-neighbour and node_feature level; the runs used 3)."""

from __future__ import annotations

import re
from typing import Any

from dpgnn_core.methods.catalog import spec_types
from dpgnn_core.specs.base import _words
from flows.cli import app
from tests.flows.clirunner import CliRunner


def _help_line(name: str, option: str) -> str:
    """The help text of ``option`` in ``dpgnn run NAME --help``, on one line."""
    r = CliRunner().invoke(app, ["run", name, "--help"], env={"COLUMNS": "400"})
    assert r.exit_code == 0, r.output
    (line,) = [ln for ln in r.output.splitlines() if re.search(rf"{option}\s", ln)]
    return " ".join(line.strip("│ ").split())


def test_dpdgc_help_gives_the_hops_each_level_runs_with() -> None:
    assert "(default: 1 for dpdgc-ndp)" in _help_line("dpdgc-ndp", "--hops")
    fdp = _help_line("dpdgc-fdp", "--hops")
    assert "(default: 3 for dpdgc-fdp; 1 with messages = adjacency)" in fdp
    assert "default: 2" not in fdp
    assert "(default: 1, 0.1, 1 for dpdgc-ndp; 1, 1, 1 with messages = adjacency)" in \
        _help_line("dpdgc-ndp", "--budget-split")


def _spec(spec_type: Any, name: str, **given: Any) -> Any:
    """A spec of ``name`` with only what it requires (a target ε at a private level, a
    degree bound at node level)."""
    level = {n: lv for lv, n in spec_type.level_names.items()}[name]
    required: dict[str, Any] = {"epsilon": 1.0} if level != "none" else {}
    if level == "node":
        required["max_degree"] = 5
    return spec_type(method=name, **required, **given)


def test_every_level_decided_default_in_the_help_is_the_runs() -> None:
    """For every levelled family (GAP, ProGAP, DPDGC), every name and every field its
    level decides: the default the help states is the value of a spec that leaves the
    field out (and so for each variant input, DPDGC's adjacency messages)."""
    checked = 0
    for name, spec_type in spec_types().items():
        if name not in spec_type.level_names.values():
            continue
        for field in spec_type.model_fields:
            note = spec_type.default_note(name, field)
            if note is None:
                continue
            stated, *variants = note.split("; ")
            assert stated == f"{_words(getattr(_spec(spec_type, name), field))} for {name}"
            for v in variants:
                value, given = v.split(" with ")
                k, x = given.split(" = ")
                assert value == _words(getattr(_spec(spec_type, name, **{k: x}), field))
            checked += 1
    assert checked >= 20  # GAP's and ProGAP's module recipes, DPDGC's label recipe
