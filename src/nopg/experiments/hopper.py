"""The paper's Hopper experiment (paper §6, appendix table "Hopper with D4RL").

Environment: gymnasium MuJoCo ``Hopper-v5`` (:mod:`nopg.envs.hopper`), 11-D D4RL state, 3-D
torque in ``[-1, 1]``; falling is a terminal, the 1000-step limit a truncation. Evaluation:
undiscounted return of ``final_eval_episodes`` episodes from the reset distribution (mean and
std written per seed to ``seed_<k>/evaluation.json`` with the episode lengths).

Data: the paper used D4RL's ``hopper-expert-v2`` (SAC expert). No expert policy or download is
available here, so by default the data are generated locally with uniformly random actions
(:func:`nopg.envs.hopper.collect_hopper`, ``behaviour = "uniform"``; ``n_samples`` transitions,
episodes of about 23 steps that end in a fall). This is a much poorer data set than the
paper's: it shows only the first ~0.2 s after a reset. ``task.dataset`` takes a local D4RL
``hopper-*.hdf5`` file, a ``.npz`` or a local Minari id (e.g. ``mujoco/hopper/expert-v0``)
through :mod:`nopg.data.formats`; ``n_samples`` of its transitions are then drawn uniformly
(``null`` keeps all).

Paper configuration: sizes 3000, 5000, 10000, gamma 0.99, state factor 4, action factor 10, a
(256, 256) ReLU MLP with ``tanh`` output, Adam 3e-4, 5000 updates, ``N_pi = 1`` (NOPG-S),
kernel-mean next states, ``N_mu0 = 500`` initial states (drawn here from the reset
distribution). Deviation: ``top_k = 10`` entries per row of ``P`` (the dense n x n model does not
fit 10^4 samples on a small machine). Bandwidths (a documented deviation): the library's
``auto`` rule with no factors (:func:`nopg.bandwidth.selection.knn_bandwidths`; its support guard widens
the state bandwidths about 2.8 x on this data). The paper's setting is ``--bandwidth silverman
--state-factor 4 --action-factor 10``. The paper reports that NOPG improves with more data but
does not reach a satisfactory policy.

Measured results: ``docs/experiments.md``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..data.dataset import TransitionDataset
from ..envs.hopper import collect_hopper, make_hopper_env
from ..train.algorithm import NOPG
from .common import TaskSettings, subsample, task_settings
from .runner import ExperimentConfig
from .task_base import EnvironmentTask, d4rl_task_config

logger = logging.getLogger("nopg.experiments")

__all__ = ["HopperSettings", "HopperTask"]


@task_settings
class HopperSettings(TaskSettings):
    """``task.<name>`` settings of hopper."""

    n_samples: int | None = 10000      # transitions (drawn from task.dataset; null keeps all)
    behaviour: str = "uniform"         # the built-in behaviour policy
    action_noise: float = 0.0          # noise on the behaviour's actions
    eval_steps: int = 1000             # evaluation episode length
    n_initial_states: int = 500        # N_mu0, from the reset distribution
    dataset: str | None = None         # a local data file or Minari id instead


class HopperTask(EnvironmentTask, name="hopper", state_dim=11, action_dim=3, action_max=1.0):
    """Hopper locomotion from a fixed batch of transitions."""

    def default_config(self) -> ExperimentConfig:
        return d4rl_task_config(HopperSettings(), nopg={"model.top_k": 10},
                                hidden=(256, 256), eval_episodes=3, final_eval_episodes=10)

    def make_dataset(self, config: ExperimentConfig, seed: int) -> TransitionDataset:
        t = config.task
        n = t["n_samples"]
        if t["dataset"]:
            return subsample(self.external_dataset(t["dataset"], "Hopper"), n, seed)
        if n is None:
            raise ValueError("task.n_samples must be set when no task.dataset is given")
        if t["behaviour"] != "uniform":
            raise ValueError(f"task.behaviour must be 'uniform' (the only built-in behaviour "
                             f"policy); got {t['behaviour']!r}")
        return collect_hopper(int(n), behaviour="uniform", seed=seed,
                              action_noise=float(t["action_noise"]))

    def env_fn(self, config: ExperimentConfig) -> Callable[[], Any]:
        steps = int(config.task["eval_steps"])
        return lambda: make_hopper_env(max_episode_steps=steps)

    def plot(self, algo: NOPG, data: TransitionDataset, config: ExperimentConfig, out_dir: Path
             ) -> list[Path]:
        """``evaluation.json``: the last evaluation, with the data episodes' mean return."""
        paths, summary = self.write_evaluation(
            out_dir, data_episode_return_mean=float(data.episode_returns().mean()))
        if summary is not None:
            logger.info("hopper: %d evaluation episodes, return %.1f ± %.1f, length %.0f "
                        "(data episodes: return %.1f)", summary["episodes"],
                        summary["return_mean"], summary["return_std"], summary["length_mean"],
                        summary["data_episode_return_mean"])
        return paths
