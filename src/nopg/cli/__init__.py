"""The ``nopg`` command line: :func:`main` builds the parser from one module per subcommand
(``nopg.cli.<command>``: its ``add_parser`` and its ``command``) and runs the one asked for.

    nopg reproduce pendulum-grid                 # the paper's Pendulum grid run, NOPG-D, 3 seeds
    nopg reproduce pendulum-grid --stochastic    # the same with NOPG-S
    nopg reproduce pendulum-grid --set task.n_theta=20 --set task.n_theta_dot=20 --seeds 0
    nopg reproduce gradient-analysis             # NOPG vs G(PO)MDP+N/+BN and DPG+Q on the LQG
    nopg reproduce gradient-analysis --full --ray-address auto   # the paper's size, on Ray
    nopg reproduce trust-region                  # gradient norm against policy log-likelihood
    nopg reproduce sample-efficiency --task pendulum-random   # NOPG vs d3rlpy, PWIS and SB3
    nopg list                                    # the available experiments
    nopg data results/.../checkpoint/dataset.npz # inspect a data set (.npz, .hdf5, minari:<id>)
    nopg data convert demos.npz demos.hdf5       # convert between formats
    nopg collect mountaincar --out demos.npz     # record mountain-car demonstrations by keyboard
    nopg bandwidth demos.npz --method knn        # the bandwidths chosen and the data's support
    nopg fit demos.npz --env MountainCarContinuous-v0   # train on your own data (+ evaluate)
    nopg evaluate results/run --env Pendulum-v1 --data other.npz  # returns (95% CI), J_hat on data
    nopg export results/run --seed 0 --out policy.onnx   # TorchScript (.pt) or ONNX, verified
"""

from __future__ import annotations

import argparse
import logging
import sys
import warnings
from collections.abc import Callable, Sequence

from ..train.algorithm import SupportWarning
from . import (
    bandwidth,
    collect,
    data,
    evaluate,
    export,
    fit,
    reproduce,
    sweep_report,
    tune_k,
)

__all__ = ["COMMANDS", "build_parser", "main"]

COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "reproduce": reproduce.command, "fit": fit.command, "data": data.command,
    "collect": collect.command, "tune-k": tune_k.command, "bandwidth": bandwidth.command,
    "evaluate": evaluate.command, "export": export.command, "sweep-report": sweep_report.command,
}
"""The function that runs each subcommand but ``list``."""


def build_parser() -> argparse.ArgumentParser:
    """The ``nopg`` argument parser: its subcommands in the order ``nopg --help`` lists them."""
    parser = argparse.ArgumentParser(
        prog="nopg", description="Nonparametric Off-Policy Policy Gradient (batch RL).")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True)
    reproduce.add_parser(sub)
    fit.add_parser(sub)
    sub.add_parser("list", help="list the available experiments")
    data.add_parser(sub)
    tune_k.add_parser(sub)
    bandwidth.add_parser(sub)
    collect.add_parser(sub)
    evaluate.add_parser(sub)
    export.add_parser(sub)
    sweep_report.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the process exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    # export's result is its one line on stdout: its console shows warnings and errors only
    quiet = args.command == "export"
    logging.basicConfig(level=logging.DEBUG if args.verbose else
                        logging.WARNING if quiet else logging.INFO,
                        format="%(asctime)s %(levelname)s %(message)s", datefmt="%H:%M:%S")
    logging.captureWarnings(True)  # e.g. SolverWarning also reaches run.log
    # fit logs its SupportWarning's text on the nopg logger already: captured too, it would
    # print twice
    warnings.filterwarnings("ignore", category=SupportWarning)
    try:
        return _dispatch(args)
    except ValueError as err:
        print(f"nopg: error: {err}", file=sys.stderr)
        return 2


def _dispatch(args: argparse.Namespace) -> int:
    from ..experiments import ANALYSES, TASKS

    if args.command == "list":
        return _list_command(TASKS, ANALYSES)
    return COMMANDS[args.command](args)


def _list_command(tasks: dict[str, type], analyses: dict[str, str]) -> int:
    """``nopg list``: the experiments and analyses, one line each."""
    width = max(len(name) for name in [*tasks, *analyses])
    for name, cls in sorted(tasks.items()):
        doc = (cls.__doc__ or "").strip().splitlines()[0]
        print(f"{name:{width}s} {doc}")
    for name, doc in analyses.items():
        print(f"{name:{width}s} {doc}")
    return 0
