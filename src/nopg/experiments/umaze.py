"""The paper's U-Maze experiment (paper §6 "U-Maze with D4RL", appendix table "U-Maze with D4RL").

Environment: gymnasium-robotics ``PointMaze_UMaze-v3`` with D4RL ``maze2d-umaze-v1`` conventions
(:mod:`nopg.envs.maze`): the goal fixed at cell ``(1, 1)``, sparse reward ``1[dist <= 0.45]``,
300-step episodes, the 4-D state ``[x, y, vx, vy]``. Evaluation: undiscounted return of
``final_eval_episodes`` episodes from the environment's reset distribution, and the success rate
(share of episodes in which the ball came within 0.45 of the goal), written per seed to
``seed_<k>/evaluation.json``.

Data: by default generated locally with D4RL's noisy waypoint controller
(:func:`nopg.envs.maze.collect_umaze_d4rl_style`): one ``source_steps``-step stream, of which
``n_samples`` transitions are drawn uniformly without replacement, as the paper sub-sampled
D4RL's million-step file. ``task.dataset`` may instead name a local file (``.npz``, or a D4RL
``.hdf5`` / Minari id through :mod:`nopg.data.formats` when installed); ``task.dataset_frame = "d4rl"``
maps D4RL's maze coordinates to gymnasium-robotics' frame and (``task.terminals_as_timeouts``,
default on for that frame) turns D4RL's ``terminals``, which only mark where the continuing
stream was cut, into truncations; ``task.relabel_rewards`` (default true) recomputes the rewards
for the fixed goal from the next states.

Paper configuration: sizes 100 ... 1000, gamma 0.99, state factor 2, action factor 5, a
(64, 32) ReLU MLP, Adam 3e-4, 5000 updates, ``N_pi = 1`` (NOPG-S), kernel-mean next states,
``N_mu0 = 50`` initial states. Deviation: the paper's policy outputs ``5 tanh(f)``, but the
simulator clips forces to ``[-1, 1]`` and the data hold no action outside that box, where the
kernel model would only extrapolate; the policy here outputs ``tanh(f)`` (``action_max = 1``).
Bandwidths (a documented deviation): the library's ``auto`` rule with no factors
(:func:`nopg.bandwidth.selection.knn_bandwidths`). The paper's setting, Silverman's rule times those factors
(the paper does not name the base rule), is ``--bandwidth silverman --state-factor 2
--action-factor 5``; measured over seeds 0-19 the two do equally well (``docs/bandwidths.md``).
Behaviour term off (``nopg.behaviour.weight = 0``, the paper's objective): the waypoint
controller steers to randomly chosen goals, so its actions are predictable from the state
(action predictability 0.54-0.61) but not aimed at this task's goal, and keeping the policy near
them lowers the return (``docs/bandwidths.md``).
The paper reports that NOPG (and BEAR, BRAC, MOPO, MOReL) fail on this task.

Measured results: ``docs/experiments.md``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from torch import nn

from ..data.dataset import TransitionDataset
from ..envs.evaluation import rollout, rollouts
from ..envs.maze import (
    GOAL_RADIUS,
    UMAZE_GOAL,
    UMAZE_MAP,
    collect_umaze_d4rl_style,
    d4rl_to_gymnasium_states,
    make_umaze_env,
    umaze_reward,
)
from ..train.algorithm import NOPG
from .common import TaskSettings, subsample, task_settings
from .runner import ExperimentConfig
from .task_base import EnvironmentTask, d4rl_task_config

logger = logging.getLogger("nopg.experiments")

__all__ = ["UMazeSettings", "UMazeTask"]


def _terminals_to_truncations(fields: dict[str, Any]) -> dict[str, Any]:
    """Undo D4RL maze2d's ``terminals``, which mark episode cuts of a continuing stream.

    The maze never terminates; D4RL's generator stored "target reached or 300 steps" as
    ``terminals``. A terminal row's next state is unknown in such a file (readers put a
    placeholder there), so the row is dropped and the previous row of its episode is marked
    truncated instead.
    """
    term = np.asarray(fields["terminals"], dtype=bool)
    if not term.any():
        return fields
    n = term.shape[0]
    trunc = np.zeros(n, bool) if fields["truncations"] is None else fields["truncations"].copy()
    ids = fields["episode_ids"]
    prev = np.flatnonzero(term)[np.flatnonzero(term) > 0] - 1
    if ids is not None:
        prev = prev[ids[prev] == ids[prev + 1]]
    trunc[prev] = True
    keep = ~term
    if not keep.any():
        raise ValueError("every transition of the data set is terminal")
    out = {k: (None if v is None else np.asarray(v)[keep]) for k, v in fields.items()}
    out["truncations"] = trunc[keep]
    out["terminals"] = np.zeros(int(keep.sum()), dtype=bool)
    return out


@task_settings
class UMazeSettings(TaskSettings):
    """``task.<name>`` settings of umaze."""

    n_samples: int | None = 1000       # transitions drawn from the stream (null keeps all)
    source_steps: int = 20000          # length of the generated stream
    action_noise: float = 0.5          # noise of the waypoint controller
    reward_type: str = "sparse"        # "sparse" or "dense"
    eval_steps: int = 300              # evaluation episode length
    n_initial_states: int = 50         # N_mu0, from the reset distribution
    dataset: str | None = None         # a local data file or Minari id instead
    dataset_frame: str = "gymnasium"   # its coordinates: "gymnasium" or "d4rl"
    relabel_rewards: bool = True       # recompute the rewards for the fixed goal
    terminals_as_timeouts: bool | None = None   # default: on for the "d4rl" frame


class UMazeTask(EnvironmentTask, name="umaze", state_dim=4, action_dim=2, action_max=1.0):
    """Point-mass U-Maze navigation from D4RL-style waypoint-controller data."""

    def default_config(self) -> ExperimentConfig:
        return d4rl_task_config(UMazeSettings(), nopg={"behaviour.weight": 0.0},
                                hidden=(64, 32), eval_episodes=5, final_eval_episodes=20)

    # ------------------------------------------------------------------ data
    def make_dataset(self, config: ExperimentConfig, seed: int) -> TransitionDataset:
        t = config.task
        n = t["n_samples"]
        if t["dataset"]:
            data = self.external_dataset(t["dataset"], "U-Maze", minari_obs_keys="observation",
                                         state_layout=" [x, y, vx, vy]")
            frame = t["dataset_frame"]
            if frame not in ("gymnasium", "d4rl"):
                raise ValueError(f"task.dataset_frame must be 'gymnasium' or 'd4rl'; got {frame!r}")
            fields = {"states": data.states, "actions": data.actions, "rewards": data.rewards,
                      "next_states": data.next_states, "terminals": data.terminals,
                      "truncations": data.truncations, "episode_ids": data.episode_ids}
            if frame == "d4rl":
                fields["states"] = d4rl_to_gymnasium_states(data.states)
                fields["next_states"] = d4rl_to_gymnasium_states(data.next_states)
            as_timeouts = t["terminals_as_timeouts"]
            if as_timeouts if as_timeouts is not None else frame == "d4rl":
                fields = _terminals_to_truncations(fields)
            if t["relabel_rewards"]:
                fields["rewards"] = umaze_reward(fields["next_states"][:, :2],
                                                 t["reward_type"])
            return subsample(TransitionDataset(**fields), n, seed)
        steps = int(t["source_steps"] or n)
        if n is not None and steps < int(n):
            raise ValueError(f"task.source_steps ({steps}) must be >= task.n_samples ({n})")
        data = collect_umaze_d4rl_style(steps, seed=seed, action_noise=float(t["action_noise"]),
                                        reward_type=t["reward_type"])
        return subsample(data, n, seed)

    def env_fn(self, config: ExperimentConfig) -> Callable[[], Any]:
        steps = int(config.task["eval_steps"])
        reward_type = config.task["reward_type"]
        return lambda: make_umaze_env(max_episode_steps=steps, reward_type=reward_type)

    # ------------------------------------------------------------ evaluation
    def evaluate(self, policy: nn.Module, config: ExperimentConfig, seed: int, episodes: int
                 ) -> list[float]:
        """Returns, successes (within the goal radius at some step) and final goal distances."""
        done = rollouts(self.env_fn(config)(), policy, episodes, 1_000_000 + 1000 * seed)
        dists = [np.linalg.norm(ep["states"][1:, :2] - UMAZE_GOAL[None], axis=1) for ep in done]
        successes = [bool(np.any(dist <= GOAL_RADIUS)) for dist in dists]
        return self.record({"returns": [ep["return"] for ep in done], "successes": successes,
                            "success_rate": float(np.mean(successes)),
                            "final_distance": [float(dist[-1]) for dist in dists]})

    def plot(self, algo: NOPG, data: TransitionDataset, config: ExperimentConfig, out_dir: Path
             ) -> list[Path]:
        """``evaluation.json`` (the last evaluation) and ``maze.png``."""
        paths, summary = self.write_evaluation(out_dir)
        if summary is not None:
            logger.info("umaze: %d evaluation episodes, success rate %.2f, return %.2f ± %.2f",
                        summary["episodes"], summary["success_rate"], summary["return_mean"],
                        summary["return_std"])
        paths.append(_plot_maze(algo, data, config, out_dir / "maze.png", self.env_fn(config)))
        return paths


def _plot_maze(algo: NOPG, data: TransitionDataset, config: ExperimentConfig, path: Path,
               env_fn: Any) -> Path:
    """Walls, data positions, the goal and three evaluation trajectories."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 5))
    rows, cols = len(UMAZE_MAP), len(UMAZE_MAP[0])
    for i, row in enumerate(UMAZE_MAP):
        for j, v in enumerate(row):
            if v == 1:
                ax.add_patch(plt.Rectangle((j - cols / 2, rows / 2 - i - 1), 1, 1, color="0.6"))
    ax.scatter(data.states[:, 0], data.states[:, 1], s=2, c="tab:blue", alpha=0.3, label="data")
    env = env_fn()
    try:
        for k in range(3):
            ep = rollout(env, algo.policy, seed=2_000_000 + k)
            ax.plot(ep["states"][:, 0], ep["states"][:, 1], lw=1.2, label=f"episode {k}")
    finally:
        env.close()
    ax.add_patch(plt.Circle(tuple(UMAZE_GOAL), GOAL_RADIUS, color="tab:red", alpha=0.3))
    ax.set_xlim(-cols / 2, cols / 2)
    ax.set_ylim(-rows / 2, rows / 2)
    ax.set_aspect("equal")
    ax.legend(loc="lower left", fontsize=7)
    ax.set_title(f"U-Maze, n = {data.n}, J_hat = {algo.J_hat():.2f}")
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
