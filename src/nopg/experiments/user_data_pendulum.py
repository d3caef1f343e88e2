"""User-data pendulum experiments: uniform random actions and a noisy swing-up controller.

Part of the "user data" experiments (:mod:`nopg.experiments.user_data`): data sets that nobody
tuned NOPG for, run with the library's defaults (``auto`` bandwidths, factors 1, ``top_k = 10``,
the BiCGSTAB solver) to see what a user gets out of the box.

Data (gymnasium ``Pendulum-v1``, ``task.n_episodes`` episodes of ``task.episode_length`` steps,
default 10 x 200 = 2000 transitions; the first ``env.reset`` is seeded with the data seed and the
later resets continue its generator, so every episode starts from the env's own random state,
``theta ~ U(-pi, pi)``, ``theta_dot ~ U(-1, 1)``). Time limits are truncations, not terminals;
states are recorded in float64 from the simulator state.

* ``pendulum-uniform``: every action ``U(-2, 2)``, independent of the state.
* ``pendulum-controller``: a swing-up controller (:func:`swingup_action`: energy pumping far from
  the top, a linear PD balance within 0.5 rad of it) plus Gaussian noise of standard deviation
  ``task.noise_std`` (default 1), clipped to ``[-2, 2]``; the applied action is recorded.
  :func:`controller_reference_returns` gives the returns of this behaviour (noisy, mean over
  ``task.reference_episodes`` fixed noise seeds, and noiseless) under the evaluation protocol;
  they are logged and written to ``seed_<k>/reference_returns.json`` after each seed.

Evaluation (both): the undiscounted return of a 500-step episode from the bottom at rest
(``theta = pi``), the objective's initial state is that bottom state, and the plots are the
pendulum phase portraits, all as in :mod:`nopg.experiments.pendulum_grid`. Settings: gamma 0.99,
1 x 50 ReLU MLP with ``2 tanh`` output, Adam 1e-2, 1500 updates, ``auto`` bandwidths with state
and action factors 1, ``top_k = 10``, ``solver = "bicgstab"``.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import numpy as np

from ..data.dataset import TransitionDataset
from ..envs.pendulum import angle_normalize, angle_to_obs, make_pendulum_env, set_pendulum_state
from ..train.algorithm import NOPG
from .common import TaskSettings, task_settings
from .pendulum_grid import PendulumGridTask
from .runner import ExperimentConfig
from .task_base import task_config

logger = logging.getLogger("nopg.experiments")

__all__ = ["PendulumControllerSettings", "PendulumControllerTask", "PendulumUniformSettings",
           "PendulumUniformTask", "collect_pendulum_episodes",
           "controller_reference_returns", "swingup_action"]

MAX_TORQUE = 2.0
GRAVITY_TERM = 15.0   # 3 g / (2 l) of Pendulum-v1: theta_ddot = 15 sin(theta) + 3 u
UPRIGHT_ENERGY = GRAVITY_TERM   # E = theta_dot^2 / 2 + 15 cos(theta) is conserved when u = 0
REFERENCE_SEED = 20_240_601     # noise seeds of the reference episodes: [REFERENCE_SEED, k]


def swingup_action(theta: float, theta_dot: float, energy_gain: float = 1.0,
                   balance_gains: tuple[float, float] = (10.0, 2.0),
                   balance_angle: float = 0.5) -> float:
    """A noiseless swing-up and balance controller for ``Pendulum-v1``, action in ``[-2, 2]``.

    Within ``balance_angle`` of the top (``theta = 0``): the PD law ``-(k_p theta + k_d
    theta_dot)``, which with ``theta_ddot = 15 theta + 3 u`` near the top gives the stable
    closed loop ``theta_ddot = -15 theta - 6 theta_dot`` for the default gains. Elsewhere: pump
    energy ``E = theta_dot^2 / 2 + 15 cos(theta)`` towards the upright value 15 by pushing along
    the motion, ``u = k_E (15 - E) sign(theta_dot)`` (``sign(0) = +1``, so it also starts from
    rest at the bottom). The torque limit 2 is too weak to lift the pendulum directly, hence
    the pumping.
    """
    th = float(angle_normalize(theta))
    if abs(th) < balance_angle:
        u = -(balance_gains[0] * th + balance_gains[1] * float(theta_dot))
    else:
        energy = 0.5 * float(theta_dot) ** 2 + GRAVITY_TERM * np.cos(th)
        u = energy_gain * (UPRIGHT_ENERGY - energy) * (1.0 if theta_dot >= 0 else -1.0)
    return float(np.clip(u, -MAX_TORQUE, MAX_TORQUE))


def check_count(name: str, value: Any) -> int:
    """``task.<name>`` as a positive int (the user-data tasks' settings)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"task.{name} must be a positive int. Got {value!r}.")
    return int(value)


def _check_noise(value: Any) -> float:
    ok = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)
    if not ok or not np.isfinite(float(value)) or float(value) < 0:
        raise ValueError(f"task.noise_std must be a finite float >= 0. Got {value!r}.")
    return float(value)


