#!/usr/bin/env bash
# The NOPG-S cells of the sample-efficiency sweep that do not fit the 2-core CPU, on a lent GPU.
#
#   bash scripts/device/gpu_nopg_s_cells.sh OUT_DIR [WHEEL_DIR] [SECONDS]
#
# One `nopg reproduce sample-efficiency` process per (task, size, seed), all at once, with
# `nopg.model.device=cuda` and otherwise the reduced default's settings (seeds 0-2, the task's NOPG
# updates, `auto` bandwidths). Each process has SECONDS (default 480) before it is stopped; a
# stopped run leaves its log (a line every 100 updates) but no row. The rows of all finished
# runs are merged into OUT_DIR/runs.csv (the sweep's format: `nopg sweep-report` reads it); the
# logs go to OUT_DIR/logs.tgz. Set CELLS="task:size ..." to run other cells, DEVICE=cpu and
# EXTRA="--set nopg_updates=2" to try the script without a GPU.
set -u
OUT=${1:?usage: gpu_nopg_s_cells.sh OUT_DIR [WHEEL_DIR] [SECONDS]}
WHL=${2:-}
LIMIT=${3:-480}
DEVICE=${DEVICE:-cuda}
CELLS=${CELLS:-"mountaincar-human:1 mountaincar-human:2 mountaincar-human:5 cartpole-random:1000
pendulum-grid:800 umaze:100 umaze:300 umaze:1000"}
SEEDS=${SEEDS:-"0 1 2"}
mkdir -p "$OUT"
. "$(dirname "$0")/device_env.sh"
{ date -u; nvidia-smi -L 2>/dev/null; python3 -c "import torch, numpy, scipy; print('torch',
  torch.__version__, 'cuda', torch.version.cuda, torch.cuda.is_available() and
  torch.cuda.get_device_name(0), 'numpy', numpy.__version__, 'scipy', scipy.__version__)"; nproc --all
} 2>&1 | tee "$OUT/machine.txt"
# Several processes share the GPU: MPS lets their kernels overlap (without it they time-slice).
if [ "$DEVICE" = cuda ] && nvidia-cuda-mps-control -d 2>/dev/null; then
  echo "MPS daemon started" | tee -a "$OUT/machine.txt"
fi

WORK=$(mktemp -d)
START=$(date +%s)
for cell in $CELLS; do
  task=${cell%:*} size=${cell#*:}
  for seed in $SEEDS; do
    name=$task-$size-$seed
    # shellcheck disable=SC2086
    timeout "$LIMIT" python3 -m nopg.cli reproduce sample-efficiency --task "$task" \
      --set 'algorithms=["NOPG-S"]' --set "sizes=[$size]" --set "seeds=[$seed]" \
      --set "settings={\"nopg.model.device\": \"$DEVICE\"}" ${EXTRA:-} --workers 1 \
      --out "$WORK" --name "$name" --no-progress > "$WORK/$name.out" 2>&1 &
  done
done
wait
echo "all cells done in $(( $(date +%s) - START )) s" | tee -a "$OUT/machine.txt"
python3 - "$WORK" "$OUT/runs.csv" <<'EOF'
import pathlib, sys
from nopg.experiments.sample_efficiency_report import read_rows, write_rows
rows = [r for path in sorted(pathlib.Path(sys.argv[1]).glob("*/runs.csv")) for r in read_rows(path)]
if rows:
    write_rows(rows, sys.argv[2])
print(f"{len(rows)} rows merged")
for r in rows:
    print(r["task"], r["size"], r["seed"], f"return {r['return']:.2f}", f"J_hat {r['J_hat']:.3f}",
          f"{r['wall_time_s']:.0f} s", r["error"] or "")
EOF
grep -h "s/update" "$WORK"/*/run.log | tail -n 40
tar czf "$OUT/logs.tgz" -C "$WORK" .
