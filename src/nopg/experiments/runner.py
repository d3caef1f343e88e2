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
import math
import shutil
import time
import warnings
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from ..algorithm import NOPG, EvalCallback
from ..anchored import AnchoredBellman
from ..bandwidth import ACTION_EFFECT_MAX, METHODS, Bandwidths, check_max_action_effect
from ..bandwidth_plots import plot_bandwidth_report
from ..bandwidth_report import bandwidth_report
from ..config import NOPGConfig
from ..data import TransitionDataset
from ..model_config import plain_bounds
from ..plots import plot_learning_curve, plot_learning_curves
from ..policies import DeterministicMLPPolicy, GaussianMLPPolicy, input_scaling_from_data
from ..policy_selection import JudgeScore, best_score, judge_model, score_policy
from ..run_evaluation import bootstrap_mean_ci
from ..snapshots import PolicySnapshots, choose_snapshot
from .common import TaskSettings, check_task_value, suggestion
from .recipes import (
    apply_recipe,
    check_recipes,
    discount_horizon,
    ends_in_failure,
    escalation,
    gains_nothing,
    recipes_report,
    resolve_recipes,
    reward_rates,
)

logger = logging.getLogger("nopg.experiments")


@dataclass(frozen=True)
class ExperimentConfig:
    """Hyper-parameters of a NOPG experiment (defaults: the paper's appendix, see each task)."""

    seeds: tuple[int, ...] = (0, 1, 2)
    n_updates: int = 1500                     # policy updates per seed
    stochastic: bool = False                  # NOPG-S (Gaussian policy) instead of NOPG-D
    bandwidth_method: str = "silverman"       # silverman | scott | cv | auto
    state_factor: float | tuple[float, ...] = 1.0   # per-dimension multipliers of the rule
    action_factor: float | tuple[float, ...] = 1.0
    max_action_effect: float | None = ACTION_EFFECT_MAX   # auto's action guard (None: off)
    hidden: tuple[int, ...] = (50,)           # policy MLP hidden widths (ReLU)
    sigma_max: float = 1.0                    # NOPG-S: sigma = sigma_max * sigmoid(g)
    normalize_states: bool = False            # the policy sees states standardised by the data
    env_state_bounds: bool = True             # moved successors: nopg.state_bounds from the env
    env_terminal_bounds: bool = True          # moved successors: nopg.terminal_bounds from the task
    restarts: int = 1                         # fits per seed from other initialisations; best J_hat
    restart_updates: int | None = None        # updates per restart before choosing (None: all)
    recipes: tuple[str, ...] = ("auto",)      # fits per seed (recipes.py; "auto": by the data)
    snapshot_every: int | None = 100          # judged policy snapshots every N updates (None: off)
    snapshot_from: float = 0.5                # ... from this share of n_updates on
    eval_every: int = 100                     # evaluate in the environment every N updates
    eval_episodes: int = 1                    # episodes per evaluation
    final_eval_episodes: int = 1              # episodes of the final evaluation
    nopg: NOPGConfig = field(default_factory=NOPGConfig)
    task: TaskSettings | dict[str, Any] = field(default_factory=dict)   # the task's own settings

    def __post_init__(self) -> None:
        if not self.seeds:
            raise ValueError("The 'seeds' parameter must name at least one seed. Got () instead.")
        for name in ("n_updates", "eval_every", "eval_episodes", "final_eval_episodes", "restarts"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"The '{name}' parameter must be a positive int. "
                                 f"Got {value!r} instead.")
        if self.restart_updates is not None and (
                isinstance(self.restart_updates, bool) or not isinstance(self.restart_updates, int)
                or self.restart_updates < 1):
            raise ValueError(f"The 'restart_updates' parameter must be a positive int or None. "
                             f"Got {self.restart_updates!r} instead.")
        check_recipes(self.recipes)
        self._check_snapshots()
        if len(self.recipes) > 1 and self.restarts > 1:
            raise ValueError(f"'recipes' ({len(self.recipes)}) and 'restarts' ({self.restarts}) "
                             "both choose among fits: set one of them")
        check_max_action_effect(self.max_action_effect)
        if self.bandwidth_method not in METHODS:
            raise ValueError(f"The 'bandwidth_method' parameter must be one of {', '.join(METHODS)}. "
                             f"Got {self.bandwidth_method!r} instead.")

    def _check_snapshots(self) -> None:
        every, share = self.snapshot_every, self.snapshot_from
        if every is not None and (isinstance(every, bool) or not isinstance(every, int) or every < 1):
            raise ValueError(f"The 'snapshot_every' parameter must be a positive int or None. "
                             f"Got {every!r} instead.")
        if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 <= share <= 1:
            raise ValueError(f"The 'snapshot_from' parameter must be a number in [0, 1]. "
                             f"Got {share!r} instead.")

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["nopg"] = self.nopg.to_dict()
        return out

    def replace(self, **changes: Any) -> ExperimentConfig:
        """A copy with top-level fields, ``nopg.<field>`` or ``task.<key>`` entries replaced."""
        top: dict[str, Any] = {}
        nopg_changes: dict[str, Any] = {}
        task_changes: dict[str, Any] = {}
        for key, value in changes.items():
            if key.startswith("nopg."):
                nopg_changes[key[5:]] = value
            elif key.startswith("task."):
                task_changes[key[5:]] = check_task_value(self.task, key[5:], value)
            elif key == "nopg" and isinstance(value, dict):
                nopg_changes.update(value)
            elif key == "task" and isinstance(value, Mapping):     # a dict or TaskSettings
                task_changes.update({k: check_task_value(self.task, k, v) for k, v in value.items()})
            elif key in {f.name for f in dataclasses.fields(self)}:
                top[key] = tuple(value) if isinstance(value, list) else value
            else:
                raise ValueError(f"unknown experiment setting {key!r}"
                                 f"{suggestion(key, _setting_names(self))}")
        known = self.nopg.to_dict()
        for key in nopg_changes:
            if key not in known:
                raise ValueError(f"unknown NOPG setting 'nopg.{key}'"
                                 f"{suggestion(f'nopg.{key}', [f'nopg.{k}' for k in known])}")
        nopg_cfg = NOPGConfig.from_dict({**known, **nopg_changes})
        task = {**self.task, **task_changes} if isinstance(self.task, dict) else \
            dataclasses.replace(self.task, **task_changes)
        return dataclasses.replace(self, nopg=nopg_cfg, task=task, **top)


