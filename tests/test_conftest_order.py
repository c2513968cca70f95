"""The test order under pytest-xdist (tests/conftest.py ``pytest_collection_modifyitems``):
a permutation of the collection, each worker's block starting with its share of the slow
tests, a module's slow tests together in one block; no change without xdist."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from tests.conftest import pytest_collection_modifyitems


class _Item:
    def __init__(self, name: str, *marks: str, module: str = "m") -> None:
        self.name, self.marks = name, marks
        self.nodeid = f"tests/{module}.py::{name}"

    def get_closest_marker(self, name: str) -> Any:
        return object() if name in self.marks else None

    def __repr__(self) -> str:
        return self.name


def _collection(n_fast: int, slow: list[tuple[str, ...]]) -> list[Any]:
    """``n_fast`` fast tests, then the ``slow`` ones (their marks; a mark ``mod:NAME``
    names the module, else each is a module of its own)."""
    items: list[Any] = [_Item(f"f{i}") for i in range(n_fast)]
    for j, marks in enumerate(slow):  # the slow ones last, as tests/flows come last
        module = next((m[4:] for m in marks if m.startswith("mod:")), f"s{j}")
        items.append(_Item(f"s{j}", *(m for m in marks if not m.startswith("mod:")),
                           module=module))
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
    slow = [("slow", "mod:a"), ("integration", "slow"), ("slow",), ("slow", "mod:a"),
            ("integration",), ("slow",), ("slow", "mod:a"), ("slow", "mod:b"),
            ("integration", "mod:b")]
    items = _collection(40, slow)
    got = _order(items, workers)
    assert sorted(map(repr, got)) == sorted(map(repr, items))  # nothing lost or repeated
    assert len(got) == len(items)
    blocks = _blocks(got, workers)
    n_slow = [sum(1 for i in b if i.marks) for b in blocks]
    assert sum(n_slow) == len(slow)
    assert max(n_slow) - min(n_slow) <= 3  # a module's slow tests go together (a: 3)
    for b, k in zip(blocks, n_slow, strict=True):
        assert all(i.marks for i in b[:k]) and not any(i.marks for i in b[k:])
        # each module's slow tests one after the other, in one block
        modules = [i.nodeid.split("::")[0] for i in b[:k]]
        assert modules == sorted(modules, key=modules.index)
        # the modules with a test that starts servers come before the others
        serves = {m for m, i in zip(modules, b, strict=False) if "integration" in i.marks}
        kinds = [m in serves for m in modules]
        assert kinds == sorted(kinds, reverse=True)
    where = {i.nodeid: n for n, b in enumerate(blocks) for i in b if i.marks}
    assert len({where[i.nodeid] for i in got if i.nodeid.startswith("tests/a.py")}) == 1
    assert len({where[i.nodeid] for i in got if i.nodeid.startswith("tests/b.py")}) == 1
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
