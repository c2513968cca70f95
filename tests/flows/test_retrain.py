"""The retrain flow's own checks (the served deployment: tests/deployments/test_retrain.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dpgnn_core.specs import DpMlpSpec, TrainSpec
from flows.retrain import is_private, retrain


def test_private_specs_only(tmp_path: Path) -> None:
    assert is_private(DpMlpSpec(method="dp-mlp", epsilon=2))
    assert not is_private(DpMlpSpec(method="dp-mlp"))  # no epsilon: trains without noise
    assert not is_private(TrainSpec(method="gcn"))
    with pytest.raises(ValueError, match="retrains private models: spec 'gcn' is not private"):
        retrain.fn(spec=TrainSpec(method="gcn"), dataset=str(tmp_path))
