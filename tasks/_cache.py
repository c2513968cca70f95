"""Cache keys: the task's name, its inputs and the code version.

Prefect's default policy includes the flow run id and so never hits across runs; this one
hits whenever the same inputs meet the same code.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import BaseModel

from dpgnn_core.io import sha256_json
from tasks.config import code_version, project_dir


def _plain(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


#: The parameters that hold a dataset reference (:class:`tasks.refs.DatasetRef`).
DATASET_PARAMS = ("dataset", "budget_dataset")


def _by_content(params: dict[str, Any]) -> dict[str, Any]:
    """``params`` with each dataset reference keyed by what it holds, not where: its
    ``path`` left out (its ``content_sha256`` names the content, and every task checks the
    folder against it when it reads). The same data in another folder is the same
    computation: a sweep that ingests the raw files into the project's own folder reuses
    the cached release a ``dpgnn run`` made on the folder ``dpgnn ingest`` wrote (it was
    refused as a lost release, its plan being released already: the README tour's step 4)."""
    for name in DATASET_PARAMS:
        ref = params.get(name)
        if isinstance(ref, dict) and "content_sha256" in ref:
            params[name] = {k: v for k, v in ref.items() if k != "path"}
    return params


def inputs_and_code(name: str, extra: Callable[[dict[str, Any]], Any] | None = None
                    ) -> Callable[[Any, dict[str, Any]], str]:
    """A Prefect ``cache_key_fn`` hashing ``name``, the parameters (a dataset reference by
    its content, not its folder: :func:`_by_content`), ``extra(params)``, the project
    directory and the code version.

    A ``context`` parameter (:class:`tasks.config.RunContext`, given by a flow whose tasks
    may run on a worker with another environment) supplies the project directory and the
    code version instead of the worker's own, and is not otherwise part of the key: the
    same task gets the same key with or without it, wherever the key is computed.
    An ``owner`` parameter (a release's owner token, :func:`tasks.budget.new_owner`: which
    budget reservation the task shares) is not part of the key either: it does not change
    what the task computes; nor is ``dask_address`` (the cluster a partitioned run's
    workers are on).
    """

    def key(_ctx: Any, params: dict[str, Any]) -> str:
        params = _by_content(dict(params))
        context = params.pop("context", None)
        params.pop("owner", None)
        params.pop("dask_address", None)  # where a partitioned run's workers are
        # The project directory is part of the key: artifacts live under it.
        blob = {"task": name, "params": _plain(params),
                "code": context["code_version"] if context else code_version(),
                "home": context["home"] if context else str(project_dir()),
                "extra": _plain(extra(params)) if extra else None}
        return f"{name}-{sha256_json(blob)}"

    return key
