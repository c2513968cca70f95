"""The README's "A two-minute tour", every ``dpgnn`` command of its block in order, timed
(issue 52 §7: the tour under 90 s on an idle 2-core machine).

Each command runs as a user types it, from a fresh folder laid out as the README assumes
(``benchmarks/`` of the tree and ``../shared`` beside it, the project state in its
``./.dpgnn``), with ``PYTHONPATH`` set to the tree; the MLflow UI line is skipped. For each
command: wall seconds and CPU seconds (user + sys of the command and its children,
``getrusage``), and the load average before it. With ``--server``, ``dpgnn server start``
runs first (its warm runner then runs ``dpgnn run`` and ``dpgnn audit``, whose CPU is the
runner's and is not counted here: the CPU column is then a lower bound) and ``dpgnn server
stop`` last.

    python benchmarks/bench_readme_tour.py [--tree DIR] [--server] [--port 4391]
        [--shared DIR]

``--tree DIR`` runs another checkout's code and README (its ``PYTHONPATH``) with this
venv, for a before/after on one machine; ``--shared`` is the folder the tour's
``../shared`` points to (default: the one beside this tree).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent
sys.path.insert(0, str(HERE))

from _util import child_cpu_run  # noqa: E402


def tour_commands(readme: Path) -> list[list[str]]:
    """The ``dpgnn`` commands of the README's tour block, continuation lines joined and
    comments dropped."""
    text = readme.read_text()
    section = text[text.index("## A two-minute tour"):]
    block = re.search(r"```bash\n(.*?)```", section, re.S)
    if block is None:
        raise SystemExit(f"{readme}: no bash block in the tour")
    joined = re.sub(r"\\\n\s*", " ", block.group(1))
    out = []
    for line in joined.splitlines():
        line = line.split(" #", 1)[0].strip()
        if line.startswith("dpgnn "):
            out.append(shlex.split(line))
    return out


def _run(cmd: list[str], env: dict[str, str], cwd: Path) -> dict[str, Any]:
    load = os.getloadavg()[0]
    proc, wall, cpu = child_cpu_run(cmd, env, cwd)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    return {"cmd": " ".join(cmd[1:4]), "wall_s": round(wall, 2), "cpu_s": round(cpu, 2),
            "load1": round(load, 2)}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--tree", default=str(HERE.parent))
    p.add_argument("--server", action="store_true", help="dpgnn server start first")
    p.add_argument("--port", type=int, default=4391)
    p.add_argument("--shared", default=str(HERE.parent.parent / "shared"))
    args = p.parse_args()
    tree = Path(args.tree).resolve()
    base = Path(tempfile.mkdtemp(prefix="dpgnn-tour-"))
    (base / "shared").symlink_to(Path(args.shared).resolve())
    repo = base / "repo"
    repo.mkdir()
    (repo / "benchmarks").symlink_to(tree / "benchmarks")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PREFECT_", "DPGNN_", "OMP_", "MKL_"))}
    env.update({"PYTHONPATH": str(tree), "PATH": f"{BIN}:{env.get('PATH', '')}",
                "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "DO_NOT_TRACK": "1"})
    cmds = tour_commands(tree / "README.md")
    steps = []
    if args.server:
        steps.append(_run(["dpgnn", "server", "start", "--port", str(args.port)], env, repo))
    try:
        for cmd in cmds:
            steps.append(_run(cmd, env, repo))
            print(json.dumps(steps[-1]), file=sys.stderr, flush=True)
    finally:
        if args.server:
            subprocess.run(["dpgnn", "server", "stop"], env=env, cwd=repo,
                           capture_output=True)
    print(json.dumps({"tree": str(tree), "server": args.server,
                      "wall_s": round(sum(s["wall_s"] for s in steps), 1),
                      "cpu_s": round(sum(s["cpu_s"] for s in steps), 1),
                      "steps": steps}, indent=1))


if __name__ == "__main__":
    main()
