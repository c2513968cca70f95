"""The layout rules of docs/architecture.md, checked on the source tree (no imports run, but
for the method catalogue's module names, which the registry imports by name).

imports run one way: ``flows -> tasks -> dpgnn_core``; ``dpgnn_core`` imports neither
Prefect nor MLflow, and only ``tasks/tracking.py`` imports MLflow. (Sizes and complexity:
tests/test_code_limits.py.)
"""

from __future__ import annotations

import ast
import re
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


# --- no import cycle between modules -------------------------------------------------------
#: Import cycles that exist today, each to be broken by its own work item; a cycle found must
#: lie inside one of these groups, so none can grow and no new one can appear.
KNOWN_CYCLES: tuple[frozenset[str], ...] = ()


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_checking(node: ast.If) -> bool:
    t = node.test
    return ((isinstance(t, ast.Name) and t.id == "TYPE_CHECKING")
            or (isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING"))


def _import_nodes(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement at any depth (function-local ones too), but not the body of an
    ``if TYPE_CHECKING:`` (its ``else`` runs, so it counts)."""
    out: list[ast.Import | ast.ImportFrom] = []
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _type_checking(node):
            stack.extend(node.orelse)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            out.append(node)
        else:
            stack.extend(ast.iter_child_nodes(node))
    return out


def _targets(name: str, path: Path, node: ast.Import | ast.ImportFrom,
             modules: set[str]) -> list[str]:
    """The dotted names ``node`` imports: ``from a.b import c`` is module ``a.b.c`` where one
    exists, else ``a.b``; relative imports are resolved against ``name``."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    base = node.module or ""
    if node.level:
        pkg = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        pkg = pkg[:len(pkg) - (node.level - 1)]
        base = ".".join([*pkg, base] if base else pkg)
    return [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]


def _imports_by_name(name: str, path: Path, tree: ast.AST, modules: set[str]) -> set[str]:
    """What a module that imports by name (``importlib.import_module``, ``__import__``) may
    import, read conservatively: every string of the file that names one of our modules,
    whole (``"dpgnn_core.models.gnn"``) or under the file's package when it joins
    ``__name__`` (``f"{__name__}.{_WHERE[name]}"`` with ``_WHERE`` values ``"graph"``)."""
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)
             and ((isinstance(n.func, ast.Attribute) and n.func.attr == "import_module")
                  or (isinstance(n.func, ast.Name)
                      and n.func.id in ("import_module", "__import__")))]
    if not calls:
        return set()
    pkg = name if path.name == "__init__.py" else name.rpartition(".")[0]
    strings = {n.value for n in ast.walk(tree)
               if isinstance(n, ast.Constant) and isinstance(n.value, str)}
    return ({s for s in strings if s in modules}
            | {f"{pkg}.{s}" for s in strings if f"{pkg}.{s}" in modules})


def import_graph(root: Path = REPO) -> dict[str, set[str]]:
    """Our modules (``dpgnn_core``, ``tasks``, ``flows``) to the ones of ours each imports:
    the deepest module of a dotted name that exists (a package is its ``__init__``), at
    any depth of the file, and by name (:func:`_imports_by_name`)."""
    paths = {_module_name(p, root): p for pkg in PACKAGES for p in (root / pkg).rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        edges: set[str] = set()
        tree = ast.parse(path.read_text(), str(path))
        for node in _import_nodes(tree):
            for t in _targets(name, path, node, set(paths)):
                while t and t not in paths:
                    t = t.rpartition(".")[0]
                if t and t != name:
                    edges.add(t)
        graph[name] = edges | (_imports_by_name(name, path, tree, set(paths)) - {name})
    return graph


def with_registry_imports(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """``graph`` with the imports the method registry makes by name: the implementing
    module of every catalogue entry (the names are data in the specs' entries, read here
    from the catalogue itself, which imports no torch)."""
    from dpgnn_core.methods.catalog import CATALOG

    registry = "dpgnn_core.methods.registry"
    named = {e.module for e in CATALOG.values()}
    assert named and named <= set(graph), sorted(named - set(graph))
    return {**graph, registry: graph[registry] | named}


def import_cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[frozenset[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            w = next(children, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = set()
                while True:
                    x = stack.pop()
                    on_stack.discard(x)
                    comp.add(x)
                    if x == v:
                        break
                if len(comp) > 1:
                    out.append(frozenset(comp))
    return out


def test_no_import_cycle_outside_the_known_ones() -> None:
    """Issue 50: no cycle between source files, counting imports inside functions and the
    imports by name (the registry's of each family's module, the lazy packages')."""
    new = [sorted(c) for c in import_cycles(with_registry_imports(import_graph()))
           if not any(c <= known for known in KNOWN_CYCLES)]
    assert not new, f"import cycles (TYPE_CHECKING imports aside): {new}"


def test_the_cycle_check_sees_a_cycle(tmp_path: Path) -> None:
    (tmp_path / "tasks").mkdir()
    (tmp_path / "flows").mkdir()
    (tmp_path / "dpgnn_core").mkdir()
    (tmp_path / "tasks" / "__init__.py").write_text("")
    (tmp_path / "tasks" / "a.py").write_text("def f():\n    from tasks.b import g\n")
    (tmp_path / "tasks" / "b.py").write_text("from . import c\n")
    (tmp_path / "tasks" / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from tasks import b\n"
        "import tasks.a\n")
    (tmp_path / "flows" / "x.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from flows import y\n")
    (tmp_path / "flows" / "y.py").write_text("import flows.x\n")
    (tmp_path / "dpgnn_core" / "__init__.py").write_text(
        "import importlib\n_WHERE = {'f': 'low'}\n"
        "def __getattr__(n):\n    return importlib.import_module(f'{__name__}.{_WHERE[n]}')\n")
    (tmp_path / "dpgnn_core" / "low.py").write_text("")
    (tmp_path / "dpgnn_core" / "reg.py").write_text(
        "import importlib\nNAMES = ('dpgnn_core.impl',)\n"
        "def load():\n    return [importlib.import_module(n) for n in NAMES]\n")
    (tmp_path / "dpgnn_core" / "impl.py").write_text(
        "def f():\n    from dpgnn_core.reg import load\n")
    graph = import_graph(tmp_path)
    assert graph["tasks.b"] == {"tasks.c"} and graph["flows.x"] == set()
    assert graph["dpgnn_core"] == {"dpgnn_core.low"}  # by name, joined to __name__
    assert graph["dpgnn_core.reg"] == {"dpgnn_core.impl"}  # by name, from a string
    assert sorted(map(sorted, import_cycles(graph))) == [
        ["dpgnn_core.impl", "dpgnn_core.reg"], ["tasks.a", "tasks.b", "tasks.c"]]


def test_the_budget_is_one_package() -> None:
    """Issue 50 §5: the odometer's store, records, reporting and changes live in the
    package ``dpgnn_core.budget`` (its public face in ``__init__``), none loose beside it."""
    loose = sorted(p.name for p in (REPO / "dpgnn_core").glob("budget*.py"))
    assert not loose, f"budget modules outside dpgnn_core/budget/: {loose}"
    import dpgnn_core.budget as budget

    assert {"BudgetStore", "Budget", "BudgetExceeded", "Filter", "decide"} <= set(budget.__all__)


#: A decorator line marking a test ``waits`` (a file-wide ``pytestmark`` would do too).
_MARKS_WAITS = re.compile(r"^\s*(@pytest\.mark\.waits\b|pytestmark\b.*\bmark\.waits\b)",
                          re.MULTILINE)


def _waits_outside(tests: Path, makefile: Path) -> list[str]:
    """Test files that mark a test ``waits`` outside the folders the Makefile's ``WAITS``
    names: ``make test`` runs ``-m "not waits"`` on xdist and ``-m waits $(WAITS)`` beside
    it, so such a test would run in neither."""
    line = next(x for x in makefile.read_text().splitlines() if x.startswith("WAITS :="))
    folders = [tests.parent / d for d in line.split(":=", 1)[1].split()]
    return sorted(str(p.relative_to(tests.parent)) for p in tests.rglob("test_*.py")
                  if _MARKS_WAITS.search(p.read_text())
                  and not any(p == f or f in p.parents for f in folders))


def test_every_test_that_waits_runs_in_make_test() -> None:
    make = (REPO / "Makefile").read_text()
    assert '-m "not waits"' in make
    # Two sessions of the tests that wait, which between them run all of $(WAITS).
    assert "-m waits --durations=8 $(WAITS_1)" in make
    assert "-m waits --durations=8 $(WAITS_2)" in make
    assert "WAITS_2 := $(filter-out $(WAITS_1),$(WAITS))" in make
    lines = dict(x.split(" := ", 1) for x in make.splitlines() if x.startswith("WAITS"))
    assert set(lines["WAITS_1"].split()) <= set(lines["WAITS"].split())
    assert _waits_outside(REPO / "tests", REPO / "Makefile") == []
    marked = [p for p in (REPO / "tests").rglob("test_*.py")
              if _MARKS_WAITS.search(p.read_text())]
    assert len(marked) >= 3  # the schedule tests of tests/deployments and tests/team


def test_the_waits_check_sees_a_test_outside(tmp_path: Path) -> None:
    (tmp_path / "tests" / "flows").mkdir(parents=True)
    (tmp_path / "tests" / "team").mkdir()
    (tmp_path / "Makefile").write_text("WAITS := tests/team tests/flows/test_c.py\n")
    (tmp_path / "tests" / "flows" / "test_c.py").write_text("pytestmark = pytest.mark.waits\n")
    (tmp_path / "tests" / "team" / "test_a.py").write_text("@pytest.mark.waits\n")
    assert _waits_outside(tmp_path / "tests", tmp_path / "Makefile") == []
    (tmp_path / "tests" / "flows" / "test_b.py").write_text("@pytest.mark.waits\n")
    assert _waits_outside(tmp_path / "tests", tmp_path / "Makefile") == ["tests/flows/test_b.py"]
