#!/usr/bin/env bash
# The GPU paths, on a machine with a CUDA GPU (CI has none): each step's output in OUT_DIR/<step>.log.
#
#   bash scripts/gpu_checks.sh [OUT_DIR]          # default OUT_DIR: build/gpu_checks
#
# The default job's data and run directory go to GPU_CHECKS_WORK (default: OUT_DIR).
#
# 1. environment: nvidia-smi and `python -m QuantumGrav doctor` (CUDA, NCCL, gloo, a port);
# 2. tests: tests/test_cuda.py (the default layer on CUDA against PyG's, fp16/bf16, the default model trained on
#    the GPU, NCCL with cuda:LOCAL_RANK under TrainerDDP, torchrun and the seeds' script) and the sparse layer's own;
# 3. bench_scale: the default model at N = 128 ... 2,048, both data sources, PyG's layer at the same batch of 32
#    (the GPU has the memory the 2-core machine lacked), into OUT_DIR/results_bench_scale_cuda.json;
# 4. the default job (configs/train.yaml as shipped, full size) on the GPU.
# Each step has a time limit, cut to what is left of GPU_CHECKS_BUDGET_S (default 1800) for all of them; the next
# step runs whatever the last did; the script's exit status is the tests'.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-build/gpu_checks}
mkdir -p "$out"
py=${PYTHON:-python3}
work=${GPU_CHECKS_WORK:-$out}
deadline=$((SECONDS + ${GPU_CHECKS_BUDGET_S:-1800}))
export PYTHONPATH="$PWD/QuantumGravPy/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1

step() {  # step NAME SECONDS COMMAND...: runs it under a limit, its output to the console and NAME.log
    local name=$1 limit=$2
    shift 2
    (( limit > deadline - SECONDS )) && limit=$((deadline - SECONDS))
    (( limit < 10 )) && { echo "=== $name: skipped, the budget is spent"; return 124; }
    echo "=== $name ($(date -u +%H:%M:%S))"
    timeout "$limit" "$@" > >(tee "$out/$name.log") 2>&1
    local code=$?
    echo "=== $name: exit $code"
    return $code
}

step environment 60 bash -c "nvidia-smi -L; $py -c 'import torch, torch_geometric; print(torch.__version__, torch_geometric.__version__, torch.cuda.get_device_name(0))'; $py -m QuantumGrav doctor --nproc 1"
step tests 240 "$py" -m pytest -q -p no:cacheprovider QuantumGravPy/tests/test_cuda.py QuantumGravPy/tests/test_sparse_attention.py
tests=$?
step bench_scale 270 "$py" benchmarks/scale/bench_scale.py --tables peak scale --device cuda \
    --before-batch '{"128": 32, "512": 32, "1024": 32, "2048": 32}' --json "$out/results_bench_scale_cuda.json"
step default_job 300 "$py" -m QuantumGrav train --config configs/train.yaml --set "training.path=$work/runs" \
    --set "data.root=$work/data"
exit $tests
