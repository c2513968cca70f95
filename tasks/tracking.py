"""Task ``log_run``: the only module of dpgnn that imports MLflow.

Uses ``MlflowClient`` with an explicit tracking URI and run id (never the fluent, thread-local
active run), so it is safe in Prefect's worker threads. MLflow is a record of runs, not a
cache: this task is never cached and every pipeline run makes one MLflow run.

:func:`check_tracking_uri` tells in a few seconds whether a tracking URI can be used at all
(MLflow's own client retries for minutes before giving up); ``log_run`` calls it first and
runs MLflow's HTTP client with a short retry budget, so an unreachable server costs seconds.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from prefect import task

from dpgnn_core.errors import TrackingError
from tasks.config import project_dir
from tasks.mlflow_batches import log_batches

DEFAULT_EXPERIMENT = "dpgnn"

#: The experiment tag MLflow 3 uses to classify an experiment (its UI writes it when a user
#: picks the experiment's type): experiments dpgnn creates, or logs to without the tag, are
#: marked as model-training experiments, whose page is the runs table (not GenAI traces).
#: MLflow 3.17's UI decides the page by its own "GenAI / Model training" switch (the URL's
#: ``workflowType``, else the browser's local storage, GenAI at first), not by this tag
#: (read only with its workflow-based navigation off); :func:`run_url` links with the
#: switch set.
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
EXPERIMENT_KIND = "custom_model_development"

#: MLflow stores a dataset digest of at most 36 characters: the run's dataset input gets
#: this many leading hex digits of the dataset's content sha256 (the whole hash is the
#: input's ``dpgnn.content_sha256`` tag and is in its profile).
DIGEST_CHARS = 16

#: MLflow's HTTP client defaults to 7 retries with exponential backoff and a 120 s timeout
#: per request (minutes before a dead server is reported). ``log_run`` uses these instead,
#: unless the variable is already set in the environment.
HTTP_RETRY_ENV = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "1",
                  "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
                  "MLFLOW_HTTP_REQUEST_TIMEOUT": "20"}


def run_url(tracking_uri: str, experiment_id: str, run_id: str) -> str:
    """The run's page on an MLflow server. ``workflowType=machine_learning``: MLflow 3.17's
    UI otherwise opens in its GenAI mode (its own switch, kept in the browser, which the
    experiment's kind tag does not override)."""
    return (f"{tracking_uri.rstrip('/')}/#/experiments/{experiment_id}/runs/{run_id}"
            "?workflowType=machine_learning")


#: The tracking URI a run uses when none is given: MLflow's own variable (a team's tracking
#: server, set on every machine that runs flows: workers, ``serve.py``, ``dpgnn run``).
TRACKING_ENV = "MLFLOW_TRACKING_URI"


#: Where ``mlflow ui`` serves by default (its ``--host`` and ``--port`` defaults).
UI_URL = "http://127.0.0.1:5000"


def experiment_url(base: str, experiment_id: str) -> str:
    """The experiment's runs table on the MLflow UI at ``base`` (``workflowType``: as
    :func:`run_url`, else MLflow 3.17 opens its GenAI view)."""
    return f"{base.rstrip('/')}/#/experiments/{experiment_id}?workflowType=machine_learning"


def open_lines(tracking_uri: str, experiment_id: str, run_id: str | None = None
               ) -> list[str]:
    """How to open a run (or, without ``run_id``, the experiment) in MLflow's runs table:
    its link when ``tracking_uri`` is a server; else the ``mlflow ui`` command for the
    store and the link on that UI's default address (:data:`UI_URL`)."""
    import sys

    if tracking_uri.startswith(("http:", "https:")):
        return [run_url(tracking_uri, experiment_id, run_id) if run_id else
                experiment_url(tracking_uri, experiment_id)]
    exe = Path(sys.executable).parent / "mlflow"
    link = (run_url(UI_URL, experiment_id, run_id) if run_id else
            experiment_url(UI_URL, experiment_id))
    return [f"{exe} ui --backend-store-uri {tracking_uri}", f"then open {link}"]


def default_tracking_uri() -> str:
    """``$MLFLOW_TRACKING_URI`` when set (not empty), else an SQLite store under the project
    directory (MLflow's file store is an error now)."""
    if os.environ.get(TRACKING_ENV, "").strip():
        return os.environ[TRACKING_ENV].strip()
    home = project_dir()
    home.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{home / 'mlflow.db'}"


def _sqlite_path(uri: str) -> Path | None:
    """The database file of a ``sqlite:`` URI (``sqlite:///relative`` or
    ``sqlite:////absolute``, as SQLAlchemy reads them); None for an in-memory database."""
    if not uri.startswith("sqlite:///"):
        if uri.rstrip("/") == "sqlite:":
            return None
        raise TrackingError(f"tracking URI {uri!r} is not sqlite:///PATH")
    path = urllib.parse.unquote(uri[len("sqlite:///"):].split("?", 1)[0])
    return None if path in ("", ":memory:") else Path(path)


def _http_error_reason(err: BaseException, timeout: float) -> str:
    reason = getattr(err, "reason", err)
    if isinstance(reason, (socket.timeout, TimeoutError)):
        return f"no answer within {timeout:g} s"
    if isinstance(reason, ConnectionRefusedError):
        return "connection refused"
    return str(reason) or type(reason).__name__


#: Schemes of MLflow's own tracking stores ("" and "file": a local folder); a database
#: scheme may name its driver (``postgresql+psycopg2``).
MLFLOW_SCHEMES = frozenset({"", "file", "http", "https", "databricks", "databricks-uc", "uc",
                            "sqlite", "postgresql", "mysql", "mssql"})


def tracking_schemes() -> frozenset[str]:
    """The URI schemes MLflow can store runs at: its own (:data:`MLFLOW_SCHEMES`) and those
    of installed tracking-store plugins (entry points ``mlflow.tracking_store``; read
    without importing MLflow)."""
    from importlib.metadata import entry_points

    return MLFLOW_SCHEMES | {e.name for e in entry_points(group="mlflow.tracking_store")}


def check_tracking_uri(uri: str, timeout: float = 3.0) -> None:
    """Fail fast, with a one-line reason, when ``uri`` cannot take an MLflow run.

    ``http(s)``: the server must answer ``GET /health`` (or, behind a proxy without it, the
    experiments search API) within ``timeout`` seconds, once, without retries. ``sqlite``:
    the database's folder must exist and be writable (and the file, when it exists). A
    scheme MLflow has no store for (``ftp``, a typo) is refused (:func:`tracking_schemes`);
    other usable schemes (``databricks``, ``postgresql``, ...) are not checked further.

    Raises:
        TrackingError: the URI cannot be used, with the reason.
    """
    scheme = urllib.parse.urlsplit(uri).scheme.lower()
    usable = tracking_schemes()
    if scheme.split("+")[0] not in usable:
        raise TrackingError(f"tracking URI {uri!r}: MLflow cannot store runs at a "
                            f"{scheme}:// address (it takes {', '.join(sorted(usable - {''}))}"
                            " or a local folder)")
    if scheme in ("http", "https"):
        base = uri.rstrip("/")
        try:
            with urllib.request.urlopen(f"{base}/health", timeout=timeout) as resp:
                if 200 <= resp.status < 300:
                    return
        except urllib.error.HTTPError:
            pass  # it answers; a proxy may lack /health: ask the tracking API below
        except (urllib.error.URLError, OSError) as e:
            raise TrackingError(f"MLflow tracking server {base} does not answer: "
                                f"{_http_error_reason(e, timeout)}") from e
        query = f"{base}/api/2.0/mlflow/experiments/search?max_results=1"
        try:
            with urllib.request.urlopen(query, timeout=timeout) as resp:
                if 200 <= resp.status < 300:
                    return
                status = resp.status
        except urllib.error.HTTPError as e:
            status = e.code
        except (urllib.error.URLError, OSError) as e:
            raise TrackingError(f"MLflow tracking server {base} does not answer: "
                                f"{_http_error_reason(e, timeout)}") from e
        raise TrackingError(f"{base} answers but not as an MLflow tracking server "
                            f"(HTTP {status} from its experiments API)")
    if scheme == "sqlite":
        db = _sqlite_path(uri)
        if db is None:
            return
        folder = db.parent if str(db.parent) else Path(".")
        if not folder.is_dir():
            raise TrackingError(f"MLflow SQLite store {db}: folder {folder} does not exist")
        if not os.access(folder, os.W_OK | os.X_OK):
            raise TrackingError(f"MLflow SQLite store {db}: folder {folder} is not writable")
        if db.exists() and not os.access(db, os.R_OK | os.W_OK):
            raise TrackingError(f"MLflow SQLite store {db} is not writable")
        _check_sqlite_file(db)


def _check_sqlite_file(db: Path) -> None:
    """An existing SQLite store must open and read as a database: MLflow otherwise retries
    creating its engine 10 times over about 100 s, printing a 4-line warning for each
    (issue 48 §5), or fails on its first query with SQLAlchemy's paragraph.

    Raises:
        TrackingError: naming the file and SQLite's reason.
    """
    import sqlite3

    if not db.exists():
        return
    if not db.is_file():
        raise TrackingError(f"MLflow SQLite store {db} is not a file (a folder or a special "
                            "file is in its place)")
    try:
        con = sqlite3.connect(f"file:{urllib.parse.quote(str(db))}?mode=ro", uri=True,
                              timeout=5.0)
        try:
            con.execute("SELECT count(*) FROM sqlite_master").fetchone()
        finally:
            con.close()
    except sqlite3.Error as e:
        raise TrackingError(f"MLflow SQLite store {db} cannot be read as a database: {e} "
                            "(move it aside to start a new store)") from e


@contextlib.contextmanager
def no_engine_retries() -> Iterator[None]:
    """Within the block, MLflow creates a SQL store's engine once, without its 10 retries
    over about 100 s (one 4-line warning each) when the database cannot be opened: the
    error is reported at once, in one line (``mlflow_error``). Call with MLflow imported."""
    from mlflow.store.db import utils

    saved = utils.MAX_RETRY_COUNT
    utils.MAX_RETRY_COUNT = 1
    try:
        yield
    finally:
        utils.MAX_RETRY_COUNT = saved


def error_reason(err: BaseException) -> str:
    """One line saying why MLflow failed: a database error's own message (SQLite's "file
    is not a database"), without SQLAlchemy's statement and its "Background on this error"
    link; the exception's text otherwise."""
    orig = getattr(err, "orig", None)
    text = str(orig if isinstance(orig, BaseException) else err)
    return " ".join(text.split()) or type(err).__name__


@contextlib.contextmanager
def short_http_retries() -> Iterator[None]:
    """MLflow's HTTP client with :data:`HTTP_RETRY_ENV` (variables already set are kept)."""
    added = {k: v for k, v in HTTP_RETRY_ENV.items() if k not in os.environ}
    os.environ.update(added)
    try:
        yield
    finally:
        for k in added:
            os.environ.pop(k, None)


@contextlib.contextmanager
def quiet_mlflow() -> Iterator[None]:
    """MLflow's INFO records ("Creating initial MLflow database tables...", "Updating
    database tables" on a fresh store; MLflow's own handler writes them to the terminal)
    are left out unless ``DPGNN_VERBOSE`` (``--verbose``) is set; warnings still show.
    So are its error records (a failed database write logs its 60-line traceback before
    raising): every caller reports the exception MLflow raises in one line
    (``mlflow_error``). Call with MLflow imported (it installs its handler then)."""
    import logging

    quiet = os.environ.get("DPGNN_VERBOSE", "") in ("", "0", "false")
    loggers = [logging.getLogger(n) for n in ("mlflow", "alembic")]
    saved = [lg.level for lg in loggers]
    handlers = list(loggers[0].handlers) if quiet else []  # MLflow's own (no propagation)

    def below_error(record: logging.LogRecord) -> bool:
        return record.levelno < logging.ERROR

    if quiet:
        for lg in loggers:
            lg.setLevel(max(lg.getEffectiveLevel(), logging.WARNING))
        for h in handlers:
            h.addFilter(below_error)
    try:
        yield
    finally:
        for lg, level in zip(loggers, saved, strict=True):
            lg.setLevel(level)
        for h in handlers:
            h.removeFilter(below_error)


def _experiment(client: Any, name: str, tracking_uri: str) -> str:
    """The experiment's id, creating it as a model-training experiment when missing (and
    marking an existing one without a kind)."""
    from mlflow.exceptions import MlflowException

    exp = client.get_experiment_by_name(name)
    if exp is None:
        location = None
        if tracking_uri.startswith("sqlite:"):
            location = (project_dir() / "mlartifacts").resolve().as_uri()
        try:
            return str(client.create_experiment(name, artifact_location=location,
                                                tags={EXPERIMENT_KIND_TAG: EXPERIMENT_KIND}))
        except MlflowException:  # created meanwhile by a concurrent run
            exp = client.get_experiment_by_name(name)
            if exp is None:
                raise
    if not exp.tags.get(EXPERIMENT_KIND_TAG):
        with contextlib.suppress(MlflowException):  # e.g. no permission: log the run anyway
            client.set_experiment_tag(exp.experiment_id, EXPERIMENT_KIND_TAG, EXPERIMENT_KIND)
    return str(exp.experiment_id)


def _flat(prefix: str, obj: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in obj.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flat(f"{key}.", v))
        else:
            out[key] = v
    return out


#: ``cache_policy=None``: Prefect accepts it (and then keeps no cache policy at all), but its
#: type hints only list CachePolicy or NotSet; typed Any so the call checks unchanged.
_NO_CACHE_POLICY: Any = None


def _dataset_input(dataset: dict[str, Any]) -> Any:
    """MLflow's dataset input for an ingested dataset folder: name, digest (leading digits
    of its content sha256), source (the folder, as MLflow's ``local`` source JSON) and a
    profile of its counts; the UI's Dataset column shows it."""
    from mlflow.entities import Dataset, DatasetInput, InputTag

    sha = str(dataset["content_sha256"])
    profile = {"content_sha256": sha, **dataset.get("profile", {})}
    entity = Dataset(name=str(dataset["name"]), digest=sha[:DIGEST_CHARS], source_type="local",
                     source=json.dumps({"uri": str(dataset["path"])}),
                     profile=json.dumps(profile))
    return DatasetInput(entity, tags=[InputTag("mlflow.data.context",
                                               str(dataset.get("context", "train"))),
                                      InputTag("dpgnn.content_sha256", sha)])


#: The most points of one metric's per-step curve a run logs to MLflow: evenly spaced, the
#: first and last included; ``history.json`` (an artifact of the run) keeps every step.
#: GAP-EDP on Cora has 6,400 steps: its 19,200 points took ~100 s of ``log_batch`` into
#: SQLite on a busy machine, as long as its training (benchmarks/RESULTS.md, "The README
#: tour").
MAX_CURVE_POINTS = 500


def history_points(history: list[dict[str, Any]], most: int = MAX_CURVE_POINTS
                   ) -> list[tuple[str, int, float]]:
    """``(metric, step, value)`` of a run's history, each metric thinned to at most
    ``most`` points (evenly spaced over its own steps, the first and last kept)."""
    curves: dict[str, list[tuple[int, float]]] = {}
    for rec in history:
        step = int(rec.get("epoch", rec.get("step", 0)))
        for k, v in rec.items():
            if k not in ("epoch", "step") and v is not None and not math.isnan(v):
                curves.setdefault(k, []).append((step, float(v)))
    out = []
    for k, pts in curves.items():
        if len(pts) > most:
            keep = sorted({round(i * (len(pts) - 1) / (most - 1)) for i in range(most)})
            pts = [pts[i] for i in keep]
        out += [(k, step, v) for step, v in pts]
    return out


def _by_name(metrics: dict[str, dict[str, float | None]]) -> dict[str, float | None]:
    """Final metrics per split (``{"test": {"accuracy": ...}}``) as MLflow's names
    (``test_accuracy``)."""
    return {f"{split}_{k}": v for split, m in metrics.items() for k, v in m.items()}


def _fill_run(client: Any, run_id: str, *, params: dict[str, Any], tags: dict[str, str],
              dataset: dict[str, Any] | None, history_path: str | None,
              metrics: dict[str, float | None], artifacts: list[str], at: int) -> None:
    """What a run carries, a pipeline run's and a sweep point's alike: params (nested
    dicts flattened with dots), tags, the dataset input, the per-step history
    (:func:`history_points`) and the final ``metrics`` (at step 0; NaN and None left out),
    all stamped ``at`` (ms), and the artifacts."""
    from mlflow.entities import Metric, Param, RunTag

    items = [Param(k, (json.dumps(v, ensure_ascii=False, default=str)
                       if isinstance(v, (list, tuple)) else str(v))[:6000])
             for k, v in _flat("", params).items()]
    series: list[Metric] = []
    if history_path:
        history = json.loads(Path(history_path).read_text())
        series += [Metric(k, v, at, step) for k, step, v in history_points(history)]
    series += [Metric(k, float(v), at, 0) for k, v in metrics.items()
               if v is not None and not math.isnan(float(v))]
    run_tags = [RunTag(k, v) for k, v in tags.items()]
    for params_, metrics_, tags_ in log_batches(items, series, run_tags):
        client.log_batch(run_id, metrics=metrics_, params=params_, tags=tags_)
    if dataset is not None:
        client.log_inputs(run_id, datasets=[_dataset_input(dataset)])
    for path in artifacts:
        client.log_artifact(run_id, path)


@task(name="log_run", cache_policy=_NO_CACHE_POLICY, persist_result=False)
def log_run(
    *,
    run_name: str,
    params: dict[str, Any],
    history_path: str | None,
    metrics: dict[str, dict[str, float | None]],
    artifacts: list[str],
    tags: dict[str, str],
    tracking_uri: str | None = None,
    experiment: str = DEFAULT_EXPERIMENT,
    start_time_ms: int | None = None,
    dataset: dict[str, Any] | None = None,
) -> dict[str, str]:
    """Create one MLflow run: params, per-epoch metrics, final metrics, artifacts, and the
    dataset as the run's input.

    Args:
        start_time_ms (int, optional): the run's start (ms since the epoch), e.g. when the
            flow started, so that the run spans the real work; now by default. It ends when
            logging ends.
        dataset (dict, optional): ``name``, ``path``, ``content_sha256`` and an optional
            ``profile`` (counts) of the dataset folder, logged as MLflow's dataset input.

    Returns ``{"run_id", "experiment_id", "tracking_uri"}``.

    Raises:
        TrackingError: the tracking URI does not answer or cannot be written
            (:func:`check_tracking_uri`); anything MLflow raises while logging.
    """
    from mlflow.tracking import MlflowClient

    uri = tracking_uri or default_tracking_uri()
    check_tracking_uri(uri)
    with short_http_retries(), quiet_mlflow(), no_engine_retries():
        client = MlflowClient(tracking_uri=uri)
        exp_id = _experiment(client, experiment, uri)
        run = client.create_run(exp_id, run_name=run_name, start_time=start_time_ms,
                                tags={"mlflow.runName": run_name, **tags})
        run_id = run.info.run_id
        try:
            _fill_run(client, run_id, params=params, tags=tags, dataset=dataset,
                      history_path=history_path, metrics=_by_name(metrics),
                      artifacts=artifacts, at=int(time.time() * 1000))
            client.set_terminated(run_id, "FINISHED", end_time=int(time.time() * 1000))
        except Exception:
            with contextlib.suppress(Exception):  # keep the logging error, not this one
                client.set_terminated(run_id, "FAILED", end_time=int(time.time() * 1000))
            raise
    return {"run_id": run_id, "experiment_id": exp_id, "tracking_uri": uri}


def tag_run(tracking_uri: str, run_id: str, tags: dict[str, str]) -> None:
    """Set ``tags`` on an existing run (a link to a run logged after it)."""
    from mlflow.entities import RunTag
    from mlflow.tracking import MlflowClient

    with short_http_retries(), no_engine_retries():
        MlflowClient(tracking_uri=tracking_uri).log_batch(
            run_id, tags=[RunTag(k, v) for k, v in tags.items()])


def log_sweep(*, result: dict[str, Any], spec: dict[str, Any], paths: dict[str, str],
              tracking_uri: str | None = None, experiment: str = "dpgnn-sweeps",
              start_time_ms: int | None = None, release_time_ms: int | None = None
              ) -> dict[str, Any]:
    """One MLflow parent run for a sweep (its spec as params, the results table, the best
    configurations and the plots as artifacts) and a nested child run per point that
    carries what a single run carries (:func:`tasks.run_page.point_page`: the run name,
    privacy params, tags and description, the dataset, history, final metrics and
    artifacts), from its training's start to its evaluation's end
    (``result["point_times"]``, by :func:`~tasks.run_page.point_key`; the sweep's start
    and the logging time when a point has none). The configuration chosen on validation
    for each (method, ε) is tagged ``dpgnn.selected`` with what the selection read.

    Never raises: a logging failure is returned as ``mlflow_error`` (the sweep's results
    are on disk; rerunning the sweep reuses every point and logs again).

    With ``selection = "private"`` every time logged is ``release_time_ms``, the
    selection's release moment (now when not given; ``start_time_ms`` and the points'
    times are ignored): the parent and child runs start and end at it and their metrics
    carry it. The sweep's wall time grows with the secret number of candidates K, so it
    must not be logged (docs/privacy.md, "One release, one charge"). The released
    candidate's page states the released model's privacy: the tuning ε, not its own
    training's (:func:`tasks.run_page.selection_release`).

    Returns:
        dict: ``mlflow_parent_run_id``, ``mlflow_tracking_uri``, ``mlflow_experiment_id``,
        ``mlflow_url`` (the parent run's page, when the URI is a server) and, on failure,
        ``mlflow_error``.
    """
    import tempfile

    from mlflow.entities import Param, RunTag
    from mlflow.tracking import MlflowClient

    from tasks.budget import budget_tags  # here: log_run needs no odometer (dp_accounting)
    from tasks.run_page import point_key

    uri = tracking_uri or default_tracking_uri()
    ds = result["dataset"]
    dataset = {"name": ds["name"], "path": ds["path"], "content_sha256": ds["content_sha256"]}
    try:
        check_tracking_uri(uri)
        with short_http_retries(), quiet_mlflow(), no_engine_retries(), \
                tempfile.TemporaryDirectory() as tmp:
            client = MlflowClient(tracking_uri=uri)
            exp_id = _experiment(client, experiment, uri)
            now = int(time.time() * 1000)
            private_selection = spec.get("selection") == "private"
            if private_selection:  # no sweep wall time: it would reveal K
                now = start_time_ms = release_time_ms or now
            parent = client.create_run(exp_id, run_name=spec["name"],
                                       start_time=start_time_ms, tags={
                "mlflow.runName": spec["name"], "dpgnn.sweep": "true",
                "dpgnn.dataset_sha256": ds["content_sha256"],
                "dpgnn.selection": str(spec.get("selection")),
                **budget_tags(result.get("budget") or {}),
                **result.get("mlflow_tags", {})}).info.run_id
            params = {k: json.dumps(v, default=str) if isinstance(v, (list, dict)) else v
                      for k, v in spec.items()}
            client.log_batch(parent, params=[Param(k, str(v)[:6000])
                                             for k, v in params.items()])
            client.log_inputs(parent, datasets=[_dataset_input(dataset)])
            selected = {(b["method"], b["config_id"], b["epsilon"]): b for b in result["best"]}
            readings: dict[Any, Any] = {}  # the odometer per unit, read once
            times = result.get("point_times") or {}
            for i, row in enumerate(result["rows"]):
                span = ((now, now) if private_selection else
                        tuple(times.get(point_key(row)) or (start_time_ms or now, now)))
                row["mlflow_run_id"] = _log_point(
                    client, exp_id, parent, row, ds,
                    selected.get((row["method"], row["config_id"], row["epsilon"])),
                    readings, (int(span[0]), int(span[1])), Path(tmp) / str(i))
            for key in ("table", "csv", "spec", "best", "privacy_utility", "hyperparameters"):
                if key in paths:
                    client.log_artifact(parent, paths[key])
            client.log_batch(parent, tags=[RunTag("dpgnn.points", str(len(result["rows"])))])
            client.set_terminated(parent, "FINISHED", end_time=now if private_selection
                                  else int(time.time() * 1000))
    except Exception as e:  # the results are on disk; say how to log them again
        return {"mlflow_parent_run_id": None, "mlflow_tracking_uri": uri,
                "mlflow_error": f"MLflow logging failed ({type(e).__name__}: "
                                f"{error_reason(e)[:300]}); the results are in "
                                f"{paths.get('table')}: rerun the same sweep to log again "
                                + ("(every point is reused from the cache)"
                                   if spec.get("selection") != "private" else
                                   "(a private selection is drawn and trained afresh: a "
                                   "new tuning release)")}
    out = {"mlflow_parent_run_id": parent, "mlflow_tracking_uri": uri,
           "mlflow_experiment_id": exp_id}
    if uri.startswith(("http:", "https:")):
        out["mlflow_url"] = run_url(uri, exp_id, parent)
    return out


def _log_point(client: Any, exp_id: str, parent: str, row: dict[str, Any],
               ds: dict[str, Any], best: dict[str, Any] | None, readings: dict[Any, Any],
               span: tuple[int, int], folder: Path) -> str:
    """One sweep point's child run (:func:`tasks.run_page.point_page`), from ``span[0]``
    to ``span[1]`` (ms; its metrics stamped at the end); returns its run id."""
    from tasks.run_page import point_page

    page = point_page(row, ds, best, readings, folder)
    child = client.create_run(exp_id, run_name=page["name"], start_time=span[0], tags={
        "mlflow.runName": page["name"], "mlflow.parentRunId": parent, **page["tags"]}
                              ).info.run_id
    _fill_run(client, child, params=page["params"], tags=page["tags"],
              dataset={k: ds[k] for k in ("name", "path", "content_sha256")},
              history_path=page["history_path"], metrics=page["metrics"],
              artifacts=page["artifacts"], at=span[1])
    client.set_terminated(child, "FAILED" if row.get("refused") else "FINISHED",
                          end_time=span[1])
    return str(child)
