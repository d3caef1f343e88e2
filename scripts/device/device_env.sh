# Sourced by the scripts that run on a lent GPU machine (scripts/device/gpu_nopg_s_cells.sh,
# scripts/device/study_cells.sh): one torch thread per process, the wheels in $WHL (if any)
# installed to /tmp/site, and this checkout's src/ on PYTHONPATH (nopg is not installed there).
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
if [ -n "${WHL:-}" ] && ls "$WHL"/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site "$WHL"/*.whl && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH}

# The machine and the library versions, for a study's machine.txt.
describe_machine() {
  date -u; nproc --all
  python3 -c "import torch, numpy, scipy; print('torch', torch.__version__, 'numpy',
    numpy.__version__, 'scipy', scipy.__version__)"
}
