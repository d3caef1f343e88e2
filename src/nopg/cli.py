"""The ``nopg`` command line.

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
import inspect
import json
import logging
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from .algorithm import SupportWarning
from .bandwidth import ACTION_EFFECT_MAX, METHODS, check_max_action_effect


def _parse_value(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def _config_file(path_text: str | None) -> dict[str, Any]:
    """The settings of a ``--config`` JSON file (``{}`` without one)."""
    if path_text is None:
        return {}
    path = Path(path_text)
    if not path.is_file():
        raise ValueError(f"config file {path} does not exist")
    try:
        loaded = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"config file {path} is not valid JSON: {err}") from None
    if not isinstance(loaded, dict):
        raise ValueError(f"config file {path} must hold a JSON object")
    return loaded


def _set_items(items: list[str] | None) -> dict[str, Any]:
    """``--set KEY=VALUE`` items (values parsed as JSON where they are JSON, else strings)."""
    changes: dict[str, Any] = {}
    for item in items or []:
        if "=" not in item:
            raise ValueError(f"--set expects key=value, got {item!r}")
        key, text = item.split("=", 1)
        changes[key.strip()] = _parse_value(text)
    return changes


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    changes = _config_file(args.config)
    flags = {
        "seeds": args.seeds, "n_updates": args.n_updates, "bandwidth_method": args.bandwidth,
        "state_factor": args.state_factor, "action_factor": args.action_factor,
        "eval_every": args.eval_every, "nopg.gamma": args.gamma,
        "nopg.learning_rate": args.lr, "nopg.top_k": args.top_k,
        "nopg.n_mc_policy": args.n_mc_policy, "nopg.device": args.device,
        "nopg.dtype": args.dtype, "recipes": args.recipes,
    }
    for key, value in flags.items():
        if value is not None:
            if key in ("state_factor", "action_factor") and len(value) == 1:
                value = value[0]
            changes[key] = value
    if args.stochastic:
        changes["stochastic"] = True
    changes.update(_set_items(args.set))
    if getattr(args, "command", None) == "fit":
        for key, value in {"final_eval_episodes": args.eval_episodes,
                           "task.eval_steps": args.eval_steps,
                           "hidden": args.hidden}.items():
            if value is not None:
                changes.setdefault(key, value)
    return changes


def _add_training_args(parser: argparse.ArgumentParser, seeds: str) -> None:
    """The flags shared by ``reproduce`` and ``fit``."""
    parser.add_argument("--stochastic", action="store_true", help="NOPG-S instead of NOPG-D")
    parser.add_argument("--recipes", nargs="+", metavar="RECIPE",
                        help="fit each recipe (given: the configuration; stabilise: anchored "
                             "model, CMA-ES, linear policy; anchored: the anchored model) and "
                             "keep the policy one anchored model of the data rates best; auto (the "
                             "default): given and stabilise where the data's episodes end in "
                             "failures (terminals that earn less than the steps that go on "
                             "keep earning), up to 5000 transitions; "
                             "where no transition is terminal (up to 2000 transitions), given, "
                             "then anchored where the judge forecasts that given's policy gains "
                             "nothing along its episodes; else given. The judge and the "
                             "anchored recipes use at most 16 initial states (a spread)")
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
                        help="any setting, e.g. task.n_theta=20 or nopg.solver=bicgstab")
    parser.add_argument("--out", default="results", help="results folder (default ./results)")
    parser.add_argument("--name", help="run folder name (default <task>__<algo>__<time>)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    parser.add_argument("--tensorboard", action="store_true",
                        help="also log every update to seed_<k>/tensorboard (needs tensorboard)")


_DATA_HELP = "data set (.npz, .hdf5/.h5, minari:<id>)"
_OBS_KEY_HELP = "Minari dict observations: use this key (repeat for several, in order)"
_JSON_HELP = "print JSON instead of text"
_SAVED_RUN_HELP = "run folder (seed_<k>/checkpoint/) or checkpoint folder"


def _subcommand(sub: Any, name: str, help_text: str, description: str | None = None,
                **kwargs: Any) -> argparse.ArgumentParser:
    """Add the subcommand ``name``; ``description`` may be an indented triple-quoted string."""
    text = None if description is None else inspect.cleandoc(description)
    return sub.add_parser(name, help=help_text, description=text, **kwargs)


def _add_factor_args(parser: argparse.ArgumentParser, note: str = "") -> None:
    """``--state-factor`` and ``--action-factor``: one factor, or one per dimension."""
    for kind in ("state", "action"):
        parser.add_argument(f"--{kind}-factor", type=float, nargs="+", default=[1.0], metavar="F",
                            help=f"{kind} bandwidth factor(s): one, or one per {kind} dimension"
                                 f"{note}")


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="nopg", description="Nonparametric Off-Policy Policy Gradient (batch RL).")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True)
    _add_reproduce_parser(sub)
    _add_fit_parser(sub)
    sub.add_parser("list", help="list the available experiments")
    _add_data_parser(sub)
    _add_tune_parser(sub)
    _add_bandwidth_parser(sub)
    _add_collect_parser(sub)
    _add_evaluate_export_parsers(sub)
    _add_sweep_report_parser(sub)
    return parser


def _add_sweep_report_parser(sub: Any) -> None:
    """The ``sweep-report`` subcommand (merge sample-efficiency sweeps, summarise, plot)."""
    rep = _subcommand(sub, "sweep-report", "merge sample-efficiency runs.csv files, summarise and plot",
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


def _add_reproduce_parser(sub: Any) -> None:
    """The ``reproduce`` subcommand (the paper's experiments and analyses)."""
    rep = sub.add_parser("reproduce", help="run one of the paper's experiments")
    rep.add_argument("experiment", help="experiment name (see `nopg list`)")
    _add_training_args(rep, seeds="0 1 2")
    rep.add_argument("--full", action="store_true",
                     help="gradient-analysis: the paper's size (1000 data sets per point)")
    rep.add_argument("--workers", type=int,
                     help="gradient-analysis: local worker processes (default: all cores)")
    rep.add_argument("--ray-address",
                     help="gradient-analysis: run on Ray ('local', 'auto' or a cluster address)")
    rep.add_argument("--task", help="sample-efficiency: the task (pendulum-grid, pendulum-random, "
                                    "cartpole-random, mountaincar-human, umaze, or a user-data "
                                    "task: pendulum-uniform, pendulum-controller, "
                                    "mountaincar-uniform, invertedpendulum-random)")


def _add_fit_parser(sub: Any) -> None:
    """The ``fit`` subcommand (NOPG on the user's own data file)."""
    fit = _subcommand(sub, "fit", "train NOPG on your own data file (.npz, .hdf5/.h5, minari:<id>)",
                      """
        nopg fit DATA: select bandwidths, optimise a policy on the data and write a results
        folder like `nopg reproduce` (log, learning curves, bandwidth report, checkpoint). J_hat
        is the model's discounted return from the initial states (by default the states that
        start the data's episodes); with --env the policy is also rolled out in that gymnasium
        environment.""")
    fit.add_argument("data", help=_DATA_HELP)
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
    fit.add_argument("--obs-key", action="append", help=_OBS_KEY_HELP)
    _add_training_args(fit, seeds="0")


def _add_data_parser(sub: Any) -> None:
    """The ``data`` subcommand (inspect or convert a data set)."""
    data = _subcommand(sub, "data", "inspect or convert a data set (.npz, .hdf5/.h5, minari:<id>)",
                       """
        nopg data PATH: summarise a data set (JSON by default). nopg data convert IN OUT:
        convert; the format follows the extension (.npz, .hdf5, .h5) or the prefix
        minari:<dataset id> (local Minari data sets only, never downloaded). A file named
        'convert' can be given as ./convert.""")
    data.add_argument("args", nargs="+", metavar="PATH | convert IN OUT",
                      help="a data set to inspect, or `convert IN OUT`")
    data.add_argument("--format", dest="output_format", choices=["json", "text"], default="json",
                      help="inspection output (default json)")
    data.add_argument("--obs-key", action="append", help=_OBS_KEY_HELP)
    data.add_argument("--overwrite", action="store_true", help="convert: replace OUT if it exists")
    data.add_argument("--env-id", help="convert to Minari: gymnasium id recorded with the data set")


def _add_tune_parser(sub: Any) -> None:
    """The ``tune-k`` subcommand (what ``top_k`` and ``n_candidates`` cost in accuracy)."""
    tune = _subcommand(
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
    tune.add_argument("data", help=_DATA_HELP)
    tune.add_argument("--checkpoint",
                      help="use this checkpoint's policy, bandwidths and gamma (default: a fresh MLP)")
    tune.add_argument("--k", type=int, nargs="+", default=[5, 10, 20, 40], help="top_k values")
    tune.add_argument("--candidates", type=int, nargs="+", default=[16, 32, 64],
                      help="n_candidates values (at --top-k)")
    tune.add_argument("--top-k", type=int, default=10, help="top_k for the candidate rows")
    tune.add_argument("--bandwidth",
                      help="bandwidth rule (default: the checkpoint's bandwidths, else silverman)")
    _add_factor_args(tune, " (also applied to a checkpoint's bandwidths)")
    tune.add_argument("--gamma", type=float, help="discount (default: the checkpoint's, else 0.99)")
    tune.add_argument("--seed", type=int, default=0)
    tune.add_argument("--json", action="store_true", help=_JSON_HELP)


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


def _add_bandwidth_parser(sub: Any) -> None:
    """The ``bandwidth`` subcommand (the bandwidths chosen and the data's support)."""
    bw = _subcommand(sub, "bandwidth", "show the kernel bandwidths chosen for a data set and its support",
                     """
        nopg bandwidth DATA: select the bandwidths (timed), compare them with Silverman's per
        dimension, give the distances of the next states to the data states in bandwidths, and
        the thinness of the data at the next states with the data's own next actions and with
        uniform actions. Prints a summary (or JSON) and saves a figure.""")
    bw.add_argument("data", help=_DATA_HELP)
    bw.add_argument("--method", default="auto", metavar="METHOD",
                    help=f"bandwidth rule, one of {', '.join(METHODS)} (default auto)")
    _add_factor_args(bw)
    bw.add_argument("--seed", type=int, default=0, help="seed of cv and the probes (default 0)")
    bw.add_argument("--max-action-effect", default=f"{ACTION_EFFECT_MAX:g}",
                    metavar="E", help="auto's action guard: narrow the action kernel where one action "
                    f"bandwidth moves the next state by more than E state bandwidths (default "
                    f"{ACTION_EFFECT_MAX:g}; 'none' turns it off)")
    bw.add_argument("--plot", default="bandwidth_report.png", metavar="PATH",
                    help="figure to write (default ./bandwidth_report.png); its folder must exist")
    bw.add_argument("--json", action="store_true", help=_JSON_HELP)


def _add_collect_parser(sub: Any) -> None:
    """The ``collect`` subcommand (keyboard demonstrations)."""
    col = sub.add_parser("collect", help="record demonstrations with the keyboard")
    col.add_argument("env", choices=["mountaincar"], help="environment (MountainCarContinuous-v0)")
    col.add_argument("--out", required=True, help="output file (.npz, .hdf5) or minari:<id>")
    col.add_argument("--episodes", type=int, default=3, help="episodes to record (default 3)")
    col.add_argument("--seed", type=int, default=0, help="reset seed of the first episode")
    col.add_argument("--max-steps", type=int, default=999, help="time limit (default 999)")
    col.add_argument("--fps", type=float, default=30.0, help="steps per second (default 30)")
    col.add_argument("--hold-steps", type=int, default=4,
                     help="keep a push for N steps after a key press (bridges key-repeat gaps)")
    col.add_argument("--append", action="store_true", help="add the episodes to an existing OUT")


def _add_evaluate_export_parsers(sub: Any) -> None:
    """The ``evaluate`` and ``export`` subcommands (a saved policy, after training)."""
    ev = _subcommand(sub, "evaluate", "evaluate a saved policy in an environment and/or on another data set",
                     """
        nopg evaluate RUN_OR_CHECKPOINT: for every seed's checkpoint of a run folder (or one
        checkpoint folder), roll the policy out in a gymnasium environment (--env; mean return
        with a 95% bootstrap interval) and/or compute its J_hat and support gap on another data
        set (--data) with the checkpoint's bandwidths and settings, from the states that start
        the data's episodes.""")
    ev.add_argument("path", help=_SAVED_RUN_HELP)
    ev.add_argument("--env", help="gymnasium id to roll the policy out in")
    ev.add_argument("--episodes", type=int, default=10, help="episodes per checkpoint (10)")
    ev.add_argument("--seed", type=int, default=0, help="reset seed of the first episode (0)")
    ev.add_argument("--max-steps", type=int, help="episode length cap (default: the env's)")
    ev.add_argument("--data", help="data set for J_hat (.npz, .hdf5/.h5, minari:<id>)")
    ev.add_argument("--json", action="store_true", help=_JSON_HELP)

    ex = _subcommand(sub, "export", "export a saved policy as TorchScript or ONNX", """
        nopg export RUN_OR_CHECKPOINT --out FILE: write the policy (a Gaussian policy's mean
        action) as a TorchScript or ONNX file mapping states (batch, state_dim) to actions
        (batch, action_dim), and check that the file reproduces the policy's actions.""")
    ex.add_argument("path", help=_SAVED_RUN_HELP)
    ex.add_argument("--out", required=True, help="output file (.pt for TorchScript, .onnx)")
    ex.add_argument("--format", dest="export_format", choices=["torchscript", "onnx"],
                    help="default: from the --out suffix")
    ex.add_argument("--seed", type=int, help="which seed's checkpoint of a run folder")
    ex.add_argument("--dtype", choices=["float64", "float32"], help="default: the policy's")
    ex.add_argument("--overwrite", action="store_true", help="replace an existing --out file")


def _print_description(desc: dict[str, Any], fmt: str) -> None:
    if fmt == "json":
        print(json.dumps(desc, indent=2))
        return
    def vec(values: list[float]) -> str:
        return "[" + ", ".join(f"{v:.4g}" for v in values) + "]"
    print(f"transitions       {desc['n']}  (state dim {desc['state_dim']}, "
          f"action dim {desc['action_dim']})")
    print(f"episodes          {desc['n_episodes']}  (lengths {desc['episode_length_min']}-"
          f"{desc['episode_length_max']}, mean {desc['episode_length_mean']:.1f}; ids "
          f"{'stored' if desc['has_episode_ids'] else 'inferred'})")
    print(f"episode ends      {desc['episodes_ending_terminal']} terminal, "
          f"{desc['episodes_ending_truncated']} truncated, {desc['episodes_ending_open']} neither")
    print(f"flags             {desc['n_terminals']} terminals, {desc['n_truncations']} truncations")
    print(f"returns           mean {desc['episode_return_mean']:.4g}, min "
          f"{desc['episode_return_min']:.4g}, max {desc['episode_return_max']:.4g}, std "
          f"{desc['episode_return_std']:.4g}")
    print(f"rewards           mean {desc['reward_mean']:.4g}, min {desc['reward_min']:.4g}, "
          f"max {desc['reward_max']:.4g}")
    print(f"states            min {vec(desc['state_min'])}  max {vec(desc['state_max'])}")
    print(f"actions           min {vec(desc['action_min'])}  max {vec(desc['action_max'])}")


def _data_command(args: argparse.Namespace) -> int:
    from .formats import describe, load_dataset, resolve_location, save_dataset

    items = list(args.args)
    obs_keys = args.obs_key
    if items[0] == "convert":
        if len(items) != 3:
            raise ValueError("usage: nopg data convert IN OUT")
        src, dst = items[1], items[2]
        in_kind = resolve_location(src)[0]
        data = load_dataset(src, obs_keys=obs_keys if in_kind == "minari" else None)
        kind = save_dataset(data, dst, overwrite=args.overwrite, env_id=args.env_id)
        print(f"wrote {data!r} to {dst} ({kind})")
        return 0
    if items[0] == "inspect":
        items = items[1:]
    if len(items) != 1:
        raise ValueError("usage: nopg data PATH  or  nopg data convert IN OUT")
    _print_description(describe(load_dataset(items[0], obs_keys=obs_keys)), args.output_format)
    return 0


def _collect_command(args: argparse.Namespace) -> int:
    from .data import concatenate
    from .envs.mountaincar import TerminalKeys, collect_demonstrations, render_ascii
    from .formats import load_dataset, resolve_location, save_dataset

    if args.fps <= 0:
        raise ValueError(f"--fps must be positive. Got {args.fps}.")
    kind, target = resolve_location(args.out)
    exists = kind == "minari" or Path(target).exists()
    previous = load_dataset(args.out) if args.append and exists else None
    if previous is None and kind != "minari" and Path(target).exists():
        raise ValueError(f"{target} already exists; pass --append to add episodes to it")
    print("MountainCarContinuous-v0: left/a push -1, right/d push +1, s/space coast, q quits. "
          "Episodes end at the goal or the time limit.", file=sys.stderr)

    def show(obs: Any, action: float, t: int) -> None:
        print("\r" + render_ascii(obs, action, t), end="", file=sys.stderr, flush=True)

    def done(k: int, ep: dict[str, Any]) -> None:
        end = "goal" if ep["terminals"][-1] else "time limit"
        print(f"\nepisode {k}: {ep['rewards'].size} steps, return {ep['rewards'].sum():.1f} "
              f"({end})", file=sys.stderr)

    with TerminalKeys() as keys:
        data = collect_demonstrations(args.episodes, keys, seed=args.seed,
                                      max_episode_steps=args.max_steps, hold_steps=args.hold_steps,
                                      step_time=1.0 / args.fps, on_step=show, on_episode=done)
    if data is None:
        print("\nno episode completed; nothing written", file=sys.stderr)
        return 1
    if previous is not None:
        data = concatenate([previous, data])
    save_dataset(data, args.out, overwrite=previous is not None)
    print(f"\nwrote {data!r} to {args.out}")
    return 0


def _tune_command(args: argparse.Namespace) -> int:
    import numpy as np

    from .algorithm import NOPG
    from .bandwidth import Bandwidths, select_bandwidths
    from .formats import load_dataset
    from .policies import DeterministicMLPPolicy
    from .tuning import neighbor_report

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


def _bandwidth_command(args: argparse.Namespace) -> int:
    import numpy as np

    from .bandwidth_plots import plot_bandwidth_report
    from .bandwidth_report import bandwidth_report
    from .figures import check_plot_path
    from .formats import load_dataset

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


_NOPG_FLAGS = ("seeds", "n_updates", "bandwidth", "state_factor", "action_factor", "gamma", "lr",
               "top_k", "n_mc_policy", "eval_every", "device", "dtype")


def _analysis_changes(args: argparse.Namespace) -> dict[str, Any]:
    """``--config`` and ``--set`` settings of an analysis; NOPG-run flags are refused, except
    sample-efficiency's ``--device`` and ``--dtype``, which set its NOPG runs' (the baselines keep
    their own device)."""
    passed = ("device", "dtype") if args.experiment == "sample-efficiency" else ()
    used = [f"--{name.replace('_', '-')}" for name in _NOPG_FLAGS
            if getattr(args, name) is not None and name not in passed]
    if args.stochastic:
        used.append("--stochastic")
    if used:
        raise ValueError(f"{args.experiment} does not take {', '.join(used)}; use --set KEY=VALUE "
                         "with its settings (see its config.json)")
    changes = {**_config_file(args.config), **_set_items(args.set)}
    changes.pop("experiment", None)
    nopg = {f"nopg.{name}": getattr(args, name) for name in passed if getattr(args, name) is not None}
    if nopg:
        changes["settings"] = {**changes.get("settings", {}), **nopg}
    return changes


def _refuse_analysis_flags(args: argparse.Namespace, task: bool = False, parallel: bool = False
                           ) -> None:
    """Refuse ``--task`` (sample-efficiency's) and ``--full``/``--workers``/``--ray-address``
    (sample-efficiency's and gradient-analysis's) where they do not apply."""
    if task and args.task is not None:
        raise ValueError("--task applies to sample-efficiency only")
    if parallel and (args.full or args.workers is not None or args.ray_address is not None):
        raise ValueError("--full, --workers and --ray-address apply to sample-efficiency and "
                         "gradient-analysis only")


def _set_threads(args: argparse.Namespace) -> None:
    """torch's thread count from ``--threads``."""
    if args.threads < 1:
        raise ValueError(f"--threads must be >= 1. Got {args.threads} instead.")
    torch.set_num_threads(args.threads)


def _analysis_command(args: argparse.Namespace) -> int:
    changes = _analysis_changes(args)
    progress = not args.no_progress
    if args.experiment == "sample-efficiency":
        from .experiments.sample_efficiency import SampleEfficiencyConfig
        from .experiments.sample_efficiency_sweep import run_sample_efficiency

        task = args.task or changes.pop("task", None) or SampleEfficiencyConfig.task
        base = SampleEfficiencyConfig.paper_size(task) if args.full else \
            SampleEfficiencyConfig(task=task)
        summary = run_sample_efficiency(base.replace(**changes), out=args.out, progress=progress,
                                        run_name=args.name, workers=args.workers,
                                        ray_address=args.ray_address)
        failed = f" ({summary['n_failed']} failed: see runs.csv)" if summary["n_failed"] else ""
        print(f"sample-efficiency {task}: {summary['n_runs']} runs{failed} in "
              f"{summary['wall_time_s']:.0f} s; results in {summary['run_dir']}")
        return 0
    _refuse_analysis_flags(args, task=True)
    if args.experiment == "gradient-analysis":
        from .experiments.gradient_analysis import GradientAnalysisConfig, run_gradient_analysis

        base = GradientAnalysisConfig.paper_size() if args.full else GradientAnalysisConfig()
        summary = run_gradient_analysis(base.replace(**changes), out=args.out, progress=progress,
                                        run_name=args.name, workers=args.workers,
                                        ray_address=args.ray_address)
        print(f"gradient-analysis: {summary['n_data_sets']} data sets in "
              f"{summary['wall_time_s']:.0f} s; results in {summary['run_dir']}")
        return 0
    _refuse_analysis_flags(args, parallel=True)
    from .experiments.trust_region import TrustRegionConfig, run_trust_region

    summary = run_trust_region(TrustRegionConfig().replace(**changes), out=args.out,
                               progress=progress, run_name=args.name)
    print(f"trust-region: results in {summary['run_dir']}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the process exit code."""
    parser = _build_parser()
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
    from .experiments import ANALYSES, TASKS, get_task, run_experiment

    if args.command == "list":
        width = max(len(name) for name in [*TASKS, *ANALYSES])
        for name, cls in sorted(TASKS.items()):
            doc = (cls.__doc__ or "").strip().splitlines()[0]
            print(f"{name:{width}s} {doc}")
        for name, doc in ANALYSES.items():
            print(f"{name:{width}s} {doc}")
        return 0
    commands = {"data": _data_command, "collect": _collect_command, "tune-k": _tune_command,
                "bandwidth": _bandwidth_command, "fit": _fit_command,
                "evaluate": _evaluate_command, "export": _export_command,
                "sweep-report": _sweep_report_command}
    if args.command in commands:
        return commands[args.command](args)
    _set_threads(args)
    if args.experiment in ANALYSES:
        return _analysis_command(args)
    _refuse_analysis_flags(args, task=True, parallel=True)
    task = get_task(args.experiment)
    config = task.default_config().replace(**_overrides(args))
    summary = run_experiment(task, config, out=args.out, progress=not args.no_progress,
                             run_name=args.name, tensorboard=args.tensorboard)
    _print_summary(summary)
    return 0


def _print_summary(summary: dict[str, Any]) -> None:
    seeds = summary["seeds"]
    if summary["return_mean"] is None:
        per_seed = ", ".join(f"{s['J_hat']:.4g}" for s in seeds)
        gaps = ", ".join(f"{s['support_gap']:.2f}" for s in seeds)
        starts = ", ".join(f"{s.get('initial_gap', float('nan')):.2f}" for s in seeds)
        print(f"{summary['task']} {summary['algorithm']}: J_hat {summary['J_hat_mean']:.4g} "
              f"(seeds: {per_seed}; support gap: {gaps}; initial gap: {starts}); no environment, "
              f"so no evaluation return; results in {summary['run_dir']}")
        return
    per_seed = ", ".join(f"{s['return_mean']:.1f}" for s in seeds)
    print(f"{summary['task']} {summary['algorithm']}: return {summary['return_mean']:.1f} ± "
          f"{summary['return_std']:.1f} (seeds: {per_seed}); results in {summary['run_dir']}")


def _fit_command(args: argparse.Namespace) -> int:
    from .experiments import run_experiment
    from .experiments.data_file import DataFileTask

    _set_threads(args)
    task = DataFileTask(args.data, env_id=args.env, initial_states=args.initial_states,
                        obs_keys=args.obs_key, action_max=args.action_max,
                        state_bounds=_bound_pair(args, "state"),
                        terminal_bounds=_bound_pair(args, "terminal"))
    changes = _overrides(args)
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
    _print_summary(summary)
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


def _evaluate_command(args: argparse.Namespace) -> int:
    from .formats import load_dataset
    from .run_evaluation import checkpoint_folders, evaluate_saved, format_report

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


def _sweep_report_command(args: argparse.Namespace) -> int:
    from .experiments.sample_efficiency_report import format_table, merge_rows, read_rows, write_report

    rows = merge_rows([read_rows(path) for path in args.runs])
    out = Path(args.out)
    if (out / "runs.csv").exists() and not args.overwrite:
        raise ValueError(f"{out} already holds a report (runs.csv); choose another --out or "
                         "pass --overwrite")
    summary = write_report(rows, out, args.confidence)
    print(format_table(summary))
    print(f"{len(rows)} runs of {rows[0]['task']} from {len(args.runs)} file(s); report in {out}")
    return 0


def _export_command(args: argparse.Namespace) -> int:
    from .export import check_target, export_policy, resolve_format
    from .run_evaluation import checkpoint_folders, load_saved

    target = check_target(args.out, args.overwrite)
    fmt = resolve_format(target, args.export_format)
    found = checkpoint_folders(args.path, args.seed)
    if len(found) > 1:
        seeds = ", ".join(str(s) for s, _ in found)
        raise ValueError(f"{args.path} holds the checkpoints of seeds {seeds}; choose one with --seed")
    saved = load_saved(found[0][1], found[0][0])
    model = saved.algo.model_
    example = model.data.states[:64] if model is not None else None
    dtype = None if args.dtype is None else getattr(torch, args.dtype)
    try:
        path = export_policy(saved.policy, target, fmt, example_states=example,
                             overwrite=args.overwrite, dtype=dtype)
    except ImportError as err:
        raise ValueError(str(err)) from None
    print(f"wrote {path} ({fmt}; checked against the policy of {found[0][1]})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
