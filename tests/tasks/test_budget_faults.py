"""A process ended at once (its Prefect server killed, a full disk: ``os._exit`` from a
watcher thread) gives back the reservation of a training that released nothing, and keeps
the one of a training that did (issue 48 §4: every charge needs a release the user can
use)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dpgnn_core.data.synthetic import csbm
from dpgnn_core.methods.registry import get
from tasks.budget import gate_for, give_back_live, store


@pytest.fixture(autouse=True)
def _own_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DPGNN_HOME", str(tmp_path / "home"))


class Ended(BaseException):
    """Stands for ``os._exit``: nothing after it runs in the process."""


def _status(sha: str) -> list[str]:
    s = store()
    return [r.status for r in s.summary(s.resolve(sha)).records]


@pytest.mark.parametrize("at_step", [None, 1])
def test_ending_at_once_gives_back_only_what_released_nothing(
        monkeypatch: pytest.MonkeyPatch, at_step: int | None) -> None:
    import dpgnn_core.methods.dp_mlp as dp_mlp

    data = csbm(num_nodes=200, seed=111)
    ref = {"path": "/nowhere/faults", "name": "faults", "content_sha256": f"{111:064x}"}
    method = get("dp-mlp")
    spec = method.spec(epsilon=2.0, steps=6, batch_size=32, hidden=8, device="cpu")
    seen: list[list[str]] = []

    def end() -> None:  # what flows.cli.common.give_up does before os._exit
        give_back_live("the Prefect server ended")
        seen.append(_status(ref["content_sha256"]))
        raise Ended

    if at_step is None:  # after the reservation, before step 1
        real = dp_mlp.resolve_device
        monkeypatch.setattr(dp_mlp, "resolve_device", lambda d: (end(), real(d))[1])
    with pytest.raises(Ended), gate_for(ref, method.name, spec) as gate:  # type: ignore[arg-type]
        method.fit(data, spec, gate=gate, on_step=(
            (lambda t, r: end() if t == at_step else None) if at_step else None))
    assert seen == [["released-unused"] if at_step is None else ["spent"]]
