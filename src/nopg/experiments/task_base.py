"""Scaffolding the experiment tasks share, so that each task module keeps only what is its own.

* :class:`TaskBase`: the class statement of a task names it and its spaces,
  ``class HopperTask(EnvironmentTask, name="hopper", state_dim=11, action_dim=3, action_max=1.0)``.
* :func:`task_config`: an :class:`~nopg.experiments.runner.ExperimentConfig` with the settings
  most of the paper's tasks share (gamma 0.99, a 1 x 50 ReLU MLP, Adam at 1e-2, ``auto``
  bandwidths with factors 1, 3 Monte-Carlo next states drawn at every update, a dense ``P`` up
  to 2000 samples) and the task's own on top; :func:`d4rl_task_config` adds those of the
  paper's D4RL tasks.
* :class:`EnvironmentTask`: a task evaluated by rolling its policy out in a gymnasium
  environment from the environment's reset distribution. It draws the objective's initial
  states from that distribution (reset seeds ``10_000 + seed``), evaluates from reset seeds
  ``1_000_000 + 1000 seed + k``, keeps the last evaluation's episodes and writes them, with
  their mean and spread, to ``seed_<k>/evaluation.json``. A subclass gives its environment
  (:meth:`EnvironmentTask.env_fn`), data and figures.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from torch import nn

from ..data.dataset import TransitionDataset
from ..envs.evaluation import evaluate_episodes
from ..model.defaults import AUTO_MC_NEXT
from ..train.config import NOPGConfig
from .common import TaskSettings, load_external_dataset, sample_reset_states
from .runner import ExperimentConfig

if TYPE_CHECKING:
    import gymnasium as gym

__all__ = ["EVALUATION_FILE", "EnvironmentTask", "TaskBase", "d4rl_task_config", "evaluation_summary",
           "task_config"]

EVALUATION_FILE = "evaluation.json"
"""The file (in ``seed_<k>/``) that holds the last evaluation's episodes and their summary."""

_PAPER_NOPG = {"gamma": 0.99, "optimizer.learning_rate": 1e-2, "model.top_k": None,
               "model.dense_max_n": 2000, "model.n_mc_next": AUTO_MC_NEXT,
               "behaviour.n_mc_next": None}
_PAPER_RUN = {"n_updates": 1500, "bandwidth_method": "auto", "state_factor": 1.0,
              "action_factor": 1.0, "hidden": (50,), "sigma_max": 1.0, "eval_every": 100}
_PAPER_D4RL_NOPG = {"optimizer.learning_rate": 3e-4, "model.n_mc_policy": 1,
                    "model.n_mc_next": None}
_PAPER_D4RL_RUN = {"n_updates": 5000, "eval_every": 500}