def collect_pendulum_episodes(n_episodes: int, episode_length: int, seed: int,
                              behaviour: str = "uniform", noise_std: float = 1.0
                              ) -> TransitionDataset:
    """``n_episodes`` Pendulum-v1 episodes of ``episode_length`` steps from ``env.reset``.

    ``behaviour="uniform"``: actions ``U(-2, 2)``; ``"controller"``: :func:`swingup_action`
    plus ``N(0, noise_std^2)`` noise, clipped to ``[-2, 2]``. The first reset is seeded with
    ``seed`` (later resets continue its generator), the actions draw from
    ``numpy.random.default_rng([seed, 1])``. Returns a data set with no terminals, a truncation
    on the last step of every episode and ``episode_ids``.
    """
    n_episodes = check_count("n_episodes", n_episodes)
    length = check_count("episode_length", episode_length)
    if behaviour not in ("uniform", "controller"):
        raise ValueError(f"behaviour must be 'uniform' or 'controller'. Got {behaviour!r}.")
    noise_std = _check_noise(noise_std)
    n = n_episodes * length
    rng = np.random.default_rng([int(seed), 1])
    states, next_states = np.empty((n, 3)), np.empty((n, 3))
    actions, rewards = np.empty(n), np.empty(n)
    env = make_pendulum_env(max_episode_steps=length)
    try:
        i = 0
        for episode in range(n_episodes):
            env.reset(seed=int(seed) if episode == 0 else None)
            th, thd = (float(v) for v in env.unwrapped.state)
            for _ in range(length):
                if behaviour == "uniform":
                    u = rng.uniform(-MAX_TORQUE, MAX_TORQUE)
                else:
                    u = swingup_action(th, thd) + noise_std * rng.standard_normal()
                u = float(np.clip(u, -MAX_TORQUE, MAX_TORQUE))
                states[i] = angle_to_obs(th, thd)
                _, reward, terminated, _, _ = env.step(np.array([u], dtype=np.float64))
                if terminated:  # pragma: no cover - Pendulum-v1 never terminates
                    raise RuntimeError("Pendulum-v1 reported a terminal state")
                th, thd = (float(v) for v in env.unwrapped.state)
                actions[i], rewards[i], next_states[i] = u, float(reward), angle_to_obs(th, thd)
                i += 1
    finally:
        env.close()
    truncations = np.zeros(n, dtype=bool)
    truncations[length - 1::length] = True
    return TransitionDataset(states=states, actions=actions[:, None], rewards=rewards,
                             next_states=next_states, terminals=np.zeros(n, dtype=bool),
                             truncations=truncations,
                             episode_ids=np.repeat(np.arange(n_episodes), length))


def controller_return_from_bottom(noise_std: float = 0.0, n_steps: int = 500,
                                  noise_seed: int | list[int] = 0) -> float:
    """Undiscounted return of the (noisy) swing-up controller over ``n_steps`` from the bottom."""
    noise_std = _check_noise(noise_std)
    rng = np.random.default_rng(noise_seed)
    env = make_pendulum_env(max_episode_steps=check_count("eval_steps", n_steps))
    total = 0.0
    try:
        env.reset(seed=0)
        set_pendulum_state(env, np.pi, 0.0)
        for _ in range(int(n_steps)):
            th, thd = env.unwrapped.state
            u = swingup_action(th, thd) + noise_std * rng.standard_normal()
            _, reward, _, _, _ = env.step(np.array([np.clip(u, -MAX_TORQUE, MAX_TORQUE)]))
            total += float(reward)
    finally:
        env.close()
    return total


