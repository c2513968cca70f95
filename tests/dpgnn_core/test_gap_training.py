"""GAP's and ProGAP's module training (issue 28): dropout only in training mode, batch norm
at edge level and ∞ only, mini-batch epochs that visit every row once, the best validation
epoch kept, level-dependent defaults, the options in `dpgnn run gap-edp --help`."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import Tensor, nn

from dpgnn_core.data.synthetic import csbm
from dpgnn_core.errors import DataError
from dpgnn_core.methods import _row_training as row_training
from dpgnn_core.methods import gap, progap
from dpgnn_core.specs import GapSpec, ProgapSpec, parse_spec
from dpgnn_core.training.dp_sgd import check_dp_compatible

DATA = csbm(num_nodes=400, homophily=0.9, feature_signal=0.6, feature_dim=12, seed=5)


def _roots(spec: GapSpec | ProgapSpec) -> list[nn.Module]:
    """GAP's encoder and classifier, or ProGAP's model, as the spec builds them."""
    if spec.method.startswith("progap"):
        return [progap.new_model(DATA, spec)]  # type: ignore[arg-type]
    return [gap.new_encoder(spec, 12, 3), gap.new_classifier(spec, 3)]  # type: ignore[arg-type]


def _modules(spec: GapSpec | ProgapSpec) -> list[nn.Module]:
    return [m for root in _roots(spec) for m in root.modules()]


def _forward(model: nn.Module, x: Tensor) -> Tensor:
    if isinstance(model, gap.GapClassifier):
        return model(x.reshape(len(x), 3, 4))
    return model(x)


@pytest.mark.parametrize("build", [
    lambda d: gap.GapEncoder(12, 16, 8, 3, dropout=d, norm="batch"),
    lambda d: gap.GapClassifier(2, 4, 16, 3, dropout=d, norm="batch"),
    lambda d: progap.ProgapStage(12, 16, 2, 0, 3, dropout=d, norm="batch"),
])
def test_dropout_acts_in_training_mode_only(build: object) -> None:
    torch.manual_seed(0)
    model = build(0.5)  # type: ignore[operator]
    torch.manual_seed(0)
    plain = build(0.0)  # type: ignore[operator]
    x = torch.randn(32, 12)
    model.train()
    assert not torch.allclose(_forward(model, x), _forward(model, x))  # fresh masks
    plain.load_state_dict(model.state_dict())  # batch norm's running statistics too
    model.eval(), plain.eval()
    assert torch.equal(_forward(model, x), _forward(model, x))
    assert torch.allclose(_forward(model, x), _forward(plain, x))  # no dropout at all


@pytest.mark.parametrize("spec", [
    GapSpec(method="gap-ndp", epsilon=4, max_degree=30),
    GapSpec(method="gap-ndp", epsilon=4, max_degree=30, norm="layer", dropout=0.2),
    ProgapSpec(method="progap-ndp", epsilon=4, max_degree=30, base_layers=2),
    ProgapSpec(method="progap-ndp", epsilon=4, max_degree=30, norm="layer", dropout=0.2),
])
def test_node_level_models_have_no_batch_norm_and_pass_the_dp_validator(
        spec: GapSpec | ProgapSpec) -> None:
    mods = _modules(spec)
    assert not any(isinstance(m, nn.BatchNorm1d) for m in mods)
    for m in mods:  # every trainable parameter sits in a Linear (per-row clipping)
        if any(True for _ in m.parameters(recurse=False)):
            assert isinstance(m, nn.Linear), type(m)
    for root in _roots(spec):
        check_dp_compatible(root)


def test_edge_level_and_inf_default_to_batch_norm() -> None:
    for spec in (GapSpec(method="gap-edp", epsilon=1), GapSpec(method="gap-inf"),
                 ProgapSpec(method="progap-edp", epsilon=1), ProgapSpec(method="progap-inf")):
        assert any(isinstance(m, nn.BatchNorm1d) for m in _modules(spec)), spec.method


@pytest.mark.parametrize("cls,name", [(GapSpec, "gap-ndp"), (ProgapSpec, "progap-ndp")])
@pytest.mark.parametrize("field,value,says", [
    ("norm", "batch", "batch norm mixes the rows"),
    ("selection", "best-val", "reads validation labels without noise"),
])
def test_node_level_refuses_what_dp_adam_cannot_allow(cls: type, name: str, field: str,
                                                       value: str, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        cls(method=name, epsilon=4, max_degree=5, **{field: value})


@pytest.mark.parametrize("name,level_defaults", [
    ("gap-edp", {"lr": 1e-3, "dropout": 0.5, "norm": "batch", "encoder_dim": 64,
                 "selection": "best-val"}),
    ("gap-inf", {"lr": 1e-3, "dropout": 0.5, "norm": "batch", "encoder_dim": 64,
                 "selection": "best-val"}),
    ("gap-ndp", {"lr": 1e-2, "dropout": 0.0, "norm": "none", "encoder_dim": 16,
                 "selection": "last"}),
    ("progap-edp", {"lr": 1e-3, "dropout": 0.5, "norm": "batch", "hidden": 64,
                    "selection": "best-val"}),
    ("progap-ndp", {"lr": 1e-2, "dropout": 0.0, "norm": "none", "hidden": 16,
                    "selection": "last"}),
])
def test_defaults_depend_on_the_level_and_given_values_win(
        name: str, level_defaults: dict[str, object]) -> None:
    base: dict[str, object] = {"method": name}
    if not name.endswith("-inf"):
        base["epsilon"] = 2.0
    if name.endswith("-ndp"):
        base["max_degree"] = 5
    spec = parse_spec(base)
    assert {k: getattr(spec, k) for k in level_defaults} == level_defaults
    given = parse_spec({**base, "lr": 0.05, "dropout": 0.1, "norm": "layer"})
    assert (given.lr, given.dropout, given.norm) == (0.05, 0.1, "layer")
    assert parse_spec(given.model_dump()) == given  # a stored spec validates to itself
    edge = not name.endswith("-ndp")
    for records, batch in ((10, 10), (1000, 64), (2033, 64), (11510, 360)):
        expected = batch if edge else spec.default_batch_for(records)
        assert spec.with_batch_size(records).batch == expected


class _Recorder(nn.Module):
    """A linear classifier on column 1 of its input that records column 0 (the row id) of
    every training batch."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(1, 2)
        self.seen: list[list[int]] = []

    def forward(self, x: Tensor) -> Tensor:
        if self.training:
            self.seen.append(x[:, 0].long().tolist())
        out: Tensor = self.lin(x[:, 1:])
        return out


