"""A dataset file cannot run code (issue 48 §1): Planetoid's pickles are read by a
restricted unpickler; the other raw formats are parsed by readers that run none (checked
here with crafted files too)."""

from __future__ import annotations

import builtins
import os
import pickle
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp

from dpgnn_core.data.loaders import load_facebook100, load_planetoid
from dpgnn_core.errors import DataError
from tests.dpgnn_core.data.test_planetoid_gaps import N_ALLX, write_planetoid


class _Call:
    """Pickles as a call of ``func(*args)``: what a crafted file does."""

    def __init__(self, func: Any, *args: Any) -> None:
        self.func, self.args = func, args

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return self.func, self.args


def _payloads(marker: Path) -> dict[str, tuple[bytes, str]]:
    """name -> (pickle bytes that would create ``marker``, the global the error names)."""
    touch = f"touch {marker}"
    inside = sp.csr_matrix(np.eye(3, dtype=np.float32))
    inside.evil = _Call(os.system, touch)  # deep inside a legitimate sparse matrix
    return {
        "os.system": (pickle.dumps(_Call(os.system, touch), protocol=2),
                      f"{os.system.__module__}.system"),
        "exec": (pickle.dumps(_Call(builtins.exec, f"open({str(marker)!r}, 'w')"),
                              protocol=4), "builtins.exec"),
        "subprocess": (pickle.dumps(_Call(subprocess.call, ["touch", str(marker)]),
                                    protocol=5), "subprocess.call"),
        "nested": (pickle.dumps(inside, protocol=2), f"{os.system.__module__}.system"),
        # an attribute of an allowed global, and a codec that imports a module
        "attribute": (b"cnumpy\nndarray.__init__\n.", "numpy.ndarray.__init__"),
        "codec": (b"c_codecs\nencode\n(Vx\nVrot13\ntR.", "_codecs.encode (codec 'rot13')"),
    }


@pytest.mark.parametrize("payload", ["os.system", "exec", "subprocess", "nested",
                                     "attribute", "codec"])
def test_crafted_planetoid_pickle_does_not_run(tmp_path: Path, payload: str) -> None:
    src, marker = tmp_path / "raw", tmp_path / "MARKER"
    write_planetoid(src, np.arange(N_ALLX, N_ALLX + 40), name="citeseer")
    blob, named = _payloads(marker)[payload]
    (src / "ind.citeseer.x").write_bytes(blob)
    with pytest.raises(DataError) as e:
        load_planetoid(src)
    msg = str(e.value)
    assert not marker.exists(), "the crafted pickle ran"
    assert "\n" not in msg
    assert str(src / "ind.citeseer.x") in msg and named in msg and "refused" in msg, msg


@pytest.mark.parametrize("protocol", [0, 1, 2, 3, 4, 5])
def test_planetoid_pickles_of_every_protocol_load(tmp_path: Path, protocol: int,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The restricted unpickler admits what numpy and scipy write with any protocol (the
    published files are protocol 2, written by Python 2)."""
    dump = pickle.dump
    monkeypatch.setattr(pickle, "dump", lambda obj, f, protocol_=None, **_k: dump(
        obj, f, protocol=protocol))
    truth = write_planetoid(tmp_path, np.arange(N_ALLX, N_ALLX + 40))
    d = load_planetoid(tmp_path)
    assert d.num_nodes == N_ALLX + 40
    for node, (row, label) in list(truth.items())[::50]:
        np.testing.assert_allclose(d.x[node], row)
        assert d.y[node] == label


def test_planetoid_graph_as_defaultdict_loads(tmp_path: Path) -> None:
    """The published ``graph`` files hold a ``collections.defaultdict`` of lists."""
    from collections import defaultdict

    write_planetoid(tmp_path, np.arange(N_ALLX, N_ALLX + 40))
    with open(tmp_path / "ind.toy.graph", "rb") as f:
        graph = pickle.load(f)
    dd: defaultdict[int, list[int]] = defaultdict(list, graph)
    (tmp_path / "ind.toy.graph").write_bytes(pickle.dumps(dd, protocol=2))
    assert load_planetoid(tmp_path).num_edges > 0


def test_truncated_planetoid_pickle_is_one_line(tmp_path: Path) -> None:
    write_planetoid(tmp_path, np.arange(N_ALLX, N_ALLX + 40))
    p = tmp_path / "ind.toy.allx"
    p.write_bytes(p.read_bytes()[:100])
    with pytest.raises(DataError, match="cannot unpickle Planetoid part") as e:
        load_planetoid(tmp_path)
    assert str(p) in str(e.value) and "\n" not in str(e.value)


# --- .mat files: scipy.io.loadmat runs no code; a cell array where a matrix belongs -------


def test_facebook100_cell_array_is_refused_in_one_line(tmp_path: Path) -> None:
    import scipy.io as sio

    p = tmp_path / "School1.mat"
    cells = np.empty((4, 1), dtype=object)
    for i in range(4):
        cells[i, 0] = np.array([[1, 2]])
    sio.savemat(p, {"A": sp.csr_matrix(np.ones((4, 4))), "local_info": cells})
    with pytest.raises(DataError) as e:
        load_facebook100(p, min_class_size=1)
    msg = str(e.value)
    assert str(p) in msg and "'local_info'" in msg and "numeric" in msg and "\n" not in msg


def test_facebook100_adjacency_of_another_kind_is_refused_in_one_line(tmp_path: Path) -> None:
    import scipy.io as sio

    p = tmp_path / "School2.mat"
    sio.savemat(p, {"A": {"x": np.ones(3)},
                    "local_info": np.ones((4, 7), dtype=np.int64)})
    with pytest.raises(DataError) as e:
        load_facebook100(p, min_class_size=1)
    msg = str(e.value)
    assert str(p) in msg and "'A'" in msg and "\n" not in msg


# --- no deserialiser that runs code, anywhere in the code ---------------------------------


def _unsafe_calls(path: Path) -> list[str]:
    """The calls in ``path`` that can run code a file chooses: ``pickle.load(s)`` (other
    than the restricted unpickler's module), ``torch.load`` without
    ``weights_only=True``, ``numpy.load(allow_pickle=True)``, ``yaml.load``, and
    ``joblib`` / ``dill`` / ``cloudpickle`` loads."""
    import ast

    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        owner = node.func.value.id if isinstance(node.func.value, ast.Name) else ""
        name = node.func.attr
        kw = {k.arg: k.value for k in node.keywords}
        true = lambda v: isinstance(v, ast.Constant) and v.value is True  # noqa: E731
        bad = ((owner in ("pickle", "dill", "cloudpickle", "joblib", "marshal")
                and name in ("load", "loads"))
               or (owner == "torch" and name == "load" and not true(kw.get("weights_only")))
               or (owner in ("np", "numpy") and name == "load"
                   and kw.get("allow_pickle") is not None and not (
                       isinstance(kw["allow_pickle"], ast.Constant)
                       and kw["allow_pickle"].value is False))
               or (owner == "yaml" and name in ("load", "unsafe_load", "full_load")))
        if bad:
            found.append(f"{path}:{node.lineno}: {owner}.{name}")
    return found


def test_no_code_runs_a_file_chooses() -> None:
    root = Path(__file__).resolve().parents[3]
    files = [p for pkg in ("dpgnn_core", "tasks", "flows", "deployments")
             for p in sorted((root / pkg).rglob("*.py"))]
    assert len(files) > 50
    assert [c for f in files for c in _unsafe_calls(f)] == []
