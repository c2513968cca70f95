"""Issue 48 §5: inputs that gave a raw, late or misleading error are one ``error:`` line,
before Prefect starts (before any expensive work): a seed beyond 32 bits, steps or a noise
multiplier the PLD accountant cannot hold in memory, BatchNorm under DP, a checkpoint
interval that is not a number, a malformed ``DPGNN_RETRAIN_SPEC``."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from dpgnn_core.data.store import write_dataset
from dpgnn_core.data.synthetic import csbm
from dpgnn_core.environment import checkpoint_seconds
from dpgnn_core.errors import DataError, PrivacyError
from dpgnn_core.privacy import GaussianEvent, Ledger, PoissonGaussianEvent, make_accountant
from flows.cli import app
from tests.flows.budgeted import budgeted_with_a_release
from tests.flows.clirunner import CliRunner

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("issue48") / "ds"
    write_dataset(csbm(num_nodes=200, seed=1), folder)
    return folder


def _one_error(r: Any, code: int) -> str:
    lines = [line for line in r.output.splitlines() if line.strip()]
    assert r.exit_code == code and len(lines) == 1 and lines[0].startswith("error: "), \
        r.output
    return str(lines[0])


@pytest.mark.parametrize(("args", "env", "needle"), [
    (["dp-mlp", "--epsilon", "1", "--seed", str(2**70)], {}, "--seed 1180591620717411303424"),
    (["gcn", "--seed", "-1"], {}, "greater than or equal to 0"),
    (["dp-mlp", "--epsilon", "1", "--steps", "1000000000"], {},
     "the PLD accountant composes at most 1,000,000 steps"),
    (["dp-mlp", "--epsilon", "1", "--noise-multiplier", "1e-9"], {},
     "--noise-multiplier 1e-09: one step's privacy losses reach about 5e+17"),
    (["dp-graph-gcn", "--epsilon", "1", "--norm", "batch"], {}, "norm 'batch' is not private"),
    (["dp-mlp", "--epsilon", "1"], {"DPGNN_CHECKPOINT_SECONDS": "abc"},
     "DPGNN_CHECKPOINT_SECONDS must be a number of seconds"),
    # the fault trial (benchmarks/RESULTS-history.md, tenth session): each trained, was
    # charged, then failed or reported ε = 0
    (["dp-gcn", "--epsilon", "1", "--clip", "1e308"], {}, "--clip 1e+308"),
    (["dp-gcn", "--epsilon", "1", "--lr", "inf"], {}, "--lr inf: Input should be a finite"),
    (["dp-mlp", "--epsilon", "1e-9"], {}, "--epsilon 1e-09: Input should be greater than or "
     "equal to 0.001"),
    # was a raw RuntimeError ("can't allocate memory") after Prefect started, 28 s in
    (["dp-gcn", "--epsilon", "1", "--hidden", str(10**12)], {}, "--hidden 1000000000000: "
     "the model's layer of 1000000000000 × 5 classes alone needs"),
    # trained and was charged, then warned that MLflow refused the name
    (["dp-mlp", "--epsilon", "1", "--experiment", ""], {},
     "--experiment '': an MLflow experiment needs a name"),
])
def test_bad_run_input_is_one_line_before_prefect(dataset: Path, args: list[str],
                                                  env: dict[str, str], needle: str,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    import flows.cli.common
    import flows.pipeline

    def never(*a: object, **kw: object) -> None:
        raise AssertionError("the flow (or Prefect's server) started")

    monkeypatch.setattr(flows.pipeline, "pipeline", never)
    monkeypatch.setattr(flows.cli.common, "use_server_if_running", never)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    r = runner.invoke(app, ["run", *args, "--dataset", str(dataset)])
    line = _one_error(r, 2)
    assert needle in line, line


def test_a_seed_within_32_bits_and_rdp_steps_pass(dataset: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The limits are limits: the largest seed, and 10^9 steps under the RDP accountant
    (whose cost does not grow with the steps), pass the pre-flight (to where Prefect's
    server would start)."""
    import flows.cli.common
    from tests.flows.conftest import FlowStarted

    def started() -> None:
        raise FlowStarted

    monkeypatch.setattr(flows.cli.common, "use_server_if_running", started)
    for extra in (["--seed", str(2**32 - 1)], ["--steps", "1000000000", "--accountant", "rdp"]):
        r = runner.invoke(app, ["run", "dp-mlp", "--epsilon", "1", *extra, "--dataset",
                                str(dataset)])
        assert isinstance(r.exception, FlowStarted), r.output


