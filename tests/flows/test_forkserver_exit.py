"""The forkserver of a sweep's local Dask cluster freezes its heap at exit: the first module
it preloads (:data:`flows.sweep.FORKSERVER_PRELOAD`) is :mod:`dpgnn_core.freeze_at_exit`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

#: A forkserver preloading ``argv[1:]`` forks a child that runs the exit handlers it
#: inherited and tells by its exit code whether they froze the heap. The script imports no
#: dpgnn module itself (the forkserver imports this file as ``__mp_main__`` too).
_PROBE = """
import atexit, gc, multiprocessing, os, sys

def probe():
    atexit._run_exitfuncs()
    os._exit(3 if gc.get_freeze_count() > 0 else 4)

if __name__ == "__main__":
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(sys.argv[1:])
    p = ctx.Process(target=probe)
    p.start()
    p.join(60)
    print({3: True, 4: False}.get(p.exitcode, p.exitcode))
"""


@pytest.mark.skipif(sys.platform == "win32", reason="no forkserver on Windows")
@pytest.mark.parametrize("preloaded", [True, False])
def test_the_forkserver_preloads_the_freeze_at_exit_first(tmp_path: Path,
                                                          preloaded: bool) -> None:
    from flows.sweep import FORKSERVER_PRELOAD

    assert FORKSERVER_PRELOAD[0] == "dpgnn_core.freeze_at_exit"  # before the libraries
    script = tmp_path / "probe.py"
    script.write_text(_PROBE)
    preload = list(FORKSERVER_PRELOAD[:1]) if preloaded else []
    root = Path(__file__).resolve().parents[2]
    r = subprocess.run([sys.executable, str(script), *preload], capture_output=True,
                       text=True, timeout=120, cwd=root,
                       env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(root)})
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(preloaded)  # without it, the handler is not there
