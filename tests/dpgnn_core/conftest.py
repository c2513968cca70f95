"""Fixtures of the core's tests."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="module")
def thread_client() -> Iterator[Any]:
    """A Dask client of an in-process LocalCluster (two one-thread workers), for a module of
    partitioned tests that need no worker process of their own. Module-scoped, not
    session-scoped: a client left open becomes distributed's default client, and a later
    test's ``DaskTaskRunner`` on this xdist worker would run on its workers."""
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=2, processes=False, threads_per_worker=1,
                      dashboard_address=None) as cluster, Client(cluster) as c:
        yield c
