"""The pre-registered tasks' comparison table, from the driver's ``results.jsonl``.

    python benchmarks/preregistered_summary.py [--results records/preregistered/results.jsonl]

Per task and algorithm (NOPG, BC, TD3+BC, IQL): the seeds finished, the mean of the per-seed
returns with its 95% percentile-bootstrap interval (:func:`nopg.io.run_evaluation.bootstrap_mean_ci`,
the protocol's), and the median wall time a seed. Per task the verdict of the success criterion of
``docs/preregistration.md``: NOPG's mean at or above the best baseline mean, given only where
every algorithm has all five seeds (else ``incomplete``); then the count over the tasks with a
verdict. Prints a Markdown table; runs that did not finish are counted by status.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

from nopg.io.run_evaluation import bootstrap_mean_ci

RESULTS = Path(__file__).resolve().parents[1] / "records" / "preregistered" / "results.jsonl"
ALGORITHMS = ("NOPG", "BC", "TD3+BC", "IQL")
SEEDS = 5


def read(path: Path) -> list[dict]:
    """The driver's rows (the last row per task, algorithm and seed)."""
    rows: dict[tuple, dict] = {}
    for line in path.read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            rows[(row["task_number"], row["algorithm"], row["seed"])] = row
    return list(rows.values())


def cell(rows: list[dict]) -> tuple[str, float | None, int]:
    """A table cell (mean [interval], seeds), the mean, and the number of seeds finished."""
    ok = sorted((r for r in rows if r["status"] == "ok"), key=lambda r: r["seed"])
    if not ok:
        failed = defaultdict(int)
        for r in rows:
            failed[r["status"]] += 1
        return ("-" if not failed else ", ".join(f"{k} x{v}" for k, v in failed.items())), \
            None, 0
    returns = [float(r["return_mean"]) for r in ok]
    mean = statistics.fmean(returns)
    low, high = bootstrap_mean_ci(returns)
    wall = statistics.median(float(r["wall_s"]) for r in ok)
    return f"{mean:.1f} [{low:.1f}, {high:.1f}] ({len(ok)}; {wall:.0f} s)", mean, len(ok)


def table(rows: list[dict]) -> str:
    by_task: dict[tuple[int, str], list[dict]] = defaultdict(list)
    for r in rows:
        by_task[(r["task_number"], r["task"])].append(r)
    lines = ["| # | task | " + " | ".join(ALGORITHMS) + " | NOPG at or above the best baseline |",
             "|---" * (len(ALGORITHMS) + 3) + "|"]
    wins = verdicts = 0
    for (number, task), mine in sorted(by_task.items()):
        cells, means, counts = [], {}, {}
        for algorithm in ALGORITHMS:
            text, mean, n = cell([r for r in mine if r["algorithm"] == algorithm])
            cells.append(text)
            means[algorithm], counts[algorithm] = mean, n
        if all(counts[a] == SEEDS for a in ALGORITHMS):
            best = max(means[a] for a in ALGORITHMS[1:])
            win = means["NOPG"] >= best
            wins, verdicts = wins + win, verdicts + 1
            verdict = f"{'yes' if win else 'no'} ({means['NOPG'] - best:+.1f})"
        else:
            verdict = "incomplete"
        lines.append(f"| {number} | {task} | " + " | ".join(cells) + f" | {verdict} |")
    lines.append("")
    lines.append(f"Cells: mean of the seeds' returns [95% bootstrap interval] (seeds finished; "
                 f"median wall a seed). Success count: {wins} of {verdicts} task(s) with every "
                 f"algorithm's {SEEDS} seeds.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--results", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    print(table(read(args.results)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
