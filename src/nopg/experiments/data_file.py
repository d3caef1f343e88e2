"""NOPG on a user's own data file (``nopg fit DATA``), as a :class:`~nopg.experiments.Task`.

The data come from :func:`nopg.data.formats.load_dataset` (``.npz``, ``.hdf5``/``.h5`` in the D4RL
layout, or ``minari:<id>``) and are the same for every seed; seeds change the policy
initialisation, the bandwidth selection's subsample and the Monte-Carlo noise.

* **Initial states** (the states the objective ``J`` averages over): the states that start the
  data's episodes (:meth:`~nopg.data.dataset.TransitionDataset.episode_start_states`) unless a file gives
  them (:func:`load_initial_states`). Data without episode structure (every transition its own
  episode) therefore average over all data states; give a file when the policy should be judged
  from particular states.
* **Action bound** of the ``a_max * tanh`` policy: the environment's action space when an
  environment is given (the largest ``|low|``, ``|high|`` per dimension), otherwise the largest
  ``|a|`` in the data per dimension.
* **Evaluation** (optional): with a gymnasium environment id, the undiscounted return of
  ``final_eval_episodes`` episodes from ``env.reset(seed=10_000 + 1000 seed + k)``, and of
  ``eval_episodes`` every ``eval_every`` updates. Without one, only ``J_hat`` and the support
  gap judge the policy.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from torch import nn

from ..data.dataset import TransitionDataset
from ..data.formats import load_dataset
from ..envs.evaluation import evaluate_policy, make_env
from ..model.bellman import as_states
from ..model.config import plain_bounds
from ..train.algorithm import NOPG
from ..viz.policy_plots import plot_policy_actions
from .common import TaskSettings, task_settings
from .runner import ExperimentConfig

__all__ = ["DataFileTask", "FitSettings", "fit_config", "load_initial_states"]


@task_settings
class FitSettings(TaskSettings):
    """``task.<name>`` settings of ``nopg fit``."""

    eval_steps: int | None = None      # evaluation episode length cap (null: the env's)


def fit_config(**task: Any) -> ExperimentConfig:
    """The defaults of ``nopg fit``: the method's (:class:`nopg.MethodConfig`), one seed, and
    the evaluation's; ``task`` changes its :class:`FitSettings`."""
    return ExperimentConfig(seeds=(0,), eval_every=100, eval_episodes=2, final_eval_episodes=10,
                            task=FitSettings()).replace(task=task)


