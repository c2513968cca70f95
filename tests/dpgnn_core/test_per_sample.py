"""Book-keeping per-sample clipping: norms and clipped sums equal per-sample autograd (for
every convolution, GIN's trainable epsilon included) and Opacus; noise per group."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch
from torch import nn

from dpgnn_core.data.synthetic import csbm
from dpgnn_core.graph.dpgnn_sampler import sample_edgelists, sample_subgraphs
from dpgnn_core.graph.subgraphs import build_batch
from dpgnn_core.models.mlp import MLP
from dpgnn_core.models.subgraph_gnn import SubgraphGNN
from dpgnn_core.privacy import PrivacyError
from dpgnn_core.training.per_sample import (
    PerSampleClipper,
    Scale,
    group_noise_stds,
    linear_sq_norms,
    private_step,
)


@pytest.fixture(scope="module")
def batch():
    g = csbm(num_nodes=300, avg_degree=8, feature_dim=10, seed=1)
    train = g.mask("train")
    sg = sample_subgraphs(sample_edgelists(g.edge_index, g.num_nodes, train, 3,
                                           np.random.default_rng(0)),
                          g.num_nodes, train, 2, 3)
    return g, build_batch(sg, np.arange(12), g.x, normalisation="none")


def _per_sample_reference(model: nn.Module, groups, loss_of, n: int) -> torch.Tensor:
    """[n, G] per-group norms and per-sample flat gradients, by one backward per sample."""
    names = [[id(p) for m in grp for p in m.parameters()] for grp in groups]
    norms, grads = [], []
    for k in range(n):
        model.zero_grad()
        loss_of(model, k).backward()
        flat = {id(p): p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p)
                for p in model.parameters()}
        norms.append([math.sqrt(sum(float(flat[i].square().sum()) for i in grp))
                      for grp in names])
        grads.append(flat)
    return torch.tensor(norms), grads


@pytest.mark.parametrize("conv", ["gcn", "sage", "gin", "gat"])
@pytest.mark.parametrize("all_nodes", [False, True])
def test_norms_and_clipped_sums_match_autograd(batch, conv: str, all_nodes: bool) -> None:
    g, b = batch
    torch.manual_seed(2)
    model = SubgraphGNN(conv, g.num_features, 3, hidden=12, layers=2, heads=3, gin_eps=0.1)
    reference = copy.deepcopy(model)
    n = b.x.shape[0]
    y = torch.randint(0, 3, (n, b.x.shape[1]) if all_nodes else (n,))

    def loss_of(net, k):
        out = net(b.x[k:k + 1], b.adj[k:k + 1], b.mask[k:k + 1], all_nodes=all_nodes)
        return nn.functional.cross_entropy(out.reshape(-1, 3), y[k:k + 1].reshape(-1),
                                           reduction="sum")

    ref_norms, ref_grads = _per_sample_reference(reference, reference.groups(), loss_of, n)
    clipper = PerSampleClipper(model, model.groups())
    clips = [0.5, 0.2, 0.3]
    with clipper.capture():
        out = model(b.x, b.adj, b.mask, all_nodes=all_nodes)
        losses = nn.functional.cross_entropy(out.reshape(-1, 3), y.reshape(-1),
                                             reduction="none").reshape(n, -1).sum(1)
        norms = private_step(clipper, losses, clips=clips, noise_stds=[0.0] * 3,
                             denominator=1.0, generator=None)
    torch.testing.assert_close(norms.T, ref_norms, rtol=1e-4, atol=1e-6)
    factor = (torch.tensor(clips)[None] / (ref_norms + 1e-6)).clamp(max=1.0)  # [n, G]
    for gi, grp in enumerate(reference.groups()):
        for mod in grp:
            for (name, p), q in zip(mod.named_parameters(), [
                    q for q in _matching(model, reference, mod).parameters()], strict=True):
                expected = sum(factor[k, gi] * ref_grads[k][id(p)] for k in range(n))
                torch.testing.assert_close(q.grad, expected, rtol=1e-4, atol=1e-6,
                                           msg=f"{conv} {name}")
    if conv == "gin":
        assert all(s.eps.grad is not None and s.eps.grad.abs() > 0 for s in model.eps)
    assert all(p.requires_grad for p in model.parameters())


def _matching(model: nn.Module, reference: nn.Module, mod: nn.Module) -> nn.Module:
    names = {id(m): n for n, m in reference.named_modules()}
    return dict(model.named_modules())[names[id(mod)]]


@pytest.mark.parametrize("sizes", [(1, 5, 7), (4, 6, 5), (30, 4, 3)])
def test_linear_norm_paths_agree(sizes) -> None:
    t, i, o = sizes  # T=1 outer product, ghost (T*T <= i*o), materialised otherwise
    a, g = torch.randn(9, t, i), torch.randn(9, t, o)
    per = torch.einsum("bto,bti->boi", g, a)
    expected = per.square().sum((1, 2)) + g.sum(1).square().sum(1)
    torch.testing.assert_close(linear_sq_norms(a, g, True), expected, rtol=1e-4, atol=1e-5)


def test_matches_opacus_on_an_mlp() -> None:
    from opacus import GradSampleModule

    torch.manual_seed(0)
    model = MLP(6, 16, 3, 3, dropout=0.0)
    twin = copy.deepcopy(model)
    x, y = torch.randn(20, 6), torch.randint(0, 3, (20,))
    gsm = GradSampleModule(twin, loss_reduction="sum")
    nn.functional.cross_entropy(gsm(x), y, reduction="sum").backward()
    per = torch.cat([p.grad_sample.reshape(20, -1) for p in twin.parameters()], 1)
    clipper = PerSampleClipper(model)
    with clipper.capture():
        norms = private_step(clipper, nn.functional.cross_entropy(model(x), y, reduction="none"),
                             clips=[1.0], noise_stds=[0.0], denominator=20.0, generator=None)
    torch.testing.assert_close(norms[0], per.norm(dim=1), rtol=1e-4, atol=1e-6)
    f = (1.0 / (per.norm(dim=1) + 1e-6)).clamp(max=1.0)
    mine = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
    torch.testing.assert_close(mine, (per * f[:, None]).sum(0) / 20, rtol=1e-4, atol=1e-6)
    gsm.cleanup()


@pytest.mark.parametrize("conv", ["gcn", "sage", "gin", "gat"])
def test_same_clipped_sum_as_opacus_ghost_clipping(batch, conv: str) -> None:
    """Opacus's ghost clipping (norms from activations and output gradients, then a second
    backward of the clip-weighted loss) leaves the same clipped sum in ``p.grad`` as our one
    pass, without noise. (GIN's ``Scale`` has no Opacus norm sampler: Opacus falls back to
    functorch per-sample gradients for it, fast gradient clipping rather than ghost.)"""
    import warnings

    from opacus import PrivacyEngine

    g, b = batch
    torch.manual_seed(3)
    model = SubgraphGNN(conv, g.num_features, 3, hidden=12, layers=2, heads=3, gin_eps=0.1)
    twin = copy.deepcopy(model)
    n = b.x.shape[0]
    y = torch.randint(0, 3, (n,))
    clip = 0.3
    clipper = PerSampleClipper(model)
    with clipper.capture():
        norms = private_step(clipper, nn.functional.cross_entropy(
            model(b.x, b.adj, b.mask), y, reduction="none"), clips=[clip], noise_stds=[0.0],
            denominator=1.0, generator=None)
    clipper.remove()
    assert (norms > clip).any()  # clipping is active
    loader = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(b.x, b.adj, b.mask, y), batch_size=n)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        module, opt, crit, _ = PrivacyEngine().make_private(
            module=twin, optimizer=torch.optim.SGD(twin.parameters(), lr=0.0),
            criterion=nn.CrossEntropyLoss(), data_loader=loader, noise_multiplier=0.0,
            max_grad_norm=clip, poisson_sampling=False, grad_sample_mode="ghost")
        opt.zero_grad(set_to_none=True)
        crit(module(b.x, b.adj, b.mask), y).backward()
    torch.testing.assert_close(module.get_norm_sample(), norms[0], rtol=1e-4, atol=1e-6)
    for (name, p), q in zip(model.named_parameters(), twin.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-6, msg=f"{conv} {name}")
    module.cleanup()


def test_noise_per_group_has_the_stated_std() -> None:
    model = nn.Sequential(nn.Linear(50, 40), nn.Linear(40, 30))
    clipper = PerSampleClipper(model, [[model[0]], [model[1]]])
    stds = group_noise_stds(0.7, 2.0, [1.0, 3.0])
    assert stds == pytest.approx([0.7 * 2 * 1 * math.sqrt(2), 0.7 * 2 * 3 * math.sqrt(2)])
    with clipper.capture():
        out = model(torch.zeros(4, 50))
        private_step(clipper, (out * 0).sum(1), clips=[1.0, 3.0], noise_stds=stds,
                     denominator=2.0, generator=torch.Generator().manual_seed(0))
    for lin, std in zip(model, stds, strict=True):
        assert float(lin.weight.grad.std()) == pytest.approx(std / 2.0, rel=0.05)


def test_refuses_what_it_cannot_clip() -> None:
    with pytest.raises(PrivacyError, match="LayerNorm"):
        PerSampleClipper(nn.Sequential(nn.Linear(3, 3), nn.LayerNorm(3)))
    lin = nn.Linear(3, 3)
    with pytest.raises(PrivacyError, match="no clipping group"):
        PerSampleClipper(nn.Sequential(lin, nn.Linear(3, 3)), [[lin]])
    with pytest.raises(PrivacyError, match="sensitivity"):
        group_noise_stds(1.0, 1.0, [0.0])
    s = Scale(0.5)
    assert float(s(torch.ones(2))[0]) == 1.5
