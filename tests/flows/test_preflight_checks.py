"""Issue 29 §2: what the pre-flight refuses before Prefect starts, in one line: a tampered
or missing dataset file or manifest, a training split of one class, a δ not small against
N_train (without the recorded override), a target ε the PLD accountant cannot calibrate,
and a tracking URI whose scheme MLflow cannot use."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dpgnn_core.data.store import write_dataset
from dpgnn_core.data.synthetic import csbm
from dpgnn_core.errors import PrivacyError
from dpgnn_core.methods import preflight
from dpgnn_core.methods.registry import get
from flows.cli import app
from tests.flows.clirunner import CliRunner

runner = CliRunner()


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    write_dataset(csbm(num_nodes=200, seed=1), tmp_path / "ds")  # 100 training nodes
    return tmp_path / "ds"


def _run(dataset: Path, *args: str) -> Any:
    return runner.invoke(app, ["run", "dp-mlp", "--epsilon", "4", *args,
                               "--dataset", str(dataset)])


def _one_error(r: Any) -> str:
    lines = [line for line in r.output.splitlines() if line.strip()]
    assert r.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error: "), r.output
    return str(lines[0])


def _edit_manifest(folder: Path, **changes: Any) -> None:
    path = folder / "manifest.json"
    manifest = json.loads(path.read_text())
    for key, value in changes.items():
        if "." in key:
            a, b = key.split(".", 1)
            manifest[a][b] = value
        else:
            manifest[key] = value
    path.write_text(json.dumps(manifest))


def _flip_byte(path: Path) -> None:
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    path.write_bytes(bytes(raw))


@pytest.mark.parametrize(("tamper", "needle"), [
    (lambda d: _flip_byte(d / "features.parquet"), ("checksum mismatch", "features.parquet")),
    (lambda d: (d / "edges.parquet").unlink(), ("listed in the manifest is missing",
                                                "edges.parquet")),
    (lambda d: _edit_manifest(d, **{"files.nodes.parquet": {"sha256": "0" * 64, "bytes": 1}}),
     ("checksum mismatch", "nodes.parquet")),
    (lambda d: _edit_manifest(d, content_sha256="0" * 64), ("manifest was edited",
                                                            "content_sha256")),
    (lambda d: _edit_manifest(d, num_nodes=150), ("manifest was edited",
                                                  "it says num_nodes = 150")),
    (lambda d: _edit_manifest(d, feature_dim=3), ("manifest was edited",
                                                  "it says feature_dim = 3")),
    (lambda d: _edit_manifest(d, **{"split_counts.train": 180}), ("manifest was edited",
                                                                  "split_counts")),
])
def test_tampered_dataset_is_refused_before_prefect(dataset: Path, started: list[Any],
                                                    tamper: Any, needle: tuple[str, str]
                                                    ) -> None:
    tamper(dataset)
    line = _one_error(_run(dataset))
    assert all(n in line for n in needle), line
    assert not started


def test_untampered_dataset_starts_the_flow(dataset: Path, started: list[Any]) -> None:
    r = _run(dataset)
    assert started and r.exit_code != 2


@pytest.mark.parametrize("only_train", [False, True])
def test_one_class_in_the_training_split_is_refused(tmp_path: Path, started: list[Any],
                                                    only_train: bool) -> None:
    data = csbm(num_nodes=200, seed=1)
    train = data.mask("train")
    if only_train:  # several classes, but the training split holds one
        data.y[train] = 2
    else:  # the whole graph has one class
        data.y[data.y >= 0] = 0
        data.num_classes = 1
    write_dataset(data, tmp_path / "one")
    for method in (["dp-mlp", "--epsilon", "4"], ["gcn"]):
        r = runner.invoke(app, ["run", *method, "--dataset", str(tmp_path / "one")])
        line = _one_error(r)
        assert "a classifier needs at least two classes in the training split" in line
        assert f"all {int(train.sum())} training nodes" in line
        assert f"have class {2 if only_train else 0}" in line
    assert not started


@pytest.mark.parametrize(("delta", "outcome"), [
    ("0.5", "refused"), ("0.01", "refused"), ("0.0099", "warned"), ("0.0011", "warned"),
    ("0.001", "quiet"), ("1e-6", "quiet"),
])
def test_delta_against_n_train(dataset: Path, started: list[Any], delta: str,
                               outcome: str) -> None:
    r = _run(dataset, "--delta", delta)
    if outcome == "refused":
        line = _one_error(r)
        assert f"--delta {float(delta):g} >= 1/N_train = 1/100" in line
        assert "--allow-large-delta" in line and not started
        return
    assert started, r.output
    warned = [line for line in r.output.splitlines() if line.startswith("warning: --delta")]
    assert len(warned) == (outcome == "warned"), r.output


def test_large_delta_override_is_recorded(dataset: Path, started: list[Any]) -> None:
    r = _run(dataset, "--delta", "0.5", "--allow-large-delta")
    assert started, r.output
    spec = started[0]["spec"]
    assert spec.allow_large_delta and spec.model_dump()["allow_large_delta"] is True
    assert "allowed by --allow-large-delta" in r.output
    # Without the override the field is not in the dump: earlier specs keep their keys.
    plain = get("dp-mlp").spec(epsilon=4.0)
    assert "allow_large_delta" not in plain.model_dump()
    assert type(plain).model_validate(plain.model_dump()) == plain


@pytest.mark.parametrize(("args", "outcome"), [
    (["--epsilon", "1e6"], "refused"), (["--epsilon", "101"], "refused"),
    (["--epsilon", "100"], "runs"), (["--epsilon", "1e6", "--accountant", "rdp"], "runs"),
])
def test_epsilon_the_pld_accountant_cannot_calibrate(dataset: Path, started: list[Any],
                                                    args: list[str], outcome: str) -> None:
    r = runner.invoke(app, ["run", "dp-mlp", *args, "--dataset", str(dataset)])
    if outcome == "refused":
        line = _one_error(r)
        assert "above 100 the PLD accountant cannot calibrate" in line
        assert "--accountant rdp" in line and not started
    else:
        assert started, r.output


@pytest.mark.parametrize("uri", ["ftp://nowhere", "htp://localhost:5000", "s3://bucket/x"])
def test_tracking_uri_scheme_mlflow_cannot_use(dataset: Path, started: list[Any],
                                               uri: str) -> None:
    line = _one_error(_run(dataset, "--tracking-uri", uri))
    scheme = uri.split(":")[0]
    assert f"MLflow cannot store runs at a {scheme}:// address" in line and not started


def test_check_privacy_thresholds() -> None:
    manifest = {"task": "node", "split_counts": {"train": 1000}}
    spec = get("dp-mlp").spec
    assert preflight.check_privacy(spec(epsilon=1.0), manifest) == []  # default δ
    assert preflight.check_privacy(spec(epsilon=1.0, delta=1e-4), manifest) == []
    assert preflight.check_privacy(spec(epsilon=1.0, delta=2e-4), manifest)
    with pytest.raises(PrivacyError, match="1/N_train = 1/1000"):
        preflight.check_privacy(spec(epsilon=1.0, delta=1e-3), manifest)
    assert preflight.check_privacy(spec(epsilon=1.0, delta=1e-3, allow_large_delta=True),
                                   manifest)
    assert preflight.check_privacy(get("gcn").spec(), manifest) == []  # not private
    assert np.isfinite(preflight.PLD_MAX_EPSILON)
