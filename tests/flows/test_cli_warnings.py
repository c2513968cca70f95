"""Issue 33 §7: raw Python warnings do not reach the terminal. Inside a command's
:func:`flows.clilog.captured` block a warning is one ``warning: ...`` line (GAP's
"encoder_dim exceeds the input features" without its source path), Dask's "Port 8787 is
already in use" goes to the log file only, ``--verbose`` keeps Python's own display; and
the plots of a sweep whose every point was refused draw no legend (matplotlib's "No
artists with labels")."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from flows import clilog

GAP = ("encoder_dim 64 exceeds the 32 input features: the encoder widens the features "
       "(allowed; GAP's default is 64)")
DASK = ("Port 8787 is already in use.\nPerhaps you already have a cluster running?\n"
        "Hosting the HTTP server on port 40123 instead")


def _warn(message: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.warn(message, UserWarning, stacklevel=1)


def test_a_warning_is_one_line_and_its_source_is_in_the_log(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DPGNN_VERBOSE", raising=False)
    with clilog.captured(tmp_path) as log:
        _warn(GAP)
        _warn(DASK)
    err = capsys.readouterr().err
    assert err == f"warning: {GAP}\n", err
    text = log.read_text()
    assert f"{__file__}:" in text and "UserWarning: encoder_dim 64" in text
    assert "Port 8787 is already in use" in text and "Hosting the HTTP server" in text


def test_verbose_keeps_pythons_display(tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DPGNN_VERBOSE", "1")
    before = warnings.showwarning
    with clilog.captured(tmp_path):
        assert warnings.showwarning is before


def test_the_display_is_restored_after_the_block(tmp_path: Path) -> None:
    before = warnings.showwarning
    with clilog.captured(tmp_path):
        assert warnings.showwarning is not before
    assert warnings.showwarning is before


def test_plots_of_refused_points_draw_no_empty_legend(tmp_path: Path) -> None:
    from dpgnn_core import plots

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        plots.privacy_utility([], tmp_path / "pu.png")
        plots.budget_over_time({}, {}, tmp_path / "budget.png")
    assert (tmp_path / "pu.png").stat().st_size > 0
