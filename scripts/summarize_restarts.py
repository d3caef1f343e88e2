"""Does choosing the restart with the highest ``J_hat`` pick a good run? One line per study group.

    python scripts/summarize_restarts.py records/bandwidth_study_restarts.csv

Reads the per-restart rows that ``bandwidth_study.py`` writes when ``restarts > 1`` (``J_hat`` and
evaluation return of every restart at the moment of the choice) and reports, per (task, label):
the mean over seeds of the chosen restart's return minus the mean return of the seed's restarts,
the same against restart 0 (what a single run would have given), the number of seeds where the
chosen restart was clearly the worst (its return the lowest, with a spread above 10% of the
best), and the mean within-seed Spearman correlation of ``J_hat`` with the return (seeds whose
restarts all returned the same are left out of it).
"""

from __future__ import annotations

import argparse
import collections
import csv

import numpy as np
from scipy.stats import spearmanr


def summarize(path: str) -> list[str]:
    """Report lines, one per (task, label) group of ``path``."""
    groups: dict[tuple[str, str], dict[str, list[tuple[float, float]]]] = \
        collections.defaultdict(lambda: collections.defaultdict(list))
    with open(path, newline="") as fh:
        for row in csv.DictReader(fh):
            groups[(row["task"], row["label"])][row["seed"]].append(
                (float(row["J_hat"]), float(row["return"])))
    lines = ["| task | label | seeds | chosen − mean of restarts | chosen − restart 0 | "
             "seeds where the chosen was clearly the worst | mean within-seed Spearman |",
             "|---|---|---|---|---|---|---|"]
    for (task, label), seeds in groups.items():
        gain, vs_first, worst, rho = [], [], 0, []
        for runs in seeds.values():
            J = np.array([j for j, _ in runs])
            R = np.array([r for _, r in runs])
            chosen = R[int(J.argmax())]
            gain.append(chosen - R.mean())
            vs_first.append(chosen - R[0])
            if chosen == R.min() and R.max() - R.min() > 0.1 * abs(R.max()):
                worst += 1
            if np.ptp(R) > 0 and np.ptp(J) > 0:
                rho.append(spearmanr(J, R)[0])
        lines.append(f"| {task} | {label} | {len(seeds)} | {np.mean(gain):+.1f} | "
                     f"{np.mean(vs_first):+.1f} | {worst} | "
                     f"{np.mean(rho) if rho else float('nan'):.2f} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("csv", nargs="?", default="records/bandwidth_study_restarts.csv")
    print("\n".join(summarize(parser.parse_args().csv)))


if __name__ == "__main__":
    main()
