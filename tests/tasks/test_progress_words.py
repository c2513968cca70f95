"""Issue 33 §7: what the progress line says. A tiny target ε reads in the form ε spent
does; a Ctrl-C (KeyboardInterrupt, the training's ``Stopped``) "stopped", never "failed";
DPDGC's k-neighbour and node levels show ε spent on their classifier's steps."""

from __future__ import annotations

import io

import pytest

from dpgnn_core.data.synthetic import csbm
from dpgnn_core.methods.dpdgc import train_dpdgc
from dpgnn_core.methods.private_run import PrivateRun
from dpgnn_core.specs import DpdgcSpec
from dpgnn_core.training.checkpoint import Stopped
from tasks.progress import Progress, format_target, status


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_tiny_target_reads_like_epsilon_spent() -> None:
    out, clock = io.StringIO(), FakeClock()
    with Progress("dp-mlp", 10, target_epsilon=1e-4, stream=out, clock=clock,
                  mode="plain") as p:
        p.update(10, epsilon=9.995e-5)
    line = next(x for x in out.getvalue().splitlines() if "eps" in x)
    assert "eps 1.00e-04/1.00e-04 " in line, line
    assert format_target(4.0) == "4.00" and format_target(0.5) == "0.500"  # issue 48 §6
    assert format_target(1.234e-4) == "1.24e-04"  # rounded up as ε spent is: spent ≤ it


@pytest.mark.parametrize("interrupt", [KeyboardInterrupt(), Stopped(249, 400, None)])
def test_ctrl_c_is_stopped_not_failed(interrupt: KeyboardInterrupt) -> None:
    out, clock = io.StringIO(), FakeClock()
    with pytest.raises(KeyboardInterrupt), \
            status("running dp-mlp on ds…", stream=out, clock=clock, mode="plain"), \
            Progress("dp-mlp", 400, stream=out, clock=clock, mode="plain") as p:
        p.update(249)
        raise interrupt
    assert out.getvalue().splitlines()[-2:] == ["dp-mlp: stopped at step 249/400 after 0s",
                                                "running dp-mlp on ds: stopped after 0s"]


def test_an_error_still_says_failed() -> None:
    out, clock = io.StringIO(), FakeClock()
    with pytest.raises(RuntimeError), Progress("dp-mlp", 400, stream=out, clock=clock,
                                               mode="plain") as p:
        p.update(249)
        raise RuntimeError
    assert out.getvalue().splitlines()[-1] == "dp-mlp: failed at step 249/400 after 0s"


@pytest.mark.parametrize("level", ["k_neighbor", "node"])
def test_dpdgc_classifier_steps_carry_epsilon(level: str) -> None:
    data = csbm(num_nodes=120, seed=3)
    bound = {"max_degree": 60} if level == "node" else {}
    spec = DpdgcSpec(level=level, epsilon=8.0, steps=3, batch_size=32, hidden=8, adj_dim=4,
                     adj_steps=0, device="cpu", **bound)
    recs: list[dict[str, float]] = []
    _, _, _, report, _ = train_dpdgc(data, spec,
                                   PrivateRun(lambda s, r: recs.append(dict(r))))
    assert len(recs) == 3 and all("epsilon" in r for r in recs), recs
    # an upper bound on ε spent, never below the report's
    assert all(r["epsilon"] >= report["epsilon"] - 1e-9 for r in recs)
    assert recs[-1]["total_steps"] == 3
