"""Run every benchmark in turn and print their JSON (``make bench``). Figures go to
benchmarks/RESULTS.md by hand, with the machine and command."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCRIPTS = ["bench_calibration.py", "bench_pld_epsilon.py", "bench_run_overhead.py",
           "bench_flow_end.py", "bench_scale_data.py", "bench_dgl.py"]

if __name__ == "__main__":
    for name in SCRIPTS:
        print(f"== {name}", flush=True)
        subprocess.run([sys.executable, str(HERE / name)], check=True)
