"""Size and complexity limits of the source (issue 27 §5): no function above McCabe
complexity 15 (ruff's C901, set in pyproject.toml so ``make lint`` enforces it) and no
source file above 600 lines, each file holding one idea."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("dpgnn_core", "tasks", "flows", "benchmarks")
MAX_LINES = 600
#: Files allowed above the limit until they are split (none left: specs.py became the
#: dpgnn_core/specs/ package, one module per family, and GAP's shared row training and staged
#: composition left methods/gap.py); a file added here needs an issue that splits it.
OVER_THE_LIMIT: set[str] = set()


def test_pyproject_enforces_complexity():
    lint = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["ruff"]["lint"]
    assert "C90" in lint["select"]
    assert lint["mccabe"]["max-complexity"] == 15


def test_no_function_above_complexity_15():
    pytest.importorskip("ruff")
    run = subprocess.run([sys.executable, "-m", "ruff", "check", "--select", "C901",
                          "--output-format", "concise", *PACKAGES], cwd=ROOT,
                         capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stdout + run.stderr


def test_no_source_file_above_600_lines():
    sizes = {str(p.relative_to(ROOT)): len(p.read_text().splitlines())
             for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}
    assert len(sizes) > 50  # the walk found the source
    over = {f: n for f, n in sizes.items() if n > MAX_LINES and f not in OVER_THE_LIMIT}
    assert not over, over


def test_no_context_variable_carries_a_fits_privacy_path():
    """Issue 50 §3: a fit's calibration, budget reservation, releases and ε reach it through
    one explicit engine (``methods/private_run.PrivateRun``), never a context variable: none
    in ``dpgnn_core/methods`` nor in the release gate."""
    files = [*(ROOT / "dpgnn_core" / "methods").rglob("*.py"),
             ROOT / "dpgnn_core" / "privacy" / "gate.py"]
    assert len(files) > 10  # the walk found the source
    found = [str(p.relative_to(ROOT)) for p in files
             if "ContextVar" in p.read_text() or "contextvars" in p.read_text()]
    assert not found, found
