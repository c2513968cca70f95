"""A staged method is data in the catalogue (``staged``) and stages its module declares
(dpgnn_core/methods/_staged.py); one runner (tasks/staged.py) runs any of them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

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


def _tiny_dataset(folder: Any) -> dict[str, Any]:
    from dpgnn_core.data.store import write_dataset
    from dpgnn_core.data.synthetic import csbm
    from tasks.ingest import dataset_summary

    write_dataset(csbm(num_nodes=60, feature_dim=4, avg_degree=3, seed=5), folder)
    return dict(dataset_summary(folder))


def test_the_train_task_refuses_a_staged_method(tmp_path: Path) -> None:
    """Issue 50 §1: a staged method has one runner (tasks.staged.run_stages) for `dpgnn
    run`, sweep points and audits; the train task, which used to train GAP in one task for
    sweeps and audits (another artifact layout, another cache), refuses it before any
    training."""
    from tasks.train import artifact_dir, train

    ds = _tiny_dataset(tmp_path / "ds")
    spec = GapSpec(method="gap-edp", epsilon=1.0, hops=1, epochs=1, device="cpu")
    with pytest.raises(ValueError, match=r"gap-edp is a staged method.*run_stages"):
        train.fn(ds, spec)
    assert not artifact_dir("train", ds["content_sha256"], spec).exists()


def test_a_shared_stage_folder_being_written_is_waited_for_and_used(tmp_path: Path) -> None:
    """Two sweep points of GAP at two ε (on two workers) compute the graph stage, whose
    folder depends only on the dataset, the level and D, at the same time: the second
    writer of that folder used to fail its point at once (TargetBusyError). It now waits
    for the first and uses its intact folder, without writing it again."""
    import threading

    import numpy as np

    from dpgnn_core.io import atomic_dir
    from dpgnn_core.methods._staged import StageOutput, graph_stage
    from tasks.staged import _store, finish_artifact

    ds = {"content_sha256": "0" * 64, "path": str(tmp_path), "name": "ds"}
    spec = GapSpec(method="gap-edp", epsilon=1.0)
    stage = graph_stage("gap", spec)
    result = StageOutput({"edge_index.npy": np.arange(6).reshape(2, 3)},
                         info={"graph": {"edges_after": 3}})
    out = tmp_path / "graph"
    got: list[Any] = []
    with atomic_dir(out, overwrite=True) as tmp:  # another point writing the folder
        waiting = threading.Thread(
            target=lambda: got.append(_store(out, stage, result, ds, spec.model_copy(
                update={"epsilon": 2.0}), None)))
        waiting.start()
        waiting.join(0.5)
        assert waiting.is_alive()  # busy: it waits instead of failing
        np.save(tmp / "edge_index.npy", np.arange(6).reshape(2, 3))
        m = finish_artifact(tmp, stage.kind, ["edge_index.npy"], spec, ds, {})  # type: ignore[arg-type]
    waiting.join(30)
    assert not waiting.is_alive()
    (ref,) = got
    assert ref["path"] == str(out) and ref["files"] == m["files"]
    assert ref["graph"] == {"edges_after": 3}
    assert (json.loads((out / "manifest.json").read_text())["spec"]["epsilon"]) == 1.0
