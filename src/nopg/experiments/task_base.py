"""Scaffolding the experiment tasks share, so that each task module keeps only what is its own.

* :func:`task_config`: an :class:`~nopg.experiments.runner.ExperimentConfig` with the settings
  most of the paper's tasks share (gamma 0.99, a 1 x 50 ReLU MLP, Adam at 1e-2, ``auto``
  bandwidths with factors 1, kernel-mean next states, a dense ``P`` up to 2000 samples) and the
  task's own on top.
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

from ..config import NOPGConfig
from ..data import TransitionDataset
from ..evaluation import evaluate_episodes
from .common import TaskSettings, sample_reset_states
from .runner import ExperimentConfig

if TYPE_CHECKING:
    import gymnasium as gym

__all__ = ["EVALUATION_FILE", "EnvironmentTask", "evaluation_summary", "task_config"]

EVALUATION_FILE = "evaluation.json"
"""The file (in ``seed_<k>/``) that holds the last evaluation's episodes and their summary."""

_PAPER_NOPG = {"gamma": 0.99, "learning_rate": 1e-2, "top_k": None, "dense_max_n": 2000}
_PAPER_RUN = {"bandwidth_method": "auto", "state_factor": 1.0, "action_factor": 1.0,
              "hidden": (50,), "sigma_max": 1.0, "eval_every": 100}


def task_config(task: TaskSettings | dict[str, Any], nopg: dict[str, Any] | None = None,
                **settings: Any) -> ExperimentConfig:
    """The shared experiment settings with a task's own.

    Parameters
    ----------
    task : TaskSettings or dict
        The task's settings (``config.task``).
    nopg : dict, optional
        :class:`~nopg.NOPGConfig` settings that differ from the shared ones (gamma 0.99,
        learning rate 1e-2, ``top_k=None``, ``dense_max_n=2000``).
    **settings
        :class:`~nopg.experiments.runner.ExperimentConfig` fields that differ from the shared
        ones (``auto`` bandwidths, factors 1, hidden ``(50,)``, ``sigma_max`` 1, evaluation
        every 100 updates).
    """
    return ExperimentConfig(**{**_PAPER_RUN, **settings},
                            nopg=NOPGConfig(**{**_PAPER_NOPG, **(nopg or {})}), task=task)


def evaluation_summary(evaluation: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """An evaluation's episodes with their mean return and spread (and mean length, when the
    episodes' lengths are recorded), the episode count and ``extra`` entries."""
    returns = evaluation["returns"]
    summary = {**evaluation, "return_mean": float(np.mean(returns)),
               "return_std": float(np.std(returns))}
    if "lengths" in evaluation:
        summary["length_mean"] = float(np.mean(evaluation["lengths"]))
    return {**summary, "episodes": len(returns), **extra}


class EnvironmentTask:
    """Base of the tasks evaluated in a gymnasium environment from its reset distribution.

    Subclasses set ``name``, ``state_dim``, ``action_dim``, ``action_max`` and define
    :meth:`env_fn`, ``default_config``, ``make_dataset`` and ``plot`` (which may call
    :meth:`write_evaluation`); they may replace :meth:`evaluate` (calling :meth:`record`).
    """

    name: str
    state_dim: int
    action_dim: int
    action_max: float

    def __init__(self) -> None:
        self._last_eval: dict[str, Any] | None = None

    def env_fn(self, config: ExperimentConfig) -> Callable[[], gym.Env]:
        """A function that makes the evaluation environment for ``config``."""
        raise NotImplementedError

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
        """Returns, lengths and falls of ``episodes`` episodes (:func:`nopg.evaluation.evaluate_episodes`)."""
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
