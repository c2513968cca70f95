"""Settings read from the environment, checked when a command starts rather than where they
are used (inside a flow, after Prefect and the data have loaded), so a bad value is one line
naming the variable and the value."""

from __future__ import annotations

import math
import os

from dpgnn_core.errors import DataError

#: ``DPGNN_CHECKPOINT_SECONDS``: the least time between two checkpoints of a training.
CHECKPOINT_SECONDS = "DPGNN_CHECKPOINT_SECONDS"


def env_seconds(name: str, default: float) -> float:
    """The number of seconds in environment variable ``name`` (``default`` when it is unset
    or empty): a finite number ≥ 0.

    Raises:
        DataError: naming the variable and its value.
    """
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value >= 0):
        raise DataError(f"environment variable {name} must be a number of seconds >= 0 "
                        f"(default {default:g}); unset it or give one", field=name,
                        value=text)
    return value


def checkpoint_seconds() -> float:
    """``DPGNN_CHECKPOINT_SECONDS`` (default 60 s): a killed run loses at most about this
    much work."""
    return env_seconds(CHECKPOINT_SECONDS, 60.0)


def check_environment() -> None:
    """Every setting above, before a command starts work.

    Raises:
        DataError: the first variable whose value is wrong.
    """
    checkpoint_seconds()


def physical_memory() -> int:
    """This machine's physical memory in bytes (0 where the system does not say): what the
    size checks of a model (``--hidden``) or a generated graph (``-o num_nodes``) compare
    with before any work."""
    try:
        return int(os.sysconf("SC_PHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (AttributeError, OSError, ValueError):
        return 0
