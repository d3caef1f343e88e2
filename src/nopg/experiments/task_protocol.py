"""What the runner reads from an experiment: its configuration (:class:`ExperimentConfig`), the
:class:`Task` protocol, and what a task knows beyond its data (the paper's policy, the state and
terminal bounds of its environment, its evaluation length and the judge's horizon)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol

import gymnasium as gym
import numpy as np
from torch import nn

from ..data.dataset import TransitionDataset
from ..model.config import plain_bounds
from ..select.method_config import MethodConfig
from ..select.recipes import discount_horizon
from ..select.task_knowledge import make_policy as method_policy
from ..select.task_knowledge import model_episode_report as model_episode_report_upto
from ..select.task_knowledge import with_bounds
from ..train.algorithm import NOPG
from .common import TaskSettings, check_task_value

__all__ = ["ExperimentConfig", "Task", "environment_state_bounds", "judge_steps", "make_policy",
           "model_episode_report", "task_horizon", "task_terminal_bounds", "with_task_bounds"]


@dataclass(frozen=True)
class ExperimentConfig(MethodConfig):
    """A NOPG experiment: the method's settings (:class:`nopg.MethodConfig`, the fields it
    shares with ``nopg fit``), the seeds, the evaluation and the task's own settings as its
    typed :class:`~nopg.experiments.common.TaskSettings`."""

    seeds: tuple[int, ...] = (0, 1, 2)
    env_state_bounds: bool = True             # moved successors: nopg.model.state_bounds from the env
    env_terminal_bounds: bool = True          # moved successors: nopg.model.terminal_bounds from the task
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
    ``terminal_bounds(config)``, the moved successors' ``nopg.model.terminal_bounds``
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
    """The paper's policy for ``task`` (:func:`nopg.select.task_knowledge.make_policy`): an MLP with an
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
    (:func:`nopg.select.task_knowledge.with_bounds`), as :class:`nopg.AutoNOPG` runs it."""
    return with_bounds(config, environment_state_bounds(task, config, state_dim),
                       task_terminal_bounds(task, config, state_dim))


def model_episode_report(config: ExperimentConfig, algo: NOPG, seed: int) -> dict[str, Any]:
    """:func:`nopg.select.task_knowledge.model_episode_report` up to the task's evaluation length
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
