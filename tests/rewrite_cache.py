"""Writes pytest's assertion-rewritten bytecode of every test module and ``conftest.py``
under the given folders once, before `make test`'s pytest processes start (Makefile).

pytest rewrites the asserts of each test module it imports and caches the result in
``__pycache__`` (``*.cpython-311-pytest-<version>.pyc``), but writes no cache where
``PYTHONDONTWRITEBYTECODE`` is set (these machines set it): each of the suite's pytest
processes (two xdist workers, the two sessions of the tests that wait, the child pytests of
some tests) parsed, rewrote and compiled every module it collects again. Collecting the
whole suite took 13.9-16.7 s of CPU without the cache and 8.9-9.2 s with it. pytest reads
a cached file whatever that variable says, and checks it against its source's hash, so a
stale file is rewritten, never used. pytest has no public API for this; what is used here
(``_rewrite_test``, ``_write_pyc``, ``_read_pyc``, ``get_cache_dir``, ``PYC_TAIL``) is the
pinned pytest's (constraints.txt), and anything that fails only leaves pytest to rewrite as
before.

    python tests/rewrite_cache.py tests [PART/PARTS]

``PART/PARTS`` (e.g. ``0/2``): only every PARTS-th module from the PART-th, so that two
processes share the work (`make test` runs two, beside ``compileall``).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any


class _State:
    """What ``_write_pyc`` reads of pytest's ``AssertionState``: its trace."""

    @staticmethod
    def trace(message: str) -> None:
        del message


def write(folder: str, part: int = 0, parts: int = 1) -> int:
    """Write the missing or stale rewritten modules under ``folder`` (this process's
    ``part`` of ``parts``); return how many."""
    try:
        from _pytest.assertion import rewrite
    except ImportError:
        return 0
    written = 0
    modules = sorted(fn for fn in Path(folder).rglob("*.py")
                     if fn.name.startswith("test_") or fn.name == "conftest.py")
    for fn in modules[part::parts]:
        try:
            pyc = rewrite.get_cache_dir(fn) / (fn.name[:-3] + rewrite.PYC_TAIL)
            if rewrite._read_pyc(fn, pyc) is not None:
                continue
            source_hash, co = rewrite._rewrite_test(fn, None)  # type: ignore[arg-type]
            pyc.parent.mkdir(exist_ok=True)
            state: Any = _State()
            written += bool(rewrite._write_pyc(state, co, source_hash, pyc))
        except (AttributeError, OSError, SyntaxError, TypeError, ValueError):
            continue  # pytest rewrites it itself (and reports a syntax error properly)
    return written


if __name__ == "__main__":
    share = sys.argv[2] if len(sys.argv) > 2 else "0/1"
    write(sys.argv[1], *(int(x) for x in share.split("/")))
