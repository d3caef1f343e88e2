"""Redraw sample-efficiency figures from their summary CSVs (no run is repeated).

    python scripts/plot_sample_efficiency.py records/sample_efficiency_cartpole_random_merged_summary.csv
    python scripts/plot_sample_efficiency.py records/*_merged_summary.csv --out docs/results/figures

Each ``<stem>_summary.csv`` (``nopg reproduce sample-efficiency`` / ``nopg sweep-report``'s
``summary.csv``) is drawn by :func:`nopg.experiments.sample_efficiency_report.plot_sample_efficiency`
with the title, reference line (mountain car's demonstrators) and paper curves that
``write_report`` gives a sweep, to ``<stem>.png`` beside it (or in ``--out``).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from nopg.datasets import paper_curves
from nopg.experiments.sample_efficiency_report import plot_sample_efficiency, read_summary, seeds_phrase


def redraw(summary_path: Path, out_dir: Path | None, confidence: float = 0.95) -> Path:
    summary = read_summary(summary_path)
    task = summary[0]["task"]
    reference = None
    if task == "mountaincar-human":
        from nopg.experiments.mountaincar_human import HUMAN_MEAN_RETURN

        reference = HUMAN_MEAN_RETURN
    stem = summary_path.name.removesuffix("_summary.csv").removesuffix(".csv")
    path = (out_dir or summary_path.parent) / f"{stem}.png"
    return plot_sample_efficiency(
        summary, path, title=f"{task}: mean return, {100 * confidence:.0f}% bootstrap interval "
                             f"over {seeds_phrase(summary)}",
        reference=reference, paper=paper_curves(task))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("summaries", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, help="folder of the figures (default: beside each CSV)")
    parser.add_argument("--confidence", type=float, default=0.95,
                        help="the summaries' interval level, for the title")
    args = parser.parse_args()
    for path in args.summaries:
        print(redraw(path, args.out, args.confidence))


if __name__ == "__main__":
    main()
