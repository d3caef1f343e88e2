"""``nopg tune-k``: what ``top_k`` and the candidate count cost in accuracy on a data set."""

from __future__ import annotations

import argparse
import json
from typing import Any

import torch

from .common import DATA_HELP, JSON_HELP, add_factor_args, subcommand

__all__ = ["add_parser", "command"]


def add_parser(sub: Any) -> None:
    """The ``tune-k`` subcommand (what ``top_k`` and ``n_candidates`` cost in accuracy)."""
    tune = subcommand(
        sub, "tune-k", "measure what top_k and the candidate count cost in accuracy on a data set",
        """
        For a data set and a policy (a checkpoint's, or a fresh MLP), compare NOPG's sparse P
        (top_k = k) with the dense P (or, above 4000 samples, the largest k) and recommend a k.
        Columns of the k table:
          mass min/p5/mean  share of a row's kernel mass in its k kept entries
          J rel err         |J_hat(k) - J_hat(ref)| / |J_hat(ref)|
          grad cos          cosine between the policy gradients of k and the reference
          |grad|/|ref|      gradient norm over the reference's; '*' marks a gradient at
                            round-off level, whose cosine is noise (either sign)
        Recommended: the smallest k with J rel err <= 0.01, grad cos >= 0.99 and |grad|/|ref|
        in [0.5, 2]. The candidate table gives, per n_candidates value, the rows still
        certified after a typical policy update and the error of refine=False. With
        --checkpoint, its policy, bandwidths and gamma are used (--bandwidth / --gamma
        override them).""", formatter_class=argparse.RawDescriptionHelpFormatter)
    tune.add_argument("data", help=DATA_HELP)
    tune.add_argument("--checkpoint",
                      help="use this checkpoint's policy, bandwidths and gamma (default: a fresh MLP)")
    tune.add_argument("--k", type=int, nargs="+", default=[5, 10, 20, 40], help="top_k values")
    tune.add_argument("--candidates", type=int, nargs="+", default=[16, 32, 64],
                      help="n_candidates values (at --top-k)")
    tune.add_argument("--top-k", type=int, default=10, help="top_k for the candidate rows")
    tune.add_argument("--bandwidth",
                      help="bandwidth rule (default: the checkpoint's bandwidths, else silverman)")
    add_factor_args(tune, " (also applied to a checkpoint's bandwidths)")
    tune.add_argument("--gamma", type=float, help="discount (default: the checkpoint's, else 0.99)")
    tune.add_argument("--seed", type=int, default=0)
    tune.add_argument("--json", action="store_true", help=JSON_HELP)


def command(args: argparse.Namespace) -> int:
    """``nopg tune-k``: compare top_k and candidate counts; returns the exit code."""
    import numpy as np

    from ..bandwidth.selection import Bandwidths, select_bandwidths
    from ..data.formats import load_dataset
    from ..policies.networks import DeterministicMLPPolicy
    from ..train.algorithm import NOPG
    from ..train.tuning import neighbor_report

    data = load_dataset(args.data)
    state_factor, action_factor = np.asarray(args.state_factor), np.asarray(args.action_factor)
    bw, gamma, source = None, args.gamma, args.bandwidth or "silverman"
    if args.checkpoint:
        algo = NOPG.load(args.checkpoint, device="cpu")
        policy = algo.policy
        meta = NOPG.read_checkpoint_meta(args.checkpoint)
        if args.bandwidth is None and meta.get("bandwidths"):
            bw = Bandwidths.from_dict(meta["bandwidths"]).scaled(state_factor, action_factor)
            source = f"checkpoint {args.checkpoint}"
        gamma = algo.config.gamma if gamma is None else gamma
    else:
        torch.manual_seed(args.seed)
        policy = DeterministicMLPPolicy(data.state_dim, data.action_dim,
                                        action_max=float(np.abs(data.actions).max()))
    if bw is None:
        bw = select_bandwidths(data, source, state_factor=state_factor,
                               action_factor=action_factor, seed=args.seed)
    gamma = 0.99 if gamma is None else gamma
    starts = data.episode_start_states()
    s0 = starts[np.random.default_rng(args.seed).choice(len(starts), min(50, len(starts)), replace=False)]
    report = neighbor_report(data, bw, policy, s0, gamma=gamma, top_k_values=tuple(args.k),
                             n_candidates_values=tuple(args.candidates), top_k=args.top_k,
                             seed=args.seed)
    if args.json:
        print(json.dumps({**report.to_dict(), "bandwidth_source": source}, indent=2))
    else:
        print(f"bandwidths from {source}")
        print(report.to_text())
    return 0
