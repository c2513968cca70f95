"""Shared fixtures. Real datasets come from ../shared/datasets (skipped when absent)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

# One project directory per test process, set before `tasks` (and so Prefect) is imported.
_HOME = Path(tempfile.mkdtemp(prefix="dpgnn-test-home-"))
os.environ["DPGNN_HOME"] = str(_HOME)
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.pop("PREFECT_API_URL", None)

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared" / "datasets"


@pytest.fixture(scope="session")
def shared() -> Path:
    """The real datasets folder; skips the test when it is absent."""
    if not SHARED.is_dir():
        pytest.skip(f"real datasets not found at {SHARED} (clone with ../shared beside it)")
    return SHARED


@pytest.fixture(scope="session")
def home() -> Path:
    return _HOME
