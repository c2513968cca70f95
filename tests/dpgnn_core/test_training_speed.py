"""The cheaper training kernels of issue 52 §7 compute what they replace: the fused Adam
(:func:`dpgnn_core.training.optim.adam`) follows unfused Adam, and DPDGC's input dropout
(:func:`dpgnn_core.models.dpdgc.input_dropout`) and its hidden dropout
(:func:`~dpgnn_core.models.dpdgc.mask_dropout`) have dropout's distribution, and its
classifier computes on sparse rows (:class:`~dpgnn_core.models.sparse_rows.SparseRows`)
what it computes on dense ones."""

from __future__ import annotations

import pytest
import torch

from dpgnn_core.models.dpdgc import DpdgcClassifier, input_dropout, mask_dropout
from dpgnn_core.models.sparse_rows import SparseRows
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


def _rows() -> tuple[torch.Tensor, SparseRows]:
    g = torch.Generator().manual_seed(6)  # input data, not noise
    xh = torch.cat([_sparse_features(), torch.randn(400, 4, generator=g)], 1)
    rows = SparseRows.of(xh, 300)
    assert rows is not None
    return xh, rows


def _out_and_grads(clf: DpdgcClassifier, xh: torch.Tensor | SparseRows, seed: int
                   ) -> list[torch.Tensor]:
    clf.zero_grad(set_to_none=True)
    torch.manual_seed(seed)
    out = clf(xh)
    (out.square().sum() + out[:, 0].sum()).backward()  # type: ignore[no-untyped-call]
    return [out.detach()] + [p.grad.clone() for p in clf.parameters() if p.grad is not None]


def test_sparse_rows_compute_what_the_dense_rows_do_with_the_same_dropout_draws() -> None:
    xh, rows = _rows()
    assert torch.equal(rows.dense(), xh)
    torch.manual_seed(0)
    clf = DpdgcClassifier(300, 4, 16, 3, dropout=0.5)
    for training in (False, True):  # train: the same masks drawn in the same order
        clf.train(training)
        dense, sparse = _out_and_grads(clf, xh, 7), _out_and_grads(clf, rows, 7)
        assert len(dense) == len(sparse) == 9  # logits and all 8 parameters' gradients
        for a, b in zip(dense, sparse, strict=True):
            torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-5)
    clf.train()
    torch.manual_seed(8)
    a = clf(rows)
    assert not torch.allclose(a, clf(rows))  # fresh masks at every call


def test_sparse_rows_only_where_the_features_are_sparse_and_fixed() -> None:
    xh, _ = _rows()
    assert SparseRows.of(torch.rand(50, 40) + 0.1, 30) is None  # dense features
    assert SparseRows.of(xh.clone().requires_grad_(True), 300) is None  # a gradient wanted
    with pytest.raises(ValueError, match="300 features"):
        DpdgcClassifier(200, 104, 16, 3)(SparseRows.of(xh, 300))


def test_sparse_rows_keep_a_hooked_feature_layer_called() -> None:
    """Per-sample clipping hooks the Linear layers: sparse rows must not bypass them."""
    xh, rows = _rows()
    clf = DpdgcClassifier(300, 4, 16, 3).train()
    seen: list[torch.Size] = []
    clf.feat.register_forward_hook(lambda m, i, o: seen.append(i[0].shape))
    torch.testing.assert_close(clf(rows), clf(xh))
    assert seen == [torch.Size([400, 300])] * 2


def test_mask_dropout_has_dropouts_distribution() -> None:
    h = torch.full((300, 200), 2.0)
    assert mask_dropout(h, 0.3, False) is h and mask_dropout(h, 0.0, True) is h
    torch.manual_seed(9)
    out = mask_dropout(h, 0.3, True)
    values = out.unique()
    assert len(values) == 2 and values[0] == 0.0
    torch.testing.assert_close(values[1], torch.tensor(2.0 / 0.7))  # kept: scaled
    k = (out != 0).float()
    assert abs(float(k.mean()) - 0.7) < 0.01
    assert abs(float((k[:, :-1] * k[:, 1:]).mean()) - 0.49) < 0.01  # independent
    leaf = h.clone().requires_grad_(True)
    torch.manual_seed(9)  # the same mask: the gradient is it, scaled
    mask_dropout(leaf, 0.3, True).sum().backward()  # type: ignore[no-untyped-call]
    assert leaf.grad is not None
    torch.testing.assert_close(leaf.grad, (out != 0).float() / 0.7)
