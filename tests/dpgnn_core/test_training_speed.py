"""The cheaper training kernels of issue 52 §7 compute what they replace: the fused Adam
(:func:`dpgnn_core.training.optim.adam`) follows unfused Adam, and DPDGC's input dropout
(:func:`dpgnn_core.models.dpdgc.input_dropout`) has dropout's distribution."""

from __future__ import annotations

import torch

from dpgnn_core.models.dpdgc import DpdgcClassifier, input_dropout
from dpgnn_core.training.optim import adam


def _trajectory(fused: bool) -> list[torch.Tensor]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(20, 8), torch.nn.SELU(), torch.nn.Linear(8, 3))
    opt = (adam(model.parameters(), lr=1e-2, weight_decay=5e-4) if fused else
           torch.optim.Adam(model.parameters(), lr=1e-2, weight_decay=5e-4))
    x, y = torch.randn(64, 20), torch.randint(0, 3, (64,))
    for _ in range(50):
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    return [p.detach().clone() for p in model.parameters()]


def test_adam_is_fused_on_the_cpu_and_follows_unfused_adam() -> None:
    opt = adam([torch.nn.Parameter(torch.zeros(3))], lr=1e-3)
    assert opt.defaults["fused"] is True
    for a, b in zip(_trajectory(True), _trajectory(False), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_adam_on_float64_is_fused_too() -> None:
    assert adam([torch.nn.Parameter(torch.zeros(3, dtype=torch.float64))],
                lr=1e-3).defaults["fused"] is True


def _sparse_features(n: int = 400, f: int = 300, density: float = 0.02) -> torch.Tensor:
    g = torch.Generator().manual_seed(1)  # input data, not noise
    return (torch.rand(n, f, generator=g) < density).float() * 3.0


def test_input_dropout_has_dropouts_distribution() -> None:
    x, p = _sparse_features(), 0.5
    torch.manual_seed(2)
    draws = torch.stack([input_dropout(x, p, True) for _ in range(200)])
    nz = x != 0
    assert bool((draws[:, ~nz] == 0).all())  # a zero stays zero
    kept = draws[:, nz]
    assert set(kept.unique().tolist()) <= {0.0, 3.0 / (1 - p)}  # kept entries scaled
    frac = float((kept != 0).float().mean())
    assert abs(frac - (1 - p)) < 0.01  # each kept with probability 1 - p
    k = (kept != 0).float()  # independently: neighbouring entries (most in one row)
    assert abs(float((k[:, :-1] * k[:, 1:]).mean()) - (1 - p) ** 2) < 0.01
    assert abs(float(draws.sum() / (200 * x.sum())) - 1.0) < 0.02  # unbiased


def test_input_dropout_falls_back_to_dropout() -> None:
    x = _sparse_features()
    assert input_dropout(x, 0.5, False) is x  # evaluation: the input itself
    dense = torch.rand(50, 40) + 0.1
    torch.manual_seed(3)
    a = input_dropout(dense, 0.3, True)
    torch.manual_seed(3)
    torch.testing.assert_close(a, torch.nn.functional.dropout(dense, 0.3, True))
    leaf = x.clone().requires_grad_(True)  # a gradient wanted: dropout itself
    torch.manual_seed(4)
    b = input_dropout(leaf, 0.5, True)
    torch.manual_seed(4)
    torch.testing.assert_close(b, torch.nn.functional.dropout(leaf, 0.5, True))


def test_dpdgc_classifier_drops_features_sparsely_in_training_only() -> None:
    clf = DpdgcClassifier(300, 4, 16, 3, dropout=0.5)
    xh = torch.cat([_sparse_features(), torch.randn(400, 4)], 1)
    clf.eval()
    out = clf(xh)
    torch.testing.assert_close(clf(xh), out)  # no dropout in evaluation
    clf.train()
    torch.manual_seed(5)
    a = clf(xh)
    torch.manual_seed(5)
    torch.testing.assert_close(clf(xh), a)  # seeded: reproducible
    assert not torch.allclose(a, out)
