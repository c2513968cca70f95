"""The Prefect server of the deployment tests: ``dpgnn server start``'s (``prefect server
start`` with its services, the scheduler among them), as a user runs it."""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

#: How often the server's scheduler looks for deployments to schedule (Prefect's default:
#: 60 s; a deployment registered or changed is scheduled within 5 s by its "recent
#: deployments" loop either way). Configuration, the scheduler itself runs as shipped.
SCHEDULER_LOOP_SECONDS = "5"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="package")
def scheduling_server(tmp_path_factory: pytest.TempPathFactory,
                      seeded_prefect: Callable[[Path], bool]) -> Iterator[str]:
    """The API URL of a server started by ``dpgnn server start``'s own code
    (:func:`flows.server.start`, which runs ``prefect server start`` in its own session)
    on a free port, in a home of its own (its database a copy of the session's migrated
    one), shared by the tests of this folder and stopped after the last of them (not at the
    end of the session: a server with its services running costs ~0.1 core while idle,
    and `make test`'s session of the tests that wait runs other folders after this one).

    Its environment is a user's, without this test process's Prefect settings, plus
    ``SCHEDULER_LOOP_SECONDS`` and no UI (the UI is tested in tests/flows/test_servers.py:
    a server with it copies its files at start). The tests delete the deployments they
    register before they register them: a deleted deployment's scheduled runs go with it."""
    from flows import server

    home = tmp_path_factory.mktemp("scheduling-server")
    seeded_prefect(home / "prefect")
    with pytest.MonkeyPatch.context() as mp:
        for k in [k for k in os.environ if k.startswith(("PREFECT_", "MLFLOW_"))]:
            mp.delenv(k)
        mp.setenv("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
        mp.setenv("PREFECT_API_BLOCKS_REGISTER_ON_START", "false")  # the copy has them
        mp.setenv("PREFECT_UI_ENABLED", "false")
        mp.setenv("PREFECT_SERVER_SERVICES_SCHEDULER_LOOP_SECONDS", SCHEDULER_LOOP_SECONDS)
        info = server.start(port=_free_port(), home=home, timeout=180)
    try:
        yield str(info["url"])
    finally:
        with contextlib.suppress(Exception):
            server.stop(home)


@pytest.fixture
def on_server(scheduling_server: str) -> Iterator[str]:
    """:func:`scheduling_server`, also the Prefect API of this process (its ``prefect``
    commands and flows) for the test."""
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings(updates={PREFECT_API_URL: scheduling_server}):
        yield scheduling_server