def _setting_names(config: ExperimentConfig) -> list[str]:
    top = [f.name for f in dataclasses.fields(config) if f.name not in ("nopg", "task")]
    return top + [f"nopg.{name}" for name in config.nopg.to_dict()] + \
        [f"task.{name}" for name in config.task]


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
    """The paper's policy: MLP with ``a_max * tanh`` output (Gaussian for NOPG-S).

    With ``config.normalize_states`` (and ``data``) its input is standardised by the data.
    """
    scaling = input_scaling_from_data(data.states) if config.normalize_states and data is not None \
        else {}
    if config.stochastic:
        return GaussianMLPPolicy(task.state_dim, task.action_dim, action_max=task.action_max,
                                 sigma_max=config.sigma_max, hidden=config.hidden, **scaling)
    return DeterministicMLPPolicy(task.state_dim, task.action_dim, action_max=task.action_max,
                                  hidden=config.hidden, **scaling)


def _bandwidths(data: TransitionDataset, config: ExperimentConfig, seed: int, out_dir: Path
                ) -> tuple[Bandwidths, float]:
    """Select the bandwidths (timed) and write their report (``bandwidths.json``/``.png``)."""
    # Bandwidth warnings (e.g. cross-validation on grid data) go into the run's log.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        report = bandwidth_report(data, method=config.bandwidth_method,
                                  state_factor=np.asarray(config.state_factor, float),
                                  action_factor=np.asarray(config.action_factor, float), seed=seed,
                                  max_action_effect=config.max_action_effect)
    for w in caught:
        logger.warning("%s: %s", w.category.__name__, w.message)
    (out_dir / "bandwidths.json").write_text(json.dumps(report.to_dict(), indent=2))
    plot_bandwidth_report(report, out_dir / "bandwidths.png")
    return report.bandwidths, report.seconds


def _mean(returns: list[float]) -> float | None:
    """The mean evaluation return, or ``None`` for a task without an evaluation environment."""
    return float(np.mean(returns)) if len(returns) else None


def _format_return(value: float | None) -> str:
    return "n/a (no evaluation)" if value is None else f"{value:.2f}"


