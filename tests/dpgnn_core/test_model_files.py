"""Issue 50 §6: the registry owns saving and loading, from each family's one ``build(spec,
in_dim, num_classes)``; a ``model.pt`` written before (with the ``kind`` string that once
tied a file to its method's own save and load) still loads, weights and all."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from dpgnn_core.methods import registry
from dpgnn_core.methods.catalog import CATALOG
from dpgnn_core.models.dpdgc import AdjacencyEncoder
from dpgnn_core.serialize import torch_save

#: One name per family, its old ``kind`` and small options.
FAMILIES: dict[str, tuple[str, dict[str, Any]]] = {
    "gcn": ("baseline", {"hidden": 8}),
    "dp-sage": ("dpgnn", {"hidden": 8}),
    "drw-gcn": ("drw", {"hidden": 8}),
    "dp-mlp": ("dp_mlp", {"hidden": 8}),
    "gap-edp": ("gap", {"hidden": 8, "encoder_dim": 4, "epsilon": 1.0}),
    "progap-edp": ("progap", {"hidden": 4, "stages": 2, "epsilon": 1.0}),
    "dp-graph-gat": ("graph_cls", {"hidden": 8, "epsilon": 1.0}),
    "dpdgc-edp": ("dpdgc", {"hidden": 8, "adj_dim": 4, "epsilon": 1.0}),
}


def _old_file(path: Path, kind: str, model: torch.nn.Module, spec: Any, in_dim: int,
              num_classes: int) -> dict[str, Any]:
    """What ``_private.save_model`` wrote before issue 50, read back."""
    torch_save({"kind": kind, "spec": spec.model_dump(mode="json"), "in_dim": in_dim,
                "num_classes": num_classes,
                "state_dict": {k: v.cpu() for k, v in model.state_dict().items()}},
               str(path), target=str(path))
    blob: dict[str, Any] = torch.load(path, weights_only=True)
    return blob


def _same_weights(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


#: The families that had model files before issue 50 (what ``FAMILIES`` must cover). A
#: family added since has no file in the old format, and needs no entry here: adding a
#: method (docs/adding-a-method.md) touches no test of another family.
BEFORE_ISSUE_50 = {"baseline", "dp-gnn", "drw", "dp-mlp", "gap", "progap", "graph-cls", "dpdgc"}


def test_every_family_with_old_files_is_covered() -> None:
    families = {e.family for e in CATALOG.values()}
    assert BEFORE_ISSUE_50 <= families  # none of them left the catalogue
    assert {CATALOG[n].family for n in FAMILIES} == BEFORE_ISSUE_50


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_a_file_written_before_loads(name: str, tmp_path: Path) -> None:
    kind, options = FAMILIES[name]
    m = registry.get(name)
    spec = m.spec(**options)
    torch.manual_seed(0)
    model = m.build(spec, 5, 3)
    if name == "dpdgc-edp":  # a run with adjacency messages keeps the released W
        w = torch.randn(7, spec.adj_dim)
        model.attach_encoder(AdjacencyEncoder(7, spec.adj_dim))  # type: ignore[operator]
        model.encoder.weight.copy_(w)  # type: ignore[union-attr]
    method, loaded, stored = registry.load_blob(
        _old_file(tmp_path / "model.pt", kind, model, spec, 5, 3))
    assert method is m and stored == spec and not loaded.training
    assert _same_weights(loaded, model)


def test_gap_loads_a_classifier_saved_without_its_encoder(tmp_path: Path) -> None:
    m = registry.get("gap-edp")
    spec = m.spec(hidden=8, encoder_dim=4, epsilon=1.0)
    model = m.build(spec, 5, 3)
    model.encoder = None
    _, loaded, _ = registry.load_blob(_old_file(tmp_path / "m.pt", "gap", model, spec, 5, 3))
    assert loaded.encoder is None and _same_weights(loaded, model)


def test_the_registry_writes_what_it_reads(tmp_path: Path) -> None:
    """Every method's file is written by the registry, the same way: weights, spec and
    dims, and no per-method kind string."""
    m = registry.get("dp-mlp")
    spec = m.spec(hidden=8)
    model = m.build(spec, 5, 3)
    from dpgnn_core.methods.contract import write_model

    write_model(str(tmp_path / "model.pt"), model, spec, 5, 3)
    blob = torch.load(tmp_path / "model.pt", weights_only=True)
    assert set(blob) == {"spec", "in_dim", "num_classes", "state_dict"}
    assert _same_weights(m.load(blob)[0], model)
