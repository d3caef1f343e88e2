#!/usr/bin/env bash
# The CUDA checks of the moved-successor models (local-linear, anchored), CMA-ES and the search
# horizon, and the whole test suite on a machine where CUDA is available, for a lent GPU machine.
#
#   bash scripts/device/gpu_check_models.sh OUT_DIR [WHEEL_DIR]
#
# 1. tests/test_cuda.py (CPU and CUDA give the same numbers, the new models included);
# 2. benchmarks/bench_moved_successors_device.py: seconds per update on cart-pole, CPU and CUDA;
# 3. the whole suite (pytest-xdist), which must pass where torch.cuda.is_available() is true
#    (SUITE=0 skips it).
# WHEEL_DIR holds wheels of packages the machine lacks (cma, pyamg, gymnasium, ...), installed
# with --no-index into /tmp/site.
set -u
OUT=${1:?usage: gpu_check_models.sh OUT_DIR [WHEEL_DIR]}
WHL=${2:-}
source "$(dirname "$0")/gpu_env.sh"
timeout 150 python3 -m pytest -q -p no:cacheprovider -W ignore tests/test_cuda.py 2>&1 \
  | tee "$OUT/test_cuda.txt" | tail -15
timeout 120 python3 benchmarks/bench_moved_successors_device.py --updates 4 2>&1 \
  | tee "$OUT/moved_successors.txt"
if [ "${SUITE:-1}" != 0 ]; then      # SUITE=0 skips the whole suite
  timeout 200 python3 -m pytest -q -p no:cacheprovider -W ignore -n 14 tests 2>&1 \
    | tee "$OUT/suite.txt" | tail -30
fi
