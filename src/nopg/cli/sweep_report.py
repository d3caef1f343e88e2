"""``nopg sweep-report``: merge the runs.csv files of sample-efficiency sweeps, summarise and
plot them."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from .common import subcommand

__all__ = ["add_parser", "command"]


def add_parser(sub: Any) -> None:
    """The ``sweep-report`` subcommand (merge sample-efficiency sweeps, summarise, plot)."""
    rep = subcommand(sub, "sweep-report", "merge sample-efficiency runs.csv files, summarise and plot",
                      """
        nopg sweep-report RUNS.csv [RUNS.csv ...] --out DIR: merge the runs of sample-efficiency
        sweeps of one task (from other machines, days or settings; a run in a later file
        replaces one of an earlier file with the same algorithm, size and seed), check that the
        offline algorithms of each size and seed trained on identical data, and write runs.csv,
        summary.csv, table.md and sample_efficiency.png (mean and bootstrap interval over
        seeds) into DIR.""")
    rep.add_argument("runs", nargs="+", help="runs.csv files of `nopg reproduce sample-efficiency`")
    rep.add_argument("--out", required=True, help="folder for the merged report")
    rep.add_argument("--overwrite", action="store_true", help="replace a report already in --out")
    rep.add_argument("--confidence", type=float, default=0.95, help="interval level (0.95)")


def command(args: argparse.Namespace) -> int:
    """``nopg sweep-report``: merge, summarise and plot the sweeps; returns the exit code."""
    from ..experiments.sample_efficiency_report import format_table, merge_rows, read_rows, write_report

    rows = merge_rows([read_rows(path) for path in args.runs])
    out = Path(args.out)
    if (out / "runs.csv").exists() and not args.overwrite:
        raise ValueError(f"{out} already holds a report (runs.csv); choose another --out or "
                         "pass --overwrite")
    summary = write_report(rows, out, args.confidence)
    print(format_table(summary))
    print(f"{len(rows)} runs of {rows[0]['task']} from {len(args.runs)} file(s); report in {out}")
    return 0
