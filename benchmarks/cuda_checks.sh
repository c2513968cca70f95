#!/usr/bin/env bash
# The checks a CUDA machine runs (the guide: test_cuda.py, then the step benchmarks on the GPU),
# from the repository root, writing logs and JSON into ${OUT:-/tmp/cuda-checks}. Expects torch
# with CUDA and dpgnn_core's other needs importable (PYTHONPATH). tests/conftest.py is left out
# (--noconftest): it sets up Prefect and MLflow homes, which test_cuda.py does not use.
set -u
out=${OUT:-/tmp/cuda-checks}
mkdir -p "$out"
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD PYTHONUNBUFFERED=1
py=${PYTHON:-python3}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$out/gpu.txt"
$py -c "import torch, torch_geometric, opacus; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'pyg', torch_geometric.__version__, 'opacus', opacus.__version__)" | tee -a "$out/gpu.txt"
rc=0
timeout 240 $py -m pytest --noconftest -p no:cacheprovider -q -rs tests/dpgnn_core/test_cuda.py \
    2>&1 | tee "$out/test_cuda.log" || rc=1
[ "${PIPESTATUS[0]}" = 0 ] || rc=1
timeout 150 $py benchmarks/bench_dp_step.py --device cuda --batch 10000 --repeat 5 \
    --out "$out/dp_step_cuda.jsonl" > "$out/dp_step_cuda.log" 2>&1 || rc=1
tail -40 "$out/dp_step_cuda.log"
timeout 60 $py benchmarks/bench_graph_step.py --device cuda > "$out/graph_step_cuda.json" \
    2>&1 || rc=1
cat "$out/graph_step_cuda.json"
exit $rc
