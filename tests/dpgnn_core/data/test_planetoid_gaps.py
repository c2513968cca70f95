"""Planetoid raw files whose test index has gaps (Citeseer's isolated test nodes): a small
graph generated in the Planetoid layout, loaded as PyG loads it."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from dpgnn_core.data.graph import TEST, TRAIN, UNUSED, VAL
from dpgnn_core.data.loaders import load_planetoid
from dpgnn_core.errors import DataError

N_ALLX, N_TRAIN, D, C = 520, 12, 5, 3


def _onehot(labels: np.ndarray) -> np.ndarray:
    return np.eye(C, dtype=np.int64)[labels]


def write_planetoid(folder: Path, test_nodes: np.ndarray, name: str = "toy",
                    seed: int = 0) -> dict[int, tuple[np.ndarray, int]]:
    """Write ``ind.<name>.*`` for a graph of ``N_ALLX`` + test nodes; ``test_nodes`` lists
    the test node ids in the (shuffled) order of ``test.index``, rows of ``tx``/``ty`` in
    that order. Returns each node's (feature row, label) as the files give it."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    allx = rng.random((N_ALLX, D)).astype(np.float32) + 0.1
    ally_lab = rng.integers(0, C, N_ALLX)
    tx = rng.random((test_nodes.shape[0], D)).astype(np.float32) + 0.1
    ty_lab = rng.integers(0, C, test_nodes.shape[0])
    n = int(test_nodes.max()) + 1
    graph = {i: [int(rng.integers(0, n)), (i + 1) % n] for i in range(n)}
    parts = {"x": sp.csr_matrix(allx[:N_TRAIN]), "y": _onehot(ally_lab[:N_TRAIN]),
             "allx": sp.csr_matrix(allx), "ally": _onehot(ally_lab),
             "tx": sp.csr_matrix(tx), "ty": _onehot(ty_lab), "graph": graph}
    for part, obj in parts.items():
        with open(folder / f"ind.{name}.{part}", "wb") as f:
            pickle.dump(obj, f, protocol=2)
    (folder / f"ind.{name}.test.index").write_text(
        "".join(f"{i}\n" for i in test_nodes))
    truth = {i: (allx[i], int(ally_lab[i])) for i in range(N_ALLX)}
    truth.update({int(t): (tx[j], int(ty_lab[j])) for j, t in enumerate(test_nodes)})
    return truth


@pytest.mark.parametrize(("gaps", "name"), [(0, "toy"), (1, "toy"), (7, "toy"), (7, "citeseer")])
def test_planetoid_test_index_gaps(tmp_path: Path, gaps: int, name: str) -> None:
    rng = np.random.default_rng(gaps)
    span = np.arange(N_ALLX, N_ALLX + 40)
    missing = rng.choice(span[1:-1], size=gaps, replace=False)  # ends stay: span is known
    test_nodes = rng.permutation(np.setdiff1d(span, missing))
    truth = write_planetoid(tmp_path, test_nodes, name=name)
    d = load_planetoid(tmp_path)
    assert d.num_nodes == N_ALLX + 40 and d.num_classes == C
    for node, (row, label) in truth.items():  # every node where test.index puts it
        np.testing.assert_allclose(d.x[node], row)
        assert d.y[node] == label
    for node in missing:  # as PyG: a zero row, no label, in no split
        assert not d.x[node].any() and d.y[node] == -1 and d.split[node] == UNUSED
    assert (d.split[test_nodes] == TEST).all()
    assert (d.split[:N_TRAIN] == TRAIN).all() and (d.split[N_TRAIN:N_TRAIN + 500] == VAL).all()
    assert d.split_counts()["test"] == 40 - gaps
    assert d.meta["cleaning"]["test_index_gaps_filled"] == gaps
    assert any(f"{gaps} test-index gaps" in n for n in d.meta["cleaning"]["notes"]) == (gaps > 0)


def test_planetoid_test_index_disagrees_with_tx(tmp_path: Path) -> None:
    write_planetoid(tmp_path, np.arange(N_ALLX, N_ALLX + 10))
    (tmp_path / "ind.toy.test.index").write_text(
        "".join(f"{i}\n" for i in range(N_ALLX, N_ALLX + 12)))
    with pytest.raises(DataError, match=r"names 12 nodes .* tx/ty hold 10/10 rows"):
        load_planetoid(tmp_path)
