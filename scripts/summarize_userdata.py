"""Merge sample-efficiency runs of the user-data tasks and print their tables.

    python scripts/summarize_userdata.py --out records RUN_DIR [RUN_DIR ...]

Each ``RUN_DIR`` is a ``nopg reproduce sample-efficiency`` folder (its ``runs.csv``). The rows
of one task (from one or several runs, e.g. seed 0 and seeds 1-4 run apart) are merged, checked
to have trained every algorithm of a seed on the same transitions
(:func:`nopg.experiments.sample_efficiency_report.check_identical_data`), and written to
``<out>/sample_efficiency_userdata_<task>.csv`` and ``..._summary.csv`` (the sweep's own
:func:`summarize`: mean, 95% percentile-bootstrap interval, 10 000 resamples). Printed: one
Markdown table per task (mean [CI], successes by issue 10's threshold, mean wall time per run,
NOPG's mean ``J_hat``) and a compact table with one row per task.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from nopg.experiments.sample_efficiency import ALGORITHMS
from nopg.experiments.sample_efficiency_report import (
    check_identical_data,
    read_rows,
    summarize,
    write_rows,
    write_summary,
)

# Issue 10's thresholds; mountaincar-uniform: the goal reached (return > 0).
THRESHOLD = {"pendulum-uniform": (-600.0, ">="), "pendulum-controller": (-418.0, ">="),
             "mountaincar-uniform": (0.0, ">"), "invertedpendulum-random": (500.0, ">=")}


def success(task: str, value: float | None) -> bool:
    if value is None or not math.isfinite(value):
        return False
    limit, op = THRESHOLD[task]
    return value > limit if op == ">" else value >= limit


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    by_task: dict[str, list[dict]] = {}
    for run in args.runs:
        for row in read_rows(run / "runs.csv"):
            by_task.setdefault(row["task"], []).append(row)
    compact = []
    for task in THRESHOLD:
        rows = by_task.get(task)
        if not rows:
            continue
        rows.sort(key=lambda r: (ALGORITHMS.index(r["algorithm"]), r["seed"]))
        check_identical_data(rows)
        stem = f"sample_efficiency_userdata_{task.replace('-', '_')}"
        write_rows(rows, args.out / f"{stem}.csv")
        summary = summarize(rows)
        write_summary(summary, args.out / f"{stem}_summary.csv")
        limit, op = THRESHOLD[task]
        print(f"\n#### {task} (success: return {op} {limit:g})\n")
        print("| algorithm | mean return [95% CI] | successes | per seed | time per run | J_hat |")
        print("|---|---|---|---|---|---|")
        cells = []
        for s in summary:
            mine = sorted((r for r in rows if r["algorithm"] == s["algorithm"]),
                          key=lambda r: r["seed"])
            wins = sum(success(task, r["return"]) for r in mine)
            failed = sum(r["error"] is not None for r in mine)
            seeds = ", ".join("—" if r["return"] is None else f"{r['return']:.1f}" for r in mine)
            j_hat = "" if s["J_hat_mean"] is None else f"{s['J_hat_mean']:.1f}"
            print(f"| {s['algorithm']} | {s['mean']:.1f} [{s['ci_lo']:.1f}, {s['ci_hi']:.1f}] | "
                  f"{wins}/{len(mine)}{f' ({failed} failed)' if failed else ''} | {seeds} | "
                  f"{s['wall_time_mean_s']:.0f} s | {j_hat} |")
            cells.append(f"{s['mean']:.0f} [{s['ci_lo']:.0f}, {s['ci_hi']:.0f}] {wins}/{len(mine)}")
        compact.append(f"| {task} | " + " | ".join(cells) + " |")
        algos = [s["algorithm"] for s in summary]
    if compact:
        print("\n| task | " + " | ".join(algos) + " |")
        print("|---" * (len(algos) + 1) + "|")
        print("\n".join(compact))


if __name__ == "__main__":
    main()