@pytest.mark.parametrize("ledger", [
    Ledger().add(GaussianEvent(noise_multiplier=1.0, count=10**12)),
    Ledger().add(PoissonGaussianEvent(noise_multiplier=1.0, sampling_rate=0.01,
                                      steps=10**12), sampler_scheme="poisson"),
    Ledger().add(GaussianEvent(noise_multiplier=1e-9, count=1)),
])
def test_the_pld_accountant_refuses_a_grid_it_cannot_hold(ledger: Ledger) -> None:
    """Was numpy's MemoryError (3.5 PiB) or "Maximum allowed size exceeded"."""
    with pytest.raises(PrivacyError, match=r"the PLD accountant cannot hold .* in memory .*"
                                           r"--accountant rdp"):
        make_accountant("pld").epsilon(ledger, 1e-5)


def test_privacy_epsilon_with_1e12_steps_is_one_line() -> None:
    r = runner.invoke(app, ["privacy", "epsilon", "--mechanism", "gaussian",
                            "--noise-multiplier", "1", "--steps", str(10**12)])
    assert "1,000,000,000,000 composed steps" in _one_error(r, 2)
    r = runner.invoke(app, ["privacy", "epsilon", "--mechanism", "gaussian",
                            "--noise-multiplier", "1", "--steps", str(10**12),
                            "--accountant", "rdp"])
    assert r.exit_code == 0 and "epsilon = " in r.output, r.output


@pytest.mark.parametrize(("value", "ok"), [("abc", None), ("-1", None), ("nan", None),
                                           ("inf", None), ("0.5", 0.5), ("", 60.0)])