def _fit_with(algo: NOPG, task: Task, evaluator: EvalCallback, tensorboard: Path | None,
              snapshots: PolicySnapshots | None, *args: Any, **kwargs: Any) -> None:
    """``algo.fit(*args, **kwargs)`` with the task's evaluation (if it evaluates), the policy
    ``snapshots`` (if any) and, with a ``tensorboard`` folder, a TensorBoard writer after them
    (so it sees the evaluation return)."""
    callbacks: list[Any] = [evaluator] if getattr(task, "evaluates", True) else []
    callbacks += [] if snapshots is None else [snapshots]
    board = None
    if tensorboard is not None:
        from ..tensorboard import TensorBoardCallback

        board = TensorBoardCallback(tensorboard)
        callbacks.append(board)
    try:
        algo.fit(*args, callbacks=callbacks, **kwargs)
    finally:
        if board is not None:
            board.close()


def environment_state_bounds(task: Task, config: ExperimentConfig, state_dim: int
                             ) -> list[list[float | None]] | None:
    """The bounds of the task environment's observation space as ``nopg.state_bounds``, for the
    models whose successors move (``config.env_state_bounds``, ``nopg.state_bounds`` unset, a
    task with an ``observation_space(config)`` method, as every ``EnvironmentTask`` has, a
    ``Box`` space of the data's dimension with a finite bound); else ``None``."""
    space_of = getattr(task, "observation_space", None)
    if (not config.env_state_bounds or config.nopg.state_bounds is not None
            or config.nopg.successors == "kernel" or space_of is None):
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
    """Where the task's episodes end, as ``nopg.terminal_bounds`` for the models whose
    successors move (``config.env_terminal_bounds``, ``nopg.terminal_bounds`` unset, a task with
    a ``terminal_bounds(config)`` method that returns limits, as cart-pole's track limit);
    else ``None``."""
    bounds_of = getattr(task, "terminal_bounds", None)
    if (not config.env_terminal_bounds or config.nopg.terminal_bounds is not None
            or config.nopg.successors == "kernel" or bounds_of is None):
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
    """``config`` with the moved successors' ``state_bounds`` and ``terminal_bounds`` filled
    from the environment and the task (:func:`environment_state_bounds`,
    :func:`task_terminal_bounds`), each logged."""
    found = {"state_bounds": (environment_state_bounds(task, config, state_dim),
                              "the environment's observation space", "env_state_bounds"),
             "terminal_bounds": (task_terminal_bounds(task, config, state_dim),
                                 "the task's limits", "env_terminal_bounds")}
    for name, (bounds, source, switch) in found.items():
        if bounds is not None:
            logger.info("%s of the moved successors, from %s: low %s, high %s (%s=false turns "
                        "this off)", name.replace("_", " "), source, *bounds, switch)
            config = dataclasses.replace(config, nopg=dataclasses.replace(config.nopg,
                                                                          **{name: bounds}))
    return config


def _fit_once(task: Task, config: ExperimentConfig, data: TransitionDataset, bw: Bandwidths,
              s0: np.ndarray, seed: int, restart: int, log_path: Path, progress: bool,
              n_updates: int, tensorboard: Path | None = None
              ) -> tuple[NOPG, EvalCallback, PolicySnapshots | None]:
    """A fit from the policy initialisation of ``(seed, restart)``; restart 0 uses ``seed``.
    Also returns the evaluation callback and the policy snapshots (:func:`_snapshots`)."""
    torch.manual_seed(seed + 100_003 * restart)  # policy initialisation only
    policy = make_policy(task, config, data)
    algo = NOPG(policy, dataclasses.replace(config.nopg, seed=seed), stochastic=config.stochastic)
    evaluator = EvalCallback(
        lambda pol: float(np.mean(task.evaluate(pol, config, seed, config.eval_episodes))),
        every=config.eval_every)
    snapshots = _snapshots(config)
    _fit_with(algo, task, evaluator, tensorboard, snapshots, data, bw, s0, n_updates,
              log_path=log_path, progress=progress)
    return algo, evaluator, snapshots


def _snapshots(config: ExperimentConfig) -> PolicySnapshots | None:
    """The policy snapshots of a gradient fit (``snapshot_every`` updates apart, from
    ``snapshot_from`` of ``n_updates`` on); ``None`` when off or for ``optimizer="cma-es"``,
    whose search keeps its best candidate itself."""
    if config.snapshot_every is None or config.nopg.optimizer == "cma-es":
        return None
    return PolicySnapshots(config.snapshot_every,
                           int(math.ceil(config.snapshot_from * config.n_updates - 1e-9)))


