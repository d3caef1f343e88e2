"""``nopg fit``: the method on the user's own data file, into a results folder like
``nopg reproduce`` (with an environment, also evaluated there)."""

from __future__ import annotations

import argparse
from typing import Any

from .common import DATA_HELP, OBS_KEY_HELP, set_threads, subcommand
from .training import add_training_args, overrides, print_summary

__all__ = ["add_parser", "command"]


def add_parser(sub: Any) -> None:
    """The ``fit`` subcommand (NOPG on the user's own data file)."""
    fit = subcommand(sub, "fit", "train NOPG on your own data file (.npz, .hdf5/.h5, minari:<id>)",
                      """
        nopg fit DATA: select bandwidths, optimise a policy on the data and write a results
        folder like `nopg reproduce` (log, learning curves, bandwidth report, checkpoint). J_hat
        is the model's discounted return from the initial states (by default the states that
        start the data's episodes); with --env the policy is also rolled out in that gymnasium
        environment.""")
    fit.add_argument("data", help=DATA_HELP)
    fit.add_argument("--env", help="gymnasium id to evaluate in during and after training")
    fit.add_argument("--eval-episodes", type=int, help="episodes of the final evaluation (10)")
    fit.add_argument("--eval-steps", type=int,
                     help="the evaluation's episode length (the horizon the method's judge "
                          "forecasts returns over; default with --env: its time limit)")
    fit.add_argument("--initial-states", metavar="FILE",
                     help="initial states (.npy, .npz, .csv, .txt; shape (m, state_dim)); "
                          "default: the states that start the data's episodes")
    fit.add_argument("--action-max", type=float, nargs="+", metavar="A",
                     help="policy action bound(s) (default: the env's, else the data's max |a|)")
    fit.add_argument("--hidden", type=int, nargs="+", help="policy MLP hidden widths (50)")
    for kind, what in (("state", "the state space's bounds (default with --env: its observation "
                                 "space's)"),
                       ("terminal", "where episodes end: a state outside them is terminal")):
        for side in ("low", "high"):
            fit.add_argument(f"--{kind}-{side}", type=_bound_value, nargs="+", metavar="V",
                             help=f"{side} side of {what}; one value per state dimension, "
                                  "'none' where unbounded")
    fit.add_argument("--obs-key", action="append", help=OBS_KEY_HELP)
    add_training_args(fit, seeds="0")


def command(args: argparse.Namespace) -> int:
    """``nopg fit``: run the method on the data file into a results folder; returns the exit code."""
    from ..experiments import run_experiment
    from ..experiments.data_file import DataFileTask

    set_threads(args)
    task = DataFileTask(args.data, env_id=args.env, initial_states=args.initial_states,
                        obs_keys=args.obs_key, action_max=args.action_max,
                        state_bounds=_bound_pair(args, "state"),
                        terminal_bounds=_bound_pair(args, "terminal"))
    changes = overrides(args)
    if args.env is None and ("eval_every" in changes or "final_eval_episodes" in changes):
        raise ValueError("--eval-every and --eval-episodes need --env (an environment to roll "
                         "the policy out in)")
    config = task.default_config().replace(**changes)
    steps = config.task["eval_steps"]
    if steps is not None and (isinstance(steps, bool) or not isinstance(steps, int) or steps < 1):
        raise ValueError(f"the evaluation episode length (--eval-steps, task.eval_steps) must be "
                         f"a positive int or null; got {steps!r}")
    summary = run_experiment(task, config, out=args.out, progress=not args.no_progress,
                             run_name=args.name, tensorboard=args.tensorboard)
    print_summary(summary)
    return 0


def _bound_value(text: str) -> float | None:
    """A bound on the command line: a number, or ``none``/``inf``/``-inf`` where unbounded."""
    if text.strip().lower() in ("none", "null", "inf", "+inf", "-inf"):
        return None
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a bound must be a number or 'none'; got {text!r}") \
            from None


def _bound_pair(args: argparse.Namespace, kind: str) -> list[list[float | None]] | None:
    """``[low, high]`` from ``--<kind>-low`` and ``--<kind>-high`` (a missing side unbounded)."""
    low, high = getattr(args, f"{kind}_low"), getattr(args, f"{kind}_high")
    if low is None and high is None:
        return None
    n = len(low if low is not None else high)
    return [low if low is not None else [None] * n, high if high is not None else [None] * n]
