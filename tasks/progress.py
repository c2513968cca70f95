"""Live progress of the tasks: training steps with the loss, ε spent and an ETA; the stages of
ingest, subgraph sampling and GAP's PMA hops; "points done / total" for sweeps.

One reporter, :class:`Progress`, rendered one of two ways:

* a rich progress bar when stderr is a terminal;
* otherwise a plain log line now and then: after every 10 % of the work or every 10 s,
  whichever comes first, and at the end, so CI logs and schedulers see progress::

      dp-mlp: step 120/400 (30%) loss 1.234 eps 2.10/4 elapsed 12s eta 28s

  The lines go to Prefect's run logger when it shows INFO records (``PREFECT_LOGGING_LEVEL``)
  and to stderr otherwise.

``DPGNN_PROGRESS`` overrides the choice: ``rich``, ``plain`` or ``off`` (``auto``, the
default, picks by whether stderr is a terminal).

The core reports through callbacks only: :meth:`Progress.on_step` is the ``on_step(step,
record)`` a fit takes (a private fit's records carry ``epsilon``, an upper bound on ε spent
so far), and :meth:`Progress.stage` the generic ``progress(stage, done, total)`` of long
stages (``Method.fit(..., progress=...)``). ε is shown rounded *up*, so the display never
under-reports it.

Rich shows one live display at a time, so every reporter and the CLI's :func:`status`
spinner are rows of one shared display, started by the first and stopped by the last.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import math
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TextIO

#: The environment variable that picks the rendering: auto, rich, plain or off.
ENV = "DPGNN_PROGRESS"
MODES = ("auto", "rich", "plain", "off")

Clock = Callable[[], float]


def resolve_mode(mode: str | None = None, stream: Any = None) -> str:
    """``rich``, ``plain`` or ``off``: ``mode``, else ``$DPGNN_PROGRESS``; ``auto`` (the
    default, and any unknown value) is ``rich`` when ``stream`` (default stderr) is a
    terminal, ``plain`` otherwise."""
    chosen = (mode or os.environ.get(ENV, "") or "auto").strip().lower()
    if chosen not in MODES or chosen == "auto":
        target = stream if stream is not None else sys.stderr
        try:
            tty = bool(target.isatty())
        except (AttributeError, ValueError):  # no isatty, or a closed file
            tty = False
        chosen = "rich" if tty else "plain"
    return chosen


# --- formatting ------------------------------------------------------------------------


def format_duration(seconds: float | None) -> str:
    """``7s``, ``3m05s``, ``1h02m``; ``?`` when unknown."""
    if seconds is None or not math.isfinite(seconds):
        return "?"
    s = max(0, round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def format_epsilon(eps: float) -> str:
    """ε rounded *up* (a display must never under-report ε spent) to three significant
    digits, at least two decimals: ``2.10``, ``0.124``, ``0.00100``; below 0.001 in
    scientific notation, ``1.00e-04`` (a two-decimal display showed 9.995e-05 as 0.01)."""
    if not math.isfinite(eps):
        return "inf"
    if eps <= 0:
        return "0.00"
    exp = math.floor(math.log10(eps))
    if eps >= 1e-3:
        for e in (exp, exp + 1):  # rounded up to the next power of ten (0.9999): its form
            decimals = max(2, 2 - e)
            scale = 10**decimals
            shown = math.ceil(eps * scale * (1 - 1e-12)) / scale
            if shown < 10.0 ** (e + 1):
                break
        return f"{shown:.{decimals}f}"
    return _scientific(eps)


def _scientific(eps: float) -> str:
    """``eps`` ≥ 0 in scientific notation, three significant digits rounded up:
    ``1.00e-04``, ``0.00e+00``."""
    if eps <= 0:
        return "0.00e+00"
    exp = math.floor(math.log10(eps))
    mantissa = math.ceil(eps / 10.0**exp * 100 * (1 - 1e-12)) / 100
    if mantissa >= 10:
        mantissa, exp = mantissa / 10, exp + 1
    return f"{mantissa:.2f}e{exp:+03d}"


def format_target(eps: float) -> str:
    """A target ε in the form :func:`format_epsilon` gives ε spent (three significant
    digits, rounded up the same way, so that ε spent ≤ target reads so): ``4.00``,
    ``0.500``, ``1.00e-04``."""
    return format_epsilon(eps)


def format_epsilon_pair(spent: float, target: float) -> str:
    """``spent/target`` read alike (issue 48: ``eps 0.00/1`` and ``eps 0.00/1.00e-09``
    did not): both as :func:`format_epsilon` gives them, and both in scientific notation
    when either is (``0.00e+00/1.00e-09``, ``5.00e-04/1.00e+00``)."""
    a, b = format_epsilon(spent), format_epsilon(target)
    if math.isfinite(spent) and math.isfinite(target) and ("e" in a) != ("e" in b):
        a, b = _scientific(max(spent, 0.0)), _scientific(max(target, 0.0))
    return f"{a}/{b}"


def _percent(done: int, total: int) -> int:
    return int(100 * done / total) if total else 100


# --- rate limiting of plain lines ------------------------------------------------------


class Throttle:
    """When a plain reporter writes its next line: once ``fraction`` of ``total`` has been
    done since the last line (but not within ``min_seconds`` of it: a fast run does not
    flood the log), or ``seconds`` have passed since it (or since the first report: time
    spent preparing before it does not count), whichever comes first; and once at the end
    (``done >= total``)."""

    def __init__(self, total: int | None, clock: Clock, *, fraction: float = 0.1,
                 seconds: float = 10.0, min_seconds: float = 1.0) -> None:
        self.total = total
        self.clock = clock
        self.fraction = fraction
        self.seconds = seconds
        self.min_seconds = min_seconds
        self._last_time: float | None = None
        self._last_done = 0
        self._finished = False

    def due(self, done: int) -> bool:
        now = self.clock()
        if self._last_time is None:
            self._last_time = now
        if self._finished:
            return False
        if self.total and done >= self.total:
            self._finished = True
            return True
        since = now - self._last_time
        by_work = (bool(self.total) and since >= self.min_seconds
                   and done - self._last_done >= max(1, math.ceil(self.fraction
                                                                  * (self.total or 0))))
        return by_work or since >= self.seconds

    def emitted(self, now: float, done: int) -> None:
        """A line was written at ``now``, after ``done`` units."""
        self._last_time, self._last_done = now, done


# --- the shared rich display -----------------------------------------------------------


def default_console() -> Any:
    from rich.console import Console

    return Console(stderr=True)


def _columns() -> list[Any]:
    from rich.progress import BarColumn, ProgressColumn, SpinnerColumn, Task, TextColumn
    from rich.text import Text

    class Bar(BarColumn):  # none for the status and for one-piece stages (a spinner)
        def render(self, task: Task) -> Any:
            return Text("") if (task.total or 0) <= 1 else super().render(task)

    class Count(ProgressColumn):
        def render(self, task: Task) -> Text:
            if (task.total or 0) <= 1:
                return Text("")
            unit = task.fields.get("unit", "")
            done, total = int(task.completed), int(task.total or 0)
            return Text(f"{unit} {done}/{total} ({_percent(done, total)}%)".strip(),
                        style="progress.download")

    class Times(ProgressColumn):
        def render(self, task: Task) -> Text:
            elapsed = format_duration(task.finished_time if task.finished
                                      else task.elapsed)
            if task.total is None or task.finished:
                return Text(elapsed, style="progress.elapsed")
            return Text(f"{elapsed} eta {format_duration(task.time_remaining)}",
                        style="progress.remaining")

    return [SpinnerColumn(finished_text="[green]✓[/]"),
            TextColumn("[progress.description]{task.description}"),
            Bar(bar_width=20), Count(), TextColumn("{task.fields[info]}"), Times()]


def _rich_progress(console: Any) -> Any:
    """A rich Progress whose status rows (the CLI's spinner) are tables of their own, so a
    long status message does not squeeze the columns of the work rows."""
    from rich.progress import Progress as RichProgress

    class Display(RichProgress):
        def get_renderables(self) -> Any:
            tasks = [t for t in self.tasks if t.visible]
            for t in tasks:
                if t.fields.get("status"):
                    yield self.make_tasks_table([t])
            # A reporter's stages (sampling, ...) above its main row (training steps).
            work = sorted((t for t in tasks if not t.fields.get("status")),
                          key=lambda t: t.fields.get("order", (0, 0, 0)))
            if work:
                yield self.make_tasks_table(work)

    return Display(*_columns(), console=console, refresh_per_second=8, transient=False)


class _Display:
    """The process's one rich live display (rich allows one at a time): reporters and the
    CLI's status add rows to it; it starts with the first user and stops with the last."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._progress: Any = None
        self._users = 0

    def open(self, console: Any) -> Any:
        with self._lock:
            if self._progress is None:
                self._progress = _rich_progress(console)
                self._progress.start()
            self._users += 1
            return self._progress

    def close(self) -> None:
        with self._lock:
            self._users -= 1
            if self._users <= 0 and self._progress is not None:
                self._users = 0
                try:
                    self._progress.stop()
                finally:
                    self._progress = None


_DISPLAY = _Display()
_ORDER = itertools.count()  # reporters, in the order they start


# --- plain output ----------------------------------------------------------------------


def _run_logger() -> Any:
    """Prefect's run logger inside a flow or task run, if Prefect is loaded; else None."""
    if "prefect" not in sys.modules:
        return None
    try:
        from prefect.context import FlowRunContext, TaskRunContext

        if TaskRunContext.get() is None and FlowRunContext.get() is None:
            return None
        from prefect import get_run_logger

        return get_run_logger()
    except Exception:  # no context, or Prefect's logging not set up: fall back to stderr
        return None


def emit(line: str, stream: TextIO | None = None) -> None:
    """Write one plain progress line: to ``stream`` if given; else to Prefect's run logger
    when it shows INFO records (its console handler prints them), else to stderr."""
    if stream is None:
        logger = _run_logger()
        if logger is not None and logger.isEnabledFor(logging.INFO):
            logger.info(line)
            return
        stream = sys.stderr
    stream.write(line + "\n")
    stream.flush()


# --- the reporter ----------------------------------------------------------------------


@dataclass
class _Stage:
    start: float
    throttle: Throttle
    description: str
    mark: tuple[float, int] | None = None
    task: Any = None
    finished: bool = False


class Progress:
    """A progress reporter: a rich bar on a terminal, plain log lines otherwise.

    Args:
        label (str): what is running, the start of every line (``dp-mlp``, ``sweep``).
        total (int, optional): the work to do (steps, epochs, points); a fit's records may
            correct it (``total_steps``). (default: :obj:`None`)
        unit (str, optional): what is counted. (default: ``"step"``)
        target_epsilon (float, optional): the budget, shown as ``eps spent/target``.
        mode (str, optional): ``rich``, ``plain``, ``off`` or ``auto`` (default:
            ``$DPGNN_PROGRESS``, else auto: rich when stderr is a terminal).
        console (rich.console.Console, optional): where the rich display draws (default:
            stderr).
        stream (file, optional): where plain lines go (default: Prefect's run logger or
            stderr, see :func:`emit`).
        clock (callable, optional): seconds, monotonic (tests pass a fake one).
        fraction (float, optional): a plain line after this share of the work.
            (default: 0.1)
        seconds (float, optional): or after this many seconds. (default: 10)
        min_seconds (float, optional): but not within this many seconds of the last
            line, except the last one. (default: 1)

    Use it as a context manager; :meth:`close` ends the rows and writes a last line for a
    run that stopped early.
    """

    def __init__(self, label: str, total: int | None = None, *, unit: str = "step",
                 target_epsilon: float | None = None, mode: str | None = None,
                 console: Any = None, stream: TextIO | None = None,
                 clock: Clock = time.monotonic, fraction: float = 0.1,
                 seconds: float = 10.0, min_seconds: float = 1.0) -> None:
        self.label = label
        self.unit = unit
        self.total = total
        self.target_epsilon = target_epsilon
        self.mode = resolve_mode(mode, stream)
        self._stream = stream
        self._clock = clock
        self._fraction = fraction
        self._seconds = seconds
        self._min_seconds = min_seconds
        self._start = clock()
        self._throttle = Throttle(total, clock, fraction=fraction, seconds=seconds,
                                  min_seconds=min_seconds)
        self._first: tuple[float, int] | None = None  # the first report
        self._mark: tuple[float, int] | None = None  # the last line: the ETA's rate since
        self.done = 0
        self.loss: float | None = None
        self.epsilon: float | None = None
        self._stages: dict[str, _Stage] = {}
        self._lock = threading.RLock()
        self._rich: Any = None
        self._task: Any = None
        self._closed = False
        self._order = next(_ORDER)
        if self.mode == "rich":
            self._rich = _DISPLAY.open(console or default_console())
            if total is not None:  # the row shows from the start (step 0 while preparing)
                self._task = self._rich.add_task(label, total=total, unit=unit, info="",
                                                 order=(self._order, 1, 0))

    # -- context ------------------------------------------------------------------------

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        # Ctrl-C (a KeyboardInterrupt, the training's Stopped) stopped it; it did not fail
        self.close(failed=exc is not None and not isinstance(exc, KeyboardInterrupt),
                   interrupted=isinstance(exc, KeyboardInterrupt))

    def close(self, failed: bool = False, interrupted: bool = False) -> None:
        """End the reporter: finished rows stay on screen; a run that stopped before its
        total (or was ``interrupted``: Ctrl-C) says where it stopped, "failed" only when it
        ``failed``."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            stopped = (interrupted or (self.total is not None and self.done < self.total)) \
                and self._first is not None
            if self.mode == "plain" and (failed or stopped) and self._first is not None:
                emit(f"{self.label}: {'failed' if failed else 'stopped'} at {self.unit} "
                     f"{self.done}/{self.total if self.total is not None else '?'} after "
                     f"{format_duration(self._clock() - self._start)}", self._stream)
            if self._rich is not None:
                rows = [(self._task, self.label)] + [(st.task, st.description)
                                                     for st in self._stages.values()
                                                     if not st.finished]
                for task, description in rows:
                    if task is not None and (failed or task is not self._task):
                        self._rich.update(task, description=f"{description} [red]"
                                          f"({'failed' if failed else 'stopped'})[/]")
                if self._task is not None and not failed and stopped:
                    self._rich.update(self._task, description=f"{self.label} [yellow]"
                                      "(stopped)[/]")
                self._rich.refresh()
                _DISPLAY.close()
                self._rich = None

    # -- callbacks for the core ---------------------------------------------------------

    def on_step(self) -> StepCallback:
        """The ``on_step(step, record)`` callback for a fit (reads ``train_loss``,
        ``epsilon`` and ``total_steps``; a private step's record has no ``train_loss``
        unless the run set ``log_raw_loss``, so the line shows no loss then); pass
        :meth:`stage` as the fit's ``progress``."""
        return StepCallback(self)

    def update(self, done: int, *, total: int | None = None, loss: float | None = None,
               epsilon: float | None = None) -> None:
        """``done`` units of ``total`` are done; the latest loss and ε spent so far (ε
        shown never decreases)."""
        if self.mode == "off":
            return
        with self._lock:
            now = self._clock()
            if total is not None and total != self.total:
                self.total = int(total)
                self._throttle.total = self.total
            if self._first is None:
                self._first = (now, done)
            self.done = done
            if loss is not None:
                self.loss = float(loss)
            if epsilon is not None:
                self.epsilon = max(float(epsilon), self.epsilon or float("-inf"))
            if self.mode == "plain":
                if self._throttle.due(done):
                    emit(self.line(now), self._stream)
                    self._throttle.emitted(now, done)
                    self._mark = (now, done)
                return
            if self._rich is not None:
                if self._task is None:
                    self._task = self._rich.add_task(self.label, total=self.total,
                                                     unit=self.unit, info="",
                                                     order=(self._order, 1, 0))
                self._rich.update(self._task, completed=done, total=self.total,
                                  info=self._info())

    def advance(self, n: int = 1) -> None:
        """``n`` more units done (e.g. one more sweep point)."""
        self.update(self.done + n)

    def stage(self, name: str, done: int, total: int) -> None:
        """The generic ``progress(stage, done, total)`` callback: one row (rich) or a line
        at the start, every 10 % or 10 s, and the end of each named stage (plain)."""
        if self.mode == "off":
            return
        with self._lock:
            now = self._clock()
            st = self._stages.get(name)
            new = st is None
            if st is None:
                st = _Stage(start=now, throttle=Throttle(
                    total, self._clock, fraction=self._fraction, seconds=self._seconds,
                    min_seconds=self._min_seconds),
                    description=f"{self.label}: {name}")
                self._stages[name] = st
            if st.finished:
                return
            ended = done >= total
            if self.mode == "plain":
                text = f"{self.label}: {name}"
                if ended:
                    st.finished = True
                    emit(f"{text} done in {format_duration(now - st.start)}", self._stream)
                elif new:
                    st.throttle.due(done)  # starts its clock
                    st.mark = (now, done)
                    emit(f"{text}…", self._stream)
                elif total > 1 and st.throttle.due(done):
                    eta = _eta(st.mark, now, done, total)
                    emit(f"{text} {done}/{total} ({_percent(done, total)}%) elapsed "
                         f"{format_duration(now - st.start)} eta {format_duration(eta)}",
                         self._stream)
                    st.throttle.emitted(now, done)
                    st.mark = (now, done)
                return
            if self._rich is not None:
                if st.task is None:
                    st.task = self._rich.add_task(st.description, total=total, unit="",
                                                  info="", order=(self._order, 0,
                                                                  len(self._stages)))
                self._rich.update(st.task, completed=done, total=total)
                st.finished = ended

    @contextlib.contextmanager
    def span(self, name: str) -> Iterator[None]:
        """A stage of one piece of work: reported when it starts and when it ends."""
        self.stage(name, 0, 1)
        yield
        self.stage(name, 1, 1)

    # -- rendering ----------------------------------------------------------------------

    def line(self, now: float | None = None) -> str:
        """The plain progress line, e.g. ``dp-mlp: step 120/400 (30%) loss 1.234 eps
        2.10/4.00 elapsed 12s eta 28s``."""
        now = self._clock() if now is None else now
        if self.total:
            parts = [f"{self.label}: {self.unit} {self.done}/{self.total} "
                     f"({_percent(self.done, self.total)}%)"]
        else:
            parts = [f"{self.label}: {self.unit} {self.done}"]
        if self.loss is not None:
            parts.append(f"loss {self.loss:.4g}")
        if self.epsilon is not None:
            parts.append(f"eps {self._eps_text()}")
        parts.append(f"elapsed {format_duration(now - self._start)}")
        if self.total:
            mark = self._mark or self._first
            parts.append(f"eta {format_duration(_eta(mark, now, self.done, self.total))}")
        return " ".join(parts)

    def _eps_text(self) -> str:
        assert self.epsilon is not None
        if self.target_epsilon is None:
            return format_epsilon(self.epsilon)
        return format_epsilon_pair(self.epsilon, self.target_epsilon)

    def _info(self) -> str:
        parts = []
        if self.loss is not None:
            parts.append(f"loss {self.loss:.4g}")
        if self.epsilon is not None:
            parts.append(f"ε {self._eps_text()}")
        return "  ".join(parts)


def _eta(mark: tuple[float, int] | None, now: float, done: int, total: int
         ) -> float | None:
    """Seconds left at the rate since ``mark`` (time, done): the last line, or the first
    report (None when nothing was done since)."""
    if done >= total:
        return 0.0
    if mark is None or done <= mark[1] or now <= mark[0]:
        return None
    return (now - mark[0]) / (done - mark[1]) * (total - done)


class StepCallback:
    """``on_step(step, record)`` for a fit, feeding a :class:`Progress`."""

    def __init__(self, reporter: Progress) -> None:
        self.reporter = reporter

    def __call__(self, step: int, rec: dict[str, float]) -> None:
        total = rec.get("total_steps")
        self.reporter.update(step, total=int(total) if total is not None else None,
                             loss=rec.get("train_loss"), epsilon=rec.get("epsilon"))


@contextlib.contextmanager
def status(message: str, *, mode: str | None = None, console: Any = None,
           stream: TextIO | None = None, clock: Clock = time.monotonic) -> Iterator[None]:
    """What the CLI shows around a whole command: a spinner row with ``message`` (rich; the
    reporters started inside add their rows below it, and it disappears at the end), or a
    line at the start and one at the end (plain)."""
    chosen = resolve_mode(mode, stream)
    if chosen == "off":
        yield
        return
    if chosen == "plain":
        start = clock()
        emit(message, stream)
        what = message.rstrip("….").rstrip()
        try:
            yield
        except BaseException as e:
            word = "stopped" if isinstance(e, KeyboardInterrupt) else "failed"  # Ctrl-C
            emit(f"{what}: {word} after {format_duration(clock() - start)}", stream)
            raise
        emit(f"{what}: done in {format_duration(clock() - start)}", stream)
        return
    display = _DISPLAY.open(console or default_console())
    task = display.add_task(message, total=None, unit="", info="", status=True)
    try:
        yield
    finally:
        display.remove_task(task)
        _DISPLAY.close()
