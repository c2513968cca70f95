"""Fixed overhead of `dpgnn run` (ephemeral Prefect vs the background server, cold vs fully
cached) against the same work done by calling the core library directly.

Every configuration runs as a fresh process, as a user's command would.
Usage: python benchmarks/bench_run_overhead.py [--repeat 2] [--epochs 50]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent
sys.path.insert(0, str(HERE))

CORE = """
import sys
from dpgnn_core.data.store import read_dataset
from dpgnn_core.methods import baseline
from dpgnn_core.specs import TrainSpec
d = read_dataset(sys.argv[1])
spec = TrainSpec(method="gcn", epochs=int(sys.argv[2]))
fit = baseline.fit(d, spec)
print(baseline.evaluate(d, baseline.predict(fit.model, d, spec))["test"]["accuracy"])
"""


def _time(cmd: list[str], env: dict[str, str]) -> float:
    t = time.perf_counter()
    subprocess.run(cmd, env=env, check=True, capture_output=True)
    return time.perf_counter() - t


def main() -> None:
    from _util import machine

    p = argparse.ArgumentParser()
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--epochs", type=int, default=50)
    args = p.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="dpgnn-overhead-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env["DPGNN_HOME"] = str(tmp / "home")
    ds = tmp / "ds"
    subprocess.run([BIN / "dpgnn", "ingest", "--format", "synthetic", "--out", str(ds),
                    "-o", "num_nodes=3000"], env=env, check=True, capture_output=True)
    run = [str(BIN / "dpgnn"), "run", "--method", "gcn", "--dataset", str(ds), "--epochs",
           str(args.epochs), "--json"]
    # Warm-up: creates the Prefect and MLflow databases (a one-off cost per project).
    subprocess.run(run, env=env, check=True, capture_output=True)

    res: dict[str, float] = {}

    def best(name: str, cmd: list[str]) -> None:
        res[name] = min(_time(cmd, env) for _ in range(args.repeat))

    best("core_direct_s", [sys.executable, "-c", CORE, str(ds), str(args.epochs)])
    best("run_ephemeral_cold_s", [*run, "--refresh"])
    best("run_ephemeral_cached_s", run)
    subprocess.run([BIN / "dpgnn", "server", "start", "--port", "4299"], env=env, check=True,
                   capture_output=True)
    try:
        best("run_server_cold_s", [*run, "--refresh"])
        best("run_server_cached_s", run)
    finally:
        subprocess.run([BIN / "dpgnn", "server", "stop"], env=env, capture_output=True)
    core = res["core_direct_s"]
    ratios = {f"{k.removesuffix('_s')}_over_core": v / core for k, v in res.items()
              if k != "core_direct_s"}
    print(json.dumps({"machine": machine(), "epochs": args.epochs, "repeat": args.repeat,
                      "seconds": res, "ratios": ratios}, indent=2))


if __name__ == "__main__":
    main()
