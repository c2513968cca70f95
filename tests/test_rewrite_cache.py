"""tests/rewrite_cache.py writes the rewritten modules pytest itself would cache, which a
pytest process reads even where PYTHONDONTWRITEBYTECODE keeps it from writing any."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from _pytest.assertion import rewrite

from tests.rewrite_cache import write

MODULE = "def test_x():\n    a = [1]\n    assert a == [2]\n"


def _pyc(fn: Path) -> Path:
    return rewrite.get_cache_dir(fn) / (fn.name[:-3] + rewrite.PYC_TAIL)


def test_the_written_module_is_the_one_pytest_reads_and_a_stale_one_is_rewritten(
        tmp_path: Path) -> None:
    fn = tmp_path / "test_one.py"
    fn.write_text(MODULE)
    (tmp_path / "helper.py").write_text("x = 1\n")  # not a test module: not rewritten
    assert [write(str(tmp_path), part, 2) for part in (0, 1)] == [1, 0]
    assert write(str(tmp_path)) == 0  # up to date
    assert sorted(p.name for p in _pyc(fn).parent.iterdir()) == [_pyc(fn).name]
    # pytest (not writing bytecode) runs the cached module: its assertion is rewritten, so
    # the failure explains itself; then the source changes and the cache is rewritten.
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        "-p", "no:xdist", str(fn)], env=env, capture_output=True, text=True,
                       cwd=tmp_path, timeout=120)
    assert "assert [1] == [2]" in r.stdout, r.stdout
    fn.write_text(MODULE.replace("[2]", "[1]"))
    assert rewrite._read_pyc(fn, _pyc(fn)) is None  # pytest would not use the stale file
    assert write(str(tmp_path)) == 1
    assert rewrite._read_pyc(fn, _pyc(fn)) is not None
