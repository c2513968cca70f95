"""Dense (training) and sparse (inference) paths agree; per-sample gradients on the dense
path (ours and Opacus's) are exact."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from dpgnn_core.data.synthetic import csbm
from dpgnn_core.graph.dpgnn_sampler import sample_edgelists, sample_subgraphs
from dpgnn_core.graph.subgraphs import build_batch
from dpgnn_core.models.subgraph_gnn import SubgraphGNN


@pytest.fixture(scope="module")
def batch():
    g = csbm(num_nodes=400, avg_degree=8, feature_dim=12, seed=0)
    train = g.mask("train")
    sg = sample_subgraphs(sample_edgelists(g.edge_index, g.num_nodes, train, 4,
                                           np.random.default_rng(0)),
                          g.num_nodes, train, 2, 4)
    ids = np.arange(24)
    return g, sg, ids, build_batch(sg, ids, g.x, normalisation="none")


@pytest.mark.parametrize("conv", ["gcn", "sage", "gin", "gat"])
@pytest.mark.parametrize("layers", [1, 2])
def test_dense_matches_sparse_on_each_subgraph(batch, conv: str, layers: int) -> None:
    g, sg, ids, b = batch
    torch.manual_seed(0)
    model = SubgraphGNN(conv, g.num_features, 3, hidden=16, layers=layers, gin_eps=0.3,
                        heads=3).eval()
    dense = model(b.x, b.adj, b.mask)
    every = model(b.x, b.adj, b.mask, all_nodes=True)
    torch.testing.assert_close(every[:, 0], dense, rtol=1e-5, atol=1e-5)
    for row, i in enumerate(ids):
        nodes, edges = sg.subgraph(int(i))
        local = {int(v): j for j, v in enumerate(nodes)}
        ei = torch.tensor([[local[s] for s in edges[0]], [local[d] for d in edges[1]]],
                          dtype=torch.long).reshape(2, -1)
        sparse = model.forward_sparse(torch.from_numpy(g.x[nodes]), ei)
        torch.testing.assert_close(dense[row], sparse[0], rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(every[row, :len(nodes)], sparse, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("conv", ["gcn", "sage", "gat"])
def test_opacus_per_sample_gradients_are_exact(batch, conv: str) -> None:
    from opacus import GradSampleModule

    g, _, _, b = batch
    torch.manual_seed(1)
    model = SubgraphGNN(conv, g.num_features, 3, hidden=8, layers=2, heads=2)
    reference = copy.deepcopy(model)
    y = torch.randint(0, 3, (b.x.shape[0],))
    gsm = GradSampleModule(model, loss_reduction="sum")
    loss = torch.nn.functional.cross_entropy(gsm(b.x, b.adj, b.mask), y, reduction="sum")
    loss.backward()
    per_sample = {n: p.grad_sample.clone() for n, p in model.named_parameters()}
    assert set(per_sample) == {n for n, _ in reference.named_parameters()}
    for k in range(b.x.shape[0]):
        reference.zero_grad()
        out = reference(b.x[k:k + 1], b.adj[k:k + 1], b.mask[k:k + 1])
        torch.nn.functional.cross_entropy(out, y[k:k + 1], reduction="sum").backward()
        for n, p in reference.named_parameters():
            torch.testing.assert_close(per_sample[n][k], p.grad, rtol=1e-5, atol=1e-6)


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="unknown conv"):
        SubgraphGNN("gatv2", 4, 2)
    with pytest.raises(ValueError, match="unknown activation"):
        SubgraphGNN("gcn", 4, 2, activation="swish")
