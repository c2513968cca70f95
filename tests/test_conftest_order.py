"""The test order under pytest-xdist (tests/conftest.py ``pytest_collection_modifyitems``):
a permutation of the collection, each worker's block starting with its share of the slow
tests; no change without xdist."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from tests.conftest import pytest_collection_modifyitems


class _Item:
    def __init__(self, name: str, *marks: str) -> None:
        self.name, self.marks = name, marks

    def get_closest_marker(self, name: str) -> Any:
        return object() if name in self.marks else None

    def __repr__(self) -> str:
        return self.name


def _collection(n_fast: int, slow: list[tuple[str, ...]]) -> list[Any]:
    items: list[Any] = [_Item(f"f{i}") for i in range(n_fast)]
    for j, marks in enumerate(slow):  # the slow ones last, as tests/flows come last
        items.append(_Item(f"s{j}", *marks))
    return items


def _order(items: list[Any], workers: int | None) -> list[Any]:
    config = SimpleNamespace() if workers is None else SimpleNamespace(
        workerinput={"workercount": workers})
    out = list(items)
    pytest_collection_modifyitems(config, out)  # type: ignore[arg-type]
    return out


def _blocks(items: list[Any], workers: int) -> list[list[Any]]:
    """The blocks pytest-xdist's worksteal gives each worker at the start."""
    out, left = [], list(items)
    for k in range(workers):
        size = len(left) // (workers - k)
        out.append(left[:size])
        del left[:size]
    return out


@pytest.mark.parametrize("workers", [2, 3, 4])
def test_each_block_starts_with_its_share_of_the_slow_tests(workers: int) -> None:
    slow = [("slow",), ("integration", "slow"), ("slow",), ("slow",), ("integration",),
            ("slow",), ("slow",)]
    items = _collection(40, slow)
    got = _order(items, workers)
    assert sorted(map(repr, got)) == sorted(map(repr, items))  # nothing lost or repeated
    assert len(got) == len(items)
    blocks = _blocks(got, workers)
    n_slow = [sum(1 for i in b if i.marks) for b in blocks]
    assert sum(n_slow) == len(slow) and max(n_slow) - min(n_slow) <= 1
    for b, k in zip(blocks, n_slow, strict=True):
        assert all(i.marks for i in b[:k]) and not any(i.marks for i in b[k:])
    # those that start servers come before the other slow ones in every block
    for b, k in zip(blocks, n_slow, strict=True):
        kinds = ["integration" in i.marks for i in b[:k]]
        assert kinds == sorted(kinds, reverse=True)
    # the fast tests keep their relative order
    fast = [i for i in got if not i.marks]
    assert fast == [i for i in items if not i.marks]


@pytest.mark.parametrize("workers", [None, 1])
def test_without_xdist_the_order_is_the_collections(workers: int | None) -> None:
    items = _collection(10, [("slow",), ("integration",)])
    assert _order(items, workers) == items


def test_more_slow_tests_than_a_block_holds_still_a_permutation() -> None:
    items = _collection(2, [("slow",)] * 9)
    got = _order(items, 3)
    assert sorted(map(repr, got)) == sorted(map(repr, items))
