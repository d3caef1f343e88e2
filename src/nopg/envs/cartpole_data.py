"""Cart-pole episodes without gymnasium: the initial states after ``reset``
(:func:`sample_initial_states`), a batch of episodes in lock-step (:func:`simulate_cartpole`) and
the paper's random-agent data (:func:`collect_cartpole_random`), on the dynamics of
:mod:`nopg.envs.cartpole_dynamics`. The task's conventions, termination and initial state:
:mod:`nopg.envs.cartpole`."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import ArrayLike

from .cartpole_dynamics import (
    DEFAULT_PARAMS,
    DT,
    EVAL_STEPS,
    INIT_THETA_MAX,
    STABILIZATION_THETA,
    X_LIMIT,
    CartPoleParams,
    cartpole_step,
    check_states,
    outside_region,
    state_to_obs,
)

if TYPE_CHECKING:  # pragma: no cover - typing only
    from nopg.data.dataset import TransitionDataset

__all__ = ["collect_cartpole_random", "positive_count", "positive_float", "sample_initial_states",
           "simulate_cartpole"]


def positive_float(name: str, value: float) -> float:
    """``value`` as a positive finite float; else a ``ValueError`` naming the parameter ``name``."""
    try:
        out = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"The '{name}' parameter must be a positive float. Got {value!r}.") from None
    if not (math.isfinite(out) and out > 0):
        raise ValueError(f"The '{name}' parameter must be a positive float. Got {value!r}.")
    return out


def positive_count(name: str, value: int) -> int:
    """``value`` as a positive int (not a bool); else a ``ValueError`` naming the parameter ``name``."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"The '{name}' parameter must be a positive int. Got {value!r}.")
    return int(value)


def sample_initial_states(seed: np.random.Generator | int, size: int,
                          theta_max: float = INIT_THETA_MAX,
                          params: CartPoleParams = DEFAULT_PARAMS) -> np.ndarray:
    """States right after ``reset``: ``x = 0``, ``theta ~ U(-theta_max, theta_max)``, at rest,
    then one zero-voltage step (``quanser_robots`` ``Cartpole.reset``). ``seed`` (formerly
    ``rng``): a NumPy Generator to draw from, or an int.

    Returns
    -------
    numpy.ndarray of shape (size, 4)
    """
    size = positive_count("size", size)
    theta_max = positive_float("theta_max", theta_max)
    s = np.zeros((size, 4))
    s[:, 1] = np.random.default_rng(seed).uniform(-theta_max, theta_max, size)
    return cartpole_step(s, np.zeros(size), DT, params)


def simulate_cartpole(policy: Callable[[np.ndarray], np.ndarray], initial_states: ArrayLike,
                      n_steps: int = EVAL_STEPS, theta_limit: float = STABILIZATION_THETA,
                      x_limit: float = X_LIMIT, params: CartPoleParams = DEFAULT_PARAMS
                      ) -> dict[str, np.ndarray]:
    """Run a batch of episodes in lock-step (vectorised evaluation).

    Each episode stops at its first step whose next state is outside the region (terminated,
    as in :class:`QuanserCartPoleEnv`) or after ``n_steps`` steps.

    Parameters
    ----------
    policy : callable
        Maps observations of shape ``(b, 5)`` to voltages of shape ``(b,)`` or ``(b, 1)``.
    initial_states : array_like of shape (m, 4)
    n_steps : int
    theta_limit, x_limit : float
    params : CartPoleParams

    Returns
    -------
    dict
        ``returns`` (m,) undiscounted sums of ``cos theta_t``; ``lengths`` (m,) steps taken;
        ``terminated`` (m,) bool; ``final_states`` (m, 4).
    """
    n_steps = positive_count("n_steps", n_steps)
    s = check_states(initial_states, "initial_states").reshape(-1, 4).copy()
    m = s.shape[0]
    returns = np.zeros(m)
    lengths = np.zeros(m, dtype=np.int64)
    alive = np.ones(m, dtype=bool)
    for _ in range(n_steps):
        idx = np.flatnonzero(alive)
        if idx.size == 0:
            break
        cur = s[idx]
        volts = np.asarray(policy(state_to_obs(cur)), dtype=np.float64).reshape(idx.size, -1)[:, 0]
        if not np.all(np.isfinite(volts)):
            raise ValueError("The policy returned a non-finite voltage.")
        returns[idx] += np.cos(cur[:, 1])
        lengths[idx] += 1
        nxt = cartpole_step(cur, volts, DT, params)
        s[idx] = nxt
        alive[idx[outside_region(nxt, theta_limit, x_limit)]] = False
    return {"returns": returns, "lengths": lengths, "terminated": ~alive, "final_states": s}