def controller_reference_returns(noise_std: float = 1.0, n_steps: int = 500,
                                 episodes: int = 10) -> dict[str, Any]:
    """Returns of the behaviour controller under the evaluation protocol (500 steps from the bottom).

    ``noisy``: mean over ``episodes`` episodes with noise seeds ``[REFERENCE_SEED, k]`` (fixed,
    independent of the data seed), ``noisy_returns`` the episodes; ``noiseless``: the
    deterministic controller (one episode).
    """
    noisy = [controller_return_from_bottom(noise_std, n_steps, [REFERENCE_SEED, k])
             for k in range(check_count("reference_episodes", episodes))]
    return {"noise_std": float(noise_std), "eval_steps": int(n_steps), "noisy": float(np.mean(noisy)),
            "noisy_std": float(np.std(noisy)), "noisy_returns": noisy,
            "noiseless": controller_return_from_bottom(0.0, n_steps)}


def user_data_config(task: TaskSettings, **changes: Any) -> ExperimentConfig:
    """The settings every user-data task shares (the library's defaults, no tuned factor)."""
    return task_config(task, nopg={"model.top_k": 10, "model.solver": "bicgstab", "model.dense_max_n": None},
                       n_updates=1500, **changes)


@task_settings
class PendulumUniformSettings(TaskSettings):
    """``task.<name>`` settings of pendulum-uniform."""

    n_episodes: int = 10               # data episodes from env.reset
    episode_length: int = 200          # steps per data episode
    eval_steps: int = 500              # evaluation episode length (from the bottom)
    portrait_resolution: int = 100     # grid of the phase portraits, per axis


@task_settings
class PendulumControllerSettings(TaskSettings):
    """``task.<name>`` settings of pendulum-controller."""

    n_episodes: int = 10               # data episodes from env.reset
    episode_length: int = 200          # steps per data episode
    noise_std: float = 1.0             # the controller's Gaussian action noise
    reference_episodes: int = 10       # episodes of the noisy controller's reference return
    eval_steps: int = 500              # evaluation episode length (from the bottom)
    portrait_resolution: int = 100     # grid of the phase portraits, per axis


class PendulumUniformTask(PendulumGridTask, name="pendulum-uniform"):
    """Pendulum swing-up from 10 reset-started episodes of uniform random torques (user data)."""

    plot_title = "Pendulum uniform actions"

    def default_config(self) -> ExperimentConfig:
        return user_data_config(PendulumUniformSettings())

    def make_dataset(self, config: ExperimentConfig, seed: int) -> TransitionDataset:
        t = config.task
        return collect_pendulum_episodes(t["n_episodes"], t["episode_length"], seed, "uniform")


class PendulumControllerTask(PendulumGridTask, name="pendulum-controller"):
    """Pendulum swing-up from 10 episodes of a noisy energy-pumping swing-up controller (user data)."""

    plot_title = "Pendulum noisy controller"

    def __init__(self) -> None:
        self._references: dict[tuple[float, int, int], dict[str, Any]] = {}

    def default_config(self) -> ExperimentConfig:
        return user_data_config(PendulumControllerSettings())

    def make_dataset(self, config: ExperimentConfig, seed: int) -> TransitionDataset:
        t = config.task
        return collect_pendulum_episodes(t["n_episodes"], t["episode_length"], seed, "controller",
                                         noise_std=t["noise_std"])

    def reference_returns(self, config: ExperimentConfig) -> dict[str, Any]:
        """:func:`controller_reference_returns` for ``config``'s noise and evaluation (cached)."""
        t = config.task
        key = (float(t["noise_std"]), int(t["eval_steps"]),
               int(t["reference_episodes"]))
        if key not in self._references:
            self._references[key] = controller_reference_returns(*key)
        return self._references[key]

    def plot(self, algo: NOPG, data: TransitionDataset, config: ExperimentConfig, out_dir: Path
             ) -> list[Path]:
        paths = super().plot(algo, data, config, out_dir)
        ref = self.reference_returns(config)
        path = out_dir / "reference_returns.json"
        path.write_text(json.dumps(ref, indent=2))
        logger.info("pendulum-controller: behaviour controller from the bottom (%d steps): noisy "
                    "(std %.2f) %.1f ± %.1f over %d episodes, noiseless %.1f", ref["eval_steps"],
                    ref["noise_std"], ref["noisy"], ref["noisy_std"], len(ref["noisy_returns"]),
                    ref["noiseless"])
        return [*paths, path]
