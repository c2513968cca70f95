"""The project directory's one default, and the dpgnn errors the tasks raise for artifacts."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from dpgnn_core.errors import ArtifactError, DeviceError, DpgnnError
from dpgnn_core.home import DEFAULT_HOME, project_dir
from dpgnn_core.training.device import resolve_device


def test_project_dir_has_one_default(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import tasks.config
    from flows import server

    monkeypatch.setenv("DPGNN_HOME", str(tmp_path / "h"))
    assert project_dir() == tasks.config.project_dir() == (tmp_path / "h").resolve()
    assert server.state_file() == (tmp_path / "h").resolve() / "server.json"
    monkeypatch.delenv("DPGNN_HOME")
    monkeypatch.chdir(tmp_path)
    assert project_dir() == tasks.config.project_dir() == (tmp_path / DEFAULT_HOME).resolve()
    assert server.state_file().parent == (tmp_path / ".dpgnn").resolve()


def test_changed_artifact_is_a_dpgnn_error(tmp_path: Path) -> None:
    from tasks.evaluate import verify_files
    from tasks.train import load_keyed_dataset

    (tmp_path / "model.pt").write_bytes(b"x")
    with pytest.raises(ArtifactError, match="missing or changed") as e:
        verify_files(tmp_path, {"model.pt": {"sha256": "0" * 64}})
    assert isinstance(e.value, DpgnnError) and isinstance(e.value, RuntimeError)

    from dpgnn_core.data.store import write_dataset
    from dpgnn_core.data.synthetic import csbm

    write_dataset(csbm(num_nodes=50, seed=0), tmp_path / "ds")
    with pytest.raises(ArtifactError, match="changed since it was ingested"):
        load_keyed_dataset({"path": str(tmp_path / "ds"), "content_sha256": "0" * 64})


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_missing_cuda_is_a_dpgnn_error() -> None:
    with pytest.raises(DeviceError, match="no CUDA device"):
        resolve_device("cuda")
