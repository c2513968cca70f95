"""``dpgnn run auto``'s choice for the pipeline: the rules of
:mod:`dpgnn_core.methods.auto`, with the noisy mean degree (where a rule reads it) charged
to the dataset's budget and cached.

The noisy statistic is a private release like a trained model: it is checked against the
dataset's budget and reserved before it is made (a budget that cannot hold it refuses the
run here, before anything is released), recorded spent once made, and stored under
``$DPGNN_HOME/artifacts/auto/<key>/statistic.json`` (the key: the dataset's content hash
and the release's plan), so that a second ``dpgnn run auto`` of the same request re-uses
it at no cost (a ``reuse`` record, as a cached model) and decides the same. Its noise
comes from the secret generator and is never stored; the noisy count is.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from dpgnn_core.methods.auto import AutoRequest, Choice, Release, resolve

#: What the statistic's budget records say.
METHOD = "auto (noisy mean degree)"


def decide(request: AutoRequest, folder: str | Path) -> tuple[Any, Choice]:
    """(the chosen method's spec, the choice) for ``request`` on the dataset ``folder``,
    the noisy statistic (where bought) charged and cached
    (:func:`budgeted_release`).

    Every method the statistic could pick passes its pre-flight
    (:func:`dpgnn_core.methods.preflight.check`) before the statistic is bought.

    Raises:
        BudgetExceeded: the dataset's budget cannot hold the statistic (nothing released).
        DataError: the edge list is not the one the manifest names; a pre-flight refusal.
    """
    from dpgnn_core.data.manifest import load_manifest
    from dpgnn_core.methods import preflight

    manifest = load_manifest(Path(folder) / "manifest.json")
    where = {**manifest, "path": str(folder)}
    return resolve(request, folder, manifest, budgeted_release(folder, manifest),
                   check=lambda spec: preflight.check(spec, where))


def _key(manifest: Mapping[str, Any], plan: Any) -> str:
    from dpgnn_core.io import sha256_json

    return sha256_json({"dataset": manifest.get("content_sha256"), "plan": plan.as_dict(),
                        "kind": "auto-noisy-edge-count"})[:16]


def budgeted_release(folder: str | Path, manifest: Mapping[str, Any]) -> Release:
    """The noisy edge count of the dataset ``folder``: the cached release when there is
    one (recorded as a re-use, no cost), else reserved against the budget, made with
    secret noise, stored atomically and recorded spent."""
    def release(plan: Any) -> tuple[float, bool]:
        from dpgnn_core.home import project_dir

        out = project_dir() / "artifacts" / "auto" / _key(manifest, plan)
        if (out / "statistic.json").is_file():
            stored = json.loads((out / "statistic.json").read_text())
            _record_reuse(folder, manifest, plan, str(stored["release_id"]))
            return float(stored["noisy_edge_count"]), True
        return _release_new(folder, manifest, plan, out), False
    return release


def _release_new(folder: str | Path, manifest: Mapping[str, Any], plan: Any,
                 out: Path) -> float:
    from dpgnn_core.budget import Charge
    from dpgnn_core.io import atomic_dir, write_json_atomic
    from dpgnn_core.methods.auto_statistic import check_bound
    from dpgnn_core.methods.auto_statistic import release as noisy
    from dpgnn_core.privacy import Ledger
    from dpgnn_core.privacy.randomness import Randomness
    from tasks.budget import store

    edges = _verified_edges(folder, manifest)
    check_bound(edges, plan)  # before the reservation: a refused graph is charged nothing
    s, sha = store(), str(manifest.get("content_sha256", ""))
    ledger = Ledger().add(plan.event())
    rid = s.reserve(sha, str(manifest.get("name", Path(folder).name)),
                    str(Path(folder).resolve()), Charge(ledger), method=METHOD,
                    run_id=f"auto:{uuid.uuid4().hex}", delta=plan.delta,
                    epsilon=plan.epsilon, note="dpgnn run auto: the noisy mean degree its "
                    "rule reads (docs/privacy.md, \"dpgnn run auto\")")
    value = noisy(edges, plan, Randomness.secret().numpy_generator("auto-degree"))
    release_id = uuid.uuid4().hex
    with atomic_dir(out, overwrite=True) as tmp:
        write_json_atomic(tmp / "statistic.json", {
            "noisy_edge_count": value, "plan": plan.as_dict(), "release_id": release_id,
            "ledger": ledger.to_dict(), "dataset": sha,
            "created": datetime.now(UTC).isoformat(timespec="seconds")})
    s.mark_spent(rid, release_id=release_id, epsilon=plan.epsilon)
    return value


def _verified_edges(folder: str | Path, manifest: Mapping[str, Any]) -> Any:
    """The edge list, after its sha256 matched the manifest's."""
    from dpgnn_core.data.store import read_edges
    from dpgnn_core.errors import DataError
    from dpgnn_core.io import sha256_file

    path = Path(folder) / "edges.parquet"
    want = ((manifest.get("files") or {}).get("edges.parquet") or {}).get("sha256")
    got = sha256_file(path)
    if want != got:
        raise DataError("the edge list does not match the dataset's manifest", path=path,
                        field="sha256", value=got)
    edge_index, _ = read_edges(folder)
    return edge_index


def _record_reuse(folder: str | Path, manifest: Mapping[str, Any], plan: Any,
                  release_id: str) -> None:
    from dpgnn_core.budget import Charge
    from tasks.budget import store

    store().record(str(manifest.get("content_sha256", "")),
                   str(manifest.get("name", Path(folder).name)), str(Path(folder).resolve()),
                   Charge(None), status="reuse", method=METHOD,
                   run_id=f"auto:{uuid.uuid4().hex}", release_id=release_id,
                   delta=plan.delta, epsilon=0.0,
                   note="re-used the cached noisy mean degree: no new privacy cost")


__all__ = ["METHOD", "budgeted_release", "decide"]
