#!/usr/bin/env bash
# Many `scripts/bandwidth_study.py` runs at once, one process per seed (for a machine with
# many cores, such as a lent GPU machine's 16; the GPU is not used).
#
#   TASK=pendulum-uniform SEEDS="0 1 2" LABEL="local-linear penalty" SUCCESS=-600 \
#       SETS='nopg.model.successors="local-linear" nopg.model.unsupported="penalty"' \
#       bash scripts/device/study_cells.sh OUT_DIR [WHEEL_DIR] [SECONDS]
#
# SETS holds the study's --set values, separated by spaces. Every seed's row goes to
# OUT_DIR/rows/ as it ends (its restarts' rows too), all of them to OUT_DIR/study.csv
# (bandwidth_study.py's format: summarize_study.py reads it), the logs to OUT_DIR/logs.tgz; a run
# still going after SECONDS (default 560) is stopped and leaves only its log.
set -u
OUT=${1:?usage: study_cells.sh OUT_DIR [WHEEL_DIR] [SECONDS]}
WHL=${2:-}
LIMIT=${3:-560}
TASK=${TASK:-pendulum-uniform}
SEEDS=${SEEDS:-"0 1 2 3 4 5 6 7 8 9"}
LABEL=${LABEL:-study}
SUCCESS=${SUCCESS:-}
mkdir -p "$OUT/rows"
. "$(dirname "$0")/device_env.sh"
describe_machine 2>&1 | tee "$OUT/machine.txt"
sets=()
for s in ${SETS:-}; do sets+=(--set "$s"); done
LOGS=$(mktemp -d)
START=$(date +%s)
for seed in $SEEDS; do
  timeout "$LIMIT" python3 scripts/bandwidth_study.py "$TASK" --seeds "$seed" --label "$LABEL" \
    "${sets[@]}" ${SUCCESS:+--success "$SUCCESS"} --workers 1 --out "$OUT/rows/$TASK-$seed.csv" \
    > "$LOGS/$TASK-$seed.log" 2>&1 &
done
wait
first=1
for f in "$OUT"/rows/*[0-9].csv; do   # one header, then every seed's row
  [ -e "$f" ] || continue
  if [ $first = 1 ]; then cat "$f"; first=0; else tail -n +2 "$f"; fi
done > "$OUT/study.csv"
echo "$TASK: all runs done in $(( $(date +%s) - START )) s" | tee -a "$OUT/machine.txt"
tar -czf "$OUT/logs.tgz" -C "$LOGS" .
