"""Which neighbouring relation DP-GNN's sampler supports: an empirical coupling test.

Both graphs are sampled with the same uniform per edge (a coupling of the two runs); a
training subgraph counts as changed when its nodes or edges differ, or when it holds the
changed node in either graph (its features differ). The accountant assumes at most M
changed subgraphs: N(K,r) for ``node_feature`` (structure public: trivially, only the
subgraphs holding the node), 2N(K,r) - 1 for ``node`` on directed graphs. On undirected
graphs no such bound exists, which is why node level is refused there. The coupled
sampler and the count are DP-GNN's registered sensitivity check's
(dpgnn_core/methods/brute_force/subgraphs.py), which the sensitivity contract runs.
"""

from __future__ import annotations

import numpy as np
import pytest

from dpgnn_core.data.synthetic import csbm
from dpgnn_core.errors import DpgnnError
from dpgnn_core.methods.brute_force.subgraphs import changed_subgraphs
from dpgnn_core.methods.brute_force.subgraphs import random_directed as _random_directed
from dpgnn_core.methods.brute_force.subgraphs import replace_in_row as _replace_in_row
from dpgnn_core.methods.dp_gnn import marked_subgraphs, train_dpgnn
from dpgnn_core.privacy import neighbourhood_size
from dpgnn_core.specs import DpgnnSpec


@pytest.mark.parametrize(("k", "r"), [(2, 1), (3, 1), (2, 2), (4, 2)])
def test_directed_node_level_touches_at_most_2n_minus_1(k: int, r: int) -> None:
    rng = np.random.default_rng(k * 10 + r)
    bound = 2 * neighbourhood_size(k, r) - 1
    worst = 0
    for trial in range(40):
        n = 40
        ei = _random_directed(rng, n, int(rng.integers(60, 200)))
        v = int(rng.integers(n))
        # Adversarial rows: empty, a few sources, or many (v then exceeds K and is dropped).
        size = int(rng.choice([0, 1, k, 2 * k, 4 * k]))
        new = rng.choice(np.delete(np.arange(n), v), size=min(size, n - 1), replace=False)
        ei_b = _replace_in_row(ei, v, new)
        for salt in range(3):
            c = changed_subgraphs(ei, ei_b, n, v, k, r, salt + 100 * trial)
            assert c <= bound, (trial, salt, c, bound)
            worst = max(worst, c)
    # The replace-one union is needed: N(K,r) alone is exceeded (one hop is enough for
    # random graphs of this size to show it).
    if r == 1:
        assert worst > neighbourhood_size(k, r)


def test_undirected_star_of_stars_breaks_any_occurrence_bound() -> None:
    """A node adjacent to 200 nodes with 3 leaves each: removing its edges changes the keep
    probability min(1, K/(2|RE_w|)) of every neighbour w, so subgraphs that never hold it
    change. Far more than 2N(K,r) - 1: why node level is refused on undirected graphs."""
    hub, mids = 0, np.arange(1, 201)
    leaves = 201 + np.arange(600)
    src = np.concatenate([np.zeros(200, np.int64), np.repeat(mids, 3)])
    dst = np.concatenate([mids, leaves])
    und = np.concatenate([np.stack([src, dst]), np.stack([dst, src])], axis=1)
    without_hub = und[:, (und[0] != hub) & (und[1] != hub)]
    k, r = 7, 1
    changed = changed_subgraphs(und, without_hub, 801, hub, k, r, salt=1)
    assert changed > 2 * neighbourhood_size(k, r) - 1
    assert changed > 40  # the audit's estimate: ~75 changed subgraphs against N(7,1) = 8


@pytest.mark.slow  # > 4 s of CPU (make test-fast leaves it out)
def test_node_level_refused_on_undirected_and_accounted_with_the_union() -> None:
    data = csbm(num_nodes=300, avg_degree=6, seed=2)
    assert not data.directed
    with pytest.raises(DpgnnError, match="directed"):
        train_dpgnn(data, DpgnnSpec(epsilon=4.0, level="node", steps=3, batch_size=16,
                                    hidden=8, device="cpu"))
    spec = DpgnnSpec(epsilon=4.0, steps=3, batch_size=16, hidden=8, max_degree=3,
                     device="cpu")
    r = train_dpgnn(data, spec)
    assert r.report["level"] == "node_feature" and r.report["relation"] == "replace"
    assert "structure" in r.report["protects"] and r.report["marked_subgraphs"] == 4
    directed = data.__class__(**{**data.__dict__, "directed": True})
    node = spec.model_copy(update={"level": "node"})
    rn = train_dpgnn(directed, node)
    (event,) = rn.ledger.events
    assert event.level == "node" and event.marked_subgraphs == marked_subgraphs(node) == 7
    # More marked subgraphs cost more noise for the same budget.
    assert rn.report["noise_multiplier"] > r.report["noise_multiplier"]
