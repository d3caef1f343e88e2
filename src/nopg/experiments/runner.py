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

import json
import logging
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..bandwidth.selection import Bandwidths
from ..data.dataset import TransitionDataset
from ..io.run_evaluation import bootstrap_mean_ci
from ..select.auto import AutoNOPG
from ..train.algorithm import NOPG
from ..viz.bandwidth_plots import plot_bandwidth_report
from ..viz.plots import plot_learning_curve, plot_learning_curves
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

__all__ = ["ExperimentConfig", "Task", "environment_state_bounds", "fit_method", "judge_steps",
           "make_policy", "method_record", "model_episode_report", "recipes_report", "run_experiment",
           "run_log", "run_seed", "selection_report", "task_horizon", "task_terminal_bounds",
           "with_task_bounds"]

logger = logging.getLogger("nopg.experiments")


def _write_bandwidths(method: AutoNOPG, out_dir: Path) -> None:
    """``bandwidths.json`` and ``bandwidths.png`` of the method's selection."""
    report = method.bandwidth_report_
    (out_dir / "bandwidths.json").write_text(json.dumps(report.to_dict(), indent=2))
    plot_bandwidth_report(report, out_dir / "bandwidths.png")


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
             progress: bool = True, tensorboard: bool = False) -> dict[str, Any]:
    """Collect data, fit the method (:func:`fit_method`), evaluate, save and plot one seed.

    With ``tensorboard``, every update's metrics also go to ``out_dir/tensorboard`` (one
    sub-folder per fit where there are several). The summary holds the method's fit report
    (``fit_report``) and, in the form of earlier results, its recipes, escalation, snapshot
    choice and restarts (:func:`method_record`).
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    data = task.make_dataset(config, seed)
    s0 = task.initial_states(data, config, seed)
    method = fit_method(task, config, data, s0, seed, out_dir, progress, tensorboard)
    _write_bandwidths(method, out_dir)
    report = method.report_
    kept = report.kept
    if kept.log_path is not None and kept.log_path.name != "log.csv":
        shutil.copyfile(kept.log_path, out_dir / "log.csv")
    if len(report.recipes) > 1:    # the other recipes' fits stay inspectable
        for cand in report.candidates[1:]:
            cand.algo.save(out_dir / f"checkpoint_{cand.name}")
    algo = method.algo_
    algo.save(out_dir / "checkpoint")
    plot_learning_curve(out_dir / "log.csv", out_dir / "learning_curve.png",
                        title=f"{task.name} seed {seed}")
    plots = task.plot(algo, data, kept.config, out_dir)
    timings = {"bandwidth_time_s": report.bandwidth_time_s,
               "wall_time_s": time.perf_counter() - start, "fit_time_s": report.fit_time_s}
    result = _seed_result(seed, data, algo, kept.returns or [], method.bandwidths_, plots,
                          timings)
    result.update(method_record(report))
    result.update(model_episode_report(config, algo, seed))
    logger.info("seed %d: return %s, J_hat %.4f (support gap %.3f, initial gap %.3f), %.1f s "
                "(%.2f ms/update)", seed, format_return(result["return_mean"]), result["J_hat"],
                result["support_gap"], result["initial_gap"],
                result["wall_time_s"],
                1e3 * (result["time_per_update_s"] or 0.0))
    return result


def _seed_result(seed: int, data: TransitionDataset, algo: NOPG, returns: list[float],
                 bw: Bandwidths, plots: list[Path], timings: dict[str, float]) -> dict[str, Any]:
    """The summary of one seed's run; ``timings``: bandwidth, wall and fit seconds."""
    update_times = [m["update_time_s"] for m in algo.history_]
    return {
        "seed": seed, "n_samples": data.n, "return_mean": _mean(returns),
        "returns": [float(r) for r in returns], "J_hat": algo.J_hat(),
        "support_gap": algo.support_gap_, "initial_gap": algo.initial_gap_, **timings,
        "behaviour_weight": algo.behaviour_weight_,
        "action_predictability": algo.action_predictability_,
        "time_per_update_s": float(np.mean(update_times)) if update_times else None,
        "bandwidths": bw.to_dict(), "plots": [str(p.name) for p in plots],
    }


