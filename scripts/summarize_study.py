"""Markdown table of a bandwidth study CSV (written by ``bandwidth_study.py``).

    python scripts/summarize_study.py records/bandwidth_study.csv

One row per (task, label): mean return with a 95% percentile-bootstrap interval (10 000
resamples), the seeds that reached the task's success threshold, the Spearman rank correlation
of ``J_hat`` with the return, the share of the fit time spent selecting bandwidths and the mean
fit time per seed. A last line pools the within-task rank correlations over all runs.
"""

from __future__ import annotations

import argparse
import csv
from collections import defaultdict

import numpy as np
from bandwidth_study import bootstrap_mean_ci
from scipy.stats import spearmanr

SUCCESS = {"pendulum-grid": -600.0, "pendulum-random": -600.0, "pendulum-uniform": -600.0,
           "cartpole-random": 9000.0, "mountaincar-human": 82.4, "mountaincar-uniform": 0.0,
           "invertedpendulum-random": 500.0, "pendulum-controller": -418.0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv")
    args = parser.parse_args()
    groups: dict[tuple[str, str], list[dict]] = defaultdict(list)
    with open(args.csv, newline="") as fh:
        for row in csv.DictReader(fh):
            groups[(row["task"], row["label"])].append(row)
    print("| task | bandwidths | mean return [95% CI] | successes (threshold) | seeds that failed "
          "| Spearman(J_hat, return) | selection / fit time | fit time per seed |")
    print("|---|---|---|---|---|---|---|---|")
    ranks = []
    for (task, label), rows in sorted(groups.items()):
        rows = sorted(rows, key=lambda r: int(r["seed"]))
        ret = np.array([float(r["return"]) for r in rows])
        j_hat = np.array([float(r["J_hat"]) for r in rows])
        lo, hi = bootstrap_mean_ci(ret)
        thr = SUCCESS.get(task)
        failed = [int(r["seed"]) for r, v in zip(rows, ret) if thr is not None and v < thr]
        ok = len(rows) - len(failed)
        rho = spearmanr(j_hat, ret).statistic if len(rows) > 2 else float("nan")
        if np.isfinite(rho):
            ranks.append((rho, len(rows)))
        # rows transcribed from run logs may lack the selection time
        timed = [r for r in rows if r["bandwidth_time_s"]]
        frac = np.mean([float(r["bandwidth_time_s"]) / float(r["fit_time_s"]) for r in timed]) \
            if timed else float("nan")
        fit = np.mean([float(r["fit_time_s"]) for r in rows])
        successes = "— (no threshold)" if thr is None else f"{ok} of {len(rows)} (≥ {thr:g})"
        print(f"| {task} | {label} | {ret.mean():.1f} [{lo:.1f}, {hi:.1f}] | {successes} "
              f"| {failed or '—'} | {rho:.2f} | {100 * frac:.3f}% | {fit:.0f} s |")
    if ranks:
        pooled = sum(r * n for r, n in ranks) / sum(n for _, n in ranks)
        print(f"\nRun-weighted mean of the within-group Spearman correlations: {pooled:.2f} "
              f"over {sum(n for _, n in ranks)} runs in {len(ranks)} groups.")


if __name__ == "__main__":
    main()
