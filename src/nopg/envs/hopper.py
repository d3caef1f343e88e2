"""Hopper: environment factory, the healthy / termination rule and a local data collector.

Simulator: gymnasium's MuJoCo ``Hopper-v5`` (gymnasium 1.4.0, ``gymnasium/envs/mujoco/hopper_v5.py``),
headless. ``dt = 0.008`` s (timestep 0.002 s, frame skip 4); the action is
the torque on the thigh, leg and foot joints in ``[-1, 1]^3``; the 11-D observation is the D4RL
hopper state ``[z, torso angle, thigh, leg, foot angles, vx, vz, torso, thigh, leg, foot angular
velocities]`` (``qpos[1:]`` and ``qvel`` clipped to ±10), as in D4RL's ``hopper-*-v2`` files.

Reward: ``healthy_reward (1, only while healthy) + x velocity - 1e-3 |a|^2``. The hopper is
*unhealthy* (and the episode **terminates**) unless ``0.7 < z``, ``-0.2 < torso angle < 0.2``
and every entry of ``qpos[2:], qvel`` lies in ``(-100, 100)`` (open intervals, checked on the
unclipped velocities). Episodes are **truncated** by the 1000-step time limit. Resets add
``U(-0.005, 0.005)`` noise to the standing pose ``qpos = (0, 1.25, 0, 0, 0, 0)`` and to the zero
velocity.

No pre-trained Hopper policy is available offline, so :func:`collect_hopper` generates data
with a behaviour policy given here: ``"uniform"`` draws every action from ``U([-1, 1]^3)``
(D4RL-style name: *hopper-uniform-random*; D4RL's own ``hopper-random`` used a randomly
initialised SAC policy instead). Any callable ``obs -> action`` (plus optional Gaussian noise)
can be used too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # pragma: no cover - typing only
    import gymnasium as gym

    from nopg.data.dataset import TransitionDataset

__all__ = [
    "HEALTHY_ANGLE_RANGE",
    "HEALTHY_STATE_RANGE",
    "HEALTHY_Z_RANGE",
    "HOPPER_ENV_ID",
    "collect_hopper",
    "hopper_is_healthy",
    "make_hopper_env",
]

HOPPER_ENV_ID = "Hopper-v5"
"""The gymnasium id of the MuJoCo hopper (1000-step time limit)."""

HEALTHY_Z_RANGE = (0.7, float("inf"))
"""Open interval for the torso height ``z`` (``healthy_z_range`` of Hopper-v5)."""

HEALTHY_ANGLE_RANGE = (-0.2, 0.2)
"""Open interval for the torso angle (``healthy_angle_range``)."""

HEALTHY_STATE_RANGE = (-100.0, 100.0)
"""Open interval for every entry of ``qpos[2:]`` and ``qvel`` (``healthy_state_range``)."""

OBS_DIM, ACT_DIM = 11, 3


def make_hopper_env(max_episode_steps: int = 1000, **kwargs: object) -> gym.Env:
    """Gymnasium's ``Hopper-v5`` (headless) with its default settings.

    Parameters
    ----------
    max_episode_steps : int, default=1000
        Time limit (the registered value and D4RL's ``max_path``).
    **kwargs
        Passed to ``gymnasium.make`` (e.g. ``reset_noise_scale``).
    """
    if isinstance(max_episode_steps, bool) or not isinstance(max_episode_steps, (int, np.integer)) \
            or max_episode_steps < 1:
        raise ValueError(f"The 'max_episode_steps' parameter must be a positive int. "
                         f"Got {max_episode_steps!r}.")
    import gymnasium as gym

    return gym.make(HOPPER_ENV_ID, max_episode_steps=int(max_episode_steps), **kwargs)


def hopper_is_healthy(obs: np.ndarray) -> np.ndarray:
    """Hopper-v5's healthy test evaluated on 11-D observations (shape (11,) or (n, 11)).

    ``z = obs[0]``, torso angle ``obs[1]``, and ``obs[1:]`` within ``(-100, 100)``. The
    observation clips velocities to ±10, so the velocity part of the state-range test (which
    gymnasium applies to unclipped velocities) can only be seen here when it is violated by an
    angle; the test is otherwise exact.
    """
    o = np.asarray(obs, dtype=np.float64)
    if o.shape[-1] != OBS_DIM:
        raise ValueError(f"Hopper observations must have {OBS_DIM} entries; got shape {o.shape}")
    z, angle = o[..., 0], o[..., 1]
    lo, hi = HEALTHY_STATE_RANGE
    state_ok = np.all((o[..., 1:] > lo) & (o[..., 1:] < hi), axis=-1)
    return (z > HEALTHY_Z_RANGE[0]) & (z < HEALTHY_Z_RANGE[1]) & \
        (angle > HEALTHY_ANGLE_RANGE[0]) & (angle < HEALTHY_ANGLE_RANGE[1]) & state_ok


def collect_hopper(n_samples: int, behaviour: str | Callable[[np.ndarray], np.ndarray] = "uniform",
                   seed: int = 0, action_noise: float = 0.0, max_episode_steps: int = 1000
                   ) -> TransitionDataset:
    """Run a behaviour policy in ``Hopper-v5`` for ``n_samples`` steps (episode after episode).

    Parameters
    ----------
    n_samples : int
        Number of transitions; the last episode is cut when they are reached.
    behaviour : "uniform" or callable, default="uniform"
        ``"uniform"``: actions i.i.d. ``U([-1, 1]^3)``. A callable maps an observation (11,) to
        an action (3,).
    seed : int, default=0
        Seeds the first reset (later resets continue its generator) and the action noise.
    action_noise : float, default=0
        Standard deviation of Gaussian noise added to the behaviour's action (then clipped).
    max_episode_steps : int, default=1000
        Time limit of an episode.

    Returns
    -------
    TransitionDataset
        ``terminals`` where the hopper became unhealthy (a real terminal: gymnasium's
        ``terminated``), ``truncations`` where the time limit hit or the data ended mid-episode,
        ``episode_ids``; actions are the applied (clipped) ones.
    """
    if isinstance(n_samples, bool) or not isinstance(n_samples, (int, np.integer)) or n_samples < 1:
        raise ValueError(f"The 'n_samples' parameter must be a positive int. Got {n_samples!r}.")
    if not (behaviour == "uniform" or callable(behaviour)):
        raise ValueError(f"The 'behaviour' parameter must be 'uniform' or a callable obs -> "
                         f"action. Got {behaviour!r}.")
    if not np.isfinite(action_noise) or action_noise < 0:
        raise ValueError(f"The 'action_noise' parameter must be a non-negative float. "
                         f"Got {action_noise!r}.")
    from nopg.envs.evaluation import collect_episodes

    rng = np.random.default_rng([seed, 1])

    def act(obs: np.ndarray) -> np.ndarray:
        if behaviour == "uniform":
            action = rng.uniform(-1.0, 1.0, ACT_DIM)
        else:
            action = np.asarray(behaviour(obs.copy()), dtype=np.float64).reshape(ACT_DIM)
        if action_noise > 0:
            action = action + rng.normal(0.0, action_noise, ACT_DIM)
        return np.clip(action, -1.0, 1.0)

    return collect_episodes(make_hopper_env(max_episode_steps=max_episode_steps), int(n_samples),
                            act, seed)