class TaskBase:
    """Base of the experiment tasks: the class statement gives the task's name and spaces.

    ``class HopperTask(EnvironmentTask, name="hopper", state_dim=11, action_dim=3,
    action_max=1.0)`` sets the class attributes ``name``, ``state_dim``, ``action_dim`` and
    ``action_max`` (:class:`~nopg.experiments.runner.Task`); a subclass keeps those it does not
    give.
    """

    name: str
    state_dim: int
    action_dim: int
    action_max: float

    def __init_subclass__(cls, *, name: str | None = None, state_dim: int | None = None,
                          action_dim: int | None = None, action_max: float | None = None,
                          **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        declared = {"name": name, "state_dim": state_dim, "action_dim": action_dim,
                    "action_max": action_max}
        for attribute, value in declared.items():
            if value is not None:
                setattr(cls, attribute, value)


def task_config(task: TaskSettings | dict[str, Any], nopg: dict[str, Any] | None = None,
                **settings: Any) -> ExperimentConfig:
    """The shared experiment settings with a task's own.

    Parameters
    ----------
    task : TaskSettings or dict
        The task's settings (``config.task``).
    nopg : dict, optional
        :class:`~nopg.NOPGConfig` settings by path (:meth:`~nopg.NOPGConfig.replace`) that
        differ from the shared ones (gamma 0.99, learning rate 1e-2, ``model.top_k=None``,
        ``model.dense_max_n=2000``, ``model.n_mc_next=3``, the library's ``auto`` value below
        10^5 samples pinned, and the kernel mean while the behaviour term is on,
        ``behaviour.n_mc_next=None``).
    **settings
        :class:`~nopg.experiments.runner.ExperimentConfig` fields that differ from the shared
        ones (``auto`` bandwidths, factors 1, hidden ``(50,)``, ``sigma_max`` 1, evaluation
        every 100 updates).
    """
    return ExperimentConfig(**{**_PAPER_RUN, **settings},
                            nopg=NOPGConfig().replace(**{**_PAPER_NOPG, **(nopg or {})}),
                            task=task)


def d4rl_task_config(task: TaskSettings | dict[str, Any], nopg: dict[str, Any] | None = None,
                     **settings: Any) -> ExperimentConfig:
    """:func:`task_config` with the settings the paper gives its D4RL tasks (Hopper, U-Maze):
    Adam at 3e-4, ``N_pi = 1``, kernel-mean next states, 5000 updates, evaluation every 500
    updates; ``nopg`` and ``settings`` as for :func:`task_config` (bandwidths: ``auto``, as every
    task; the paper's Silverman factors are a documented option of each task).

    The kernel mean (the paper's ``N_phi = 1``) is kept here because these tasks' results were
    measured with it; the Monte-Carlo next states of the other tasks were not measured on them.
    """
    return task_config(task, nopg={**_PAPER_D4RL_NOPG, **(nopg or {})},
                       **{**_PAPER_D4RL_RUN, **settings})


def evaluation_summary(evaluation: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """An evaluation's episodes with their mean return and spread (and mean length, when the
    episodes' lengths are recorded), the episode count and ``extra`` entries."""
    returns = evaluation["returns"]
    summary = {**evaluation, "return_mean": float(np.mean(returns)),
               "return_std": float(np.std(returns))}
    if "lengths" in evaluation:
        summary["length_mean"] = float(np.mean(evaluation["lengths"]))
    return {**summary, "episodes": len(returns), **extra}


class EnvironmentTask(TaskBase):
    """Base of the tasks evaluated in a gymnasium environment from its reset distribution.

    Subclasses declare their name and spaces (:class:`TaskBase`) and define :meth:`env_fn`,
    ``default_config``, ``make_dataset`` and ``plot`` (which may call :meth:`write_evaluation`);
    they may replace :meth:`evaluate` (calling :meth:`record`).
    """

    def __init__(self) -> None:
        self._last_eval: dict[str, Any] | None = None

    def env_fn(self, config: ExperimentConfig) -> Callable[[], gym.Env]:
        """A function that makes the evaluation environment for ``config``."""
        raise NotImplementedError

    def observation_space(self, config: ExperimentConfig) -> gym.Space:
        """The evaluation environment's observation space (its bounds become the moved
        successors' ``state_bounds``: :func:`~nopg.experiments.runner.environment_state_bounds`)."""
        env = self.env_fn(config)()
        try:
            return env.observation_space
        finally:
            env.close()

    def external_dataset(self, spec: str, label: str, minari_obs_keys: str | None = None,
                         state_layout: str = "") -> TransitionDataset:
        """The local data set ``spec`` (:func:`~nopg.experiments.common.load_external_dataset`),
        refused unless its states and actions have the task's dimensions (the message calls it
        "the ``label`` data set", its states ``state_layout``, e.g. ``" [x, y, vx, vy]"``)."""
        data = load_external_dataset(spec, minari_obs_keys=minari_obs_keys)
        if data.state_dim != self.state_dim or data.action_dim != self.action_dim:
            raise ValueError(f"the {label} data set must have {self.state_dim}-D states"
                             f"{state_layout} and {self.action_dim}-D actions; {spec} has "
                             f"{data.state_dim}-D states and {data.action_dim}-D actions")
        return data

    def record(self, evaluation: dict[str, Any]) -> list[float]:
        """Keep ``evaluation`` as the last one; returns its ``returns``."""
        self._last_eval = evaluation
        return evaluation["returns"]

    def initial_states(self, data: TransitionDataset, config: ExperimentConfig, seed: int
                       ) -> np.ndarray:
        """``task.n_initial_states`` states of the reset distribution (seeds apart from the
        evaluation's)."""
        return sample_reset_states(self.env_fn(config), config.task["n_initial_states"],
                                   seed=10_000 + seed)

    def evaluate(self, policy: nn.Module, config: ExperimentConfig, seed: int, episodes: int
                 ) -> list[float]:
        """Returns, lengths and falls of ``episodes`` episodes
        (:func:`nopg.envs.evaluation.evaluate_episodes`)."""
        return self.record(evaluate_episodes(self.env_fn(config)(), policy, episodes,
                                             seed=1_000_000 + 1000 * seed))

    def write_evaluation(self, out_dir: Path, **extra: Any
                         ) -> tuple[list[Path], dict[str, Any] | None]:
        """Write the last evaluation's :func:`evaluation_summary` to ``out_dir/evaluation.json``.

        Returns the written paths (none without an evaluation) and the summary (or ``None``).
        """
        if self._last_eval is None:
            return [], None
        summary = evaluation_summary(self._last_eval, **extra)
        path = Path(out_dir) / EVALUATION_FILE
        path.write_text(json.dumps(summary, indent=2))
        return [path], summary