def judge_for(task: Task, config: ExperimentConfig, data: TransitionDataset, bw: Bandwidths
              ) -> AnchoredBellman:
    """The judge of ``config``'s fits on ``data`` (:func:`nopg.policy_selection.judge_model`,
    with the task's bounds)."""
    judge_cfg = with_task_bounds(task, config.replace(**{"nopg.successors": "anchored"}),
                                 data.state_dim)
    return judge_model(data, bw, judge_cfg.nopg, config.stochastic)


def _keep_snapshot(config: ExperimentConfig, make_judge: Callable[[], AnchoredBellman],
                   algo: NOPG, snapshots: PolicySnapshots | None, s0: np.ndarray, seed: int,
                   label: str) -> tuple[dict[str, Any], JudgeScore | None]:
    """Load the judge's choice among ``algo``'s final policy and ``snapshots`` into ``algo``
    (:func:`nopg.snapshots.choose_snapshot`), logged; the record for the summary and the kept
    policy's score (empty and ``None`` without an earlier snapshot, where ``make_judge`` is
    not called)."""
    if snapshots is None or all(s.update == algo.update_ for s in snapshots.snapshots):
        return {}, None
    choice = choose_snapshot(make_judge(), algo, snapshots.snapshots, s0, judge_steps(config),
                             seed)
    kept, final = choice.kept_score, choice.scores[0]
    logger.info("seed %d%s: the judge keeps the policy of update %d of %d (forecast %.2f; the "
                "final policy's %.2f; %d snapshots from update %d)", seed, label, choice.update,
                choice.updates[0], kept.episode_return_mean, final.episode_return_mean,
                len(choice.updates) - 1, snapshots.start)
    return {"snapshot": choice.to_dict()}, kept


def model_episode_report(config: ExperimentConfig, algo: NOPG, seed: int) -> dict[str, Any]:
    """How long the anchored model's own episodes of the final policy last, from the fit's
    initial states, up to the evaluation's episode length (the task's ``eval_steps``), logged;
    a warning where they end before half of it on average: the model predicts a failure there
    that ``J_hat``'s discount may hide. Empty for other models and for tasks without
    ``eval_steps``."""
    steps = _eval_steps(config)
    if not isinstance(algo.model_, AnchoredBellman) or not steps:
        return {}
    lengths = algo.model_episode_lengths(int(steps))
    mean, shortest = float(np.mean(lengths)), int(np.min(lengths))
    message = (f"seed {seed}: the model's own episodes of the final policy last {mean:.1f} of the "
               f"evaluation's {steps} steps on average (shortest {shortest})")
    if mean < steps / 2:
        logger.warning("%s: the model predicts a failure there, which J_hat (discounted, gamma "
                       "%g) may not show", message, config.nopg.gamma)
    else:
        logger.info(message)
    return {"model_episode_steps_mean": mean, "model_episode_steps_min": shortest,
            "model_episode_steps_of": int(steps)}


def _seed_result(seed: int, data: TransitionDataset, algo: NOPG, returns: list[float],
                 runs: list[dict[str, Any]], bw: Bandwidths, plots: list[Path],
                 timings: dict[str, float]) -> dict[str, Any]:
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
        "restarts": [{"restart": run["restart"], "J_hat": run["J_hat"],
                      "support_gap": run["support_gap"],
                      "return_mean": _mean(run["returns"])} for run in runs],
    }


def _eval_steps(config: ExperimentConfig) -> Any:
    """The task's evaluation length (``eval_steps``), ``None`` where it names none."""
    return config.task.get("eval_steps") if isinstance(config.task, Mapping) else None


def judge_steps(config: ExperimentConfig) -> int:
    """How many steps the judge counts a policy's episodes up to: the task's evaluation length
    (``eval_steps``), else ``10 / (1 - gamma)``."""
    steps = _eval_steps(config)
    return int(steps) if steps else discount_horizon(config.nopg.gamma)


