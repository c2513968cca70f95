"""Errors before Prefect starts: one `error:` line, exit 2; the full story in a log file."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from dpgnn_core.data.store import write_dataset
from dpgnn_core.data.synthetic import csbm
from dpgnn_core.errors import DataError, DeviceError, PrivacyError
from dpgnn_core.methods import preflight
from dpgnn_core.methods.registry import get
from flows import clilog
from flows.cli import app
from tests.flows.clirunner import CliRunner

runner = CliRunner()


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    write_dataset(csbm(num_nodes=200, seed=1), tmp_path / "ds")
    return tmp_path / "ds"


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


@pytest.mark.parametrize(("args", "needle"), [
    (["dp-gcn", "--epsilon", "4", "--batch-size", "5000"], "exceeds the 100 training nodes"),
    (["dp-mlp", "--epsilon", "4", "--batch-size", "101"], "at most 100"),
    (["dp-graph-gcn", "--epsilon", "4"], "graph classification method"),
    (["gap-ndp", "--epsilon", "4", "--max-degree", "2"], "exceeds it"),
    (["dp-gcn", "--epsilon", "4", "--level", "node"], "only sound on directed"),
    (["dp-mlp", "--epsilon", "inf"], "--epsilon inf: Input should be a finite number"),
    # issue 48 §4: an infinite clipping norm trained, was charged, then failed evaluating
    (["dp-mlp", "--epsilon", "4", "--clip", "inf"], "--clip inf: Input should be a finite"),
    (["dp-gcn", "--epsilon", "4", "--clipping", "layerwise", "--layer-clips", "1,inf,1"],
     "--layer-clips.1 inf: Input should be a finite number"),
    (["dp-mlp", "--epsilon", "4", "--delta", "1.5"], "--delta 1.5"),
    (["gap-ndp", "--epsilon", "4"], "degree bound"),
])
def test_invalid_run_is_one_line_before_prefect(dataset: Path, args: list[str],
                                                needle: str, monkeypatch: pytest.MonkeyPatch
                                                ) -> None:
    import flows.pipeline

    def never(**kw: object) -> None:
        raise AssertionError("the flow started")

    monkeypatch.setattr(flows.pipeline, "pipeline", never)
    r = runner.invoke(app, ["run", *args, "--dataset", str(dataset)])
    assert r.exit_code == 2, r.output
    lines = _lines(r.output)
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], lines
    assert "Traceback" not in r.output


def test_cuda_without_gpu_is_one_line(dataset: Path) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    r = runner.invoke(app, ["run", "dp-gcn", "--epsilon", "4", "--device", "cuda",
                            "--dataset", str(dataset)])
    assert r.exit_code == 2 and _lines(r.output) == [
        "error: --device cuda: torch sees no CUDA device (use --device auto, which takes "
        "CUDA when present, or --device cpu)"]


def test_preflight_imports_no_prefect(dataset: Path) -> None:
    """The checks run before Prefect (or torch, or the accountants) is even imported."""
    code = ("import sys; from flows.cli import app\n"
            "try: app(['run', 'dp-gcn', '--epsilon', '4', '--batch-size', '999', "
            "'--dataset', sys.argv[1]])\n"
            "except SystemExit as e: print('EXIT', e.code)\n"
            "print('HEAVY', [m for m in ('prefect', 'torch', 'mlflow', 'dp_accounting') "
            "if m in sys.modules])")
    r = subprocess.run([sys.executable, "-c", code, str(dataset)], capture_output=True,
                       text=True, check=True)
    assert "EXIT 2" in r.stdout and "HEAVY []" in r.stdout, r.stdout + r.stderr
    assert "exceeds the 100 training nodes" in r.stderr


def test_registry_preflight_is_the_same_check(dataset: Path) -> None:
    import json

    manifest = json.loads((dataset / "manifest.json").read_text())
    spec = get("dp-gcn").spec(epsilon=4.0, batch_size=5000)
    with pytest.raises(DataError, match="exceeds the 100 training nodes"):
        get("dp-gcn").preflight(spec, manifest)
    with pytest.raises(DataError, match="exceeds the 100 training nodes"):
        preflight.check(spec, manifest)


@pytest.mark.parametrize(("method", "options", "manifest", "error"), [
    ("dp-mlp", {}, {"task": "node", "multi_label": True, "split_counts": {"train": 9}},
     "multi-label"),
    ("dp-mlp", {}, {"task": "node", "split_counts": {"train": 0}}, "no training node"),
    ("dp-graph-gcn", {"batch_size": 10}, {"task": "graph", "split_counts": {"train": 9}},
     "exceeds the 9 training graphs"),
    ("gcn", {}, {"task": "graph", "split_counts": {"train": 9}}, "node classification"),
])
def test_manifest_checks(method: str, options: dict[str, object],
                         manifest: dict[str, object], error: str) -> None:
    m = get(method)
    spec = m.spec(**options, **({"epsilon": 1.0} if m.private else {}))
    with pytest.raises(DataError, match=error):
        preflight.check(spec, manifest)


def test_baselines_take_multi_label() -> None:
    preflight.check(get("gcn").spec(), {"task": "node", "multi_label": True,
                                        "split_counts": {"train": 9}})


def test_gap_degree_and_dpgnn_level_checks(tmp_path: Path) -> None:
    data = csbm(num_nodes=120, seed=2)
    write_dataset(data, tmp_path / "ds")
    import json

    manifest = {**json.loads((tmp_path / "ds" / "manifest.json").read_text()),
                "path": str(tmp_path / "ds")}
    deg = np.bincount(np.asarray(data.edge_index)[1], minlength=data.num_nodes).max()
    preflight.check(get("gap-ndp").spec(epsilon=4.0, max_degree=int(deg)), manifest)
    with pytest.raises(DataError, match=f"D = {deg - 1}, and some node's degree") as err:
        preflight.check(get("gap-ndp").spec(epsilon=4.0, max_degree=int(deg) - 1), manifest)
    assert str(deg) not in str(err.value)  # the observed maximum stays private
    with pytest.raises(PrivacyError, match="only sound on directed"):
        preflight.check(get("dp-gcn").spec(epsilon=4.0, level="node"), manifest)
    data.directed = True  # the same graph ingested as directed is admitted
    write_dataset(data, tmp_path / "directed")
    preflight.check(get("dp-gcn").spec(epsilon=4.0, level="node"),
                    {**json.loads((tmp_path / "directed" / "manifest.json").read_text()),
                     "path": str(tmp_path / "directed")})
    with pytest.raises(DataError, match="manifest was edited"):  # not by an edit (issue 33)
        preflight.check(get("dp-gcn").spec(epsilon=4.0, level="node"),
                        {**manifest, "directed": True})


def test_device_check() -> None:
    import torch

    spec = get("dp-mlp").spec(epsilon=1.0, device="cuda")
    if torch.cuda.is_available():
        preflight.check_device(spec)
    else:
        with pytest.raises(DeviceError, match="no CUDA device"):
            preflight.check_device(spec)


# --- the project home -------------------------------------------------------------------


def test_home_that_is_a_file(tmp_path: Path, dataset: Path) -> None:
    home = tmp_path / "home"
    home.write_text("not a folder")
    r = runner.invoke(app, ["--home", str(home), "run", "dp-mlp", "--epsilon", "4",
                            "--dataset", str(dataset)])
    assert r.exit_code == 2 and _lines(r.output) == [
        f"error: project home {home} is a file, not a folder (set --home or DPGNN_HOME to "
        "a folder)"]


def test_home_under_a_file_cannot_be_written(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    with pytest.raises(clilog.HomeError, match=r"cannot write the project home .*/f/home"):
        clilog.check_home(tmp_path / "f" / "home")


def test_full_disk_is_refused_before_starting(tmp_path: Path, dataset: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(clilog, "MIN_FREE_BYTES", 1 << 62)  # more than any disk has
    r = runner.invoke(app, ["--home", str(tmp_path / "h"), "run", "dp-mlp", "--epsilon",
                            "4", "--dataset", str(dataset)])
    assert r.exit_code == 2
    line, = _lines(r.output)
    assert line.startswith(f"error: the disk of the project home {tmp_path / 'h'} is full")


def test_torch_save_on_a_full_disk_names_the_file(tmp_path: Path) -> None:
    import torch

    from dpgnn_core.serialize import torch_save

    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full on this system")
    with pytest.raises(OSError) as e:
        torch_save({"w": torch.zeros(1 << 16)}, "/dev/full", target=tmp_path / "model.pt")
    assert e.value.errno == errno.ENOSPC and e.value.filename == str(tmp_path / "model.pt")


# --- what fails after the checks ---------------------------------------------------------


def test_unexpected_error_is_one_line_with_a_log(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    import flows.cli

    def boom(root: Path) -> list[object]:
        raise RuntimeError("boom in the datasets listing")

    monkeypatch.setattr(flows.cli, "find_datasets", boom)
    monkeypatch.setattr(sys, "argv", ["dpgnn", "--home", str(tmp_path / "h"), "datasets"])
    monkeypatch.delenv("DPGNN_VERBOSE", raising=False)
    with pytest.raises(SystemExit) as e:
        flows.cli.main()
    assert e.value.code == 1
    logs = list((tmp_path / "h" / "logs").glob("*.log"))
    assert len(logs) == 1
    text = logs[0].read_text()
    assert "Traceback" in text and "boom in the datasets listing" in text


def test_verbose_shows_the_traceback(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                     ) -> None:
    import flows.cli

    def boom(root: Path) -> list[object]:
        raise RuntimeError("boom")

    monkeypatch.setattr(flows.cli, "find_datasets", boom)
    monkeypatch.setattr(sys, "argv", ["dpgnn", "--verbose", "--home", str(tmp_path / "h"),
                                      "datasets"])
    monkeypatch.delenv("DPGNN_VERBOSE", raising=False)
    with pytest.raises(RuntimeError, match="boom"):
        flows.cli.main()


@pytest.mark.slow
def test_error_inside_the_flow_is_one_line_and_logged(tmp_path: Path,
                                                      prefect_api_url: str) -> None:
    """A fixed noise multiplier that overspends the budget in one step is only found by the
    accountant, inside the flow: the user still sees one line (not Prefect's tracebacks),
    and the log file has the traceback."""
    write_dataset(csbm(num_nodes=200, seed=1), tmp_path / "ds")
    home = tmp_path / "h"
    r = subprocess.run([str(Path(sys.executable).parent / "dpgnn"), "--home", str(home),
                        "run", "dp-mlp", "--epsilon", "0.01", "--noise-multiplier", "0.3",
                        "--dataset", str(tmp_path / "ds")], capture_output=True, text=True,
                       env={**os.environ, "PREFECT_API_URL": prefect_api_url})
    assert r.returncode == 1, r.stderr
    errors = [line for line in r.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "spends more than epsilon 0.01 in one step" in errors[0]
    assert "Traceback" not in r.stderr
    log = Path(errors[0].rsplit("(details: ", 1)[1].rstrip(")"))
    assert log.parent == home / "logs" and "Traceback" in log.read_text()


def test_dead_tracking_server_is_refused_up_front(dataset: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    import flows.pipeline

    def never(**kw: object) -> None:
        raise AssertionError("the flow started")

    monkeypatch.setattr(flows.pipeline, "pipeline", never)
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    r = runner.invoke(app, ["run", "dp-mlp", "--epsilon", "4", "--dataset", str(dataset),
                            "--tracking-uri", f"http://127.0.0.1:{port}"])
    assert r.exit_code == 2
    line, = _lines(r.output)
    assert line.startswith(f"error: MLflow tracking server http://127.0.0.1:{port} does "
                           "not answer")
