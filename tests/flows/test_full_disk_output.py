"""A full disk does not flood the terminal: the command's log file fails quietly, and
MLflow's own error records (each with its traceback) stay off the terminal while dpgnn
reports the exception MLflow raises in one line. (The end to end case, a disk that fills
during a run, is ``tests/flows/test_faults.py``; the temporary Prefect server's output,
``tests/flows/test_servers.py``.)"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from flows import clilog


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_a_log_file_on_a_full_disk_fails_quietly_and_closes(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DPGNN_VERBOSE", raising=False)
    monkeypatch.setattr(clilog, "log_path", lambda home: Path("/dev/full"))  # ENOSPC
    with clilog.captured(tmp_path):
        try:
            raise OSError(28, "No space left on device")
        except OSError:
            logging.getLogger("dpgnn.test").warning("written nowhere", exc_info=True)
    assert "Logging error" not in capsys.readouterr().err
    # the control: logging's own file handler prints a traceback for each record
    handler = logging.FileHandler("/dev/full")
    handler.handle(logging.makeLogRecord({"msg": "x", "levelno": logging.WARNING}))
    with pytest.raises(OSError):  # and its close raises
        handler.close()
    assert "--- Logging error ---" in capsys.readouterr().err


def test_mlflows_error_records_stay_off_the_terminal_unless_verbose(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    import mlflow  # noqa: F401 - installs MLflow's handler

    from tasks.tracking import quiet_mlflow

    log = logging.getLogger("mlflow.store.db.utils")
    monkeypatch.delenv("DPGNN_VERBOSE", raising=False)
    with quiet_mlflow():
        log.error("SQLAlchemy database error: disk is full (quiet)")
        log.warning("a warning still shows")
    err = capsys.readouterr().err
    assert "(quiet)" not in err and "a warning still shows" in err
    log.error("after the block (shown)")
    monkeypatch.setenv("DPGNN_VERBOSE", "1")
    with quiet_mlflow():
        log.error("verbose (shown)")
    err = capsys.readouterr().err
    assert "after the block (shown)" in err and "verbose (shown)" in err