def test_checkpoint_seconds(value: str, ok: float | None,
                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DPGNN_CHECKPOINT_SECONDS", value)
    if ok is None:
        with pytest.raises(DataError, match="DPGNN_CHECKPOINT_SECONDS"):
            checkpoint_seconds()
    else:
        assert checkpoint_seconds() == ok


def _serve_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("serve48", ROOT / "deployments" / "serve.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize(("var", "value", "says"), [
    ("DPGNN_RETRAIN_SPEC", '{"method": "dp-mlp"', "Expecting ',' delimiter"),
    ("DPGNN_RETRAIN_SPEC", "[1]", "give a JSON object"),
    ("DPGNN_RETRAIN_SPEC", '{"method": "dp-mlp", "epsilon": -1}',
     "greater than or equal to 0.001"),
    ("DPGNN_RETRAIN_INGEST", "{", "Expecting property name"),
])
def test_a_malformed_retrain_variable_is_one_line(var: str, value: str, says: str,
                                                  monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """serve.py printed a full traceback; now ``serve: error: VAR=VALUE: why``, exit 1."""
    serve = _serve_module()
    monkeypatch.setenv(var, value)
    if var == "DPGNN_RETRAIN_INGEST":
        monkeypatch.setenv("DPGNN_RETRAIN_DATASET", "/tmp/unused")
    with pytest.raises(SystemExit) as e:
        serve.main([])
    msg = str(e.value.code)
    assert msg.startswith(f"serve: error: {var}=") and says in msg and "\n" not in msg, msg


def test_a_spent_budget_is_refused_before_prefect(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A budget that admits no further release refused the run only in the flow, 6-16 s
    after Prefect started; now in the pre-flight, in one line. An open reservation (a run
    that may resume and continue its release) leaves the decision to the flow."""
    import flows.cli.common

    def never(*a: object, **kw: object) -> None:
        raise AssertionError("Prefect's server started")

    monkeypatch.setattr(flows.cli.common, "use_server_if_running", never)
    ds, home = budgeted_with_a_release(tmp_path, monkeypatch, noise_multiplier=0.5,
                                       epsilon=10.0)
    r = runner.invoke(app, [*home, "run", "dp-mlp", "--epsilon", "0.1", "--delta", "1e-4",
                            "--dataset", str(ds)])
    line = _one_error(r, 2)
    assert "privacy budget of dataset" in line and "is spent for unit node" in line, line


def test_the_guarded_self_convolution_is_the_librarys() -> None:
    """The size check adds a step, not a change: the same truncation bound and numbers as
    dp-accounting's ``self_convolve`` (with the library's bounds function, replaced by
    the same-valued fast one in both)."""
    import numpy as np

    from dpgnn_core.privacy import pld_library

    rng = np.random.default_rng(0)
    p = rng.random(300)
    p /= p.sum()
    for times, tail in ((1, 0.0), (7, 1e-15), (200, 1e-15)):
        lo, out = pld_library.self_convolve(p, times, tail)
        lib_lo, lib_out = pld_library.LIBRARY_SELF_CONVOLVE(p, times, tail)
        assert lo == lib_lo and np.array_equal(out, lib_out)


def test_the_model_size_bound_refuses_only_what_cannot_fit() -> None:
    """A width × classes layer with its gradients beyond the memory is refused, naming the
    option; one within it passes (the bound is a lower bound of every model)."""
    from dpgnn_core.methods.preflight import check_model_size
    from dpgnn_core.methods.registry import get

    manifest, gib = {"num_classes": 5}, 2**30
    check_model_size(get("dp-gcn").spec(hidden=10**8), manifest, memory=16 * gib)
    with pytest.raises(DataError, match=r"^--hidden 1000000000: .* 37.3 GiB .* 16.0 GiB"):
        check_model_size(get("dp-gcn").spec(hidden=10**9), manifest, memory=16 * gib)
    with pytest.raises(DataError, match=r"^--encoder-dim 1000000000: .*default 64"):
        check_model_size(get("gap-edp").spec(epsilon=1.0, encoder_dim=10**9), manifest,
                         memory=16 * gib)


def test_a_dataset_larger_than_the_machine_is_refused_before_loading(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A dataset in one file whose features and edges alone exceed the memory is refused
    before anything loads, in one line naming the manifest and the cluster options (issue
    51 §4: not killed by the OOM killer after minutes); a partitioned one is left to its
    cluster; one that fits passes."""
    from dpgnn_core.methods.preflight import check_dataset_size
    from tests.flows.clirunner import one_error_line

    big = {"num_nodes": 10**8, "feature_dim": 100, "num_edges": 2 * 10**9, "path": "/d"}
    with pytest.raises(DataError, match=r"67\.1 GiB to load, more than this machine's "
                                        r"24\.0 GiB.*--workers N.*file /d/manifest\.json"):
        check_dataset_size(big, memory=24 * 2**30)
    check_dataset_size({**big, "layout": "partitioned"}, memory=24 * 2**30)
    check_dataset_size({**big, "num_nodes": 10**6, "num_edges": 10**7}, memory=24 * 2**30)

    write_dataset(csbm(num_nodes=200, seed=3), tmp_path / "ds")
    monkeypatch.setattr("dpgnn_core.environment.physical_memory", lambda: 20_000)
    r = runner.invoke(app, ["run", "dp-mlp", "--dataset", str(tmp_path / "ds"),
                                 "--epsilon", "1", "--hidden", "8"])
    assert r.exit_code != 0
    line = one_error_line(r.output)
    assert "manifest.json" in line and "more than this machine's" in line, line
