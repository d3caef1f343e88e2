"""The ``nopg`` command line.

    nopg reproduce pendulum-grid                 # the paper's Pendulum grid run, NOPG-D, 3 seeds
    nopg reproduce pendulum-grid --stochastic    # the same with NOPG-S
    nopg reproduce pendulum-grid --set task.n_theta=20 --set task.n_theta_dot=20 --seeds 0
    nopg list                                    # the available experiments
    nopg data results/.../checkpoint/dataset.npz # inspect a data set
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from .bandwidth import METHODS


def _parse_value(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    changes: dict[str, Any] = {}
    if args.config is not None:
        path = Path(args.config)
        if not path.is_file():
            raise ValueError(f"config file {path} does not exist")
        loaded = json.loads(path.read_text())
        if not isinstance(loaded, dict):
            raise ValueError(f"config file {path} must hold a JSON object")
        changes.update(loaded)
    flags = {
        "seeds": args.seeds, "n_updates": args.n_updates, "bandwidth_method": args.bandwidth,
        "state_factor": args.state_factor, "action_factor": args.action_factor,
        "eval_every": args.eval_every, "nopg.gamma": args.gamma,
        "nopg.learning_rate": args.lr, "nopg.top_k": args.top_k,
        "nopg.n_mc_policy": args.n_mc_policy, "nopg.device": args.device,
        "nopg.dtype": args.dtype,
    }
    for key, value in flags.items():
        if value is not None:
            if key in ("state_factor", "action_factor") and len(value) == 1:
                value = value[0]
            changes[key] = value
    if args.stochastic:
        changes["stochastic"] = True
    for item in args.set or []:
        if "=" not in item:
            raise ValueError(f"--set expects key=value, got {item!r}")
        key, text = item.split("=", 1)
        changes[key.strip()] = _parse_value(text)
    return changes


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="nopg", description="Nonparametric Off-Policy Policy Gradient (batch RL).")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True)

    rep = sub.add_parser("reproduce", help="run one of the paper's experiments")
    rep.add_argument("experiment", help="experiment name (see `nopg list`)")
    rep.add_argument("--stochastic", action="store_true", help="NOPG-S instead of NOPG-D")
    rep.add_argument("--seeds", type=int, nargs="+", help="seeds (default 0 1 2)")
    rep.add_argument("--n-updates", type=int, help="policy updates per seed")
    rep.add_argument("--bandwidth", choices=METHODS,
                     help="bandwidth rule")
    rep.add_argument("--state-factor", type=float, nargs="+", help="state bandwidth factor(s)")
    rep.add_argument("--action-factor", type=float, nargs="+", help="action bandwidth factor(s)")
    rep.add_argument("--gamma", type=float, help="discount factor")
    rep.add_argument("--lr", type=float, help="Adam learning rate")
    rep.add_argument("--top-k", type=int, help="keep k entries per row of P")
    rep.add_argument("--n-mc-policy", type=int, help="NOPG-S Monte-Carlo actions N_pi")
    rep.add_argument("--eval-every", type=int, help="evaluate every N updates")
    rep.add_argument("--device", help="cpu, cuda or auto")
    rep.add_argument("--dtype", choices=["float64", "float32"])
    rep.add_argument("--config", help="JSON file of settings (flags override it)")
    rep.add_argument("--set", action="append", metavar="KEY=VALUE",
                     help="any setting, e.g. task.n_theta=20 or nopg.solver=bicgstab")
    rep.add_argument("--out", default="results", help="results folder (default ./results)")
    rep.add_argument("--name", help="run folder name (default <task>__<algo>__<time>)")
    rep.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    rep.add_argument("--no-progress", action="store_true", help="hide the progress bar")

    sub.add_parser("list", help="list the available experiments")

    data = sub.add_parser("data", help="summarise a data set (.npz)")
    data.add_argument("path")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the process exit code."""
    parser = _build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(message)s", datefmt="%H:%M:%S")
    logging.captureWarnings(True)  # e.g. SolverWarning also reaches run.log
    try:
        return _dispatch(args)
    except ValueError as err:
        print(f"nopg: error: {err}", file=sys.stderr)
        return 2


def _dispatch(args: argparse.Namespace) -> int:
    from .experiments import TASKS, get_task, run_experiment

    if args.command == "list":
        for name, cls in sorted(TASKS.items()):
            doc = (cls.__doc__ or "").strip().splitlines()[0]
            print(f"{name:20s} {doc}")
        return 0
    if args.command == "data":
        from .data import TransitionDataset

        print(json.dumps(TransitionDataset.load(args.path).summary(), indent=2))
        return 0
    task = get_task(args.experiment)
    config = task.default_config().replace(**_overrides(args))
    if args.threads < 1:
        raise ValueError(f"--threads must be >= 1. Got {args.threads} instead.")
    torch.set_num_threads(args.threads)
    summary = run_experiment(task, config, out=args.out, progress=not args.no_progress,
                             run_name=args.name)
    per_seed = ", ".join(f"{s['return_mean']:.1f}" for s in summary["seeds"])
    print(f"{summary['task']} {summary['algorithm']}: return {summary['return_mean']:.1f} ± "
          f"{summary['return_std']:.1f} (seeds: {per_seed}); results in {summary['run_dir']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
