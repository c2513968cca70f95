"""Fixed overhead of `dpgnn run` (ephemeral Prefect vs the background server, cold vs fully
cached) against the same work done by calling the core library directly.

Every configuration runs as a fresh process, as a user's command would.
Usage: python benchmarks/bench_run_overhead.py [--repeat 2] [--epochs 50]

``--cora`` (issue 52 §7): a private Cora run's split with ``dpgnn server`` running, for
each method: the cold run (``--refresh``) and the fully cached run, as CPU seconds (user +
sys of the ``dpgnn`` process and its children: the figure a shared machine does not
inflate much) and wall; the core library's own fit of the same spec in a fresh process
(imports and compute apart); and where a cached run's CPU goes
(``benchmarks/run_split.py``). ``--tree DIR`` runs another checkout's code (its
``PYTHONPATH``) with this venv, for a before/after on one machine:
``python benchmarks/bench_run_overhead.py --cora [--tree /tmp/old] [--repeat 2]``.

``--cora --warm``: the same runs with ``dpgnn server`` running, each one both locally
(``DPGNN_WARM=0``) and through the server's warm runner (:mod:`flows.warm`), interleaved
(local, warm, local, warm, ...) so that both see the same load: CPU of the client and of
the command the runner forked (the runner's reaped children's CPU, from ``/proc``), and
the client's wall seconds. A warm run that the runner did not run (its log names each
one) restarts the runner and is measured again.
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
from typing import Any

HERE = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent
sys.path.insert(0, str(HERE))

from _util import child_cpu_run  # noqa: E402

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


def _cora_with_budget(dpgnn: str, env: dict[str, str], ds: Path, raw: str) -> None:
    """Cora ingested (75/10/15) to ``ds`` with a budget large enough for every run here."""
    subprocess.run([dpgnn, "ingest", "--format", "planetoid", "--source", raw,
                    "--out", str(ds), "-o", "fractions=[0.75,0.1,0.15]"], env=env,
                   check=True, capture_output=True)
    subprocess.run([dpgnn, "budget", "set", str(ds), "--epsilon", "100", "--delta", "1e-5"],
                   env=env, check=True, capture_output=True)

def _time(cmd: list[str], env: dict[str, str]) -> float:
    t = time.perf_counter()
    subprocess.run(cmd, env=env, check=True, capture_output=True)
    return time.perf_counter() - t


CORE_FIT = """
import sys, time, json
t0 = time.process_time()
import torch
torch.set_num_threads(1)
from dpgnn_core.data.store import read_dataset
from dpgnn_core.methods.registry import get
method = get(sys.argv[2])
t1 = time.process_time()
data = read_dataset(sys.argv[1])
spec = method.spec(epsilon=1.0, seed=1)
fitted = method.fit(data, spec)
t2 = time.process_time()
metrics = method.evaluate(fitted.model, data, spec, fitted.extra)
t3 = time.process_time()
print(json.dumps({"imports_cpu_s": t1 - t0, "fit_cpu_s": t2 - t1, "evaluate_cpu_s": t3 - t2,
                  "test_accuracy": metrics["test"]["accuracy"]}))
"""


def _cpu_run(cmd: list[str], env: dict[str, str]) -> dict[str, Any]:
    """Run ``cmd``; its wall seconds and CPU seconds (user + sys of it and its children)."""
    out, wall, cpu = child_cpu_run(cmd, env)
    out.check_returncode()
    return {"wall_s": round(wall, 2), "cpu_s": round(cpu, 2), "stdout": out.stdout,
            "stderr": out.stderr}


def cora(args: argparse.Namespace) -> None:
    """The issue 52 §7 split on Cora (see the module docstring)."""
    from _util import machine

    tmp = Path(tempfile.mkdtemp(prefix="dpgnn-overhead-cora-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    tree = Path(args.tree).resolve() if args.tree else HERE.parent
    env.update({"DPGNN_HOME": str(tmp / "home"), "PYTHONPATH": str(tree),
                "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "DO_NOT_TRACK": "1"})
    dpgnn = str(BIN / "dpgnn")
    ds = tmp / "cora"
    _cora_with_budget(dpgnn, env, ds, args.cora_raw)
    res: dict[str, Any] = {"machine": machine(), "tree": str(tree),
                           "load_before": os.getloadavg(), "methods": {}}
    subprocess.run([dpgnn, "server", "start", "--port", str(args.port)], env=env,
                   check=True, capture_output=True)
    try:  # warm-up: creates the MLflow database (a one-off cost per project)
        warm = tmp / "warm"
        subprocess.run([dpgnn, "ingest", "--format", "synthetic", "--out", str(warm), "-o",
                        "num_nodes=200"], env=env, check=True, capture_output=True)
        subprocess.run([dpgnn, "run", "mlp", "--dataset", str(warm), "--epochs", "2"],
                       env=env, check=True, capture_output=True)
        for name in args.methods.split(","):
            run = [dpgnn, "run", name, "--dataset", str(ds), "--epsilon", "1", "--seed", "1",
                   "--json"]
            cold = _cpu_run([*run, "--refresh"], env)
            summary = json.loads(cold.pop("stdout"))
            cold.pop("stderr")
            cached = [_cpu_run(run, env) for _ in range(args.repeat)]
            for c in cached:
                c.pop("stdout"), c.pop("stderr")
            split = _cpu_run([sys.executable, str(tree / "benchmarks" / "run_split.py"),
                              *run[1:]], env)
            core = _cpu_run([sys.executable, "-c", CORE_FIT, str(ds), name], env)
            res["methods"][name] = {
                "cold": cold, "cold_test_accuracy": summary.get("test_accuracy"),
                "cached": cached, "core_fit": {**json.loads(core["stdout"]),
                                               "process_cpu_s": core["cpu_s"]},
                "cached_split_cpu_s": json.loads(split["stderr"][split["stderr"].rindex("{\n"):])}
    finally:
        subprocess.run([dpgnn, "server", "stop"], env=env, capture_output=True)
    res["load_after"] = os.getloadavg()
    print(json.dumps(res, indent=1))


SCRIPT = ("#!{python}\nimport sys\nfrom flows.warm_client import main\n"
          "if __name__ == '__main__':\n    sys.exit(main())\n")


def _children_cpu(pid: int) -> float:
    """CPU seconds of the reaped children of ``pid`` (``cutime + cstime``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[13]) + int(fields[14])) / os.sysconf("SC_CLK_TCK")


