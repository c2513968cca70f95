"""Adding a method is two source files (docs/adding-a-method.md), and the catalogue reads the
specs' typed entries: the walk-through's two listings, written as they are into a package of
their own and added to the catalogue (``catalog.add``, what listing them in
``dpgnn_core.specs.CATALOGUE`` does in the tree), give a method that is in the catalogue and
the registry, declares its sensitivity check,
validates from a mapping, passes the pre-flight and trains through ``Method.fit``; the
pre-flight of a node-level method imports no torch."""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from dpgnn_core.data.store import write_dataset
from dpgnn_core.data.synthetic import csbm
from dpgnn_core.errors import DataError
from dpgnn_core.methods import catalog, preflight, registry
from dpgnn_core.privacy import PrivacyError
from dpgnn_core.specs import CATALOGUE, DpdgcSpec, GapSpec, ProgapSpec, base, parse_spec

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "adding-a-method.md"
NAME = "dp-logreg"


def listings() -> dict[str, str]:
    """The walk-through's Python listings that name their file on their first line."""
    blocks = re.findall(r"```python\n# (\S+\.py)\n(.*?)```", DOC.read_text(), re.S)
    return {path: code for path, code in blocks}


@pytest.fixture
def two_files(tmp_path: Path) -> Iterator[ModuleType]:
    """The walk-through's spec and method modules under a package of their own (``ext``
    for ``dpgnn_core``), the spec module's entries added to the catalogue (the method
    module is imported by the registry, by the name its entry gives); what they added is
    taken out of the catalogue, the registry and the record of spec classes afterwards."""
    pkg = f"ext_{tmp_path.name.replace('-', '_')}"
    files = listings()
    assert sorted(files) == ["dpgnn_core/methods/dp_logreg.py", "dpgnn_core/specs/dp_logreg.py"]
    for path, code in files.items():
        target = tmp_path / path.replace("dpgnn_core", pkg)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(code.replace("dpgnn_core.specs.dp_logreg", f"{pkg}.specs.dp_logreg")
                          .replace("dpgnn_core.methods.dp_logreg", f"{pkg}.methods.dp_logreg"))
    assert len([p for p in tmp_path.rglob("*") if p.is_file()]) == 2  # two source files
    sys.path.insert(0, str(tmp_path))
    try:
        catalog.add(*__import__(f"{pkg}.specs.dp_logreg", fromlist=["ENTRIES"]).ENTRIES)
        assert f"{pkg}.methods.dp_logreg" not in sys.modules  # nothing imported it yet
        yield __import__(f"{pkg}.methods.dp_logreg", fromlist=["train"])
    finally:
        sys.path.remove(str(tmp_path))
        for mod in [m for m in sys.modules if m.split(".")[0] == pkg]:
            del sys.modules[mod]
        catalog._CATALOG.pop(NAME, None)
        registry._REGISTRY.pop(NAME, None)
        base._BY_NAME.pop(NAME, None)


