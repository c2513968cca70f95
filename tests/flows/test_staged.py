"""A staged method is data in the catalogue (``staged``) and stages its module declares
(dpgnn_core/methods/_staged.py); one runner (tasks/staged.py) runs any of them."""

from __future__ import annotations

import pytest

from dpgnn_core.methods.catalog import CATALOG
from dpgnn_core.methods.registry import declared, get
from dpgnn_core.specs import DpdgcSpec, GapSpec, ProgapSpec


def test_every_staged_entry_declares_its_stages() -> None:
    staged = {e.family for e in CATALOG.values() if e.staged}
    assert staged == {"gap", "progap", "dpdgc"}
    # declared() imports the family's module itself (issue 52 §5): no earlier get() needed
    assert {declared(f).family for f in staged} == staged


def test_declared_loads_its_family_in_a_fresh_interpreter() -> None:
    """Issue 52 §5: ``declared("progap")`` raised KeyError unless something had imported
    ProGAP's module before (the test above passed only after another test had). A fresh
    interpreter has imported nothing: the lookup alone must load the family."""
    import subprocess
    import sys

    code = ("import sys\n"
            "from dpgnn_core.methods.registry import declared\n"
            "assert 'dpgnn_core.methods.progap' not in sys.modules\n"
            "print(declared('progap').family, declared('gap').family)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["progap", "gap"]
    with pytest.raises(KeyError, match="unknown method family"):
        declared("no-such-family")
    with pytest.raises(KeyError, match="declares no stages"):
        declared("dp-mlp")


def test_stages_read_only_earlier_stages_and_the_last_is_train() -> None:
    names: dict[str, list[str]] = {}
    for family, spec in (("gap", GapSpec(method="gap-ndp", epsilon=1.0, max_degree=5)),
                         ("progap", ProgapSpec(method="progap-ndp", epsilon=1.0, stages=2,
                                               max_degree=5)),
                         ("dpdgc", DpdgcSpec(method="dpdgc-edp", epsilon=1.0,
                                             messages="adjacency")),
                         ("dpdgc", DpdgcSpec(method="dpdgc-ndp", epsilon=1.0, max_degree=5,
                                             messages="labels"))):
        get(spec.method)
        stages = declared(family).stages(spec, 1.0)
        seen = {"calibrate"}
        for stage in stages:
            for src in stage.reads.values():
                srcs = src if isinstance(src, tuple) else () if src is None else (src,)
                assert set(srcs) <= seen, (stage.name, srcs)
            seen.add(stage.name)
        assert stages[-1].name == "train" and len(seen) == len(stages) + 1
        names[spec.method] = [s.name for s in stages]
    assert names["progap-ndp"] == ["graph", "stage0", "aggregate1", "stage1", "aggregate2",
                                   "stage2", "train"]
    # DPDGC: each private release its own stage (no encoder with label messages)
    assert names["dpdgc-edp"] == ["encoder", "aggregate", "train"]
    assert names["dpdgc-ndp"] == ["aggregate", "train"]
