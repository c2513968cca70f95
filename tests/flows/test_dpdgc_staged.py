"""DPDGC runs through the one staged runner, as GAP does (issue 50 §1): each private
release is a cached stage of the pipeline with its events, the stages share one budget
reservation, a cached rerun reuses every stage, and the run releases what the whole fit
(``get(name).fit``, the library's and a sweep point's path) releases: the same ledger, ε,
report, aggregations and model given the same seed and noise draws."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from dpgnn_core.data.store import read_dataset, write_dataset
from dpgnn_core.data.synthetic import csbm
from dpgnn_core.privacy import Ledger

pytestmark = pytest.mark.slow


def _comparable(report: dict[str, Any]) -> dict[str, Any]:
    """A report as JSON, without what names the release (its id and time)."""
    out: dict[str, Any] = json.loads(json.dumps(report))
    out.pop("release", None)
    return out


@pytest.mark.parametrize(("name", "options", "stages", "seed"), [
    ("dpdgc-edp", {"messages": "adjacency", "adj_steps": 3, "epochs": 4},
     ["calibrate", "encoder", "aggregate", "train"], 81),
    ("dpdgc-fdp", {"messages": "labels", "hops": 2, "steps": 4, "batch_size": 32},
     ["calibrate", "aggregate", "train"], 82),
])
def test_the_pipeline_stages_release_what_the_whole_fit_releases(
        name: str, options: dict[str, Any], stages: list[str], seed: int,
        tmp_path: Path) -> None:
    from dpgnn_core.methods.registry import get
    from flows.pipeline import pipeline
    from tasks.budget import store

    write_dataset(csbm(num_nodes=160, avg_degree=4, seed=seed), tmp_path / "ds")
    ds = str(tmp_path / "ds")
    m = get(name)
    # noise derived from the seed (insecure, for this comparison only): both paths draw the
    # same noise, so they must compute the same release
    spec = m.spec(epsilon=4.0, hidden=8, adj_dim=4, device="cpu",
                  insecure_reproducible_noise=True, **options)
    out = pipeline(spec=spec, dataset=ds, explain_graphs=0)
    assert [k for k in out["cache"] if k not in ("evaluate",)] == stages
    assert set(out["cache"].values()) == {"Completed"}
    fitted = m.fit(read_dataset(ds), spec)

    folder = Path(out["artifacts_dir"])
    ledger = Ledger.load(folder / "ledger.json")
    assert ledger.to_dict() == fitted.ledger.to_dict() and ledger.entries
    assert out["epsilon"] == pytest.approx(fitted.report.epsilon) and out["epsilon"] <= 4.0
    stored = json.loads((folder / "report.json").read_text())
    assert _comparable(stored) == _comparable(fitted.report.to_dict())
    agg = json.loads((folder / "manifest.json").read_text())["aggregations"]
    hops = torch.load(Path(agg["path"]) / "aggregations.pt", weights_only=True)
    torch.testing.assert_close(hops, fitted.extra["aggregations"], rtol=0, atol=0)
    model = torch.load(folder / "model.pt", weights_only=True)["state_dict"]
    assert model.keys() == fitted.model.state_dict().keys()
    for key, value in fitted.model.state_dict().items():
        torch.testing.assert_close(model[key], value.cpu(), rtol=0, atol=0)
    metrics = m.evaluate(fitted.model, read_dataset(ds), spec, fitted.extra)
    assert out["test_accuracy"] == pytest.approx(metrics["test"]["accuracy"])

    # the stages shared one reservation, spent once; a cached rerun reuses every stage
    s = store()
    sha = json.loads((tmp_path / "ds" / "manifest.json").read_text())["content_sha256"]
    assert [r.status for r in s.summary(s.resolve(sha)).records] == ["spent"]
    again = pipeline(spec=spec, dataset=ds, explain_graphs=0)
    assert set(again["cache"].values()) == {"Cached"}
    assert again["test_accuracy"] == out["test_accuracy"]
    assert [r.status for r in s.summary(s.resolve(sha)).records] == ["spent", "reuse"]
