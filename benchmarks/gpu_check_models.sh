#!/usr/bin/env bash
# The CUDA checks of the moved-successor models (local-linear, anchored), CMA-ES and the search
# horizon, and the whole test suite on a machine where CUDA is available, for a lent GPU machine.
#
#   bash benchmarks/gpu_check_models.sh OUT_DIR [WHEEL_DIR]
#
# 1. tests/test_cuda.py (CPU and CUDA give the same numbers, the new models included);
# 2. benchmarks/bench_moved_successors_device.py: seconds per update on cart-pole, CPU and CUDA;
# 3. the whole suite (pytest-xdist), which must pass where torch.cuda.is_available() is true.
# WHEEL_DIR holds wheels of packages the machine lacks (cma, pyamg, gymnasium, ...), installed
# with --no-index into /tmp/site.
set -u
OUT=${1:?usage: gpu_check_models.sh OUT_DIR [WHEEL_DIR]}
WHL=${2:-}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 MUJOCO_GL=disable
if [ -n "$WHL" ] && ls "$WHL"/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site "$WHL"/*.whl && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH}
{ nvidia-smi -L; python3 -c "import torch, numpy, scipy, cma; print('torch', torch.__version__,
  'cuda', torch.version.cuda, torch.cuda.get_device_name(0), 'numpy', numpy.__version__,
  'scipy', scipy.__version__, 'cma', cma.__version__)"; nproc; } 2>&1 | tee "$OUT/machine.txt"
timeout 150 python3 -m pytest -q -p no:cacheprovider -W ignore tests/test_cuda.py 2>&1 \
  | tee "$OUT/test_cuda.txt" | tail -15
timeout 120 python3 benchmarks/bench_moved_successors_device.py --updates 4 2>&1 \
  | tee "$OUT/moved_successors.txt"
timeout 200 python3 -m pytest -q -p no:cacheprovider -W ignore -n 14 tests 2>&1 \
  | tee "$OUT/suite.txt" | tail -30
