"""Issue 48 §5: a sweep's budget refusals came after Prefect and the Dask cluster started
(the fault trial's ``sweep-budget-exceeds``, 50 s, and ``sweep-budget-nonprivate``, 22 s,
exit 1). They now come before either starts, in one line, exit 2
(:mod:`flows.cli.sweep_budget`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dpgnn_core.data.store import write_dataset
from dpgnn_core.data.synthetic import csbm
from flows.cli import app
from tests.flows.clirunner import CliRunner, one_error_line

runner = CliRunner()


class Started(Exception):
    """Prefect or Dask was about to start."""


def _sweep(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str) -> list[str]:
    """A budgeted dataset (ε = 1 at δ = 1e-4, nothing spent) and ``dpgnn sweep`` of a spec
    of ``body`` on it, with Prefect's start replaced by :class:`Started`: its arguments."""
    import flows.cli.common

    def started(*_: Any, **__: Any) -> Any:
        raise Started

    ds = tmp_path / "ds"
    if not ds.exists():
        write_dataset(csbm(num_nodes=200, seed=4), ds)
        home = ["--home", str(tmp_path / "home")]
        r = runner.invoke(app, [*home, "budget", "set", str(ds), "--epsilon", "1",
                                "--delta", "1e-4"])
        assert r.exit_code == 0, r.output
    monkeypatch.setenv("DPGNN_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(flows.cli.common, "use_server_if_running", started)
    spec = tmp_path / f"s{len(list(tmp_path.glob('s*.toml')))}.toml"
    spec.write_text(f'name = "b"\ndataset = "{ds}"\n{body}')
    return ["--home", str(tmp_path / "home"), "sweep", str(spec)]


_DP_MLP = ('[[methods]]\nmethod = "dp-mlp"\n'
           'grid = {steps = [5]}\nfixed = {delta = 1e-4, device = "cpu"}\n')


def test_a_sweep_whose_points_together_exceed_the_budget_is_refused_before_prefect(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each point alone fits (ε = 0.6 of 1); the two together do not: refused whole."""
    r = runner.invoke(app, _sweep(tmp_path, monkeypatch,
                                  f"epsilons = [0.6]\nseeds = [0, 1]\n\n{_DP_MLP}"))
    line = one_error_line(r.output)
    assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 1, r.output
    assert line.startswith("error: sweep b: its 2 new private release(s)"), line
    assert "Nothing was trained" in line and "they request" in line
    r = runner.invoke(app, _sweep(tmp_path, monkeypatch,  # one of them fits: it starts
                                  f"epsilons = [0.6]\nseeds = [0]\n\n{_DP_MLP}"))
    assert isinstance(r.exception, Started), r.output


def test_a_sweep_of_only_refused_points_is_refused_before_prefect(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    r = runner.invoke(app, _sweep(tmp_path, monkeypatch, 'seeds = [0]\n\n[[methods]]\n'
                                  'method = "mlp"\ngrid = {epochs = [2]}\n'))
    line = one_error_line(r.output)
    assert r.exit_code == 2, r.output
    assert line.startswith("error: sweep b: the budget refuses each of its 1 point(s)")
    assert "--allow-non-private-release" in line
    r = runner.invoke(app, [*_sweep(tmp_path, monkeypatch, 'seeds = [0]\n\n[[methods]]\n'
                                    'method = "mlp"\ngrid = {epochs = [2]}\n'),
                            "--allow-non-private-release"])  # allowed: it starts
    assert isinstance(r.exception, Started), r.output


def test_a_private_selection_beyond_the_budget_is_refused_before_prefect(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The tuning mechanism's charge (ε = 2 > 1) is what the budget checks."""
    r = runner.invoke(app, _sweep(tmp_path, monkeypatch,
                                  'epsilons = [2]\nseeds = [0]\nselection = "private"\n'
                                  f'tuning = {{expected_candidates = 2}}\n\n{_DP_MLP}'))
    line = one_error_line(r.output)
    assert r.exit_code == 2, r.output
    assert line.startswith("error: sweep b: the budget refuses each of its 1 new private "
                           "release(s) on its own"), line
