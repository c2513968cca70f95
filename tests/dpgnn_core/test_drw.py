"""DRW, DRW-R and DRW-D training: the ledger's sampling rate, one subgraph of sensitivity,
learning, partitions re-drawn every k steps."""

from __future__ import annotations

import itertools

import pytest

from dpgnn_core.data.synthetic import csbm
from dpgnn_core.methods import drw as drw_method
from dpgnn_core.methods.drw import evaluate_drw, train_drw
from dpgnn_core.privacy import PrivacyError, RdpAccountant, drw_sampling_rate
from dpgnn_core.specs import DrwSpec

DATA = csbm(num_nodes=2000, homophily=0.9, feature_signal=1.5, seed=0)
BASE = {"steps": 80, "batch_size": 40, "hidden": 32, "walk_length": 4, "device": "cpu"}


@pytest.mark.parametrize(("variant", "restarts"), [("drw", 1), ("drw-r", 2), ("drw-d", 1)])
def test_variants_learn_within_budget(variant: str, restarts: int) -> None:
    spec = DrwSpec(epsilon=8.0, variant=variant, restarts=restarts, resample_every=20,
                   insecure_reproducible_noise=True, **BASE)  # learning, not privacy
    r = train_drw(DATA, spec)
    n_train = int(DATA.mask("train").sum())
    (event,) = r.ledger.events
    assert event.sampling_rate == pytest.approx(drw_sampling_rate(n_train, 40, 4, restarts))
    assert RdpAccountant().epsilon(r.ledger, r.report["delta"]) <= 8.0
    assert r.report["noise_std"] == pytest.approx(r.report["noise_multiplier"] * 2 * 1.0)
    assert evaluate_drw(r.model, DATA, "cpu")["test"]["accuracy"] > 0.3
    # Ayle et al.'s unit: features and labels, structure public (the walks read the edges).
    assert event.level == "node_feature" and event.relation == "replace"
    assert r.report["level"] == "node_feature" and r.report["relation"] == "replace"
    assert "structure is public" in r.report["protects"]
    assert "edges" in r.report["protects"] and "not protected" in r.report["protects"]


def test_drw_d_draws_a_new_partition_every_k_steps(monkeypatch) -> None:
    seen = []
    real = drw_method.drw_partitions

    def counting(*args, **kwargs):
        for part in real(*args, **kwargs):
            seen.append(part)
            yield part

    monkeypatch.setattr(drw_method, "drw_partitions", counting)
    train_drw(DATA, DrwSpec(variant="drw-d", resample_every=10, **{**BASE, "steps": 30}))
    assert len(seen) == 3
    assert not all((a.nodes.shape == b.nodes.shape and (a.nodes == b.nodes).all())
                   for a, b in itertools.pairwise(seen))


def test_batch_larger_than_a_partition_refused() -> None:
    with pytest.raises(PrivacyError, match="exceeds"):
        train_drw(DATA, DrwSpec(epsilon=1.0, **{**BASE, "batch_size": 1000}))
    with pytest.raises(ValueError, match="drw-r"):
        DrwSpec(variant="drw", restarts=3)