@pytest.mark.parametrize("n,batch,epochs", [(130, 64, 4), (64, 64, 2), (101, 10, 3)])
def test_each_epoch_visits_every_row_once_in_ceil_n_over_b_batches(
        n: int, batch: int, epochs: int) -> None:
    spec = GapSpec(method="gap-inf", batch_size=batch, epochs=epochs, selection="last")
    per_epoch = math.ceil(n / batch)
    assert row_training.batches_per_epoch(spec, n) == per_epoch
    model = _Recorder()
    x = torch.stack([torch.arange(n, dtype=torch.float32), torch.randn(n)], 1)
    hist = row_training.fit_rows(model, x, torch.randint(0, 2, (n,)), spec, False, 0.0, "t", None)
    assert len(hist) == len(model.seen) == epochs * per_epoch
    for e in range(epochs):
        rows = model.seen[e * per_epoch:(e + 1) * per_epoch]
        assert sorted(i for b in rows for i in b) == list(range(n))
        assert max(map(len, rows)) - min(map(len, rows)) <= 1
        assert max(map(len, rows)) <= batch
    assert not model.training  # left in evaluation mode


def test_batch_norm_refuses_a_lone_row_per_batch() -> None:
    spec = GapSpec(method="gap-inf", batch_size=1)
    with pytest.raises(DataError, match="at least 2 rows"):
        row_training.fit_rows(gap.GapEncoder(3, 4, 4, 2, norm="batch"), torch.randn(5, 3),
                     torch.zeros(5, dtype=torch.long), spec, False, 0.0, "t", None)


@pytest.mark.parametrize("selection", ["best-val", "last"])
def test_selection_keeps_the_best_validation_epoch(selection: str) -> None:
    spec = GapSpec(method="gap-inf", epochs=15, batch_size=50, selection=selection,
                   device="cpu", lr=0.05)
    train = torch.from_numpy(DATA.mask("train"))
    x, y = torch.tensor(DATA.x), torch.tensor(np.asarray(DATA.y))
    val = row_training.val_rows(DATA, x, y, spec)
    torch.manual_seed(0)
    enc = gap.new_encoder(spec, DATA.num_features, DATA.num_classes)
    hist = row_training.fit_rows(enc, x[train], y[train], spec, False, 0.0, "encoder", None, val)
    scores = [h["selection_score"] for h in hist if "selection_score" in h]
    if selection == "last":
        assert val is None and scores == []
        return
    assert val is not None and len(scores) == spec.epochs  # once per epoch
    with torch.no_grad():
        kept = float((enc(val[0]).argmax(1) == val[1]).float().mean())
    assert kept == pytest.approx(max(scores))


def test_node_level_gap_trains_with_layer_norm_and_dropout() -> None:
    spec = GapSpec(method="gap-ndp", epsilon=8, max_degree=60, norm="layer", dropout=0.2,
                   steps=3, device="cpu")
    r = gap.train_gap(DATA, spec)
    assert r.report["selection"] == "the last step's weights"
    assert len(r.history) == 2 * spec.steps