def _fit_recipe(task: Task, config: ExperimentConfig, name: str, data: TransitionDataset,
                bw: Bandwidths, s0: np.ndarray, seed: int, out_dir: Path, progress: bool,
                tensorboard: bool, judge: AnchoredBellman) -> dict[str, Any]:
    """Recipe ``name``'s fit of a seed (restart 0's initialisation, the judge's choice among its
    snapshots), evaluated and scored by ``judge``: the fit's record for :func:`_fit_recipes`."""
    rconfig = with_task_bounds(task, apply_recipe(config, name), data.state_dim)
    log_path, steps = out_dir / f"log_{name}.csv", judge_steps(config)
    board = out_dir / "tensorboard" / name if tensorboard else None
    fit_start = time.perf_counter()
    algo, _, snapshots = _fit_once(task, rconfig, data, bw, s0, seed, 0, log_path, progress,
                                   rconfig.n_updates, board)
    record, kept_score = _keep_snapshot(rconfig, lambda: judge, algo, snapshots, s0, seed,
                                        f" recipe {name}")
    seconds = time.perf_counter() - fit_start
    returns = task.evaluate(algo.policy, rconfig, seed, rconfig.final_eval_episodes)
    score: JudgeScore = kept_score or score_policy(judge, algo.policy, s0, steps, seed)
    logger.info("seed %d recipe %s: return %s, J_hat %.4f (its own model); the judge: "
                "return %.2f over %d steps (episodes %.1f steps, shortest %d), J_hat %.4f "
                "(support gap %.3f); %.1f s", seed, name, _format_return(_mean(returns)),
                algo.J_hat(), score.episode_return_mean, steps, score.episode_steps_mean,
                score.episode_steps_min, score.J_hat, score.support_gap, seconds)
    return {"recipe": name, "algo": algo, "config": rconfig, "returns": returns,
            "score": score, "log": log_path, "fit_time_s": seconds, **record}


def _escalates(first: Mapping[str, Any], name: str, gamma: float, seed: int) -> dict[str, Any]:
    """Whether ``auto`` escalates to recipe ``name`` after the ``first`` fit
    (:func:`nopg.experiments.recipes.gains_nothing`), logged; the record for the summary."""
    score: JudgeScore = first["score"]
    fitted = gains_nothing(score, gamma)
    per_step, discounted = reward_rates(score, gamma)
    logger.info("seed %d: the judge forecasts %.4f a step over %d steps for recipe %s's policy "
                "against %.4f a step discounted: %s", seed, per_step, score.steps,
                first["recipe"], discounted,
                f"no gain along its episodes, recipe {name} is fitted too" if fitted else
                f"it gains along its episodes, recipe {name} is not fitted")
    return {"recipe": name, "fitted": fitted, "reward_per_step": per_step,
            "discounted_reward_per_step": discounted}


def _fit_recipes(task: Task, config: ExperimentConfig, data: TransitionDataset, bw: Bandwidths,
                 s0: np.ndarray, seed: int, out_dir: Path, progress: bool, tensorboard: bool,
                 escalate: bool = False
                 ) -> tuple[NOPG, list[float], float, ExperimentConfig, dict[str, Any]]:
    """Fit every recipe of ``config.recipes`` (each from the seed's own initialisation, so that
    each fit is the one its recipe gives alone), score the final policies under one anchored
    model (:mod:`nopg.policy_selection`) and keep the best; the kept recipe's log becomes
    ``log.csv``, the others' fits are saved to ``checkpoint_<recipe>``. With ``escalate``
    (``auto``'s escalation, :func:`nopg.experiments.recipes.escalation`) the second recipe is
    fitted only where the judge forecasts that the first one's policy gains nothing along its
    episodes. Returns the kept fit, its evaluation returns, the fits' time, its configuration
    and the summary's record: the kept recipe, one row per recipe fitted (the kept one first)
    and, with ``escalate``, whether the second was fitted."""
    judge = judge_for(task, config, data, bw)
    fits: list[dict[str, Any]] = []
    extra: dict[str, Any] = {}
    for name in config.recipes:
        if escalate and fits:
            extra["escalation"] = _escalates(fits[0], name, config.nopg.gamma, seed)
            if not extra["escalation"]["fitted"]:
                break
        fits.append(_fit_recipe(task, config, name, data, bw, s0, seed, out_dir, progress,
                                tensorboard, judge))
    kept = fits[best_score([f["score"] for f in fits])]
    if len(fits) > 1:
        logger.info("seed %d: the judge keeps recipe %s", seed, kept["recipe"])
    shutil.copyfile(kept["log"], out_dir / "log.csv")
    for f in fits:                 # the others stay inspectable (the kept one: checkpoint/)
        if f is not kept:
            f["algo"].save(out_dir / f"checkpoint_{f['recipe']}")
    rows = [{"recipe": f["recipe"], "kept": f is kept, "return_mean": _mean(f["returns"]),
             "J_hat": f["algo"].J_hat(), "support_gap": f["algo"].support_gap_,
             "fit_time_s": f["fit_time_s"], "judge": f["score"].to_dict(),
             **({"snapshot": f["snapshot"]} if "snapshot" in f else {})}
            for f in sorted(fits, key=lambda f: f is not kept)]
    fit_time = sum(f["fit_time_s"] for f in fits)
    return (kept["algo"], kept["returns"], fit_time, kept["config"],
            {"recipe": kept["recipe"], "recipes": rows, **extra})


