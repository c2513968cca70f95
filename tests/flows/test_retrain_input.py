"""The retraining flow given no dataset folder (a `prefect deploy` without
DPGNN_RETRAIN_DATASET): every run failed with a traceback naming `<cwd>/manifest.json`;
now a Failed state whose message names the variable, and nothing trained."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.mark.parametrize("dataset", ["", "  "])
def test_an_empty_dataset_is_a_one_line_refusal(dataset: str, prefect_api_url: str,
                                                tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from dpgnn_core.specs import parse_spec
    from flows.retrain import retrain

    monkeypatch.setenv("DPGNN_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    spec = parse_spec({"method": "dp-mlp", "epsilon": 2.0})
    with temporary_settings(updates={PREFECT_API_URL: prefect_api_url}):
        state = retrain(spec=spec, dataset=dataset, return_state=True)
    assert state.is_failed()
    assert state.message.startswith("no dataset folder: set DPGNN_RETRAIN_DATASET"), (
        state.message)
    assert "\n" not in state.message
    assert not (tmp_path / "home" / "artifacts").exists()