def test_two_files_make_a_method(two_files: ModuleType, tmp_path: Path) -> None:
    spec_type = two_files.DpLogregSpec
    e = catalog.entry(NAME)  # the entry written beside the spec
    assert (e.family, e.task, e.private, e.module) == (
        "dp-logreg", "node", True, two_files.__name__)
    assert e.spec_type is spec_type and dict(e.fixed) == {"method": NAME}
    m = registry.get(NAME)  # the registry read the method module's IMPLEMENTATION
    assert m.entry is e and m.spec_type is spec_type
    assert m._build is two_files.build
    # with its sensitivity check, which the sensitivity contract runs; without one, a
    # private family is refused
    checked = registry.check_sensitivity(m)
    assert len(checked) == 1 and all(case.observed <= bound * (1 + 1e-4)
                                     for cases in checked.values() for case, bound in cases)
    with pytest.raises(PrivacyError, match="declares no sensitivity check"):
        registry.check_sensitivity(dataclasses.replace(m, sensitivity=()))
    spec = parse_spec({"method": NAME, "epsilon": 2.0, "steps": 3, "device": "cpu",
                       "accountant": "rdp"})
    assert type(spec) is spec_type and registry.method_for(spec) is m

    data = csbm(num_nodes=120, num_classes=3, feature_dim=4, seed=3)
    write_dataset(data, tmp_path / "ds")
    manifest = {**json.loads((tmp_path / "ds" / "manifest.json").read_text()),
                "path": str(tmp_path / "ds")}
    assert m.preflight(spec, manifest) == []
    assert preflight.release_levels(spec) == (("node", "add_remove"),)
    with pytest.raises(DataError, match="feature_dim"):  # the family's check, from its entry
        preflight.check(spec, {**manifest, "feature_dim": 0})

    fitted = m.fit(data, spec)
    assert fitted.report.epsilon <= 2.0 + 1e-9 and fitted.report.level == "node"
    assert len(fitted.history) == 3 and fitted.history[-1]["epsilon_spent"] <= 2.0 + 1e-9
    assert fitted.ledger == m.ledger_for(spec, int(data.mask("train").sum()))(
        fitted.report.noise_multiplier)
    m.save(str(tmp_path / "model.pt"), fitted, spec, data)
    import torch

    method, model, stored = registry.load_blob(
        torch.load(tmp_path / "model.pt", weights_only=False))
    assert method is m and stored == spec
    assert m.evaluate(model, data, spec) == m.evaluate(fitted.model, data, spec)


def test_the_catalogue_reads_the_specs_names_and_levels() -> None:
    for spec_type in (GapSpec, ProgapSpec, DpdgcSpec):
        for level, name in spec_type.level_names.items():
            assert dict(catalog.entry(name).fixed) == {"method": name, "level": level}
            assert spec_type(method=name, **({"epsilon": 1.0} if level != "none" else {}),
                             **({"max_degree": 3} if level == "node" else {})).level == level
    with pytest.raises(ValueError, match="takes"):  # a name its spec class does not take
        dataclasses.replace(catalog.entry("gap-edp"), name="gap-xdp")
    assert "gap-xdp" not in catalog.CATALOG


def test_an_entry_is_typed() -> None:
    """Issue 50 §6: a misspelt field of a catalogue entry fails where it is written (the
    untyped ``Family.common`` dict once let ``release`` through to a traceback at ``dpgnn
    run dp-mlp --help``); the shipped entries are the explicit list of the specs."""
    e = catalog.entry("dp-mlp")
    with pytest.raises(TypeError, match="release"):
        dataclasses.replace(e, release=("node", "add_remove"))  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="release"):
        catalog.Entry(name="dp-mlp", family="dp-mlp", spec_type=e.spec_type,  # type: ignore[call-arg]
                      module=e.module, task="node", private=True, protection="",
                      release=("node", "add_remove"))
    assert tuple(catalog.CATALOG.values())[:len(CATALOGUE)] == CATALOGUE
    with pytest.raises(ValueError, match="in the catalogue already"):
        catalog.add(e)


def test_the_node_level_preflight_imports_no_torch(tmp_path: Path) -> None:
    """DPDGC-NDP's pre-flight (its degree check reads the edge list) in a fresh process:
    it refuses a graph beyond D and passes one within, and torch is never imported."""
    write_dataset(csbm(num_nodes=60, avg_degree=4, feature_dim=4, seed=1), tmp_path / "ds")
    code = f"""
import json, sys
from dpgnn_core.errors import DataError
from dpgnn_core.methods import preflight
from dpgnn_core.specs import DpdgcSpec
folder = {str(tmp_path / "ds")!r}
manifest = {{**json.load(open(folder + "/manifest.json")), "path": folder}}
preflight.check(DpdgcSpec(level="node", max_degree=60, epsilon=4.0), manifest)
try:
    preflight.check(DpdgcSpec(level="node", max_degree=1, epsilon=4.0), manifest)
    sys.exit("a degree above D passed")
except DataError as e:
    assert "D = 1" in str(e), e
assert "torch" not in sys.modules, "the pre-flight imported torch"
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=REPO, timeout=120)
    assert out.returncode == 0, out.stderr + out.stdout
