"""Pendulum swing-up: environment factory, state helpers and the uniform-grid data set.

The simulator is gymnasium's ``Pendulum-v1`` (``gymnasium/envs/classic_control/pendulum.py``),
whose dynamics are, with ``g = 10``, ``m = l = 1``, ``dt = 0.05``, ``max_speed = 8`` and
``max_torque = 2``::

    u          = clip(u, -2, 2)
    cost       = angle_normalize(th)**2 + 0.1 * thdot**2 + 0.001 * u**2
    new_thdot  = clip(thdot + (3 g / (2 l) sin(th) + 3 / (m l**2) u) dt, -8, 8)
    new_th     = th + new_thdot dt
    reward     = -cost   (computed on the pre-step state)

``th = 0`` is the upright position and ``th = pi`` hangs at the bottom.  The observation is
``[cos th, sin th, thdot]``.  The environment never terminates; gymnasium registers a 200-step
time limit, whereas the NOPG paper (and the original ``jacarvalho/nopg`` code) evaluates
500-step episodes from the bottom, so :func:`make_pendulum_env` defaults to 500 steps.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import ArrayLike

if TYPE_CHECKING:  # pragma: no cover - typing only
    import gymnasium as gym

    from nopg.data.dataset import TransitionDataset
    from nopg.envs.evaluation import PolicyLike

__all__ = [
    "evaluate_pendulum_from_bottom",
    "pendulum_bottom_setter",
    "BOTTOM_STATE",
    "PENDULUM_ENV_ID",
    "UPRIGHT_STATE",
    "angle_normalize",
    "angle_to_obs",
    "collect_pendulum_grid",
    "collect_pendulum_random",
    "make_pendulum_env",
    "obs_to_angle",
    "set_pendulum_state",
]

PENDULUM_ENV_ID = "Pendulum-v1"
"""The gymnasium id of the pendulum swing-up task."""

BOTTOM_STATE: np.ndarray = np.array([-1.0, 0.0, 0.0])
"""Observation ``[cos th, sin th, thdot]`` of the hanging pendulum at rest (``th = pi``)."""

UPRIGHT_STATE: np.ndarray = np.array([1.0, 0.0, 0.0])
"""Observation of the upright pendulum at rest (``th = 0``), where the random-agent data start."""


def make_pendulum_env(max_episode_steps: int = 500, render_mode: str | None = None) -> gym.Env:
    """Create gymnasium's ``Pendulum-v1`` with the paper's episode length.

    Parameters
    ----------
    max_episode_steps : int, default=500
        Time limit of an episode.  gymnasium's registration uses 200 steps; the NOPG paper
        evaluates 500 steps from the bottom.
    render_mode : str or None, default=None
        Passed to ``gymnasium.make`` (e.g. ``"rgb_array"``).

    Returns
    -------
    gymnasium.Env
        The wrapped environment (``TimeLimit`` etc.); the raw simulator is ``env.unwrapped``.

    Raises
    ------
    ValueError
        If ``max_episode_steps`` is not a positive integer.
    """
    if isinstance(max_episode_steps, bool) or not isinstance(max_episode_steps, (int, np.integer)):
        raise ValueError(
            f"The 'max_episode_steps' parameter must be a positive int. Got {max_episode_steps!r}."
        )
    if max_episode_steps < 1:
        raise ValueError(
            f"The 'max_episode_steps' parameter must be a positive int. Got {max_episode_steps}."
        )
    import gymnasium as gym  # imported lazily: the angle helpers need only numpy

    return gym.make(
        PENDULUM_ENV_ID, max_episode_steps=int(max_episode_steps), render_mode=render_mode
    )


def angle_normalize(theta: ArrayLike) -> np.ndarray:
    """Wrap angles to ``[-pi, pi)`` exactly as gymnasium's pendulum does.

    Implements ``((theta + pi) % (2 pi)) - pi`` (``angle_normalize`` in gymnasium's
    ``pendulum.py``); note that ``pi`` maps to ``-pi``.

    Parameters
    ----------
    theta : array_like
        Angles in radians, any shape.

    Returns
    -------
    numpy.ndarray
        Wrapped angles, same shape, float64.
    """
    theta = np.asarray(theta, dtype=np.float64)
    return ((theta + np.pi) % (2.0 * np.pi)) - np.pi


def angle_to_obs(theta: ArrayLike, theta_dot: ArrayLike) -> np.ndarray:
    """Map pendulum angles and velocities to observations ``[cos th, sin th, thdot]``.

    Parameters
    ----------
    theta : array_like
        Angles in radians (``0`` upright, ``pi`` bottom), any shape broadcastable with
        ``theta_dot``.
    theta_dot : array_like
        Angular velocities in rad/s.

    Returns
    -------
    numpy.ndarray
        Array of shape ``broadcast_shape + (3,)``, float64.
    """
    theta, theta_dot = np.broadcast_arrays(
        np.asarray(theta, dtype=np.float64), np.asarray(theta_dot, dtype=np.float64)
    )
    return np.stack([np.cos(theta), np.sin(theta), theta_dot], axis=-1)


def obs_to_angle(obs: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """Map observations ``[cos th, sin th, thdot]`` back to ``(theta, theta_dot)``.

    Parameters
    ----------
    obs : array_like of shape (..., 3)
        Pendulum observations.

    Returns
    -------
    theta : numpy.ndarray of shape (...)
        ``atan2(sin th, cos th)`` in ``[-pi, pi]``.
    theta_dot : numpy.ndarray of shape (...)
        Angular velocity.

    Raises
    ------
    ValueError
        If the last axis of ``obs`` does not have length 3.
    """
    obs = np.asarray(obs, dtype=np.float64)
    if obs.ndim == 0 or obs.shape[-1] != 3:
        raise ValueError(
            "Pendulum observations must have shape (..., 3) = [cos th, sin th, thdot]. "
            f"Got shape {obs.shape}."
        )
    return np.arctan2(obs[..., 1], obs[..., 0]), obs[..., 2].copy()


def set_pendulum_state(env: gym.Env, theta: float, theta_dot: float) -> np.ndarray:
    """Overwrite the simulator state of a (reset) pendulum environment.

    gymnasium's ``PendulumEnv`` keeps its state in ``env.unwrapped.state = [th, thdot]``; this
    assigns it (as the original nopg code does with ``env.env.state``) and rebuilds the
    observation, since gymnasium offers no API for exact initial states.

    Parameters
    ----------
    env : gymnasium.Env
        A pendulum environment that has been reset at least once (the ``OrderEnforcing``
        wrapper refuses ``step`` before ``reset``).
    theta : float
        Angle in radians (``0`` upright, ``pi`` bottom).
    theta_dot : float
        Angular velocity in rad/s.

    Returns
    -------
    numpy.ndarray of shape (3,)
        The observation ``[cos th, sin th, thdot]``, float64.

    Raises
    ------
    ValueError
        If ``theta`` or ``theta_dot`` is not finite, or ``env.unwrapped`` is not a
        pendulum (it lacks ``max_speed``/``max_torque``).
    """
    theta, theta_dot = float(theta), float(theta_dot)
    if not (math.isfinite(theta) and math.isfinite(theta_dot)):
        raise ValueError(
            f"Pendulum state must be finite. Got theta={theta}, theta_dot={theta_dot}."
        )
    base = env.unwrapped
    if not (hasattr(base, "max_speed") and hasattr(base, "max_torque")):
        raise ValueError(
            f"set_pendulum_state needs a gymnasium PendulumEnv; got {type(base).__name__}."
        )
    base.state = np.array([theta, theta_dot], dtype=np.float64)
    base.last_u = None
    return angle_to_obs(theta, theta_dot)


def _check_count(name: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"The '{name}' parameter must be a positive int. Got {value!r}.")
    return int(value)


def _check_range(name: str, value: tuple[float, float]) -> tuple[float, float]:
    try:
        low, high = (float(v) for v in value)
    except (TypeError, ValueError):
        raise ValueError(
            f"The '{name}' parameter must be a pair (low, high) of floats. Got {value!r}."
        ) from None
    if not (math.isfinite(low) and math.isfinite(high)) or low > high:
        raise ValueError(
            f"The '{name}' parameter must be a finite pair with low <= high. Got {value!r}."
        )
    return low, high


def collect_pendulum_grid(
    n_theta: int = 15,
    n_theta_dot: int = 15,
    n_action: int = 2,
    theta_range: tuple[float, float] = (-np.pi, np.pi),
    theta_dot_range: tuple[float, float] = (-8.0, 8.0),
    action_range: tuple[float, float] = (-2.0, 2.0),
    seed: int = 0,
) -> TransitionDataset:
    """Collect the paper's uniform-grid pendulum data set.

    The grid is the Cartesian product of ``np.linspace`` grids (endpoints included) over
    ``theta``, ``theta_dot`` and the torque ``u``, ordered with ``theta`` slowest and ``u``
    fastest.  For each point the simulator state is set (see :func:`set_pendulum_state`) and
    gymnasium's ``Pendulum-v1`` is stepped once with ``u``; this is the "uniform" data set of
    the NOPG paper (``pendulum_nopg_d_uniform.py`` in ``jacarvalho/nopg`` uses 20x20x2;
    15x15x2 = 450 samples is the paper's headline size).

    States are recorded in float64 from the simulator state rather than from gymnasium's
    float32 observation, so ``next_states`` equal the dynamics formula to round-off.

    Parameters
    ----------
    n_theta, n_theta_dot, n_action : int
        Number of grid values per dimension.
    theta_range, theta_dot_range, action_range : tuple of float
        Inclusive ``(low, high)`` ranges of the grids.  Torques outside ``[-2, 2]`` are
        clipped by the simulator; the recorded action is the unclipped grid value.
    seed : int, default=0
        Seed of the single ``env.reset`` (the reset state is overwritten anyway).

    Returns
    -------
    TransitionDataset
        ``n = n_theta * n_theta_dot * n_action`` transitions with ``states`` of shape (n, 3),
        ``actions`` (n, 1), ``rewards`` (n,), ``next_states`` (n, 3), all terminals and
        truncations ``False`` and ``episode_ids = arange(n)`` (every transition is its own
        one-step episode).

    Raises
    ------
    ValueError
        If a count is not a positive int or a range is not a finite ``(low, high)`` pair.
    """
    from nopg.data.dataset import TransitionDataset

    n_theta = _check_count("n_theta", n_theta)
    n_theta_dot = _check_count("n_theta_dot", n_theta_dot)
    n_action = _check_count("n_action", n_action)
    thetas = np.linspace(*_check_range("theta_range", theta_range), n_theta)
    theta_dots = np.linspace(*_check_range("theta_dot_range", theta_dot_range), n_theta_dot)
    torques = np.linspace(*_check_range("action_range", action_range), n_action)

    grid_th, grid_thd, grid_u = np.meshgrid(thetas, theta_dots, torques, indexing="ij")
    grid_th, grid_thd, grid_u = grid_th.ravel(), grid_thd.ravel(), grid_u.ravel()
    n = grid_th.size

    states = np.empty((n, 3))
    next_states = np.empty((n, 3))
    rewards = np.empty(n)
    env = make_pendulum_env(max_episode_steps=n)
    try:
        env.reset(seed=seed)
        for i in range(n):
            states[i] = set_pendulum_state(env, grid_th[i], grid_thd[i])
            _, reward, _, _, _ = env.step(np.array([grid_u[i]], dtype=np.float64))
            rewards[i] = float(reward)
            th_new, thd_new = env.unwrapped.state
            next_states[i] = angle_to_obs(th_new, thd_new)
    finally:
        env.close()

    return TransitionDataset(
        states=states,
        actions=grid_u.reshape(n, 1).astype(np.float64),
        rewards=rewards,
        next_states=next_states,
        terminals=np.zeros(n, dtype=bool),
        truncations=np.zeros(n, dtype=bool),
        episode_ids=np.arange(n),
    )


def _check_positive_float(name: str, value: float) -> float:
    ok = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)
    if not ok or not math.isfinite(float(value)) or float(value) <= 0.0:
        raise ValueError(f"The '{name}' parameter must be a positive finite float. Got {value!r}.")
    return float(value)


def _random_agent_sizes(n_samples: int | None, n_trajectories: int | None,
                        trajectory_length: int) -> tuple[int, int]:
    """``(total transitions, trajectory length)`` of :func:`collect_pendulum_random`."""
    if (n_samples is None) == (n_trajectories is None):
        raise ValueError(
            "Exactly one of 'n_samples' and 'n_trajectories' must be given. "
            f"Got n_samples={n_samples!r}, n_trajectories={n_trajectories!r}."
        )
    length = _check_count("trajectory_length", trajectory_length)
    if n_samples is not None:
        return _check_count("n_samples", n_samples), length
    return _check_count("n_trajectories", n_trajectories) * length, length  # type: ignore[arg-type]


def _random_agent_mixture(component_means: tuple[float, ...], component_std: float
                          ) -> tuple[np.ndarray, float]:
    """The checked component means (k,) and standard deviation of the behaviour mixture."""
    means = np.asarray(component_means, dtype=np.float64).reshape(-1)
    if means.size == 0 or not np.all(np.isfinite(means)):
        raise ValueError(
            f"The 'component_means' parameter must be non-empty and finite. Got {component_means!r}."
        )
    return means, _check_positive_float("component_std", component_std)


def collect_pendulum_random(
    n_samples: int | None = 5000,
    n_trajectories: int | None = None,
    trajectory_length: int = 500,
    seed: int = 0,
    component_means: tuple[float, ...] = (-2.0, 2.0),
    component_std: float = 1.0,
    initial_theta: float = 0.0,
    initial_theta_dot: float = 0.0,
    clip_actions: bool = True,
) -> TransitionDataset:
    """Collect the paper's "random agent" pendulum data set (paper §6.4, appendix tables).

    Every trajectory starts from the same state (by default upright at rest, ``th = 0``) and
    runs gymnasium's ``Pendulum-v1`` for at most ``trajectory_length`` steps under a
    state-independent behavioural policy: at every step one mixture component is drawn
    uniformly, then ``a ~ N(mean_k, component_std**2)``.  The defaults are those of
    ``policy_gmm`` and ``pendulum_nopg_*_behavioral*.py`` in ``jacarvalho/nopg`` (means
    ``-2`` and ``+2``, standard deviation 1, initial observation ``[1, 0, 0]``, 500 transitions
    per trajectory).

    Parameters
    ----------
    n_samples : int or None, default=5000
        Total number of transitions; the last trajectory is cut short when the budget ends
        (as the original code does).  Exactly one of ``n_samples`` and ``n_trajectories``
        must be given.
    n_trajectories : int or None, default=None
        Number of full trajectories of ``trajectory_length`` steps (pass ``n_samples=None``).
    trajectory_length : int, default=500
        Maximum number of transitions per trajectory (a time limit, not a terminal).
    seed : int, default=0
        Seed of the action noise (``numpy.random.default_rng``) and of ``env.reset``.
    component_means : tuple of float, default=(-2.0, 2.0)
        Means of the equally weighted Gaussian components.
    component_std : float, default=1.0
        Standard deviation of every component.
    initial_theta, initial_theta_dot : float, default=0.0
        Start state of every trajectory (``0`` is upright).
    clip_actions : bool, default=True
        Record the torque the simulator applies, ``clip(a, -2, 2)``, rather than the sampled
        one.  The original code records the sampled value; since the dynamics only see the
        clipped torque, recording it keeps the kernel model's action axis faithful (and the
        learned policy's ``2 tanh`` output never leaves ``[-2, 2]``).

    Returns
    -------
    TransitionDataset
        ``states``/``next_states`` of shape (n, 3) (float64, from the simulator state),
        ``actions`` (n, 1), ``rewards`` (n,), all terminals ``False``, ``truncations`` ``True``
        on the last transition of every trajectory, and ``episode_ids`` (one per trajectory).

    Raises
    ------
    ValueError
        If not exactly one of ``n_samples``/``n_trajectories`` is a positive int, or another
        parameter is invalid.
    """
    from nopg.data.dataset import TransitionDataset

    total, length = _random_agent_sizes(n_samples, n_trajectories, trajectory_length)
    means, std = _random_agent_mixture(component_means, component_std)
    th0, thd0 = float(initial_theta), float(initial_theta_dot)
    if not (math.isfinite(th0) and math.isfinite(thd0)):
        raise ValueError(f"The initial state must be finite. Got ({initial_theta}, {initial_theta_dot}).")

    rng = np.random.default_rng(seed)
    sampled = means[rng.integers(means.size, size=total)] + std * rng.standard_normal(total)

    states = np.empty((total, 3))
    next_states = np.empty((total, 3))
    rewards = np.empty(total)
    applied = np.empty(total)
    truncations = np.zeros(total, dtype=bool)
    episode_ids = np.empty(total, dtype=np.int64)
    env = make_pendulum_env(max_episode_steps=length)
    try:
        max_torque = float(env.unwrapped.max_torque)
        i, episode = 0, 0
        while i < total:
            env.reset(seed=seed + episode)
            obs = set_pendulum_state(env, th0, thd0)
            for _ in range(min(length, total - i)):
                states[i] = obs
                _, reward, terminated, _, _ = env.step(np.array([sampled[i]], dtype=np.float64))
                if terminated:  # pragma: no cover - Pendulum-v1 never terminates
                    raise RuntimeError("Pendulum-v1 reported a terminal state")
                rewards[i] = float(reward)
                applied[i] = min(max(sampled[i], -max_torque), max_torque)
                obs = angle_to_obs(*env.unwrapped.state)
                next_states[i] = obs
                episode_ids[i] = episode
                i += 1
            truncations[i - 1] = True
            episode += 1
    finally:
        env.close()

    return TransitionDataset(
        states=states,
        actions=(applied if clip_actions else sampled).reshape(total, 1),
        rewards=rewards,
        next_states=next_states,
        terminals=np.zeros(total, dtype=bool),
        truncations=truncations,
        episode_ids=episode_ids,
    )


def pendulum_bottom_setter(env: gym.Env) -> np.ndarray:
    """Put a reset pendulum at the bottom at rest, state ``(pi, 0)``, observation ``(-1, 0, 0)``.

    This is the evaluation start of the NOPG paper (``eval_initial_state = [-1, 0, 0]`` in
    ``jacarvalho/nopg``); see :func:`nopg.envs.pendulum.set_pendulum_state`.
    """
    return set_pendulum_state(env, np.pi, 0.0)


def evaluate_pendulum_from_bottom(policy: PolicyLike, n_steps: int = 500) -> float:
    """Undiscounted return of one pendulum episode of ``n_steps`` steps from the bottom.

    gymnasium's ``Pendulum-v1`` is deterministic once the state is set, so one episode is
    enough.  A zero-torque policy stays at the bottom and collects ``-n_steps * pi**2``
    (``≈ -4934.8`` for 500 steps); the paper reports ``≈ -594`` for NOPG on 450 grid samples.

    Parameters
    ----------
    policy : torch.nn.Module or callable
        See :func:`rollout`.
    n_steps : int, default=500
        Episode length.

    Returns
    -------
    float
        The undiscounted return.
    """
    from nopg.envs.evaluation import rollout

    env = make_pendulum_env(max_episode_steps=n_steps)
    try:
        return rollout(env, policy, initial_state_setter=pendulum_bottom_setter, seed=0)["return"]
    finally:
        env.close()
