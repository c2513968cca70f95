"""Every registered method trains and evaluates on CUDA (skipped where torch sees no GPU, as
on CI): the contract's tiny runs with ``device="cuda"``, whose privacy accounting must not
depend on the device, and whose predictions must match the same model moved to the CPU."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from dpgnn_core.methods.registry import METHODS, get
from dpgnn_core.privacy import make_accountant
from tests.dpgnn_core.test_method_contract import GRAPHS, NODES, _spec

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(),
                                reason="no CUDA device: these run where torch sees a GPU")


@pytest.mark.parametrize("name", sorted(METHODS))
def test_method_trains_on_cuda(name: str, tmp_path: Path) -> None:
    m = get(name)
    data = GRAPHS if m.task == "graph" else NODES
    spec = _spec(name).model_copy(update={"device": "cuda"})
    fitted = m.fit(data, spec)
    assert any(p.is_cuda for p in fitted.model.parameters()) or not list(
        fitted.model.parameters())
    if m.private:  # the ε comes from the ledger, whatever the device
        eps = make_accountant(fitted.report.accountant).epsilon(fitted.ledger,
                                                                fitted.report.delta)
        assert eps == pytest.approx(fitted.report.epsilon) and eps <= 4.0
    on_gpu = m.evaluate(fitted.model, data, spec, fitted.extra)
    m.save(str(tmp_path / "model.pt"), fitted, spec, data)
    model, _ = m.load(torch.load(tmp_path / "model.pt", weights_only=True))
    cpu_spec = spec.model_copy(update={"device": "cpu"})
    extra = {k: v.cpu() if isinstance(v, torch.Tensor) else v for k, v in fitted.extra.items()}
    on_cpu = m.evaluate(model.cpu(), data, cpu_spec, extra)
    for split in ("train", "val", "test"):
        assert on_cpu[split]["accuracy"] == pytest.approx(on_gpu[split]["accuracy"], abs=0.02)
