"""A sweep is charged once per release (issue 48 §4): the same sweep started twice at once
waits for the first and reuses its points; a private selection stopped by Ctrl-C before its
release moment gives its record back, so its rerun is charged once."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from dpgnn_core.budget import Charge
from flows.cli import app
from tests.flows.clirunner import CliRunner

runner = CliRunner()


@pytest.mark.slow
def test_the_same_sweep_twice_at_once_waits_for_the_first(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    import flows.sweep
    from dpgnn_core.sweeps import load_sweep_spec
    from flows.cli.sweep import same_sweep_lock

    ds = tmp_path / "ds"
    r = runner.invoke(app, ["ingest", "--format", "synthetic", "--out", str(ds),
                            "-o", "num_nodes=120"])
    assert r.exit_code == 0, r.output
    spec = tmp_path / "s.toml"
    spec.write_text(f'name = "twice"\ndataset = "{ds}"\nepsilons = [4.0]\nseeds = [0]\n\n'
                    '[[methods]]\nmethod = "dp-mlp"\nfixed = {steps = 3, device = "cpu"}\n')
    started: list[float] = []

    class Flow:  # the sweep flow: records when it starts, then stops the command
        def with_options(self, **_: Any) -> Any:
            def run(**__: Any) -> Any:
                started.append(time.monotonic())
                raise KeyboardInterrupt
            return run

    monkeypatch.setattr(flows.sweep, "sweep", Flow())
    monkeypatch.setattr(flows.sweep, "task_runner", lambda *a, **k: None)
    import flows.runlock

    blocked = threading.Event()
    holder = flows.runlock._holder

    def blocking(fd: int) -> str:  # called by the waiter just before it blocks
        blocked.set()
        return str(holder(fd))

    monkeypatch.setattr(flows.runlock, "_holder", blocking)
    manifest = json.loads((ds / "manifest.json").read_text())
    out: list[Any] = []
    with same_sweep_lock(load_sweep_spec(spec), manifest):  # the first sweep, running
        second = threading.Thread(target=lambda: out.append(
            runner.invoke(app, ["sweep", str(spec)])))
        second.start()
        assert blocked.wait(120), "the second sweep did not wait for the lock"
        time.sleep(1.0)
        assert started == []  # the second waits: it has not started its flow
        released = time.monotonic()
    second.join(120)
    (r,) = out
    assert r.exit_code == 130, r.output
    assert "runs the same sweep on this dataset" in r.output
    assert len(started) == 1 and started[0] >= released


def test_a_selection_stopped_before_its_release_gives_its_record_back(tmp_path: Path
                                                                      ) -> None:
    from flows.sweep_tuning import PrivateSelection, selections_stopped
    from tasks.budget import store

    sha = "ef" * 32
    s = store()

    def reserve(key: str) -> int:
        rid = s.reserve(sha, "toy", None, Charge(fixed=(1.0, 1e-6, "node", "add_remove")),
                        method="m (private selection)", run_id=f"run:tuning:{key}",
                        delta=1e-6, epsilon=1.0, covers=[key])
        s.mark_spent(rid)
        return rid

    first, second = reserve("K1"), reserve("K2")
    selection = PrivateSelection(plans=[], records=[first, second])
    selection.attached.add(first)  # named at its release: stays charged
    s.attach_selected(first, "rel", at="2030-01-01T00:00:00+00:00")
    with pytest.raises(KeyboardInterrupt), selections_stopped([selection]):
        raise KeyboardInterrupt
    by_id = {r.id: r for r in s.summary(s.resolve(sha)).records}
    assert by_id[first].status == "spent"
    assert by_id[second].status == "released-unused"
    assert "stopped (Ctrl-C) before its release moment" in by_id[second].note
    with selections_stopped([selection]):  # no Ctrl-C: nothing given back
        pass


@pytest.mark.slow
def test_a_plan_released_before_whose_cache_is_gone_is_refused_not_retrained(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 48 §4: with `.dpgnn/cache` and `.dpgnn/artifacts` moved away, a rerun missed
    the cache, retrained silently and was charged again (the README promises not). The
    gate finds the plan's release in the odometer and refuses before reserving; --refresh
    spends it again. A lost cache looks to the task like another code version's cache,
    which is what this test changes."""
    import json

    import tasks._cache
    from dpgnn_core.data.store import write_dataset
    from dpgnn_core.data.synthetic import csbm
    from dpgnn_core.specs import DpMlpSpec
    from flows.pipeline import pipeline
    from tasks.budget import LostReleaseError, store

    write_dataset(csbm(num_nodes=200, seed=78), tmp_path / "ds")
    ds = str(tmp_path / "ds")
    sha = json.loads((tmp_path / "ds" / "manifest.json").read_text())["content_sha256"]
    spec = DpMlpSpec(epsilon=2.0, steps=3, batch_size=40, hidden=8, device="cpu",
                     accountant="rdp")
    first = pipeline(spec=spec, dataset=ds, explain_graphs=0)
    s = store()

    def spent() -> list[int]:
        return [r.id for r in s.summary(s.resolve(sha)).records if r.status == "spent"]

    assert len(spent()) == 1
    version = tasks._cache.code_version()
    monkeypatch.setattr(tasks._cache, "code_version", lambda: version + "-cache-gone")
    with pytest.raises(LostReleaseError, match=r"already released .* --refresh"):
        pipeline(spec=spec, dataset=ds, explain_graphs=0)
    assert len(spent()) == 1  # refused before any charge
    again = pipeline(spec=spec, dataset=ds, refresh=True, explain_graphs=0)
    assert again["release"].startswith("new release") and len(spent()) == 2
    assert first["release"] != again["release"]
