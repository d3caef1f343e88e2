"""``nopg reproduce``: one of the paper's experiments (a task run over seeds into a results
folder) or analyses (gradient-analysis, trust-region, sample-efficiency)."""

from __future__ import annotations

import argparse
from typing import Any

from .common import config_file, set_items, set_threads
from .training import add_training_args, overrides, print_summary

__all__ = ["add_parser", "command"]


def add_parser(sub: Any) -> None:
    """The ``reproduce`` subcommand (the paper's experiments and analyses)."""
    rep = sub.add_parser("reproduce", help="run one of the paper's experiments")
    rep.add_argument("experiment", help="experiment name (see `nopg list`)")
    add_training_args(rep, seeds="0 1 2")
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


def command(args: argparse.Namespace) -> int:
    """Run the experiment or analysis ``args.experiment`` names; returns the exit code."""
    from ..experiments import ANALYSES, get_task, run_experiment

    set_threads(args)
    if args.experiment in ANALYSES:
        return _analysis_command(args)
    _refuse_analysis_flags(args, task=True, parallel=True)
    task = get_task(args.experiment)
    config = task.default_config().replace(**overrides(args))
    summary = run_experiment(task, config, out=args.out, progress=not args.no_progress,
                             run_name=args.name, tensorboard=args.tensorboard)
    print_summary(summary)
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
    changes = {**config_file(args.config), **set_items(args.set)}
    changes.pop("experiment", None)
    nopg = {f"nopg.model.{name}": getattr(args, name) for name in passed
            if getattr(args, name) is not None}
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


def _analysis_command(args: argparse.Namespace) -> int:
    changes = _analysis_changes(args)
    progress = not args.no_progress
    if args.experiment == "sample-efficiency":
        from ..experiments.sample_efficiency import SampleEfficiencyConfig
        from ..experiments.sample_efficiency_sweep import run_sample_efficiency

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
        from ..experiments.gradient_analysis import GradientAnalysisConfig, run_gradient_analysis

        base = GradientAnalysisConfig.paper_size() if args.full else GradientAnalysisConfig()
        summary = run_gradient_analysis(base.replace(**changes), out=args.out, progress=progress,
                                        run_name=args.name, workers=args.workers,
                                        ray_address=args.ray_address)
        print(f"gradient-analysis: {summary['n_data_sets']} data sets in "
              f"{summary['wall_time_s']:.0f} s; results in {summary['run_dir']}")
        return 0
    _refuse_analysis_flags(args, parallel=True)
    from ..experiments.trust_region import TrustRegionConfig, run_trust_region

    summary = run_trust_region(TrustRegionConfig().replace(**changes), out=args.out,
                               progress=progress, run_name=args.name)
    print(f"trust-region: results in {summary['run_dir']}")
    return 0
