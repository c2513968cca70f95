"""How long a trivial flow run takes end to end with Prefect's own flow-run heartbeats (the
peer) and with dpgnn's (``tasks.heartbeats``), each in a fresh process on the same
temporary Prefect server set-up, alternating (issue 52 §7: a small run's fixed cost).

    python benchmarks/bench_flow_end.py [--runs 6] [--repeat 3]

Prints one JSON object: per mode, the wall seconds of every flow run after a first (warm-up)
run, their median, and the ratio of the medians. Prefect's thread sleeps in steps of one
second and the engine joins it when the run ends, so a run shorter than a second waited for
the rest of that second; dpgnn's thread waits on the stop flag.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

_CHILD = """
import json, os, sys, time
sys.path.insert(0, {root!r})
import tasks
from prefect import flow
if {ours!r}:
    from tasks.heartbeats import install
    assert install()

@flow
def trivial(i: int) -> int:
    return i

trivial(0)  # warm-up: the temporary server's start, the flow's registration
walls = []
for i in range({runs}):
    t = time.perf_counter()
    trivial(i + 1)
    walls.append(time.perf_counter() - t)
print(json.dumps(walls))
"""


def _one(ours: bool, runs: int) -> list[float]:
    with tempfile.TemporaryDirectory(prefix="dpgnn-flow-end-") as home:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "DPGNN_"))}
        env.update({"DPGNN_HOME": home, "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
                    "DO_NOT_TRACK": "1"})
        r = subprocess.run([sys.executable, "-c", _CHILD.format(root=str(ROOT), ours=ours,
                                                               runs=runs)],
                           env=env, capture_output=True, text=True, timeout=600, cwd=home)
        if r.returncode != 0:
            raise SystemExit(r.stderr[-3000:])
        walls: list[float] = json.loads(r.stdout.strip().splitlines()[-1])
        return walls


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--runs", type=int, default=6)
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args()
    walls: dict[str, list[float]] = {"prefect": [], "dpgnn": []}
    for _ in range(args.repeat):
        walls["prefect"] += _one(False, args.runs)
        walls["dpgnn"] += _one(True, args.runs)
    med = {k: statistics.median(v) for k, v in walls.items()}
    print(json.dumps({"runs_per_process": args.runs, "processes_per_mode": args.repeat,
                      "median_wall_s": {k: round(v, 3) for k, v in med.items()},
                      "prefect_over_dpgnn": round(med["prefect"] / med["dpgnn"], 2),
                      "load1": round(os.getloadavg()[0], 2),
                      "wall_s": {k: [round(x, 3) for x in v] for k, v in walls.items()}},
                     indent=1))


if __name__ == "__main__":
    main()