def _warm_run(cmd: list[str], env: dict[str, str], home: Path) -> dict[str, Any]:
    """``cmd`` through the warm runner: the client's CPU plus the forked command's."""
    log = home / "warm.log"
    for _ in range(3):
        runner = json.loads((home / "warm.json").read_text())["pid"]
        ran = log.read_text().count("` as pid ")
        before = _children_cpu(runner)
        out = _cpu_run(cmd, env)
        deadline = time.monotonic() + 10
        while log.read_text().count("` as pid ") == ran and time.monotonic() < deadline:
            time.sleep(0.2)
        if log.read_text().count("` as pid ") > ran:
            time.sleep(1.5)  # the runner reaps the command's supervisor within a second
            out["client_cpu_s"] = out["cpu_s"]
            out["cpu_s"] = round(out["cpu_s"] + _children_cpu(runner) - before, 2)
            return out
        _restart_runner(cmd[0], env, home)  # stale (the code changed): run it again
    raise RuntimeError("the warm runner did not run the command")


def _restart_runner(dpgnn: str, env: dict[str, str], home: Path, port: int = 0) -> None:
    args = ["--port", str(port)] if port else []
    subprocess.run([dpgnn, "server", "start", *args], env=env, check=True,
                   capture_output=True)
    deadline = time.monotonic() + 300
    while not (home / "warm.sock").exists():
        if time.monotonic() > deadline:
            raise RuntimeError("the warm runner did not start serving")
        time.sleep(0.5)


def warm_cora(args: argparse.Namespace) -> None:
    """``--cora --warm`` (module docstring)."""
    from _util import machine

    tmp = Path(tempfile.mkdtemp(prefix="dpgnn-overhead-warm-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update({"DPGNN_HOME": str(tmp / "home"), "PYTHONPATH": str(HERE.parent),
                "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "DO_NOT_TRACK": "1"})
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("MKL_NUM_THREADS", "1")
    env.setdefault("OPENBLAS_NUM_THREADS", "1")
    home = tmp / "home"
    script = tmp / "dpgnn"  # the installed script once pyproject's entry point is installed
    script.write_text(SCRIPT.format(python=sys.executable))
    script.chmod(0o755)
    dpgnn = str(script)
    ds = tmp / "cora"
    _cora_with_budget(dpgnn, env, ds, args.cora_raw)
    res: dict[str, Any] = {"machine": machine(), "load_before": os.getloadavg(),
                           "methods": {}}
    _restart_runner(dpgnn, env, home, args.port)
    local = {**env, "DPGNN_WARM": "0"}
    try:  # warm-up: creates the MLflow database (a one-off cost per project)
        subprocess.run([dpgnn, "run", args.methods.split(",")[0], "--dataset", str(ds),
                        "--epsilon", "1", "--seed", "1", "--json"], env=local, check=True,
                       capture_output=True)
        for name in args.methods.split(","):
            run = [dpgnn, "run", name, "--dataset", str(ds), "--epsilon", "1", "--seed", "1",
                   "--json"]
            rows: dict[str, list[dict[str, Any]]] = {
                "cold_local": [], "cold_warm": [], "cached_local": [], "cached_warm": []}
            for _ in range(args.repeat):
                rows["cold_local"].append(_cpu_run([*run, "--refresh"], local))
                rows["cold_warm"].append(_warm_run([*run, "--refresh"], env, home))
                rows["cached_local"].append(_cpu_run(run, local))
                rows["cached_warm"].append(_warm_run(run, env, home))
            for kind in rows.values():
                for r in kind:
                    r["test_accuracy"] = json.loads(r.pop("stdout")).get("test_accuracy")
                    r.pop("stderr")
            res["methods"][name] = rows
    finally:
        subprocess.run([dpgnn, "server", "stop"], env=env, capture_output=True)
    res["load_after"] = os.getloadavg()
    print(json.dumps(res, indent=1))


def main() -> None:
    from _util import machine

    p = argparse.ArgumentParser()
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--epochs", type=int, default=50)
    p.add_argument("--cora", action="store_true", help="the issue 52 §7 split on Cora")
    p.add_argument("--cora-raw", default=str(HERE.parent.parent / "shared" / "datasets" /
                                             "planetoid" / "Cora" / "raw"))
    p.add_argument("--methods", default="gap-edp,dpdgc-edp")
    p.add_argument("--tree", default=None, help="run this checkout's code (PYTHONPATH)")
    p.add_argument("--port", type=int, default=4298)
    p.add_argument("--warm", action="store_true",
                   help="with --cora: local and warm-runner runs, interleaved")
    args = p.parse_args()
    if args.cora and args.warm:
        warm_cora(args)
        return
    if args.cora:
        cora(args)
        return
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
