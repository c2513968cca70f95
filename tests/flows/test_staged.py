"""A staged method is data in the catalogue (``staged``) and stages its module declares
(dpgnn_core/methods/_staged.py); one runner (tasks/staged.py) runs any of them."""

from __future__ import annotations

from dpgnn_core.methods._staged import declared
from dpgnn_core.methods.catalog import CATALOG
from dpgnn_core.methods.registry import get
from dpgnn_core.specs import GapSpec, ProgapSpec


def test_every_staged_entry_declares_its_stages() -> None:
    staged = {e.family for e in CATALOG.values() if e.staged}
    assert staged == {"gap", "progap"}
    get("gap-edp")  # the registry imports the method modules, which declare their stages
    assert {declared(f).family for f in staged} == staged


def test_stages_read_only_earlier_stages_and_the_last_is_train() -> None:
    for family, spec in (("gap", GapSpec(method="gap-ndp", epsilon=1.0, max_degree=5)),
                         ("progap", ProgapSpec(method="progap-ndp", epsilon=1.0, stages=2,
                                               max_degree=5))):
        get(spec.method)
        stages = declared(family).stages(spec, 1.0)
        seen = {"calibrate"}
        for stage in stages:
            for src in stage.reads.values():
                names = src if isinstance(src, tuple) else () if src is None else (src,)
                assert set(names) <= seen, (stage.name, names)
            seen.add(stage.name)
        assert stages[-1].name == "train" and len(seen) == len(stages) + 1
    assert [s.name for s in stages] == ["graph", "stage0", "aggregate1", "stage1",
                                        "aggregate2", "stage2", "train"]
