"""A fault trial of the `dpgnn` CLI as a new user meets it (issue 48's "Done when").

Runs each case sequentially through ``.venv/bin/dpgnn`` with a private DPGNN_HOME under
/tmp, and records per case: the command, exit code, stderr line count, whether a traceback
or a raw exception name appeared, the time to the refusal, whether protected files changed
(sha256 before/after), and whether the budget store gained a release while the command
failed. A refusal case passes when: exit != 0, one ``error:`` line (naming what
``mention`` lists, where given), no traceback/raw exception, under 10 s, nothing protected
lost, no charge without release. Some cases expect success (exit 0) with a check.

Usage (from the repository root, PYTHONPATH set to it)::

    PYTHONPATH=$PWD .venv/bin/python benchmarks/fault_trial.py [--only SUBSTR] [--out FILE]

(``FAULT_TRIAL_BASE`` moves the trial's folder from /tmp/fault-trial, where two sessions
trying at once would share it.)

Writes a JSON lines record per case (default /tmp/fault-trial/results.jsonl) and prints a
summary by group plus every failing case.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import pickle
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DPGNN = str(ROOT / ".venv" / "bin" / "dpgnn")
PY = str(ROOT / ".venv" / "bin" / "python")
SHARED = ROOT.parent / "shared" if (ROOT.parent / "shared").exists() else Path("/work/shared")
DATA = Path("/work/shared/datasets")
BASE = Path(os.environ.get("FAULT_TRIAL_BASE") or "/tmp/fault-trial")  # one per session
HOME = BASE / "home"
W = BASE / "work"
MARKER = BASE / "PWNED"
RAW_EXC = re.compile(r"Traceback|^\s*\w+(Error|Exception|Warning):|RuntimeWarning|pydantic|"
                     r"OperationalError|\bFile \"", re.M)
LIMIT_S = 10.0


@dataclass
class Case:
    """One input or fault: the command and what passing means."""
    cid: str
    group: str
    cmd: list[str] | str
    expect: str = "refuse"  # refuse | ok | either (ok, or a clean refusal)
    mention: list[str] = field(default_factory=list)  # any of these in the error line
    protect: list[Path] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    setup: Callable[[], None] | None = None
    check: Callable[[dict], str | None] | None = None
    timeout: float = 30.0
    limit: float = LIMIT_S
    cwd: Path | None = None


def env_for(extra: dict[str, str]) -> dict[str, str]:
    """The user's environment: a private home, the worktree on PYTHONPATH."""
    e = dict(os.environ, PYTHONPATH=str(ROOT), DPGNN_HOME=str(HOME), COLUMNS="200",
             PREFECT_SERVER_ANALYTICS_ENABLED="false", DO_NOT_TRACK="1")
    e.update(extra)
    return {k: v for k, v in e.items() if v is not None}


def dp(*args: str | Path) -> list[str]:
    """A dpgnn command line."""
    return [DPGNN, *map(str, args)]


def sh(cmd: list[str] | str, extra: dict[str, str] | None = None, timeout: float = 120,
       cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run a command to completion (setup steps)."""
    return subprocess.run(cmd, shell=isinstance(cmd, str), env=env_for(extra or {}),
                          capture_output=True, text=True, timeout=timeout, cwd=cwd or W)


def snapshot(paths: list[Path]) -> dict[str, str]:
    """sha256 of every file under the protected paths."""
    out: dict[str, str] = {}
    for p in paths:
        if not p.exists():
            continue
        files = [p] if p.is_file() else sorted(x for x in p.rglob("*") if x.is_file())
        for f in files:
            try:
                out[str(f)] = hashlib.sha256(f.read_bytes()).hexdigest()
            except OSError:
                out[str(f)] = "unreadable"
    return out


def releases() -> int:
    """Charged rows in the budget store's releases table (0 when there is none)."""
    db = HOME / "budget.sqlite"
    if not db.exists():
        return 0
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30) as c:
            q = "select count(*) from releases where status != 'reuse'"  # a cache hit costs nothing
            return int(c.execute(q).fetchone()[0])
    except sqlite3.Error:
        return -1


