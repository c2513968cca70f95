"""The layout rules of docs/architecture.md, checked on the source tree (no imports run).

imports run one way: ``flows -> tasks -> dpgnn_core``; ``dpgnn_core`` imports neither
Prefect nor MLflow, and only ``tasks/tracking.py`` imports MLflow. (Sizes and complexity:
tests/test_code_limits.py.)
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("dpgnn_core", "tasks", "flows")
#: Which top-level packages each layer may import.
ALLOWED = {"dpgnn_core": {"dpgnn_core"}, "tasks": {"tasks", "dpgnn_core"},
           "flows": {"flows", "tasks", "dpgnn_core"}}


def _sources() -> list[Path]:
    return sorted(p for pkg in PACKAGES for p in (REPO / pkg).rglob("*.py"))


def _imports(path: Path) -> set[str]:
    """Top-level names of every module ``path`` imports (at any depth of the file)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module.split(".")[0])
    return out


@pytest.mark.parametrize("path", _sources(), ids=lambda p: str(p.relative_to(REPO)))
def test_imports_run_one_way(path: Path) -> None:
    layer = path.relative_to(REPO).parts[0]
    ours = _imports(path) & set(PACKAGES)
    assert ours <= ALLOWED[layer], f"{path}: {layer} imports {sorted(ours - ALLOWED[layer])}"
    if layer == "dpgnn_core":
        assert not _imports(path) & {"prefect", "mlflow"}, f"{path} imports Prefect or MLflow"
    if path != REPO / "tasks" / "tracking.py":
        assert "mlflow" not in _imports(path), f"{path}: only tasks/tracking.py imports mlflow"


def test_the_checks_see_a_violation(tmp_path: Path) -> None:
    bad = tmp_path / "m.py"
    bad.write_text("import mlflow\nfrom flows.cli import main\n")
    assert _imports(bad) == {"mlflow", "flows"}
