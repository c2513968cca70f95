"""The audit table of benchmarks/RESULTS.md ("Empirical privacy audit"): every private
method on Cora (stratified 75/10/15) at ε ∈ {1, 4, 8} with its default recipe, audited by
``dpgnn audit`` (one-run, 200 canaries, 95 % confidence), beside the non-private and
insecure controls. Each audit is one CLI call; its JSON line goes to
benchmarks/results/audit_cora.jsonl and the Markdown table to stdout.

    python benchmarks/audit_table.py [--home DIR] [--only NAME ...]

Run from the repository root with ../shared beside it. About 1-3 minutes per audit on 2
cores (Prefect's start-up included).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CORA = ROOT.parent / "shared" / "datasets" / "planetoid" / "Cora" / "raw"
OUT = ROOT / "benchmarks" / "results" / "audit_cora.jsonl"
DPGNN = Path(sys.executable).parent / "dpgnn"

#: (row name, method, options): the private rows at each ε, then the controls.
EPSILONS = (1, 4, 8)
PRIVATE = [
    ("dp-mlp", "dp-mlp", []),
    ("dp-gcn", "dp-gcn", []),
    ("drw-gcn", "drw-gcn", []),
    ("gap-edp", "gap-edp", []),
    ("gap-ndp", "gap-ndp", ["--max-degree", "168"]),
]
CONTROLS = [
    ("dp-mlp (non-private)", "dp-mlp", ["--non-private"]),
    ("dp-gcn (non-private)", "dp-gcn", ["--non-private"]),
    ("drw-gcn (non-private)", "drw-gcn", ["--non-private"]),
    ("gap-inf (GAP-EDP's path, no noise)", "gap-inf", []),
    ("gap-edp ε=1, insecure reproducible noise, reproduced-noise attack", "gap-edp",
     ["--epsilon", "1", "--insecure-reproducible-noise", "--attack", "reproduced-noise"]),
    ("gap-ndp ε=1000 (near-noiseless)", "gap-ndp", ["--epsilon", "1000", "--max-degree",
                                                    "168"]),
]


def jobs() -> list[tuple[str, str, list[str]]]:
    out = [(f"{name} ε={e}", m, [*opts, "--epsilon", str(e)])
           for name, m, opts in PRIVATE for e in EPSILONS]
    return out + CONTROLS


def ensure_cora(home: Path) -> Path:
    folder = home / "cora-75"
    if not (folder / "manifest.json").is_file():
        subprocess.run([str(DPGNN), "ingest", "--format", "planetoid", "--source", str(CORA),
                        "--out", str(folder), "-o", "fractions=[0.75,0.1,0.15]"], check=True,
                       env=_env(home))
    return folder


def _env(home: Path) -> dict[str, str]:
    return {**os.environ, "DPGNN_HOME": str(home), "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
            "DO_NOT_TRACK": "1"}


def run(home: Path, only: list[str]) -> list[dict[str, object]]:
    data = ensure_cora(home)
    rows = []
    for name, method, opts in jobs():
        if only and not any(o in name for o in only):
            continue
        t = time.time()
        r = subprocess.run([str(DPGNN), "audit", method, "--dataset", str(data), *opts,
                            "--canaries", "200", "--json"], capture_output=True, text=True,
                           env=_env(home))
        if r.returncode != 0:
            print(f"{name}: failed: {r.stderr.strip().splitlines()[-1:]}", file=sys.stderr)
            continue
        rec = {"row": name, **json.loads(r.stdout), "wall_seconds": round(time.time() - t, 1)}
        rows.append(rec)
        with OUT.open("a") as f:
            f.write(json.dumps(rec) + "\n")
        print(f"{name}: reported {rec['reported_epsilon']}, lower {rec['epsilon_lower']:.3f}"
              f" ({rec['correct']}/{rec['guesses']}), {rec['wall_seconds']} s", flush=True)
    return rows


def table(rows: list[dict[str, object]]) -> str:
    lines = ["| audit | reported ε | δ | ε lower bound (95 %) | correct / guesses | canaries "
             "| time (s) |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        eps = r["reported_epsilon"]
        lines.append(f"| {r['row']} | {'∞' if eps is None else f'{eps:.3g}'} "
                     f"| {r['delta']:.2g} | **{r['epsilon_lower']:.2f}** "
                     f"| {r['correct']} / {r['guesses']} | {r['m']} {r['canaries']} "
                     f"| {r['wall_seconds']:.0f} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--home", type=Path, default=Path("/tmp/dpgnn-audit-bench"))
    ap.add_argument("--only", nargs="*", default=[])
    ap.add_argument("--table-only", action="store_true",
                    help="print the table of the rows already in the results file")
    args = ap.parse_args()
    if args.table_only:
        rows = [json.loads(x) for x in OUT.read_text().splitlines() if x.strip()]
    else:
        rows = run(args.home, args.only)
    print(table(rows))


if __name__ == "__main__":
    main()