def run_case(c: Case) -> dict:
    """Run one case and judge it."""
    if c.setup:
        c.setup()
    before = snapshot(c.protect)
    rel0 = releases()
    MARKER.unlink(missing_ok=True)
    t0 = time.monotonic()
    timed_out = False
    p = subprocess.Popen(c.cmd, shell=isinstance(c.cmd, str), env=env_for(c.env), text=True,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=c.cwd or W,
                         start_new_session=True)
    try:
        out, err = p.communicate(timeout=c.timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
    dt = time.monotonic() - t0
    after = snapshot(c.protect)
    rel1 = releases()
    lost = sorted(k for k in before if after.get(k) != before[k])
    lines = [ln for ln in err.splitlines() if ln.strip()]
    rec = {"id": c.cid, "group": c.group, "cmd": c.cmd if isinstance(c.cmd, str) else " ".join(
        x.replace(str(ROOT) + "/.venv/bin/", "") for x in c.cmd), "env": c.env, "rc": p.returncode,
        "timed_out": timed_out, "seconds": round(dt, 2), "stderr_lines": len(lines),
        "raw": bool(RAW_EXC.search(err)), "lost": lost, "charged": rel1 - rel0,
        "marker": MARKER.exists(), "stderr_tail": "\n".join(lines[-4:])[-600:],
        "stdout_tail": out[-400:]}
    rec["problems"] = judge(c, rec, lines, out, err)
    rec["pass"] = not rec["problems"]
    return rec


def judge_refusal(c: Case, r: dict, lines: list[str]) -> list[str]:
    """What is wrong with a refusal: exit 0, a charge, no or several lines, raw text, late."""
    bad = []
    if r["rc"] == 0:
        bad.append("accepted (exit 0)")
    if r["charged"] > 0:
        bad.append(f"charged {r['charged']} release(s) and failed")
    errl = [ln for ln in lines if re.match(r"([\w.-]+: )?error\b", ln, re.I)]  # "serve: error: ..."
    if not errl:
        bad.append("no `error:` line")
    elif c.mention and not any(m.lower() in errl[0].lower() for m in c.mention):
        bad.append(f"error line names none of {c.mention}")
    if len(lines) > 1:
        bad.append(f"{len(lines)} stderr lines")
    if r["raw"]:
        bad.append("raw exception/traceback/warning text")
    if r["seconds"] > c.limit:
        bad.append(f"refused after {r['seconds']} s")
    return bad


def judge(c: Case, r: dict, lines: list[str], out: str, err: str) -> list[str]:
    """What is wrong with a case's outcome (empty when it passes)."""
    bad = []
    if r["marker"]:
        bad.append("payload ran (marker file written)")
    if r["lost"]:
        bad.append(f"protected files changed/lost: {len(r['lost'])}")
    if r["timed_out"]:
        bad.append(f"no answer within {c.timeout:.0f} s")
    if c.expect == "either" and r["rc"] == 0:
        if r["raw"]:
            bad.append("raw exception/traceback/warning text")
    elif c.expect in ("refuse", "either"):
        bad += judge_refusal(c, r, lines)
    else:
        if r["rc"] != 0:
            bad.append(f"exit {r['rc']}")
        if r["raw"]:
            bad.append("raw exception/traceback/warning text")
    if c.check:
        msg = c.check({**r, "out": out, "err": err})
        if msg:
            bad.append(msg)
    return bad


# ---------------------------------------------------------------- fixtures
class Payload:
    """A pickle that, when loaded by an unrestricted unpickler, writes the marker file."""

    def __init__(self, how: str = "os") -> None:
        self.how = how

    def __reduce__(self):
        if self.how == "eval":
            return (eval, (f"open({str(MARKER)!r}, 'w').write('x')",))
        if self.how == "subprocess":
            return (subprocess.call, (["touch", str(MARKER)],))
        return (os.system, (f"touch {MARKER}",))


def planetoid_copy(name: str, bad_file: str | None = None, how: str = "os",
                   nested: bool = False) -> Path:
    """Cora's raw files renamed to ``name``, one replaced by a crafted pickle."""
    d = W / f"planetoid-{name}-{bad_file}-{how}-{nested}"
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    for f in (DATA / "planetoid/Cora/raw").iterdir():
        shutil.copy(f, d / f.name.replace("cora", name))
    if bad_file:
        obj: object = Payload(how)
        if nested:
            obj = {0: [1, 2], 1: [Payload(how)]}
        (d / f"ind.{name}.{bad_file}").write_bytes(pickle.dumps(obj, protocol=2))
    return d


def write(name: str, text: str | bytes) -> Path:
    """A file under the work folder."""
    p = W / name
    p.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        p.write_bytes(text)
    else:
        p.write_text(text)
    return p


def edges_csv(n: int = 30, extra: str = "") -> str:
    """A small directed ring as CSV text (src,dst)."""
    return "src,dst\n" + "".join(f"{i},{(i + 1) % n}\n" for i in range(n)) + extra


def nodes_csv(n: int = 30, feat: Callable[[int], str] = lambda i: f"{i * 0.1:.2f}",
              label: Callable[[int], str] = lambda i: str(i % 2)) -> str:
    """A node table: id, label, two features."""
    return "id,label,f1,f2\n" + "".join(f"{i},{label(i)},{feat(i)},{i % 3}\n" for i in range(n))


def csv_case(cid: str, edges: str | bytes, nodes: str | bytes | None = None,
             extra: tuple[str, ...] = (), mention: tuple[str, ...] = (),
             expect: str = "refuse", check: Callable[[dict], str | None] | None = None) -> Case:
    """An ingest of a crafted CSV edge list (and node table)."""
    e = write(f"csv/{cid}/edges.csv", edges)
    args = ["ingest", "--format", "csv", "--source", e, "--out", W / f"out-{cid}"]
    if nodes is not None and "--id-col" not in extra:
        args += ["--id-col", "id"]
    if nodes is not None:
        args += ["--nodes", write(f"csv/{cid}/nodes.csv", nodes)]
    return Case(cid, "input:csv", dp(*args, *extra), expect=expect, mention=list(mention),
                check=check)


def prepare() -> dict[str, Path]:
    """Fresh home and work folders, and the datasets the cases use."""
    shutil.rmtree(BASE, ignore_errors=True)
    W.mkdir(parents=True)
    HOME.mkdir(parents=True)
    ds = {k: W / "ds" / k for k in ("syn", "synb", "sync", "cora", "cora2", "reed", "er", "victim")}
    steps = [
        dp("ingest", "--format", "synthetic", "-o", "num_nodes=300", "--out", ds["syn"]),
        dp("ingest", "--format", "synthetic", "-o", "num_nodes=300", "-o", "seed=7",
           "--out", ds["synb"]),
        dp("ingest", "--format", "synthetic", "-o", "num_nodes=300", "-o", "seed=9",
           "--out", ds["victim"]),
        dp("ingest", "--format", "planetoid", "--source", DATA / "planetoid/Cora/raw",
           "--out", ds["cora"]),
        dp("ingest", "--format", "planetoid", "--source", DATA / "planetoid/Cora/raw",
           "--seed", "1", "--fractions", "0.6,0.2,0.2", "--out", ds["cora2"]),
        dp("ingest", "--format", "facebook100", "--source", DATA / "facebook100/Reed98.mat",
           "--min-class-size", "50", "--out", ds["reed"]),
        dp("ingest", "--format", "synthetic", "-o", "kind=er_graphs", "-o", "num_graphs=100",
           "-o", "split=[60,10,30]", "--out", ds["er"]),
        dp("budget", "set", ds["synb"], "--epsilon", "3", "--delta", "1e-4"),
        # a large budget for the concurrency cases (synb's small one refuses them by then)
        dp("ingest", "--format", "synthetic", "-o", "num_nodes=300", "-o", "seed=11",
           "--out", ds["sync"]),
        dp("budget", "set", ds["sync"], "--epsilon", "100", "--delta", "1e-4"),
        # a finished private release on synb (for the lost-cache case) and one on syn
        # before it gets a budget (for the budget-set-after-releases case)
        dp("run", "dp-gcn", "--dataset", ds["synb"], "--epsilon", "1", "--steps", "3"),
        dp("run", "dp-gcn", "--dataset", ds["syn"], "--epsilon", "2", "--steps", "3"),
    ]
    for s in steps:
        r = sh(s, timeout=300)
        if r.returncode:
            sys.exit(f"setup failed: {' '.join(map(str, s))}\n{r.stderr[-2000:]}")
    (W / "notds").mkdir()
    (W / "notds" / "thesis.tex").write_text("\\documentclass{article} years of work\n")
    (W / "plainfile.txt").write_text("keep me\n")
    return ds


def all_cases(ds: dict[str, Path]) -> list[Case]:
    """Every case, in the order they run (charge-sensitive ones last)."""
    from fault_trial_cases import (
        budget_cases,
        charge_cases,
        env_cases,
        overwrite_cases,
        raw_cases,
        security_cases,
    )
    from fault_trial_inputs import files_cases, format_cases, input_cases, option_cases, sweep_cases

    return [*security_cases(), *overwrite_cases(ds), *env_cases(ds), *input_cases(),
            *format_cases(ds), *option_cases(ds), *sweep_cases(ds), *files_cases(ds),
            *raw_cases(ds), *budget_cases(ds), *charge_cases(ds)]


def main() -> None:
    """Run the trial and print the summary."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="only ids containing one of these (a,b,...)")
    ap.add_argument("--out", default=str(BASE.parent / "fault-trial-results.jsonl"))
    a = ap.parse_args()
    t0 = time.monotonic()
    ds = prepare()
    print(f"setup {time.monotonic() - t0:.0f} s", flush=True)
    only = a.only.split(",")
    cases = [c for c in all_cases(ds) if any(o in c.cid for o in only)]
    recs = []
    with open(a.out, "w") as f:
        for c in cases:
            r = run_case(c)
            recs.append(r)
            f.write(json.dumps(r) + "\n")
            f.flush()
            verdict = "PASS" if r["pass"] else "FAIL"
            why = "" if r["pass"] else f"  <- {'; '.join(r['problems'])}"
            line = f"{verdict} {r['seconds']:6.1f}s rc={r['rc']} {c.group:15} {c.cid}{why}"
            print(line, flush=True)
    groups: dict[str, list[int]] = {}
    for r in recs:
        g = groups.setdefault(r["group"], [0, 0])
        g[0] += 1
        g[1] += r["pass"]
    print(f"\n{len(recs)} cases, {sum(r['pass'] for r in recs)} passed, "
          f"{time.monotonic() - t0:.0f} s in all")
    for g, (n, ok) in groups.items():
        print(f"  {g:16} {ok}/{n}")


if __name__ == "__main__":
    main()