def _mean(returns: list[float]) -> float | None:
    """The mean evaluation return, or ``None`` for a task without an evaluation environment."""
    return float(np.mean(returns)) if len(returns) else None


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
                   tensorboard: bool = False) -> dict[str, Any]:
    """Run ``task`` for every seed of ``config``; returns (and writes) the summary.

    With ``tensorboard``, each seed also logs its updates to ``seed_<k>/tensorboard``.
    """
    kind = "nopg-s" if config.stochastic else "nopg-d"
    stamp = time.strftime("%Y%m%d-%H%M%S")
    run_dir = Path(out) / (run_name or f"{task.name}__{kind}__{stamp}")
    config.nopg.torch_device  # noqa: B018 -- refuses an unavailable device before any file is written
    created = not run_dir.exists()
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ValueError(f"cannot create the results folder {run_dir}: "
                         f"{err.strerror or err}") from None
    seeds: list[dict[str, Any]] = []
    try:
        return _run_seeds(task, config, kind, run_dir, seeds, progress, tensorboard)
    except Exception:
        if created and not seeds:  # nothing finished: leave no half-written folder behind
            shutil.rmtree(run_dir, ignore_errors=True)
        raise


def _run_seeds(task: Task, config: ExperimentConfig, kind: str, run_dir: Path,
               seeds: list[dict[str, Any]], progress: bool, tensorboard: bool
               ) -> dict[str, Any]:
    """The body of :func:`run_experiment`; appends each finished seed's result to ``seeds``."""
    with run_log(run_dir):
        (run_dir / "config.json").write_text(json.dumps(
            {"experiment": task.name, "algorithm": kind, **config.to_dict()}, indent=2))
        logger.info("running %s with %s into %s (torch threads: %d)", task.name, kind, run_dir,
                    torch.get_num_threads())
        start = time.perf_counter()
        for s in config.seeds:
            seeds.append(run_seed(task, config, s, run_dir / f"seed_{s}", progress, tensorboard))
        means = np.array([r["return_mean"] for r in seeds if r["return_mean"] is not None])
        j_hats = np.array([r["J_hat"] for r in seeds])
        summary = {
            "task": task.name, "algorithm": kind, "run_dir": str(run_dir),
            "return_mean": float(means.mean()) if means.size else None,
            "return_std": float(means.std()) if means.size else None,
            "return_ci": list(bootstrap_mean_ci(means)) if means.size else None,   # over seeds
            "J_hat_mean": float(j_hats.mean()),
            "wall_time_s": time.perf_counter() - start, "seeds": seeds,
        }
        report = recipes_report(seeds)
        if report is not None:
            summary["recipes"] = report
            log_recipes_report(report)
        selection = selection_report(seeds)
        if selection is not None:
            summary["selection"] = selection
            logger.info("the judge over %d scored policies: Spearman(forecast, return) %s; "
                        "regret@1 mean %.2f, largest %.2f", selection["scored"],
                        "n/a" if selection["spearman"] is None else
                        f"{selection['spearman']:.2f}", selection["regret_at_1_mean"],
                        selection["regret_at_1_max"])
        (run_dir / "summary.json").write_text(json.dumps(summary, indent=2))
        plot_learning_curves([run_dir / f"seed_{s}" / "log.csv" for s in config.seeds],
                             run_dir / "learning_curves.png",
                             labels=[f"seed {s}" for s in config.seeds], title=f"{task.name} ({kind})")
        if means.size:
            logger.info("%s %s: return %.2f ± %.2f [95%% bootstrap interval of the mean %.2f, "
                        "%.2f] over %d seeds, %.1f s", task.name, kind, summary["return_mean"],
                        summary["return_std"], *summary["return_ci"], len(seeds),
                        summary["wall_time_s"])
        else:
            logger.info("%s %s: J_hat %.4f over %d seeds (no evaluation environment), %.1f s",
                        task.name, kind, summary["J_hat_mean"], len(seeds), summary["wall_time_s"])
        return summary
