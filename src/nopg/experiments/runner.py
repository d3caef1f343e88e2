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
"""

from __future__ import annotations

import dataclasses
import json
import logging
import shutil
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from ..algorithm import NOPG
from ..analysis.statistics import rank_correlation
from ..auto import AutoNOPG
from ..bandwidth import Bandwidths
from ..bandwidth_plots import plot_bandwidth_report
from ..data import TransitionDataset
from ..fit_report import FitReport
from ..method_config import MethodConfig
from ..model_config import plain_bounds
from ..plots import plot_learning_curve, plot_learning_curves
from ..recipes import discount_horizon
from ..run_evaluation import bootstrap_mean_ci
from ..task_knowledge import make_policy as method_policy
from ..task_knowledge import model_episode_report as model_episode_report_upto
from ..task_knowledge import with_bounds
from .common import TaskSettings, check_task_value

logger = logging.getLogger("nopg.experiments")


@dataclass(frozen=True)
class ExperimentConfig(MethodConfig):
    """A NOPG experiment: the method's settings (:class:`nopg.MethodConfig`, the fields it
    shares with ``nopg fit``), the seeds, the evaluation and the task's own settings as its
    typed :class:`~nopg.experiments.common.TaskSettings`."""

    seeds: tuple[int, ...] = (0, 1, 2)
    env_state_bounds: bool = True             # moved successors: nopg.state_bounds from the env
    env_terminal_bounds: bool = True          # moved successors: nopg.terminal_bounds from the task
    eval_every: int = 100                     # evaluate in the environment every N updates
    eval_episodes: int = 1                    # episodes per evaluation
    final_eval_episodes: int = 1              # episodes of the final evaluation
    evaluate_candidates: bool = False         # evaluate every policy the judge scores (record)
    task: TaskSettings | dict[str, Any] = field(default_factory=dict)   # the task's own settings

    KIND: ClassVar[str] = "experiment"

    def __post_init__(self) -> None:
        if not self.seeds:
            raise ValueError("The 'seeds' parameter must name at least one seed. Got () instead.")
        for name in ("eval_every", "eval_episodes", "final_eval_episodes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"The '{name}' parameter must be a positive int. "
                                 f"Got {value!r} instead.")
        super().__post_init__()

    def setting_names(self) -> list[str]:
        return [*super().setting_names(), *(f"task.{name}" for name in self.task)]

    def replace(self, **changes: Any) -> ExperimentConfig:
        """A copy with top-level fields, ``nopg.<field>`` or ``task.<key>`` entries replaced."""
        task_changes: dict[str, Any] = {}
        rest: dict[str, Any] = {}
        for key, value in changes.items():
            if key.startswith("task."):
                task_changes[key[5:]] = check_task_value(self.task, key[5:], value)
            elif key == "task" and isinstance(value, Mapping):     # a dict or TaskSettings
                task_changes.update({k: check_task_value(self.task, k, v) for k, v in value.items()})
            else:
                rest[key] = value
        out = super().replace(**rest)
        if not task_changes:
            return out
        task = {**self.task, **task_changes} if isinstance(self.task, dict) else \
            dataclasses.replace(self.task, **task_changes)
        return dataclasses.replace(out, task=task)


class Task(Protocol):
    """What an experiment needs to know about its environment and data.

    A task may set ``evaluates = False`` (no environment to roll out in): its ``evaluate`` then
    returns ``[]``, no periodic evaluation runs and the returns are recorded as ``None``. A task
    that knows where its episodes end beyond what its data show (a cart's track limit) may define
    ``terminal_bounds(config)``, the moved successors' ``nopg.terminal_bounds``
    (:func:`task_terminal_bounds`).
    :mod:`nopg.experiments.task_base` holds what tasks share (``task_config``,
    ``EnvironmentTask``); a task's ``default_config().task`` is its typed settings.
    """

    name: str
    state_dim: int
    action_dim: int
    action_max: float

    def default_config(self) -> ExperimentConfig: ...

    def make_dataset(self, config: ExperimentConfig, seed: int) -> TransitionDataset: ...

    def initial_states(self, data: TransitionDataset, config: ExperimentConfig, seed: int
                       ) -> np.ndarray: ...

    def evaluate(self, policy: nn.Module, config: ExperimentConfig, seed: int, episodes: int
                 ) -> list[float]: ...

    def plot(self, algo: NOPG, data: TransitionDataset, config: ExperimentConfig, out_dir: Path
             ) -> list[Path]: ...


def make_policy(task: Task, config: ExperimentConfig, data: TransitionDataset | None = None
                ) -> nn.Module:
    """The paper's policy for ``task`` (:func:`nopg.task_knowledge.make_policy`): an MLP with an
    ``a_max tanh`` output (Gaussian for NOPG-S), its input standardised by ``data`` with
    ``config.normalize_states``."""
    return method_policy(config, task.state_dim, task.action_dim, task.action_max, data)


def environment_state_bounds(task: Task, config: ExperimentConfig, state_dim: int
                             ) -> list[list[float | None]] | None:
    """The bounds of the task's state space (``config.env_state_bounds``): a task's own
    ``state_bounds(config)`` where it gives some (``nopg fit``'s, from the user), else those of
    its environment's observation space (a task with an ``observation_space(config)`` method, as
    every ``EnvironmentTask`` has, a ``Box`` space of the data's dimension with a finite bound);
    else ``None``. :class:`nopg.AutoNOPG` gives them to the models whose successors move."""
    if not config.env_state_bounds:
        return None
    own = getattr(task, "state_bounds", None)
    given = None if own is None else own(config)
    if given is not None:
        return given
    space_of = getattr(task, "observation_space", None)
    if space_of is None:
        return None
    space = space_of(config)
    if not isinstance(space, gym.spaces.Box) or space.shape != (state_dim,):
        return None
    low, high = np.asarray(space.low, float), np.asarray(space.high, float)
    if not (np.isfinite(low).any() or np.isfinite(high).any()):
        return None
    return plain_bounds([low, high])


def task_terminal_bounds(task: Task, config: ExperimentConfig, state_dim: int
                         ) -> list[list[float | None]] | None:
    """Where the task's episodes end (``config.env_terminal_bounds``, a task with a
    ``terminal_bounds(config)`` method that returns limits, as cart-pole's track limit); else
    ``None``. :class:`nopg.AutoNOPG` gives them to the models whose successors move."""
    bounds_of = getattr(task, "terminal_bounds", None)
    if not config.env_terminal_bounds or bounds_of is None:
        return None
    bounds = bounds_of(config)
    if bounds is None:
        return None
    bounds = plain_bounds(bounds)
    if len(bounds[0]) != state_dim:
        raise ValueError(f"task {task.name!r} gives terminal bounds of {len(bounds[0])} "
                         f"dimensions for states of {state_dim}")
    return bounds


def with_task_bounds(task: Task, config: ExperimentConfig, state_dim: int) -> ExperimentConfig:
    """``config`` with the task's state and terminal bounds where its successors move
    (:func:`nopg.task_knowledge.with_bounds`), as :class:`nopg.AutoNOPG` runs it."""
    return with_bounds(config, environment_state_bounds(task, config, state_dim),
                       task_terminal_bounds(task, config, state_dim))


def model_episode_report(config: ExperimentConfig, algo: NOPG, seed: int) -> dict[str, Any]:
    """:func:`nopg.task_knowledge.model_episode_report` up to the task's evaluation length
    (``eval_steps``); empty for tasks without one."""
    steps = _eval_steps(config)
    return model_episode_report_upto(algo, int(steps), seed) if steps else {}


def _eval_steps(config: ExperimentConfig) -> Any:
    """The task's evaluation length (``eval_steps``), ``None`` where it names none."""
    return config.task.get("eval_steps") if isinstance(config.task, Mapping) else None


def task_horizon(config: ExperimentConfig, task: Task | None = None) -> int | None:
    """The task's evaluation length: a task's ``horizon(config)`` (``nopg fit``'s), else its
    ``eval_steps``; ``None`` where it names none (:class:`nopg.AutoNOPG` then reads it from
    the data)."""
    horizon_of = getattr(task, "horizon", None)
    steps = horizon_of(config) if horizon_of is not None else _eval_steps(config)
    return int(steps) if steps else None


def judge_steps(config: ExperimentConfig, task: Task | None = None) -> int:
    """How many steps the judge counts a policy's episodes up to where the data show no time
    limit: :func:`task_horizon`, else ``10 / (1 - gamma)``."""
    return task_horizon(config, task) or discount_horizon(config.nopg.gamma)


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
                "(%.2f ms/update)", seed, _format_return(result["return_mean"]), result["J_hat"],
                result["support_gap"], result["initial_gap"],
                result["wall_time_s"],
                1e3 * (result["time_per_update_s"] or 0.0))
    return result


def method_record(report: FitReport) -> dict[str, Any]:
    """The seed summary's record of the method: the fit report, and in the form of earlier
    results the kept recipe with one row per recipe fitted (the kept one first) and the
    escalation, or the snapshot choice and the restarts."""
    out: dict[str, Any] = {"fit_report": report.to_dict(), "restarts": []}
    if len(report.recipes) > 1:
        out["recipe"] = report.kept.name
        out["recipes"] = [{"recipe": c.name, "kept": c.kept, "return_mean": c.return_mean,
                           "J_hat": c.J_hat, "support_gap": c.support_gap,
                           "fit_time_s": c.fit_time_s,
                           "judge": None if c.score is None else c.score.to_dict(),
                           **({} if c.snapshot is None else {"snapshot": c.snapshot.to_dict()})}
                          for c in report.candidates]
        if report.escalation is not None:
            out["escalation"] = report.escalation
        return out
    if report.kept.snapshot is not None:
        out["snapshot"] = report.kept.snapshot.to_dict()
    if len(report.candidates) > 1:
        out["restarts"] = [{"restart": int(c.name[len("restart"):]), "J_hat": c.J_hat,
                            "support_gap": c.support_gap, "return_mean": c.return_mean}
                           for c in sorted(report.candidates, key=lambda c: c.name)]
    return out


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


def _format_return(value: float | None) -> str:
    return "n/a (no evaluation)" if value is None else f"{value:.2f}"


def recipes_report(seeds: Sequence[Mapping[str, Any]], confidence: float = 0.95
                   ) -> dict[str, Any] | None:
    """What a run's recipes gave over its seeds (the ``seeds`` results of the runner).

    Returns ``None`` where no seed fitted several recipes, else ``per_recipe`` (each recipe's
    mean evaluation return over the seeds, its bootstrap interval at ``confidence``, and how
    many seeds kept it), and, over every fit with an evaluation return, the rank correlation
    (Spearman) of the judge's forecast and of each fit's own ``J_hat`` with that return: whether
    the judge ranks the fits, and whether ``J_hat`` would have.
    """
    rows = [row for seed in seeds for row in seed.get("recipes", ())]
    if not rows:
        return None
    per_recipe: dict[str, dict[str, Any]] = {}
    for name in dict.fromkeys(row["recipe"] for row in rows):
        mine = [row for row in rows if row["recipe"] == name]
        returns = [row["return_mean"] for row in mine if row["return_mean"] is not None]
        per_recipe[name] = {
            "seeds": len(mine), "kept": sum(bool(row["kept"]) for row in mine),
            "return_mean": float(np.mean(returns)) if returns else None,
            "return_ci": list(bootstrap_mean_ci(returns, confidence)) if returns else None}
    rated = [row for row in rows if row["return_mean"] is not None]
    truth = [row["return_mean"] for row in rated]
    return {"per_recipe": per_recipe, "confidence": confidence, "fits": len(rated),
            "spearman_judge": rank_correlation(
                [row["judge"]["episode_return_mean"] for row in rated], truth),
            "spearman_own_J_hat": rank_correlation([row["J_hat"] for row in rated], truth)}


def selection_report(seeds: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """How well the judge chose, over a run's seeds: the Spearman correlation of its forecast
    with the true return over every scored policy of every seed (``fit_report.scored``), and
    the regret@1 of each seed's choice (the best scored return less the kept one's), its mean
    and largest. ``None`` where no seed scored a policy with a known return."""
    rows = [row for seed in seeds for row in seed.get("fit_report", {}).get("scored", ())]
    regrets = [seed["fit_report"]["regret_at_1"] for seed in seeds
               if seed.get("fit_report", {}).get("regret_at_1") is not None]
    if not rows:
        return None
    return {"scored": len(rows),
            "spearman": rank_correlation([r["forecast"] for r in rows],
                                         [r["return"] for r in rows]),
            "regret_at_1": regrets, "regret_at_1_mean": float(np.mean(regrets)),
            "regret_at_1_max": float(np.max(regrets))}


def _log_recipes_report(report: Mapping[str, Any]) -> None:
    """One line per recipe and one for the rank correlations (:func:`recipes_report`)."""
    def fmt(value: float | None) -> str:
        return "n/a" if value is None else f"{value:.2f}"

    for name, row in report["per_recipe"].items():
        ci = row["return_ci"]
        logger.info("recipe %s: return %s%s over %d seed(s), kept on %d", name,
                    _format_return(row["return_mean"]),
                    "" if ci is None else f" [{ci[0]:.1f}, {ci[1]:.1f}]", row["seeds"],
                    row["kept"])
    logger.info("rank correlation with the evaluation return over %d fits: the judge %s, each "
                "fit's own J_hat %s", report["fits"], fmt(report["spearman_judge"]),
                fmt(report["spearman_own_J_hat"]))


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
            _log_recipes_report(report)
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
