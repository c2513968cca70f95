"""Issue 48 §5/§6: an MLflow SQLite store that breaks during a run (a folder or garbage in
place of ``mlflow.db``) cost ~45 warning lines and two more minutes (MLflow retries
creating its engine 10 times); now one ``warning:`` line at once, the release recorded and
its artifacts named. And a run's terminal holds no Prefect-formatted record, no MLflow
retry line and no raw RuntimeWarning: they go to the command's log file."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dpgnn_core.data.store import write_dataset
from dpgnn_core.data.synthetic import csbm
from dpgnn_core.errors import TrackingError

#: A line in Prefect's console format ("04:22:06.038 | WARNING | Flow run 'x' - ...").
PREFECT_LINE = re.compile(r"^\d\d:\d\d:\d\d\.\d+ \| [A-Z]+ +\| ", re.M)


def _broken_stores(tmp_path: Path) -> list[Path]:
    folder = tmp_path / "a" / "mlflow.db"
    folder.mkdir(parents=True)
    garbage = tmp_path / "b" / "mlflow.db"
    garbage.parent.mkdir()
    garbage.write_bytes(os.urandom(4096))
    return [folder, garbage]


def test_a_sqlite_store_that_cannot_be_read_is_one_line(tmp_path: Path) -> None:
    from tasks.tracking import check_tracking_uri

    for db in _broken_stores(tmp_path):
        t0 = time.monotonic()
        with pytest.raises(TrackingError) as info:
            check_tracking_uri(f"sqlite:///{db}")
        assert time.monotonic() - t0 < 5.0
        assert str(db) in str(info.value) and "\n" not in str(info.value)
    check_tracking_uri(f"sqlite:///{tmp_path / 'fresh.db'}")  # not there yet: fine


@pytest.mark.slow
def test_a_store_broken_after_the_check_fails_at_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """The store breaks between ``check_tracking_uri`` and MLflow's first write: MLflow
    creates its engine once (it retried 10 times over ~100 s, a warning each)."""
    import tasks.tracking

    monkeypatch.setattr(tasks.tracking, "check_tracking_uri", lambda uri: None)
    db = _broken_stores(tmp_path)[0]
    t0 = time.monotonic()
    with caplog.at_level(logging.WARNING), pytest.raises(Exception) as info:
        tasks.tracking.log_run.fn(run_name="r", params={"a": 1}, history_path=None,
                                  metrics={"test": {"accuracy": 0.5}}, artifacts=[],
                                  tags={}, tracking_uri=f"sqlite:///{db}")
    assert time.monotonic() - t0 < 10.0, "MLflow retried creating its engine"
    assert "unable to open database file" in tasks.tracking.error_reason(info.value)
    assert "\n" not in tasks.tracking.error_reason(info.value)


def test_a_prefect_warning_goes_to_the_log_file_and_dpgnns_is_one_plain_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    from flows import clilog

    monkeypatch.delenv("DPGNN_VERBOSE", raising=False)
    console = logging.StreamHandler(sys.stderr)  # as Prefect's console handler on root
    console.setFormatter(logging.Formatter("%(asctime)s | %(levelname)-7s | %(message)s"))
    root = logging.getLogger()
    root.addHandler(console)
    try:
        with clilog.captured(tmp_path) as log:
            logging.getLogger("prefect.client").warning("MLflow logging failed (x)")
            logging.getLogger("urllib3.connectionpool").warning("Retrying (Retry(total=0))")
            logging.getLogger("dpgnn.budget").warning("recorded late\nsecond line")
    finally:
        root.removeHandler(console)
    err = capsys.readouterr().err
    assert err == "warning: recorded late\n", err
    text = log.read_text()
    assert "MLflow logging failed (x)" in text and "recorded late" in text
    assert "Retrying (Retry(total=0))" in text


@pytest.mark.slow
def test_a_run_with_a_broken_store_says_so_in_one_line(tmp_path: Path,
                                                      prefect_api_url: str) -> None:
    """On this process's Prefect server (``prefect_api_url``): the temporary server's own
    output is tested in tests/flows/test_servers.py."""
    data, home = tmp_path / "ds", tmp_path / "home"
    write_dataset(csbm(num_nodes=300, seed=3), data)
    (home / "mlflow.db").mkdir(parents=True)  # no store can be opened there
    env = {k: v for k, v in os.environ.items()
           if k != "DPGNN_OWNER" and not k.startswith("PREFECT_")}
    env.update({"DO_NOT_TRACK": "1", "DPGNN_PROGRESS": "off", "DPGNN_HOME": str(home),
                "PREFECT_API_URL": prefect_api_url})
    env.pop("DPGNN_VERBOSE", None)
    t0 = time.monotonic()
    r = subprocess.run([str(Path(sys.executable).parent / "dpgnn"), "run", "dp-mlp",
                        "--epsilon", "1", "--steps", "10", "--accountant", "rdp",
                        "--dataset", str(data)], env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert time.monotonic() - t0 < 100, "MLflow's engine retries (~100 s) are back"
    out = r.stdout + r.stderr
    failed = [line for line in out.splitlines() if "MLflow logging failed" in line]
    assert len(failed) == 1 and str(home / "mlflow.db") in failed[0], out
    assert re.search(r"cached in (\S+/artifacts/train/\w+)", failed[0]), failed[0]
    assert "new release" in r.stdout, r.stdout
    assert not PREFECT_LINE.search(out), out
    assert "retried" not in out and "RuntimeWarning" not in out, out