def run_seed(task: Task, config: ExperimentConfig, seed: int, out_dir: Path,
             progress: bool = True, tensorboard: bool = False) -> dict[str, Any]:
    """Collect data, select bandwidths, optimise, evaluate and plot for one seed.

    With ``tensorboard``, every update's metrics also go to ``out_dir/tensorboard`` (one
    sub-folder per restart when there are several).

    With ``config.restarts > 1`` the fit is repeated from other policy initialisations for
    ``config.restart_updates`` updates (all of them by default), the run with the highest ``J_hat``
    is kept and continued to ``n_updates``. Every restart's ``J_hat`` and evaluation return at the
    choice are recorded, for checking that ``J_hat`` ranks them.

    With several ``config.recipes`` (:mod:`nopg.experiments.recipes`) each recipe is fitted
    (restart 0's initialisation each) and the judge of :mod:`nopg.policy_selection`, one
    anchored model of the data, keeps one: every recipe's return, ``J_hat`` and judge's score
    are recorded under ``recipes``. Where ``auto`` escalates
    (:func:`nopg.experiments.recipes.escalation`), ``given`` is fitted first and the second
    recipe only where the judge forecasts that ``given``'s policy gains nothing along its
    episodes; the test's figures are recorded under ``escalation``.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    data = task.make_dataset(config, seed)
    bw, bw_time = _bandwidths(data, config, seed, out_dir)
    s0 = task.initial_states(data, config, seed)
    logger.info("seed %d: %r; bandwidths state=%s action=%s", seed, data,
                np.round(bw.state, 4).tolist(), np.round(bw.action, 4).tolist())
    recipes = resolve_recipes(config.recipes, data, config.nopg.gamma, len(s0), config.restarts)
    escalate = escalation(config.recipes, data, len(s0), config.restarts)
    if recipes != tuple(config.recipes):                      # "auto", chosen by the data
        failing = ends_in_failure(data, config.nopg.gamma)
        logger.info("seed %d: recipes %s = %s%s (%d transitions, episodes that %s in failures, "
                    "%d initial states, %d restart(s))", seed, ", ".join(config.recipes),
                    ", ".join(recipes), "" if escalate is None else
                    f", then {escalate} where its policy gains nothing along its episodes",
                    len(data), "end" if failing else "do not end", len(s0), config.restarts)
        config = config.replace(recipes=recipes + ((escalate,) if escalate else ()))
    elif "stabilise" in recipes and not ends_in_failure(data, config.nopg.gamma):
        logger.warning("seed %d: recipe stabilise on data whose episodes do not end in failures: "
                       "it ranks policies by how long their episodes last, which prefers never "
                       "reaching a goal, and the judge's forecast can count a goal's reward "
                       "more than once (docs/bandwidths.md); 'auto' fits given alone here", seed)
    if len(config.recipes) > 1:
        algo, returns, fit_time, config, extra = _fit_recipes(
            task, config, data, bw, s0, seed, out_dir, progress, tensorboard,
            escalate=escalate is not None)
        return _finish_seed(task, config, seed, out_dir, data, algo, returns, [], bw, bw_time,
                            start, fit_time, extra)
    config = with_task_bounds(task, apply_recipe(config, config.recipes[0]), data.state_dim)
    algo, returns, runs, fit_time, extra = _fit_restarts(task, config, data, bw, s0, seed, out_dir,
                                                         progress, tensorboard)
    return _finish_seed(task, config, seed, out_dir, data, algo, returns, runs, bw, bw_time, start,
                        fit_time, extra)


def _fit_restarts(task: Task, config: ExperimentConfig, data: TransitionDataset, bw: Bandwidths,
                  s0: np.ndarray, seed: int, out_dir: Path, progress: bool, tensorboard: bool
                  ) -> tuple[NOPG, list[float], list[dict[str, Any]], float, dict[str, Any]]:
    """One recipe's fit of a seed with ``config.restarts`` restarts (:func:`run_seed`), then the
    judge's choice among the kept fit's snapshots: the kept fit, its evaluation returns, the
    restarts' records, the fits' time (with their periodic evaluations and the choice) and the
    choice's record for the summary."""
    fit_time, runs = 0.0, []
    first = config.n_updates if config.restarts == 1 else \
        min(config.restart_updates or config.n_updates, config.n_updates)
    for r in range(config.restarts):
        log_path = out_dir / ("log.csv" if config.restarts == 1 else f"log_restart{r}.csv")
        fit_start = time.perf_counter()
        board = None if not tensorboard else \
            out_dir / "tensorboard" / ("" if config.restarts == 1 else f"restart{r}")
        algo, evaluator, snapshots = _fit_once(task, config, data, bw, s0, seed, r, log_path,
                                               progress, first, board)
        fit_time += time.perf_counter() - fit_start
        returns = task.evaluate(algo.policy, config, seed, config.final_eval_episodes)
        runs.append({"restart": r, "algo": algo, "evaluator": evaluator, "returns": returns,
                     "board": board, "snapshots": snapshots,
                     "J_hat": algo.J_hat(), "support_gap": algo.support_gap_, "log": log_path})
        logger.info("seed %d restart %d after %d updates: J_hat %.4f (support gap %.3f), "
                    "return %s", seed, r, first, algo.J_hat(), algo.support_gap_,
                    _format_return(_mean(returns)))
    chosen = max(runs, key=lambda run: run["J_hat"])
    algo, returns, snapshots = chosen["algo"], chosen["returns"], chosen["snapshots"]
    fit_start = time.perf_counter()
    continued = config.restarts > 1 and first < config.n_updates
    if config.restarts > 1:
        logger.info("seed %d: restart %d has the highest J_hat and is kept", seed, chosen["restart"])
        if continued:
            _fit_with(algo, task, chosen["evaluator"], chosen["board"], snapshots, data, bw, s0,
                      config.n_updates - first, log_path=chosen["log"], progress=progress)
        shutil.copyfile(chosen["log"], out_dir / "log.csv")
    record, _ = _keep_snapshot(config, lambda: judge_for(task, config, data, bw), algo,
                               snapshots, s0, seed, "")
    fit_time += time.perf_counter() - fit_start
    if continued or (record and not record["snapshot"]["kept_final"]):
        returns = task.evaluate(algo.policy, config, seed, config.final_eval_episodes)
    return algo, returns, runs, fit_time, record


