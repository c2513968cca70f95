"""DPDGC's classifier never trains on a node's own label sent out and back (issue 49 §4):
with label messages, hop 2 of node v sums its neighbours' normalised first hops, which hold
v's own training label. On low-degree graphs (citation graphs: median degree 2) that is most
of v's hop-2 row, so the classifier learned to read its training labels off its input, and
no validation or test node has that input. At ``node_feature`` level and ∞ (where the
structure may be read) the training rows take the return out; the release is unchanged."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dpgnn_core.data.graph import GraphData
from dpgnn_core.methods.dpdgc import train_dpdgc, training_hops
from dpgnn_core.methods.dpdgc_messages import (
    first_messages,
    label_rows,
    own_label_return,
    propagate,
)
from dpgnn_core.privacy.pma import aggregation_matrix
from dpgnn_core.specs import DpdgcSpec

#: A path 0-1-2-3, a triangle 4-5-6 with a tail 6-7, and a directed pair 8 -> 9 (no
#: return): every node its own class, so any mass on a node's own class in its hop-2 row
#: is its own label come back.
UNDIRECTED = [(0, 1), (1, 2), (2, 3), (4, 5), (5, 6), (4, 6), (6, 7)]
N = 10


def _graph(directed_extra: bool = True) -> tuple[torch.Tensor, np.ndarray]:
    pairs = [e for a, b in UNDIRECTED for e in ((a, b), (b, a))]
    if directed_extra:
        pairs.append((8, 9))
    ei = np.array(sorted(pairs), dtype=np.int64).T
    return aggregation_matrix(torch.from_numpy(ei), N).to(torch.float64), ei


def _dense_hop2_without_return(ei: np.ndarray, w1: np.ndarray) -> np.ndarray:
    """Independent reference: row v sums over its senders u the normalised first hop of u
    less v's own message where v also sends to u (dense numpy, loops)."""
    a = np.zeros((N, N))
    for s, r in ei.T:
        a[r, s] = 1.0
    h1 = a @ w1
    out = np.zeros_like(h1)
    for v in range(N):
        for u in range(N):
            if a[v, u] and np.linalg.norm(h1[u]) > 0:  # u sends to v
                back = w1[v] if a[u, v] else 0.0  # v's own message in h1[u]
                out[v] += (h1[u] - back) / np.linalg.norm(h1[u])
    return out


@pytest.mark.parametrize("level", ["none", "node_feature"])
def test_the_return_is_exactly_the_own_message(level: str) -> None:
    """Hop 2 less :func:`own_label_return` equals an independent dense reference, and no
    training node keeps any mass on its own (unique) class at hop 2."""
    adj_t, ei = _graph()
    y = torch.arange(N)
    train = torch.ones(N, dtype=torch.bool)
    w1 = first_messages(level, label_rows(y, train, N).double(), adj_t)
    h = propagate(adj_t, w1, [0.0, 0.0], None, None)
    got = (h[:, 1] - own_label_return(adj_t, w1, h)).numpy()
    np.testing.assert_allclose(got, _dense_hop2_without_return(ei, w1.numpy()), atol=1e-12)
    own = got[np.arange(N), np.arange(N)]
    np.testing.assert_allclose(own, 0.0, atol=1e-12)
    assert (h[:, 1].numpy()[np.arange(8), np.arange(8)] > 0.3).all()  # the leak it removes


def test_non_training_nodes_have_no_return() -> None:
    """A node outside the training split sends nothing, so nothing comes back to it: its
    row (what validation and test predictions read) is the release's."""
    adj_t, _ = _graph()
    train = torch.tensor([i % 2 == 0 for i in range(N)])
    w1 = label_rows(torch.arange(N) % 3, train, 3).double()
    h = propagate(adj_t, w1, [0.0, 0.0], None, None)
    back = own_label_return(adj_t, w1, h)
    assert torch.all(back[~train] == 0) and torch.any(back[train] != 0)


def _data() -> GraphData:
    _, ei = _graph(directed_extra=False)
    rng = np.random.default_rng(0)
    y = np.arange(N) % 3
    split = np.zeros(N, dtype=np.int8)
    split[[3, 7]] = 1
    split[[8, 9]] = 2
    return GraphData(name="own-return", task="node", x=rng.random((N, 4)).astype(np.float32),
                     edge_index=ei, y=y, split=split, num_classes=3, directed=False, meta={})


@pytest.mark.parametrize(("given", "removed"), [
    ({"level": "none"}, True),
    ({"level": "node_feature", "epsilon": 4.0}, True),
    ({"level": "none", "messages": "adjacency", "hops": 2}, False),
    ({"level": "edge", "messages": "labels", "hops": 2, "epsilon": 4.0}, False)])
def test_training_rows_only_where_the_structure_may_be_read(given: dict,
                                                            removed: bool) -> None:
    """``training_hops`` takes the return out at ∞ and ``node_feature`` level with label
    messages, nowhere else (at edge level the edges are private: a training row may not
    read them); the hops ``train_dpdgc`` releases (stored, read by every prediction) keep
    it either way."""
    data = _data()
    spec = DpdgcSpec(**{"hops": 2, **given}, epochs=1, steps=1, adj_epochs=1, adj_steps=1,
                     seed=0, device="cpu")
    _, h, _, _, _ = train_dpdgc(data, spec)
    adj_t = aggregation_matrix(torch.from_numpy(data.edge_index), N).to(h.dtype)
    if spec.messages == "labels":
        train = torch.from_numpy(data.mask("train"))
        w1 = first_messages(spec.level, label_rows(torch.from_numpy(data.y), train, 3), adj_t)
    else:
        w1 = torch.zeros(N, h.shape[2])
    got = training_hops(spec, adj_t, w1, h)
    assert torch.equal(got[:, 0], h[:, 0])
    assert torch.equal(got[:, 1], h[:, 1]) != removed
    if removed and spec.level == "none":  # exact release at ∞: the reference applies
        np.testing.assert_allclose(got[:, 1].numpy(), _dense_hop2_without_return(
            data.edge_index, w1.double().numpy()), atol=1e-5)


def test_infinity_defaults_to_three_hops_of_labels() -> None:
    """DPDGC-∞'s recipe (issue 49: adjacency messages left it below the MLP on citation
    graphs); a spec asking for adjacency messages keeps its one hop."""
    spec = DpdgcSpec(method="dpdgc-inf")
    assert (spec.messages, spec.hops) == ("labels", 3)
    assert DpdgcSpec(method="dpdgc-inf", messages="adjacency").hops == 1


@pytest.mark.parametrize("given", [{"method": "dpdgc-fdp"}, {"method": "dpdgc-kndp"},
                                   {"method": "dpdgc-ndp", "max_degree": 5}])
def test_dp_adam_levels_train_without_dropout(given: dict) -> None:
    """DPDGC's DP-Adam classifier without dropout (issue 49: 0.5 cost it 2-10 points of
    validation accuracy on Cora and Amherst41); a given dropout, or adjacency messages
    (their own recipe), keep theirs; the non-private levels keep 0.5."""
    assert DpdgcSpec(epsilon=4.0, **given).dropout == 0.0
    assert DpdgcSpec(epsilon=4.0, dropout=0.3, **given).dropout == 0.3
    assert DpdgcSpec(epsilon=4.0, messages="adjacency", **given).dropout == 0.5
    assert DpdgcSpec(method="dpdgc-inf").dropout == 0.5
