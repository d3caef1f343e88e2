"""User-data experiments: data sets nobody tuned NOPG for, run with the library's defaults.

Four tasks (``nopg reproduce <name>``; ``scripts/make_user_data.py`` saves their data sets):

* ``pendulum-uniform`` and ``pendulum-controller``: see :mod:`nopg.experiments.user_data_pendulum`.
* ``mountaincar-uniform``: gymnasium ``MountainCarContinuous-v0`` queried at ``task.n_samples``
  (default 3000) independent states ``x ~ U(-1.2, 0.6)``, ``v ~ U(-0.07, 0.07)`` with actions
  ``U(-1, 1)`` (``numpy.random.default_rng([seed, 1])``): the env's state is set, the env is
  stepped once, and its own reward (``+100`` at the goal, ``-0.1 a^2``) and ``terminated`` (goal
  reached) are recorded. Every transition is its own one-step episode (``episode_ids =
  arange(n)``; a truncation wherever it is not terminal), so no two transitions are chained.
  Objective's initial states: ``task.n_initial_states`` (15) observations of ``env.reset(seed=1000
  seed + k)``. Evaluation: undiscounted env return of 999-step episodes from ``reset(seed=10000 +
  100 seed + k)``; the fraction of episodes that reach the goal (``x >= 0.45``) is logged and,
  with the returns and lengths, written to ``seed_<k>/evaluation.json``.
* ``invertedpendulum-random``: gymnasium MuJoCo ``InvertedPendulum-v5`` (4-D state ``[cart x,
  pole angle, their velocities]``, 1-D force in ``[-3, 3]``, reward 1 per step while ``|angle| <=
  0.2``), ``task.n_samples`` (5000) transitions of uniformly random actions in episode after
  episode (first ``reset(seed=seed)``, later resets continue its generator); the env's
  ``terminated`` (the pole fell) is stored as a terminal, the ``task.episode_length`` (1000)
  step limit and the end of the data as truncations. Initial states: ``task.n_initial_states``
  (15) reset observations (one reset seeded ``10000 + seed``, then continued). Evaluation:
  undiscounted return (at most 1000) of episodes from ``reset(seed=1000000 + 1000 seed + k)``;
  returns, lengths and falls go to ``seed_<k>/evaluation.json``.

Settings (all four): gamma 0.99, 1 x 50 ReLU MLP with ``a_max tanh`` output (``a_max`` the env's
action bound: 2, 2, 1, 3), Adam 1e-2, 1500 updates, ``auto`` bandwidths with state and action
factors 1, ``top_k = 10``, ``solver = "bicgstab"``, evaluation every 100 updates (2 episodes,
10 for the final evaluation on the two tasks with random resets).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from torch import nn

from ..data.dataset import TransitionDataset
from ..envs.evaluation import collect_episodes, rollouts
from ..envs.mountaincar import (
    GOAL_POSITION,
    MAX_POSITION,
    MAX_SPEED,
    MIN_POSITION,
    make_mountaincar_env,
    reset_states,
)
from ..train.algorithm import NOPG
from ..viz.mountaincar_plots import plot_mountaincar_run
from .common import TaskSettings, task_settings
from .runner import ExperimentConfig
from .task_base import EnvironmentTask
from .user_data_pendulum import (
    PendulumControllerTask,
    PendulumUniformTask,
    check_count,
    user_data_config,
)

logger = logging.getLogger("nopg.experiments")

__all__ = ["INVERTED_PENDULUM_ENV_ID", "POLE_ANGLE_LIMIT", "USER_DATA_TASKS",
           "InvertedPendulumRandomSettings", "InvertedPendulumRandomTask",
           "MountainCarUniformSettings", "MountainCarUniformTask",
           "PendulumControllerTask", "PendulumUniformTask",
           "collect_invertedpendulum_random", "collect_mountaincar_uniform",
           "make_invertedpendulum_env"]

INVERTED_PENDULUM_ENV_ID = "InvertedPendulum-v5"
POLE_ANGLE_LIMIT = 0.2
"""``InvertedPendulum-v5`` terminates where ``|angle| > 0.2`` rad (gymnasium's source)."""


def _default_config(task: TaskSettings) -> ExperimentConfig:
    return user_data_config(task, eval_episodes=2, final_eval_episodes=10)


# ------------------------------------------------------------------------------ mountain car
def collect_mountaincar_uniform(n_samples: int, seed: int) -> TransitionDataset:
    """One-step ``MountainCarContinuous-v0`` transitions from uniform states and actions.

    States ``U([-1.2, 0.6] x [-0.07, 0.07])`` and actions ``U(-1, 1)`` from
    ``numpy.random.default_rng([seed, 1])``. ``next_states`` are the env's (float32)
    observations; ``terminals`` its ``terminated``; every transition is its own episode.
    """
    n = check_count("n_samples", n_samples)
    rng = np.random.default_rng([int(seed), 1])
    states = np.column_stack([rng.uniform(MIN_POSITION, MAX_POSITION, n),
                              rng.uniform(-MAX_SPEED, MAX_SPEED, n)])
    actions = rng.uniform(-1.0, 1.0, (n, 1))
    next_states, rewards = np.empty((n, 2)), np.empty(n)
    terminals = np.zeros(n, dtype=bool)
    env = make_mountaincar_env(max_episode_steps=n)
    try:
        env.reset(seed=int(seed))
        for i in range(n):
            env.unwrapped.state = states[i].copy()
            obs, reward, terminated, _, _ = env.step(actions[i].copy())
            next_states[i], rewards[i], terminals[i] = obs, float(reward), bool(terminated)
    finally:
        env.close()
    return TransitionDataset(states=states, actions=actions, rewards=rewards,
                             next_states=next_states, terminals=terminals,
                             truncations=~terminals, episode_ids=np.arange(n))


@task_settings
class MountainCarUniformSettings(TaskSettings):
    """``task.<name>`` settings of mountaincar-uniform."""

    n_samples: int = 3000              # one-step transitions
    n_initial_states: int = 15         # the objective's initial states, from reset()
    eval_steps: int = 999              # evaluation episode length
    portrait_resolution: int = 80      # grid of the phase portraits, per axis


class MountainCarUniformTask(EnvironmentTask, name="mountaincar-uniform", state_dim=2, action_dim=1,
                             action_max=1.0):
    """Mountain car from one-step transitions at uniformly random states and actions (user data)."""

    def default_config(self) -> ExperimentConfig:
        return _default_config(MountainCarUniformSettings())

    def make_dataset(self, config: ExperimentConfig, seed: int) -> TransitionDataset:
        return collect_mountaincar_uniform(config.task["n_samples"], seed)

    def initial_states(self, data: TransitionDataset, config: ExperimentConfig, seed: int
                       ) -> np.ndarray:
        return reset_states(check_count("n_initial_states", config.task["n_initial_states"]),
                            seed=1000 * seed)

    def env_fn(self, config: ExperimentConfig) -> Callable[[], Any]:
        steps = check_count("eval_steps", config.task["eval_steps"])
        return lambda: make_mountaincar_env(steps)

    def evaluate(self, policy: nn.Module, config: ExperimentConfig, seed: int, episodes: int
                 ) -> list[float]:
        """Returns, lengths and goal reaching of episodes from ``reset(seed=10_000 + 100 seed + k)``."""
        done = rollouts(self.env_fn(config)(), policy, episodes, 10_000 + 100 * seed)
        returns, lengths = [ep["return"] for ep in done], [ep["length"] for ep in done]
        success = [bool(ep["states"][:, 0].max() >= GOAL_POSITION) for ep in done]
        rate = float(np.mean(success))
        logger.info("%s seed %d: %d evaluation episodes, return %.1f, reached the goal in %d "
                    "(success rate %.2f)", self.name, seed, len(returns), np.mean(returns),
                    sum(success), rate)
        return self.record({"returns": returns, "lengths": lengths, "reached_goal": success,
                            "success_rate": rate})

    def plot(self, algo: NOPG, data: TransitionDataset, config: ExperimentConfig, out_dir: Path
             ) -> list[Path]:
        """``evaluation.json`` (the last evaluation) and the phase portraits."""
        paths, _ = self.write_evaluation(out_dir, data_summary=data.summary())
        paths.append(plot_mountaincar_run(algo, data, out_dir / "phase_portraits.png",
                                          f"uniform one-step data (n = {data.n})",
                                          resolution=int(config.task["portrait_resolution"]),
                                          data_style="points"))
        return paths


# -------------------------------------------------------------------------- inverted pendulum
def make_invertedpendulum_env(max_episode_steps: int = 1000) -> Any:
    """gymnasium's MuJoCo ``InvertedPendulum-v5`` (headless) with a time limit."""
    import gymnasium as gym

    return gym.make(INVERTED_PENDULUM_ENV_ID,
                    max_episode_steps=check_count("episode_length", max_episode_steps))


def collect_invertedpendulum_random(n_samples: int, seed: int, episode_length: int = 1000
                                    ) -> TransitionDataset:
    """``n_samples`` ``InvertedPendulum-v5`` transitions of uniform random actions in ``[-3, 3]``.

    Episode after episode: the first reset is seeded with ``seed``, the actions draw from
    ``numpy.random.default_rng([seed, 1])``. ``terminals`` where the pole fell (the env's
    ``terminated``), ``truncations`` at the time limit and on the last transition if the data
    end mid-episode, ``episode_ids``.
    """
    n = check_count("n_samples", n_samples)
    rng = np.random.default_rng([int(seed), 1])
    env = make_invertedpendulum_env(episode_length)
    low, high = env.action_space.low.astype(np.float64), env.action_space.high.astype(np.float64)
    return collect_episodes(env, n, lambda obs: rng.uniform(low, high), int(seed))


@task_settings
class InvertedPendulumRandomSettings(TaskSettings):
    """``task.<name>`` settings of invertedpendulum-random."""

    n_samples: int = 5000              # transitions in all
    episode_length: int = 1000         # data episode length at most (truncation)
    n_initial_states: int = 15         # the objective's initial states, from reset()
    eval_steps: int = 1000             # evaluation episode length


class InvertedPendulumRandomTask(EnvironmentTask, name="invertedpendulum-random", state_dim=4,
                                 action_dim=1, action_max=3.0):
    """MuJoCo inverted pendulum from episodes of uniformly random forces (user data)."""

    def default_config(self) -> ExperimentConfig:
        return _default_config(InvertedPendulumRandomSettings())

    def make_dataset(self, config: ExperimentConfig, seed: int) -> TransitionDataset:
        t = config.task
        return collect_invertedpendulum_random(t["n_samples"], seed,
                                               episode_length=t["episode_length"])

    def env_fn(self, config: ExperimentConfig) -> Callable[[], Any]:
        steps = config.task["eval_steps"]
        return lambda: make_invertedpendulum_env(steps)

    def initial_states(self, data: TransitionDataset, config: ExperimentConfig, seed: int
                       ) -> np.ndarray:
        check_count("n_initial_states", config.task["n_initial_states"])
        return super().initial_states(data, config, seed)

    def terminal_bounds(self, config: ExperimentConfig) -> list[list[float | None]]:
        """``InvertedPendulum-v5`` ends an episode where the pole's angle (observation 1) leaves
        ``[-0.2, 0.2]`` rad: the moved successors' ``nopg.model.terminal_bounds``. (The cart's rail,
        ``[-1, 1]`` m, is a joint limit that stops the cart, not an end.)"""
        return [[None, -POLE_ANGLE_LIMIT, None, None], [None, POLE_ANGLE_LIMIT, None, None]]

    def plot(self, algo: NOPG, data: TransitionDataset, config: ExperimentConfig, out_dir: Path
             ) -> list[Path]:
        """``evaluation.json``: the last evaluation's returns, lengths and falls."""
        paths, summary = self.write_evaluation(out_dir, data_summary=data.summary())
        if summary is not None:
            logger.info("%s: %d evaluation episodes, return %.1f ± %.1f, %d fell (data episodes: "
                        "mean length %.1f)", self.name, summary["episodes"],
                        summary["return_mean"], summary["return_std"], sum(summary["fell"]),
                        data.n / data.n_episodes)
        return paths


USER_DATA_TASKS: tuple[type, ...] = (PendulumUniformTask, PendulumControllerTask,
                                     MountainCarUniformTask, InvertedPendulumRandomTask)
"""The four user-data tasks, registered in :data:`nopg.experiments.TASKS`."""
