"""``nopg evaluate``: a saved policy's returns in an environment and/or its ``J_hat`` on
another data set."""

from __future__ import annotations

import argparse
import json
from typing import Any

from .common import JSON_HELP, SAVED_RUN_HELP, subcommand

__all__ = ["add_parser", "command"]


def add_parser(sub: Any) -> None:
    """The ``evaluate`` subcommand (a saved policy, after training)."""
    ev = subcommand(sub, "evaluate", "evaluate a saved policy in an environment and/or on another data set",
                     """
        nopg evaluate RUN_OR_CHECKPOINT: for every seed's checkpoint of a run folder (or one
        checkpoint folder), roll the policy out in a gymnasium environment (--env; mean return
        with a 95% bootstrap interval) and/or compute its J_hat and support gap on another data
        set (--data) with the checkpoint's bandwidths and settings, from the states that start
        the data's episodes.""")
    ev.add_argument("path", help=SAVED_RUN_HELP)
    ev.add_argument("--env", help="gymnasium id to roll the policy out in")
    ev.add_argument("--episodes", type=int, default=10, help="episodes per checkpoint (10)")
    ev.add_argument("--seed", type=int, default=0, help="reset seed of the first episode (0)")
    ev.add_argument("--max-steps", type=int, help="episode length cap (default: the env's)")
    ev.add_argument("--data", help="data set for J_hat (.npz, .hdf5/.h5, minari:<id>)")
    ev.add_argument("--json", action="store_true", help=JSON_HELP)


def command(args: argparse.Namespace) -> int:
    """``nopg evaluate``: evaluate every checkpoint of a saved run; returns the exit code."""
    from ..data.formats import load_dataset
    from ..io.run_evaluation import checkpoint_folders, evaluate_saved, format_report

    if args.env is None and args.data is None:
        raise ValueError("nothing to evaluate: give --env ID and/or --data DATA")
    if args.episodes < 1:
        raise ValueError(f"--episodes must be >= 1. Got {args.episodes}.")
    if args.max_steps is not None and args.max_steps < 1:
        raise ValueError(f"--max-steps must be >= 1. Got {args.max_steps}.")
    checkpoint_folders(args.path)              # a wrong path fails before any work
    data = load_dataset(args.data) if args.data is not None else None
    result = evaluate_saved(args.path, env_id=args.env, episodes=args.episodes, seed=args.seed,
                            max_steps=args.max_steps, data=data)
    if args.data is not None:
        result["data"]["path"] = args.data
    print(json.dumps(result, indent=2) if args.json else format_report(result))
    return 0
