"""``nopg bandwidth``: the bandwidths chosen for a data set and the data's support (a summary
or JSON, and a figure)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from ..bandwidth.selection import ACTION_EFFECT_MAX, METHODS, check_max_action_effect
from .common import DATA_HELP, JSON_HELP, add_factor_args, subcommand

__all__ = ["add_parser", "command"]


def _max_action_effect(text: str) -> float | None:
    """``--max-action-effect``: a positive finite number, or ``none``."""
    if text.strip().lower() == "none":
        return None
    try:
        value = float(text)
        check_max_action_effect(value)
    except ValueError:
        raise ValueError(f"--max-action-effect must be a positive number or 'none'. Got {text!r}.") \
            from None
    return value


def add_parser(sub: Any) -> None:
    """The ``bandwidth`` subcommand (the bandwidths chosen and the data's support)."""
    bw = subcommand(sub, "bandwidth", "show the kernel bandwidths chosen for a data set and its support",
                     """
        nopg bandwidth DATA: select the bandwidths (timed), compare them with Silverman's per
        dimension, give the distances of the next states to the data states in bandwidths, and
        the thinness of the data at the next states with the data's own next actions and with
        uniform actions. Prints a summary (or JSON) and saves a figure.""")
    bw.add_argument("data", help=DATA_HELP)
    bw.add_argument("--method", default="auto", metavar="METHOD",
                    help=f"bandwidth rule, one of {', '.join(METHODS)} (default auto)")
    add_factor_args(bw)
    bw.add_argument("--seed", type=int, default=0, help="seed of cv and the probes (default 0)")
    bw.add_argument("--max-action-effect", default=f"{ACTION_EFFECT_MAX:g}",
                    metavar="E", help="auto's action guard: narrow the action kernel where one action "
                    f"bandwidth moves the next state by more than E state bandwidths (default "
                    f"{ACTION_EFFECT_MAX:g}; 'none' turns it off)")
    bw.add_argument("--plot", default="bandwidth_report.png", metavar="PATH",
                    help="figure to write (default ./bandwidth_report.png); its folder must exist")
    bw.add_argument("--json", action="store_true", help=JSON_HELP)


def command(args: argparse.Namespace) -> int:
    """``nopg bandwidth``: select, report and plot; returns the exit code."""
    import numpy as np

    from ..data.formats import load_dataset
    from ..select.bandwidth_report import bandwidth_report
    from ..viz.bandwidth_plots import plot_bandwidth_report
    from ..viz.figures import check_plot_path

    if args.method not in METHODS:
        raise ValueError(f"--method must be one of {', '.join(METHODS)}. Got {args.method!r}.")
    for flag, values in (("--state-factor", args.state_factor),
                         ("--action-factor", args.action_factor)):
        if not all(np.isfinite(v) and v > 0 for v in values):
            raise ValueError(f"{flag} must be positive and finite. Got "
                             f"{' '.join(f'{v:g}' for v in values)}.")
    max_action_effect = _max_action_effect(args.max_action_effect)
    plot = check_plot_path(args.plot)           # before any work
    data = load_dataset(args.data)

    def factor(values: list[float]) -> float | np.ndarray:
        return values[0] if len(values) == 1 else np.asarray(values)

    report = bandwidth_report(data, method=args.method, state_factor=factor(args.state_factor),
                              action_factor=factor(args.action_factor), seed=args.seed,
                              max_action_effect=max_action_effect)
    plot_bandwidth_report(report, plot)
    if args.json:
        print(json.dumps({**report.to_dict(), "plot": str(plot)}, indent=2))
    else:
        print(report.to_text())
        print(f"\nfigure      {plot}")
    return 0
