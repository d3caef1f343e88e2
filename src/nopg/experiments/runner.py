"""Run a named experiment over seeds and write a results folder.

An experiment is a :class:`Task` (how to get data, initial states, a policy, and how to evaluate
and plot) plus an :class:`ExperimentConfig` (the hyper-parameters, with NOPG's own nested as a
:class:`nopg.NOPGConfig` and the task's own as its typed settings, a
:class:`~nopg.experiments.common.TaskSettings`). :func:`run_experiment` writes::

    <out>/<task>__nopg-<d|s>__<time>/
        config.json            the full experiment configuration
        summary.json           per-seed returns, J_hat, timings; mean and std over seeds
        run.log                the log (J_hat, residuals, evaluations, timings)
        learning_curves.png    J_hat and evaluation returns of all seeds
        seed_<k>/log.csv       one row per update (of the kept fit)
        seed_<k>/log_<recipe>.csv   with several ``recipes``: each recipe's fit (and
                               ``checkpoint_<recipe>/`` for those not kept)
        seed_<k>/checkpoint/   policy, optimiser, config (``NOPG.load`` resumes it)
        seed_<k>/bandwidths.json, bandwidths.png   the chosen bandwidths, selection time,
                               neighbour distances and the data's support (``nopg bandwidth``)
        seed_<k>/*.png         task plots (e.g. the pendulum phase portraits)

The configuration, the task protocol and what the runner reads from a task are in
:mod:`nopg.experiments.task_protocol`, the reports over a run's seeds in
:mod:`nopg.experiments.run_reports`; their names import from here too.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch

from ..data.dataset import TransitionDataset
from ..select.auto import AutoNOPG
from .results_folder import RunFolder, SeedFolder
from .run_records import RunSummary, SeedResult
from .run_reports import (
    format_return,
    log_recipes_report,
    method_record,
    recipes_report,
    selection_report,
)
from .task_protocol import (
    ExperimentConfig,
    Task,
    environment_state_bounds,
    judge_steps,
    make_policy,
    model_episode_report,
    task_horizon,
    task_terminal_bounds,
    with_task_bounds,
)

__all__ = ["ExperimentConfig", "RunSummary", "SeedResult", "Task", "environment_state_bounds",
           "fit_method", "judge_steps", "make_policy", "method_record", "model_episode_report",
           "recipes_report", "run_experiment", "run_log", "run_seed", "selection_report",
           "task_horizon", "task_terminal_bounds", "with_task_bounds"]

logger = logging.getLogger("nopg.experiments")


def fit_method(task: Task, config: ExperimentConfig, data: TransitionDataset, s0: np.ndarray,
               seed: int, out_dir: Path | None = None, progress: bool = True,
               tensorboard: bool = False, evaluate: bool = True) -> AutoNOPG:
    """:class:`nopg.AutoNOPG` with ``config`` and ``seed`` fitted to ``data`` from ``s0``, with
    what the task knows: its action bound, the environment's state bounds, the task's terminal
    bounds, its evaluation length, and its evaluation (recorded, and every ``eval_every``
    updates logged; not with ``evaluate=False``). With ``out_dir`` the per-update logs go
    there."""
    evaluates = evaluate and getattr(task, "evaluates", True)
    method = AutoNOPG(config, seed=seed)
    return method.fit(
        data, s0, action_max=task.action_max,
        state_bounds=environment_state_bounds(task, config, data.state_dim),
        terminal_bounds=task_terminal_bounds(task, config, data.state_dim),
        horizon=task_horizon(config, task),
        evaluate=(lambda pol: task.evaluate(pol, config, seed, config.final_eval_episodes))
        if evaluates else None,
        monitor=(lambda pol: float(np.mean(task.evaluate(pol, config, seed,
                                                         config.eval_episodes))))
        if evaluates else None,
        monitor_every=config.eval_every, evaluate_candidates=config.evaluate_candidates,
        log_dir=out_dir,
        tensorboard_dir=out_dir / "tensorboard" if tensorboard and out_dir else None,
        progress=progress)


def run_seed(task: Task, config: ExperimentConfig, seed: int, out_dir: Path,
             progress: bool = True, tensorboard: bool = False) -> SeedResult:
    """Collect data, fit the method (:func:`fit_method`), evaluate, save and plot one seed.

    With ``tensorboard``, every update's metrics also go to ``out_dir/tensorboard`` (one
    sub-folder per fit where there are several). The result's ``method`` holds the method's fit
    report (``fit_report``) and, in the form of earlier results, its recipes, escalation,
    snapshot choice and restarts (:func:`method_record`).
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    data = task.make_dataset(config, seed)
    s0 = task.initial_states(data, config, seed)
    method = fit_method(task, config, data, s0, seed, out_dir, progress, tensorboard)
    SeedFolder(out_dir).write_method(method, title=f"{task.name} seed {seed}")
    report = method.report_
    kept = report.kept
    algo = method.algo_
    plots = task.plot(algo, data, kept.config, out_dir)
    update_times = [m["update_time_s"] for m in algo.history_]
    result = SeedResult(
        seed=seed, n_samples=data.n, returns=[float(r) for r in kept.returns or []],
        J_hat=algo.J_hat(), support_gap=algo.support_gap_, initial_gap=algo.initial_gap_,
        bandwidth_time_s=report.bandwidth_time_s, wall_time_s=time.perf_counter() - start,
        fit_time_s=report.fit_time_s, behaviour_weight=algo.behaviour_weight_,
        action_predictability=algo.action_predictability_,
        time_per_update_s=float(np.mean(update_times)) if update_times else None,
        bandwidths=method.bandwidths_.to_dict(), plots=[str(p.name) for p in plots],
        method=method_record(report), model_episodes=model_episode_report(config, algo, seed))
    logger.info("seed %d: return %s, J_hat %.4f (support gap %.3f, initial gap %.3f), %.1f s "
                "(%.2f ms/update)", seed, format_return(result.return_mean), result.J_hat,
                result.support_gap, result.initial_gap, result.wall_time_s,
                1e3 * (result.time_per_update_s or 0.0))
    return result


