"""The cluster a run on a partitioned dataset trains on (issue 51 §4): ``dpgnn run METHOD
--dataset D --workers N --worker-memory SIZE`` starts a LocalCluster of N single-threaded
worker processes (each with that memory limit) for the run, as ``dpgnn sweep`` does;
``--dask-address tcp://HOST:PORT`` uses a running cluster, whose workers must see the
dataset folder and the project home at the same paths."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from dpgnn_core.errors import DataError, DpgnnError

#: The run options that choose the cluster, as the command line names them.
CLUSTER_OPTIONS = "--workers N (a local cluster) or --dask-address tcp://HOST:PORT"


def check_cluster_options(cluster: Mapping[str, Any], dataset: Path, partitioned: bool
                          ) -> None:
    """Refuse, in one line and before anything starts: a partitioned dataset without a
    cluster (it is never loaded into one process), cluster options on a dataset that is
    not partitioned (they would be ignored), ``--worker-memory`` that is not a size or
    comes without ``--workers``, and ``--workers`` with ``--dask-address``."""
    where = dataset / "manifest.json"
    given = {k: v for k, v in cluster.items() if v is not None}
    if partitioned and not (given.get("workers") or given.get("dask_address")):
        raise DataError(f"{dataset} is a partitioned dataset, trained on a Dask cluster and "
                        f"never loaded into one process: pass {CLUSTER_OPTIONS}", path=where,
                        field="layout", value="partitioned")
    if not partitioned and given:
        raise DpgnnError(f"--{next(iter(given)).replace('_', '-')} applies to partitioned "
                         f"datasets (`dpgnn ingest ... --partition-nodes N`); {dataset} is "
                         "one file set, trained in this process")
    if given.get("workers") and given.get("dask_address"):
        raise DpgnnError("--workers starts a local cluster, --dask-address uses a running "
                         "one: give one of them")
    memory = given.get("worker_memory")
    if memory is not None:
        if not given.get("workers"):
            raise DpgnnError("--worker-memory sets the memory of the workers --workers "
                             "starts; a running cluster's workers have their own")
        from dask.utils import parse_bytes

        try:
            if parse_bytes(str(memory)) <= 0:
                raise ValueError(memory)
        except ValueError:
            raise DpgnnError(f"--worker-memory {memory!r} is not a size (e.g. 1GiB, "
                             "512MB)") from None


@contextlib.contextmanager
def partition_cluster(cluster: Mapping[str, Any]) -> Iterator[str]:
    """The scheduler address a partitioned run trains on: ``dask_address``, checked to
    answer, or a LocalCluster of ``workers`` processes with ``worker_memory`` each, started
    for the block (:func:`flows.sweep.local_cluster`) and closed after it."""
    from flows.sweep import check_cluster, local_cluster, worker_start_method

    if cluster.get("dask_address"):
        check_cluster(str(cluster["dask_address"]))
        check_worker_room(str(cluster["dask_address"]), "the workers' --memory-limit")
        yield str(cluster["dask_address"])
        return
    with local_cluster(start_method=worker_start_method(), n_workers=int(cluster["workers"]),
                       threads_per_worker=1, processes=True, dashboard_address=None,
                       memory_limit=cluster.get("worker_memory") or "auto") as local:
        check_worker_room(str(local.scheduler_address), "--worker-memory")
        yield str(local.scheduler_address)


#: The share of its memory limit a worker may use at rest (its interpreter, torch and
#: dpgnn imported): above it, Dask's pause threshold (80 % by default) is one partition's
#: work away, and a paused worker leaves the run waiting for ever.
REST_SHARE = 0.6


def _rest_memory() -> int:
    """A worker's resident memory once what a partitioned fit runs is imported."""
    import psutil

    import dpgnn_core.distributed.gap  # noqa: F401 (what every block task imports)

    return int(psutil.Process().memory_info().rss)


def check_worker_room(address: str, option: str) -> None:
    """Refuse, in one line, a cluster whose workers' memory limit their own interpreter
    nearly fills: such a worker is paused by Dask at its first partition and the run would
    wait for ever. Every worker imports what the fit runs first.

    Raises:
        DpgnnError: naming ``option`` and the limit to give at least.
    """
    from distributed import Client

    with Client(address) as client:  # type: ignore[no-untyped-call]
        rest = client.run(_rest_memory)
        limits = {w: i.get("memory_limit") or 0
                  for w, i in client.scheduler_info()["workers"].items()}
    tight = [(rest[w], limits[w]) for w in rest if limits.get(w) and
             rest[w] > REST_SHARE * limits[w]]
    if tight:
        used, limit = max(tight)
        need = -(-used // int(REST_SHARE * (1 << 28))) << 28  # in steps of 256 MiB
        raise DpgnnError(f"the Dask workers' memory limit ({limit / 2**20:.0f} MiB) is "
                         f"nearly filled by a worker at rest ({used / 2**20:.0f} MiB: "
                         f"Python, torch, dpgnn), so Dask would pause it at its first "
                         f"partition; give {option} of at least {need / 2**30:.2g} GiB")


def evaluation_of(model: Mapping[str, Any]) -> dict[str, Any]:
    """The evaluation a partitioned run's train task computed block by block, in the form
    of the ``evaluate`` task's result (its ``metrics.json`` is in the model's folder)."""
    return {"path": model["path"], "files": {"metrics.json": model["files"]["metrics.json"]},
            "metrics": model["metrics"]}
