#!/usr/bin/env bash
# The CUDA checks of the project in one script, for a lent GPU machine (no network there).
#
#   bash scripts/device/gpu_check.sh OUT_DIR [WHEEL_DIR]
#
# 1. tests/test_cuda.py (CPU and CUDA give the same numbers);
# 2. benchmarks/bench_scale.py on the GPU (float32 and float64) at 10^4, 10^5 and 10^6, plus
#    Hopper-size data at 10^5, and, in the same run on the same machine, the CPU baseline (one
#    thread, the 2-core machine's setting) so that the figures can be read as ratios;
# 3. benchmarks/bench_knn_tiles.py: the full k-NN query at 10^6 by tile size and KD-tree workers.
#
# WHEEL_DIR holds wheels of packages the machine lacks (gymnasium, mujoco, ...); they are
# installed with --no-index into /tmp/site. Every stage has its own time limit, so that one
# slow stage leaves the others' results.
set -u
OUT=${1:?usage: gpu_check.sh OUT_DIR [WHEEL_DIR]}
WHL=${2:-}
source "$(dirname "$0")/gpu_env.sh"

B=benchmarks/bench_scale.py
# The CPU baseline, one thread per process, beside the GPU runs (16 cores: no contention).
( timeout 150 python3 $B --sizes 10000 100000 --dense-max 0 --paper-max 0 \
    --json "$OUT/cpu_f64.json" > /tmp/cpu_f64.txt 2>&1
  timeout 200 python3 $B --sizes 1000000 --updates 10 --dense-max 0 --paper-max 0 \
    --json "$OUT/cpu_f64_1e6.json" > /tmp/cpu_f64_1e6.txt 2>&1 ) &
CPU_PID=$!

timeout 100 python3 -m pytest -q -p no:cacheprovider -W ignore tests/test_cuda.py 2>&1 \
  | tee "$OUT/test_cuda.txt" | tail -5

run_gpu() {  # seconds dtype json-name extra-args...
  local secs=$1 dtype=$2 name=$3; shift 3
  timeout "$secs" python3 $B --device cuda --dtype "$dtype" --dense-max 0 --paper-max 0 \
    --json "$OUT/$name.json" "$@" 2>&1 | tee "/tmp/$name.txt"
}
timeout 90 python3 benchmarks/bench_knn_tiles.py --device cuda --n 1000000 --queries 200000 \
  --workers 1 16 2>&1 | tee "$OUT/knn_tiles.txt"
run_gpu 170 float32 gpu_f32 --sizes 10000 100000 1000000
run_gpu 90 float32 gpu_hopper --data hopper --sizes 100000
wait $CPU_PID
cat /tmp/cpu_f64.txt /tmp/cpu_f64_1e6.txt