@contextmanager
def run_log(run_dir: Path) -> Iterator[None]:
    """Copy the ``nopg`` logger (at INFO or finer) and captured warnings to ``run_dir/run.log``."""
    handler = logging.FileHandler(Path(run_dir) / "run.log")
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    root = logging.getLogger("nopg")
    warnings_logger = logging.getLogger("py.warnings")  # used by logging.captureWarnings
    root.addHandler(handler)
    warnings_logger.addHandler(handler)
    previous_level = root.level
    if root.getEffectiveLevel() > logging.INFO:
        root.setLevel(logging.INFO)
    try:
        yield
    finally:
        root.removeHandler(handler)
        warnings_logger.removeHandler(handler)
        root.setLevel(previous_level)
        handler.close()


def run_experiment(task: Task, config: ExperimentConfig, out: str | Path = "results",
                   progress: bool = True, run_name: str | None = None,
                   tensorboard: bool = False) -> RunSummary:
    """Run ``task`` for every seed of ``config``; returns (and writes) the summary.

    With ``tensorboard``, each seed also logs its updates to ``seed_<k>/tensorboard``.
    """
    kind = "nopg-s" if config.stochastic else "nopg-d"
    stamp = time.strftime("%Y%m%d-%H%M%S")
    config.nopg.torch_device  # noqa: B018 -- refuses an unavailable device before any file is written
    folder = RunFolder.create(Path(out) / (run_name or f"{task.name}__{kind}__{stamp}"))
    seeds: list[SeedResult] = []
    try:
        return _run_seeds(task, config, kind, folder, seeds, progress, tensorboard)
    except Exception:
        folder.remove_if_empty_run(len(seeds))
        raise


def _run_seeds(task: Task, config: ExperimentConfig, kind: str, folder: RunFolder,
               seeds: list[SeedResult], progress: bool, tensorboard: bool
               ) -> RunSummary:
    """The body of :func:`run_experiment`; appends each finished seed's result to ``seeds``."""
    run_dir = folder.path
    with run_log(run_dir):
        folder.write_config({"experiment": task.name, "algorithm": kind, **config.to_dict()})
        logger.info("running %s with %s into %s (torch threads: %d)", task.name, kind, run_dir,
                    torch.get_num_threads())
        start = time.perf_counter()
        for s in config.seeds:
            seeds.append(run_seed(task, config, s, folder.seed(s).path, progress, tensorboard))
        records = [r.to_dict() for r in seeds]
        report = recipes_report(records)
        if report is not None:
            log_recipes_report(report)
        selection = selection_report(records)
        summary = RunSummary(task=task.name, algorithm=kind, run_dir=str(run_dir),
                             seeds=list(seeds), wall_time_s=time.perf_counter() - start,
                             recipes=report, selection=selection)
        if selection is not None:
            logger.info("the judge over %d scored policies: Spearman(forecast, return) %s; "
                        "regret@1 mean %.2f, largest %.2f", selection["scored"],
                        "n/a" if selection["spearman"] is None else
                        f"{selection['spearman']:.2f}", selection["regret_at_1_mean"],
                        selection["regret_at_1_max"])
        folder.write_summary(summary, list(config.seeds), title=f"{task.name} ({kind})")
        if summary.return_mean is not None:
            logger.info("%s %s: return %.2f ± %.2f [95%% bootstrap interval of the mean %.2f, "
                        "%.2f] over %d seeds, %.1f s", task.name, kind, summary.return_mean,
                        summary.return_std, *summary.return_ci, len(seeds), summary.wall_time_s)
        else:
            logger.info("%s %s: J_hat %.4f over %d seeds (no evaluation environment), %.1f s",
                        task.name, kind, summary.J_hat_mean, len(seeds), summary.wall_time_s)
        return summary
