#!/usr/bin/env bash
# Many fits of the research prototype benchmarks/local_linear_model.py at once, one process each
# (for a machine with many cores, such as a lent GPU machine's 16).
#
#   TASK=pendulum-uniform SEEDS="0 1 2" VARIANTS="full:3 kernel:3" UPDATES=1000 \
#       bash benchmarks/prototype_study.sh OUT_DIR [WHEEL_DIR] [SECONDS]
#
# VARIANTS are MODE:DRAWS or MODE:DRAWS:OPTION (DRAWS next states drawn afresh per transition, 0
# for the kernel mean; OPTION `absorb` or `penalty`, the script's --absorb or --penalty for
# successors far from the data's next states). TASK may also be a space-separated list of tasks. Each fit's FINAL line is appended to OUT_DIR/fits.txt as it ends; a fit still running
# after SECONDS (default 560) is stopped and leaves only its log in OUT_DIR/logs.tgz.
set -u
OUT=${1:?usage: prototype_study.sh OUT_DIR [WHEEL_DIR] [SECONDS]}
WHL=${2:-}
LIMIT=${3:-560}
TASK=${TASK:-pendulum-uniform}
SEEDS=${SEEDS:-"0 1 2 3 4 5 6 7 8 9"}
VARIANTS=${VARIANTS:-"full:3"}
UPDATES=${UPDATES:-1000}
mkdir -p "$OUT"
. "$(dirname "$0")/device_env.sh"
describe_machine 2>&1 | tee "$OUT/machine.txt"
LOGS=$(mktemp -d)
START=$(date +%s)
for task in $TASK; do
  for variant in $VARIANTS; do
    IFS=: read -r mode draws option <<< "$variant"
    for seed in $SEEDS; do
      log="$LOGS/$task-$seed-$mode-$draws${option:+-$option}.log"
      ( timeout "$LIMIT" python3 benchmarks/local_linear_model.py fit "$task:$seed" --mode "$mode" \
          --draws "$draws" --updates "$UPDATES" ${option:+--$option} > "$log" 2>&1
        grep FINAL "$log" >> "$OUT/fits.txt" ) &
    done
  done
done
wait
echo "all fits done in $(( $(date +%s) - START )) s" | tee -a "$OUT/machine.txt"
tar -czf "$OUT/logs.tgz" -C "$LOGS" .
