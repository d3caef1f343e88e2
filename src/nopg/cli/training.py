"""The flags ``nopg reproduce`` and ``nopg fit`` share (the run's settings), the settings they
amount to, and the summary both print at the end of a run."""

from __future__ import annotations

import argparse
from typing import Any

from ..bandwidth.selection import METHODS
from ..experiments.run_records import RunSummary
from .common import config_file, set_items

__all__ = ["add_training_args", "overrides", "print_summary"]


def overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The settings the flags, ``--config`` and ``--set`` of ``reproduce`` or ``fit`` ask for
    (``--set`` over the flags over the file)."""
    changes = config_file(args.config)
    flags = {
        "seeds": args.seeds, "n_updates": args.n_updates, "bandwidth_method": args.bandwidth,
        "state_factor": args.state_factor, "action_factor": args.action_factor,
        "eval_every": args.eval_every, "nopg.gamma": args.gamma,
        "nopg.optimizer.learning_rate": args.lr, "nopg.model.top_k": args.top_k,
        "nopg.model.n_mc_policy": args.n_mc_policy, "nopg.model.device": args.device,
        "nopg.model.dtype": args.dtype, "recipes": args.recipes,
    }
    for key, value in flags.items():
        if value is not None:
            if key in ("state_factor", "action_factor") and len(value) == 1:
                value = value[0]
            changes[key] = value
    if args.stochastic:
        changes["stochastic"] = True
    changes.update(set_items(args.set))
    if getattr(args, "command", None) == "fit":
        for key, value in {"final_eval_episodes": args.eval_episodes,
                           "task.eval_steps": args.eval_steps,
                           "hidden": args.hidden}.items():
            if value is not None:
                changes.setdefault(key, value)
    return changes


def add_training_args(parser: argparse.ArgumentParser, seeds: str) -> None:
    """The flags shared by ``reproduce`` and ``fit``."""
    parser.add_argument("--stochastic", action="store_true", help="NOPG-S instead of NOPG-D")
    parser.add_argument("--recipes", nargs="+", metavar="RECIPE",
                        help="fit each recipe (given: the configuration; stabilise: anchored "
                             "model, CMA-ES, linear policy; anchored: the anchored model) and "
                             "keep the policy one anchored model of the data rates best; auto (the "
                             "default): given and stabilise where the data's episodes end in "
                             "failures (terminals that earn less than the steps that go on "
                             "keep earning); where no transition is terminal, given, then "
                             "anchored where the judge forecasts that given's policy gains "
                             "nothing along its episodes; else given. What follows the first "
                             "fit spends at most `budget` (30) times its CPU time. The judge "
                             "and the anchored recipes use at most 16 initial states (a spread)")
    parser.add_argument("--seeds", type=int, nargs="+", help=f"seeds (default {seeds})")
    parser.add_argument("--n-updates", type=int, help="policy updates per seed")
    parser.add_argument("--bandwidth", choices=METHODS, help="bandwidth rule (default auto)")
    parser.add_argument("--state-factor", type=float, nargs="+", help="state bandwidth factor(s)")
    parser.add_argument("--action-factor", type=float, nargs="+",
                        help="action bandwidth factor(s)")
    parser.add_argument("--gamma", type=float, help="discount factor")
    parser.add_argument("--lr", type=float, help="Adam learning rate")
    parser.add_argument("--top-k", type=int, help="keep k entries per row of P")
    parser.add_argument("--n-mc-policy", type=int, help="NOPG-S Monte-Carlo actions N_pi")
    parser.add_argument("--eval-every", type=int, help="evaluate every N updates")
    parser.add_argument("--device", help="cpu, cuda or auto")
    parser.add_argument("--dtype", choices=["float64", "float32"])
    parser.add_argument("--config", help="JSON file of settings (flags override it)")
    parser.add_argument("--set", action="append", metavar="KEY=VALUE",
                        help="any setting, e.g. task.n_theta=20 or nopg.model.solver=bicgstab")
    parser.add_argument("--out", default="results", help="results folder (default ./results)")
    parser.add_argument("--name", help="run folder name (default <task>__<algo>__<time>)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    parser.add_argument("--tensorboard", action="store_true",
                        help="also log every update to seed_<k>/tensorboard (needs tensorboard)")


def print_summary(run: RunSummary) -> None:
    """The run\'s one-line result: the mean return over the seeds, or ``J_hat`` without an
    evaluation environment."""
    if run.return_mean is None:
        per_seed = ", ".join(f"{s.J_hat:.4g}" for s in run.seeds)
        gaps = ", ".join(f"{s.support_gap:.2f}" for s in run.seeds)
        starts = ", ".join(f"{s.initial_gap:.2f}" for s in run.seeds)
        print(f"{run.task} {run.algorithm}: J_hat {run.J_hat_mean:.4g} "
              f"(seeds: {per_seed}; support gap: {gaps}; initial gap: {starts}); no environment, "
              f"so no evaluation return; results in {run.run_dir}")
        return
    per_seed = ", ".join(f"{s.return_mean:.1f}" for s in run.seeds)
    print(f"{run.task} {run.algorithm}: return {run.return_mean:.1f} ± "
          f"{run.return_std:.1f} (seeds: {per_seed}); results in {run.run_dir}")
