"""Samplers declare the scheme they implement; the DP optimizer clips and adds the noise
each mechanism states."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dpgnn_core.privacy import (
    DpgnnEvent,
    Ledger,
    PoissonGaussianEvent,
    PrivacyError,
    neighbourhood_size,
)
from dpgnn_core.training.dp_sgd import (
    Clipping,
    FixedSizeSampler,
    PoissonSampler,
    dpgnn_noise_std,
    train_steps,
)
from dpgnn_core.training.per_sample import group_noise_stds


def test_fixed_size_sampler_is_uniform_without_replacement() -> None:
    s = FixedSizeSampler(50, 10, torch.Generator().manual_seed(0))
    counts = np.zeros(50)
    for _ in range(4000):
        b = s.sample()
        assert b.shape == (10,) and len(set(b.tolist())) == 10
        assert int(b.min()) >= 0 and int(b.max()) < 50
        counts[b.numpy()] += 1
    expected = 4000 * 10 / 50
    assert np.abs(counts - expected).max() < 0.15 * expected
    again = FixedSizeSampler(50, 10, torch.Generator().manual_seed(0))
    assert torch.equal(FixedSizeSampler(50, 10, torch.Generator().manual_seed(0)).sample(),
                       again.sample())
    with pytest.raises(PrivacyError, match="batch size"):
        FixedSizeSampler(5, 6)


def test_poisson_sampler_rate() -> None:
    s = PoissonSampler(1000, 0.05, torch.Generator().manual_seed(0))
    sizes = [s.sample().shape[0] for _ in range(300)]
    assert abs(np.mean(sizes) - 50) < 2
    with pytest.raises(PrivacyError):
        PoissonSampler(10, 0.0)


def test_samplers_meet_the_ledger_contract() -> None:
    event = DpgnnEvent(noise_multiplier=1.0, num_train=50, batch_size=10, max_degree=3,
                       layers=1)
    Ledger().add(event, sampler_scheme=FixedSizeSampler(50, 10).scheme)
    with pytest.raises(PrivacyError, match="batch sampling"):
        Ledger().add(event, sampler_scheme=PoissonSampler(50, 0.2).scheme)
    poisson = PoissonGaussianEvent(noise_multiplier=1.0, sampling_rate=0.2)
    Ledger().add(poisson, sampler_scheme=PoissonSampler(50, 0.2).scheme)


def test_clipping_bounds_each_example() -> None:
    clip, m = 0.5, 8
    torch.manual_seed(0)
    model = torch.nn.Linear(6, 3)
    x, y = torch.randn(m, 6) * 10, torch.randint(0, 3, (m,))
    per = []
    for k in range(m):
        model.zero_grad()
        torch.nn.functional.cross_entropy(model(x[k:k + 1]), y[k:k + 1]).backward()
        per.append(torch.cat([p.grad.reshape(-1) for p in model.parameters()]))
    per_t = torch.stack(per)
    factor = (clip / (per_t.norm(dim=1) + 1e-6)).clamp(max=1.0)
    expected = (per_t * factor[:, None]).sum(0) / m
    before = [p.detach().clone() for p in model.parameters()]
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    train_steps(model, opt, 1, lambda: (torch.nn.functional.cross_entropy(
        model(x), y, reduction="none"), 0.0),
        clipping=Clipping((clip,), (0.0,), float(m)), generator=torch.Generator())
    step = torch.cat([(b - p.detach()).reshape(-1) for b, p in zip(before, model.parameters(),
                                                                    strict=True)])
    torch.testing.assert_close(step, expected, rtol=1e-4, atol=1e-6)
    assert step.norm() <= clip + 1e-5  # an average of vectors of norm <= C
    assert (per_t.norm(dim=1) > clip).any()  # the bound was active


@pytest.mark.parametrize(("lam", "k", "r"), [(1.0, 3, 1), (0.5, 2, 2)])
def test_noise_std_is_lambda_2c_nkr(lam: float, k: int, r: int) -> None:
    clip, m = 0.7, 8
    std = dpgnn_noise_std(lam, clip, k, r)
    assert std == pytest.approx(lam * 2 * clip * sum(k**i for i in range(r + 1)))
    (stds,) = [group_noise_stds(lam, 2.0 * neighbourhood_size(k, r), [clip])]
    assert stds == [pytest.approx(std)]
    model = torch.nn.Linear(200, 50)
    before = [p.detach().clone() for p in model.parameters()]
    train_steps(model, torch.optim.SGD(model.parameters(), lr=1.0), 1,
                lambda: ((model(torch.zeros(m, 200)) * 0.0).sum(1), 0.0),  # zero gradients
                clipping=Clipping((clip,), (std,), float(m)),
                generator=torch.Generator().manual_seed(2))
    noise = torch.cat([(b - p.detach()).reshape(-1) for b, p in zip(before, model.parameters(),
                                                                     strict=True)]) * m
    assert noise.std().item() == pytest.approx(std, rel=0.03)
    assert abs(noise.mean().item()) < 0.05 * std


def test_model_selection_keeps_the_best_weights() -> None:
    torch.manual_seed(0)
    model = torch.nn.Linear(2, 1, bias=False)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.ones(4, 2)
    scores = iter([1.0, 5.0, 2.0, 3.0, 0.0, 1.0])
    snapshots = []
    history = train_steps(model, opt, 6, lambda: (-model(x).sum(1), 0.0), clipping=None,
                          select=lambda: next(scores), select_every=1,
                          on_step=lambda i, r: snapshots.append(model.weight.detach().clone()))
    assert [h["selection_score"] for h in history] == [1.0, 5.0, 2.0, 3.0, 0.0, 1.0]
    assert torch.equal(model.weight.detach(), snapshots[1])  # the weights after step 2
    assert not torch.equal(snapshots[1], snapshots[-1])


def test_batchnorm_refused() -> None:
    from dpgnn_core.training.dp_sgd import check_dp_compatible

    check_dp_compatible(torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.LayerNorm(4)))
    with pytest.raises(PrivacyError, match="BatchNorm"):
        check_dp_compatible(torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4)))


def test_budget_too_small_names_the_smallest_epsilon() -> None:
    from dpgnn_core.privacy import RdpAccountant, calibrate_noise

    def plan(z: float) -> Ledger:
        return Ledger().add(PoissonGaussianEvent(noise_multiplier=z, sampling_rate=1.0,
                                                 steps=10_000), sampler_scheme="poisson")

    with pytest.raises(PrivacyError, match="smallest epsilon this plan reaches is") as e:
        calibrate_noise(plan, 1e-4, 1e-5, RdpAccountant(), max_noise=100.0)
    floor = float(str(e.value).split("reaches is ")[1].split(" ")[0])
    assert floor > 1e-4
