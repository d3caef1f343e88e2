"""Quanser linear cart-pole with the short pole: stabilisation task of the NOPG paper.

The simulator follows TU Darmstadt's ``quanser_robots`` package (``CartpoleStabShort``, the
environment of ``examples/cartpole_nopg_s_behavioral.py`` in ``jacarvalho/nopg``; the
constants are read from the vendored copy in
``TairanHe/EI339-RL_on_Easy21_and_Quanser_Robots``, ``quanser_robots/cartpole/base.py``,
``cartpole.py``, ``common.py``).  Everything is written in the paper's angle convention:

* ``theta = 0`` is the pole **upright** (``quanser_robots`` uses ``theta_q = theta + pi``; its
  ``theta_q = 0`` hangs down); positive ``theta`` is the same direction of rotation.
* state ``s = (x, theta, x_dot, theta_dot)`` in metres, radians and their rates; the
  observation is ``[x, sin theta, cos theta, x_dot, theta_dot]`` (``quanser_robots`` observes
  the same five quantities of ``theta_q``, i.e. ``sin`` and ``cos`` with flipped signs).
* reward ``r_t = cos theta_t`` of the state **before** the action (paper §6; ``quanser_robots``
  pays ``1 - cos theta_q = 1 + cos theta``, the same up to the constant 1), so a 10^4-step
  episode that stays exactly upright returns 10^4.

The dynamics are :mod:`nopg.envs.cartpole_dynamics`'s, episodes without gymnasium and the data
:mod:`nopg.envs.cartpole_data`'s; this module holds the gymnasium environment and imports their
names.

Termination (stabilisation mode): the episode ends when ``|theta| > 0.25`` rad or
``|x| > 0.407 - 0.1 = 0.307`` m (half of the 0.814 m track minus a 0.1 m safety range).  Here
``terminated`` is reported by the step whose *next* state is outside (gymnasium's convention);
``quanser_robots`` flags the step whose *current* state is outside, so its return includes the
reward of one outside state more.  The paper's data episodes end at ``|theta| > 3°`` (§6); the
threshold of :func:`collect_cartpole_random` is therefore a parameter.

Initial state (``quanser_robots`` ``Cartpole._calibrate`` and ``reset``): ``x = 0``,
``theta ~ U(-0.1, 0.1)`` rad, zero velocities, followed by one step with zero voltage whose
result is the first observation.  The NOPG registration ``CartpoleStabShort-v1`` limits episodes
to ``10^4`` steps (200 s).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from numpy.typing import ArrayLike

from .cartpole_data import (
    collect_cartpole_random,
    positive_count,
    positive_float,
    sample_initial_states,
    simulate_cartpole,
)
from .cartpole_dynamics import (
    CARTPOLE_ENV_ID,
    DEFAULT_PARAMS,
    DT,
    EVAL_STEPS,
    INIT_THETA_MAX,
    STABILIZATION_THETA,
    TRACK_HALF_LENGTH,
    V_MAX,
    X_LIMIT,
    CartPoleParams,
    cartpole_accelerations,
    cartpole_energy,
    cartpole_step,
    obs_to_state,
    outside_region,
    state_to_obs,
)

__all__ = [
    "CARTPOLE_ENV_ID",
    "DEFAULT_PARAMS",
    "DT",
    "EVAL_STEPS",
    "INIT_THETA_MAX",
    "STABILIZATION_THETA",
    "TRACK_HALF_LENGTH",
    "V_MAX",
    "X_LIMIT",
    "CartPoleParams",
    "QuanserCartPoleEnv",
    "cartpole_accelerations",
    "cartpole_energy",
    "cartpole_step",
    "collect_cartpole_random",
    "make_cartpole_env",
    "obs_to_state",
    "outside_region",
    "sample_initial_states",
    "simulate_cartpole",
    "state_to_obs",
]


class QuanserCartPoleEnv(gym.Env):
    """Gymnasium wrapper of :func:`cartpole_step` (the dynamics: :mod:`nopg.envs.cartpole_dynamics`;
    reward and limits: the module docstring).

    Parameters
    ----------
    theta_limit, x_limit : float
        Termination limits (0.25 rad, 0.307 m).
    init_theta_max : float
        Initial angles are uniform in ``±init_theta_max``.
    params : CartPoleParams
    render_mode : None
        Rendering is not implemented.

    Notes
    -----
    ``reset(options={"state": (x, theta, x_dot, theta_dot)})`` starts from that exact state
    (no zero-voltage step); :meth:`set_state` overwrites the state at any time.  ``info``
    holds the float64 ``state``.
    """

    metadata: dict[str, Any] = {"render_modes": [], "render_fps": int(round(1 / DT))}

    def __init__(self, theta_limit: float = STABILIZATION_THETA, x_limit: float = X_LIMIT,
                 init_theta_max: float = INIT_THETA_MAX,
                 params: CartPoleParams = DEFAULT_PARAMS, render_mode: str | None = None
                 ) -> None:
        if render_mode is not None:
            raise ValueError(f"QuanserCartPoleEnv has no render modes. Got {render_mode!r}.")
        self.theta_limit = positive_float("theta_limit", theta_limit)
        self.x_limit = positive_float("x_limit", x_limit)
        self.init_theta_max = positive_float("init_theta_max", init_theta_max)
        if not isinstance(params, CartPoleParams):
            raise ValueError(f"params must be a CartPoleParams. Got {type(params).__name__}.")
        self.params = params
        self.render_mode = None
        self.action_space = spaces.Box(-V_MAX, V_MAX, shape=(1,), dtype=np.float64)
        high = np.array([np.inf, 1.0, 1.0, np.inf, np.inf])
        self.observation_space = spaces.Box(-high, high, dtype=np.float64)
        self.state: np.ndarray | None = None

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        if options is not None and "state" in options:
            self.set_state(options["state"])
        else:
            self.state = sample_initial_states(self.np_random, 1, self.init_theta_max,
                                               self.params)[0]
        return state_to_obs(self.state), {"state": self.state.copy()}

    def set_state(self, state: ArrayLike) -> np.ndarray:
        """Overwrite the simulator state; returns the observation."""
        s = np.asarray(state, dtype=np.float64)
        if s.shape != (4,) or not np.all(np.isfinite(s)):
            raise ValueError("The state must be 4 finite floats (x, theta, x_dot, theta_dot). "
                             f"Got {state!r}.")
        self.state = s.copy()
        self.state[1] = (s[1] + np.pi) % (2.0 * np.pi) - np.pi
        return state_to_obs(self.state)

    def step(self, action: ArrayLike) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if self.state is None:
            raise RuntimeError("Call reset() before step().")
        a = np.asarray(action, dtype=np.float64).reshape(-1)
        if a.size != 1 or not np.isfinite(a[0]):
            raise ValueError(f"The action must be one finite voltage. Got {action!r}.")
        reward = float(np.cos(self.state[1]))
        self.state = cartpole_step(self.state, a[0], DT, self.params)
        terminated = bool(outside_region(self.state, self.theta_limit, self.x_limit))
        return (state_to_obs(self.state), reward, terminated, False,
                {"state": self.state.copy()})


def make_cartpole_env(max_episode_steps: int = EVAL_STEPS, **kwargs: Any) -> gym.Env:
    """``gymnasium.make`` the cart-pole (registered as :data:`CARTPOLE_ENV_ID` on first use).

    Parameters
    ----------
    max_episode_steps : int
        Time limit (10^4, as nopg's ``CartpoleStabShort-v1``).
    **kwargs
        Passed to :class:`QuanserCartPoleEnv`.
    """
    max_episode_steps = positive_count("max_episode_steps", max_episode_steps)
    if CARTPOLE_ENV_ID not in gym.registry:
        gym.register(CARTPOLE_ENV_ID, entry_point=QuanserCartPoleEnv, max_episode_steps=EVAL_STEPS)
    return gym.make(CARTPOLE_ENV_ID, max_episode_steps=max_episode_steps, **kwargs)
