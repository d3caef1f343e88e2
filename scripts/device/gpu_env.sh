# Sourced by the GPU check scripts: OUT (made), the thread settings, the wheels of WHL (if any)
# installed with --no-index into /tmp/site, the repository's src on PYTHONPATH, and the machine's
# description in $OUT/machine.txt (nvidia-smi, torch/CUDA/numpy/scipy/cma versions, nproc).
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 MUJOCO_GL=disable
if [ -n "$WHL" ] && ls "$WHL"/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site "$WHL"/*.whl && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH}
{ nvidia-smi -L; python3 -c "import importlib, torch, numpy, scipy
print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name(0),
      'numpy', numpy.__version__, 'scipy', scipy.__version__)
try:
    print('cma', importlib.import_module('cma').__version__)
except ImportError:
    print('cma missing')"; nproc; } 2>&1 | tee "$OUT/machine.txt"