def collect_cartpole_random(n_samples: int, seed: int = 0, action_max: float = 5.0,
                            theta_limit: float = STABILIZATION_THETA, x_limit: float = X_LIMIT,
                            max_episode_steps: int = 100, init_theta_max: float = INIT_THETA_MAX,
                            params: CartPoleParams = DEFAULT_PARAMS) -> TransitionDataset:
    """The paper's random-agent data: uniform voltages from near upright until the pole falls.

    Episodes start from :func:`sample_initial_states`; every step draws ``a ~ U(-action_max,
    action_max)`` independently of the state (``examples/cartpole_nopg_s_behavioral.py``: 5 V)
    and records ``(s, a, cos theta, s')`` as observations.  An episode ends

    * with ``terminal = True`` on the step whose next state leaves the region
      (``|theta| > theta_limit`` or ``|x| > x_limit``): the MDP stops there, no reward follows,
      so NOPG uses ``gamma_i = 0``;
    * with ``truncation = True`` after ``max_episode_steps`` steps (nopg's ``get_samples`` default
      ``max_ep_transitions = 100``) or when the ``n_samples`` budget ends mid-episode.

    Episodes restart until ``n_samples`` transitions are collected.

    Parameters
    ----------
    n_samples : int
    seed : int
        Seed of the numpy generator (initial angles and actions).
    action_max : float
        Voltage range of the uniform behaviour policy.
    theta_limit, x_limit : float
        Region limits; the paper's text says 3° for ``theta_limit``, nopg's code uses the
        environment's 0.25 rad.
    max_episode_steps : int
    init_theta_max : float
    params : CartPoleParams

    Returns
    -------
    TransitionDataset
        States and next states of shape (n, 5), actions (n, 1), ``episode_ids`` 0, 1, ...

    Raises
    ------
    ValueError
        For a non-positive count or limit.
    """
    from nopg.data.dataset import TransitionDataset

    n_samples = positive_count("n_samples", n_samples)
    max_episode_steps = positive_count("max_episode_steps", max_episode_steps)
    action_max = positive_float("action_max", action_max)
    theta_limit = positive_float("theta_limit", theta_limit)
    x_limit = positive_float("x_limit", x_limit)
    rng = np.random.default_rng(seed)
    states = np.empty((n_samples, 4))
    next_states = np.empty((n_samples, 4))
    actions = np.empty(n_samples)
    terminals = np.zeros(n_samples, dtype=bool)
    truncations = np.zeros(n_samples, dtype=bool)
    episode_ids = np.empty(n_samples, dtype=np.int64)
    i, episode = 0, 0
    while i < n_samples:
        s = sample_initial_states(rng, 1, init_theta_max, params)[0]
        if outside_region(s, theta_limit, x_limit):
            raise ValueError(f"The initial states (|theta| <= {init_theta_max}) are not inside the "
                             f"region |theta| <= {theta_limit}; lower 'init_theta_max'.")
        for t in range(max_episode_steps):
            a = rng.uniform(-action_max, action_max)
            nxt = cartpole_step(s, a, DT, params)
            states[i], actions[i], next_states[i], episode_ids[i] = s, a, nxt, episode
            i += 1
            if outside_region(nxt, theta_limit, x_limit):
                terminals[i - 1] = True
                break
            if t == max_episode_steps - 1 or i == n_samples:
                truncations[i - 1] = True
                break
            s = nxt
        episode += 1
    return TransitionDataset(
        states=state_to_obs(states), actions=actions[:, None], rewards=np.cos(states[:, 1]),
        next_states=state_to_obs(next_states), terminals=terminals, truncations=truncations,
        episode_ids=episode_ids)
