"""Issue 50 §6: a model picks its layers from a typed table of convolutions (its ``CONVS``),
not by comparing a ``conv`` string in its code: every model module is read (``ast``) for a
comparison with a ``conv`` attribute or name, and each table's entries are typed."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

MODELS = Path(__file__).resolve().parents[3] / "dpgnn_core" / "models"


def _conv_comparisons(path: Path) -> list[int]:
    """Lines of ``x.conv == ...``, ``conv != ...`` and ``{...}.get(conv)``."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        sides: list[ast.expr] = []
        if isinstance(node, ast.Compare) and any(
                isinstance(op, (ast.Eq, ast.NotEq)) for op in node.ops):
            sides = [node.left, *node.comparators]
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr == "get" and isinstance(node.func.value, ast.Dict)):
            sides = list(node.args)
        if any((isinstance(s, ast.Attribute) and s.attr == "conv")
               or (isinstance(s, ast.Name) and s.id == "conv") for s in sides):
            out.append(node.lineno)
    return out


def test_no_model_dispatches_on_a_conv_string() -> None:
    found = {p.name: _conv_comparisons(p) for p in sorted(MODELS.glob("*.py"))}
    assert len(found) > 5 and not {k: v for k, v in found.items() if v}, found


def test_the_check_sees_a_dispatch(tmp_path: Path) -> None:
    bad = tmp_path / "m.py"
    bad.write_text("def f(self, conv):\n    if self.conv == 'gcn':\n        pass\n"
                   "    return {'gcn': 1}.get(conv)\n")
    assert _conv_comparisons(bad) == [2, 4]


def test_every_spec_conv_has_an_entry() -> None:
    pytest.importorskip("torch_geometric")
    from typing import get_args

    from dpgnn_core.models import graph_gnn, subgraph_gnn
    from dpgnn_core.specs import GraphClsSpec, SubgraphSpec

    for table, spec, kind in ((subgraph_gnn.CONVS, SubgraphSpec, subgraph_gnn.SubgraphConv),
                              (graph_gnn.CONVS, GraphClsSpec, graph_gnn.GraphConv)):
        assert set(table) == set(get_args(spec.model_fields["conv"].annotation))
        assert all(isinstance(c, kind) for c in table.values())