def _finish_seed(task: Task, config: ExperimentConfig, seed: int, out_dir: Path,
                 data: TransitionDataset, algo: NOPG, returns: list[float],
                 runs: list[dict[str, Any]], bw: Bandwidths, bw_time: float, start: float,
                 fit_time: float, extra: dict[str, Any]) -> dict[str, Any]:
    """Save, plot and summarise the kept fit of a seed (its ``log.csv`` already written)."""
    algo.save(out_dir / "checkpoint")
    plot_learning_curve(out_dir / "log.csv", out_dir / "learning_curve.png",
                        title=f"{task.name} seed {seed}")
    plots = task.plot(algo, data, config, out_dir)
    timings = {"bandwidth_time_s": bw_time, "wall_time_s": time.perf_counter() - start,
               "fit_time_s": fit_time}
    result = _seed_result(seed, data, algo, returns, runs, bw, plots, timings)
    result.update(extra)
    result.update(model_episode_report(config, algo, seed))
    logger.info("seed %d: return %s, J_hat %.4f (support gap %.3f, initial gap %.3f), %.1f s "
                "(%.2f ms/update)", seed, _format_return(result["return_mean"]), result["J_hat"],
                result["support_gap"], result["initial_gap"],
                result["wall_time_s"],
                1e3 * (result["time_per_update_s"] or 0.0))
    return result


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
