"""`dpgnn privacy epsilon|calibrate`: the stable JSON contract and clear errors."""

from __future__ import annotations

import json

import pytest

from flows.cli import app
from tests.flows.clirunner import CliRunner

runner = CliRunner()
DPGNN = ["--mechanism", "dpgnn", "--num-train", "100000", "--batch-size", "1000",
         "--max-degree", "7", "--layers", "1", "--steps", "10000", "--delta", "1e-6"]


@pytest.mark.parametrize("accountant", ["rdp", "pld"])
def test_epsilon_then_calibrate_roundtrip(accountant: str) -> None:
    r = runner.invoke(app, ["privacy", "calibrate", *DPGNN, "--epsilon", "8",
                            "--accountant", accountant, "--json"])
    assert r.exit_code == 0, r.output
    cal = json.loads(r.stdout)
    for key in ("epsilon", "delta", "noise_multiplier", "accountant", "mechanism"):
        assert key in cal
    assert cal["epsilon"] <= 8 and cal["accountant"] == accountant
    r = runner.invoke(app, ["privacy", "epsilon", *DPGNN, "--noise-multiplier",
                            str(cal["noise_multiplier"]), "--accountant", accountant, "--json"])
    out = json.loads(r.stdout)
    assert out["epsilon"] == pytest.approx(cal["epsilon"], rel=1e-6)
    assert out["mechanism"] == "dpgnn"


def test_pld_needs_less_noise_than_rdp() -> None:
    z = {}
    for acc in ("rdp", "pld"):
        r = runner.invoke(app, ["privacy", "calibrate", *DPGNN, "--epsilon", "4",
                                "--accountant", acc, "--json"])
        z[acc] = json.loads(r.stdout)["noise_multiplier"]
    assert z["pld"] <= z["rdp"]


@pytest.mark.parametrize(("args", "needle"), [
    (["epsilon", "--mechanism", "poisson-gaussian", "--noise-multiplier", "1"],
     "--sampling-rate is required"),
    (["epsilon", "--mechanism", "dpgnn", "--noise-multiplier", "1"], "--num-train"),
    (["epsilon", "--mechanism", "gaussian", "--noise-multiplier", "0"], "--noise-multiplier 0"),
    (["epsilon", "--mechanism", "gaussian", "--noise-multiplier", "1", "--delta", "1"],
     "--delta 1"),
    (["epsilon", "--mechanism", "poisson-gaussian", "--noise-multiplier", "1",
      "--sampling-rate", "1.5"], "--sampling-rate 1.5"),
    (["calibrate", "--mechanism", "uniform-gaussian", "--sampling-rate", "0.1",
      "--epsilon", "1", "--accountant", "pld"], "RDP accountant"),
])
def test_errors(args: list[str], needle: str) -> None:
    r = runner.invoke(app, ["privacy", *args])
    assert r.exit_code == 2
    assert needle in r.output


def test_help_states_conventions() -> None:
    r = runner.invoke(app, ["privacy", "epsilon", "--help"])
    assert "replace-one" in r.output and "2C" in r.output


def test_dpgnn_level_node_costs_the_replace_one_union() -> None:
    eps = {}
    for level in ("node_feature", "node"):
        r = runner.invoke(app, ["privacy", "epsilon", *DPGNN, "--noise-multiplier", "4",
                                "--accountant", "rdp", "--level", level, "--json"])
        assert r.exit_code == 0, r.output
        eps[level] = json.loads(r.stdout)["epsilon"]
    assert eps["node"] > eps["node_feature"]
    r = runner.invoke(app, ["privacy", "epsilon", *DPGNN, "--noise-multiplier", "4",
                            "--level", "edge"])
    assert r.exit_code == 2 and "node_feature or node" in r.output