def load_initial_states(path: str | Path, state_dim: int) -> np.ndarray:
    """Initial states from ``.npy``, ``.npz`` (key ``initial_states`` or ``states``, else the
    only array) or a text file (``.csv`` comma-separated, anything else whitespace-separated).

    Returns
    -------
    ndarray of shape (m, state_dim)

    Raises
    ------
    ValueError
        If the file is missing or unreadable, or does not hold a finite ``(m, state_dim)`` array.
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"initial-states file {path} does not exist")
    try:
        if path.suffix == ".npy":
            states = np.load(path, allow_pickle=False)
        elif path.suffix == ".npz":
            with np.load(path, allow_pickle=False) as content:
                names = content.files
                keys = [k for k in ("initial_states", "states") if k in names]
                if keys:
                    states = content[keys[0]]
                elif len(names) == 1:
                    states = content[names[0]]
                else:
                    states = None
        else:
            states = np.loadtxt(path, delimiter="," if path.suffix == ".csv" else None, ndmin=2)
    except (OSError, ValueError) as err:
        raise ValueError(f"cannot read initial states from {path}: {err}") from None
    if states is None:
        raise ValueError(f"initial-states file {path} holds {names}; name the array "
                         "'initial_states' or 'states'")
    return as_states(states, state_dim, f"initial states in {path}")


def _user_bounds(kind: str, bounds: Sequence[Sequence[float | None]] | None, state_dim: int
                 ) -> list[list[float | None]] | None:
    """``[low, high]`` of ``state_dim`` entries each (``None`` or an infinity: unbounded), or one
    clear error naming the ``--{kind}-low/--{kind}-high`` options."""
    if bounds is None:
        return None
    sides = [list(side) for side in bounds]
    if len(sides) != 2 or any(len(side) != state_dim for side in sides):
        raise ValueError(f"{kind} bounds (--{kind}-low/--{kind}-high) need {state_dim} values "
                         f"each, one per state dimension ('none' or 'inf' where unbounded); got "
                         f"{[len(side) for side in sides]}")
    return plain_bounds(sides)


def _run_name(location: str) -> str:
    stem = location.split(":", 1)[1] if location.startswith("minari:") else Path(location).stem
    return "fit-" + (re.sub(r"[^A-Za-z0-9_.-]+", "-", stem).strip("-") or "data")


class DataFileTask:
    """Your own data set: NOPG on a data file, with an optional gymnasium environment."""

    name = "fit"

    def __init__(self, location: str | Path, *, env_id: str | None = None,
                 initial_states: str | Path | np.ndarray | None = None,
                 obs_keys: Sequence[str] | None = None,
                 action_max: float | Sequence[float] | None = None,
                 state_bounds: Sequence[Sequence[float | None]] | None = None,
                 terminal_bounds: Sequence[Sequence[float | None]] | None = None) -> None:
        self.location = str(location)
        self.data = load_dataset(self.location, obs_keys=obs_keys)
        self.name = _run_name(self.location)
        self.state_dim, self.action_dim = self.data.state_dim, self.data.action_dim
        self.env_id = env_id
        self.evaluates = env_id is not None
        self._env_space: Any = None
        self._env_steps: int | None = None
        if env_id is not None:
            self._check_env(env_id)
        self._state_bounds = _user_bounds("state", state_bounds, self.state_dim)
        self._terminal_bounds = _user_bounds("terminal", terminal_bounds, self.state_dim)
        if initial_states is None:
            self._initial_states = self.data.episode_start_states()
        elif isinstance(initial_states, (str, Path)):
            self._initial_states = load_initial_states(initial_states, self.state_dim)
        else:
            self._initial_states = as_states(initial_states, self.state_dim, "initial states")
        if action_max is None:
            action_max = self._env_action_max if env_id is not None else \
                np.abs(self.data.actions).max(axis=0)
        self.action_max = np.broadcast_to(np.asarray(action_max, float), (self.action_dim,)).copy()
        if not (np.isfinite(self.action_max).all() and (self.action_max > 0).all()):
            raise ValueError(f"the action bound must be positive and finite per dimension; got "
                             f"{self.action_max.tolist()} (all actions in the data are 0? give "
                             "--action-max)")

    def _make_env(self, max_steps: int | None = None) -> Any:
        return make_env(self.env_id, dims=(self.state_dim, self.action_dim), fits="the data",
                        max_episode_steps=max_steps)

    def _check_env(self, env_id: str) -> None:
        """The environment fits the data and has a Box action space (its bound is the policy's)."""
        import gymnasium as gym

        env = self._make_env()
        try:
            space = env.action_space
            if not isinstance(space, gym.spaces.Box):
                raise ValueError(f"environment {env_id!r} has a {type(space).__name__} action "
                                 "space; NOPG's policies need a Box")
            self._env_action_max = np.maximum(np.abs(space.low), np.abs(space.high)).reshape(-1)
            self._env_space = env.observation_space
            steps = getattr(env.spec, "max_episode_steps", None)
            self._env_steps = int(steps) if steps else None
        finally:
            env.close()

    def state_bounds(self, config: ExperimentConfig) -> list[list[float | None]] | None:
        """The user's bounds of the state space (``--state-low/--state-high``), or ``None``:
        the runner then reads the environment's (:meth:`observation_space`)."""
        return self._state_bounds

    def observation_space(self, config: ExperimentConfig) -> Any:
        """The environment's observation space (``None`` without ``--env``)."""
        return self._env_space

    def terminal_bounds(self, config: ExperimentConfig) -> list[list[float | None]] | None:
        """Where episodes end: the user's limits (``--terminal-low/--terminal-high``), or
        ``None``."""
        return self._terminal_bounds

    def horizon(self, config: ExperimentConfig) -> int | None:
        """The evaluation's episode length: ``task.eval_steps`` (``--eval-steps``), else the
        environment's time limit, else ``None``."""
        return config.task["eval_steps"] or self._env_steps

    def default_config(self) -> ExperimentConfig:
        return fit_config()

    def make_dataset(self, config: ExperimentConfig, seed: int) -> TransitionDataset:
        return self.data

    def initial_states(self, data: TransitionDataset, config: ExperimentConfig, seed: int
                       ) -> np.ndarray:
        return self._initial_states

    def evaluate(self, policy: nn.Module, config: ExperimentConfig, seed: int, episodes: int
                 ) -> list[float]:
        if self.env_id is None:
            return []
        result = evaluate_policy(lambda: self._make_env(config.task["eval_steps"]), policy,
                                 n_episodes=episodes, seed=10_000 + 1000 * seed)
        return [float(r) for r in result["returns"]]

    def plot(self, algo: NOPG, data: TransitionDataset, config: ExperimentConfig, out_dir: Path
             ) -> list[Path]:
        """``actions.png``: the policy's actions against the data's (:mod:`nopg.viz.policy_plots`)."""
        return [plot_policy_actions(algo.policy, data.states, data.actions, self._initial_states,
                                    out_dir / "actions.png")]
