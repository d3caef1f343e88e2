"""A gymnasium environment for the LQG of :mod:`nopg.envs.lqg` (the paper's gradient-analysis task).

``LQGEnv`` simulates ``s' = A s + B a (+ optional noise)`` with reward ``-(s^T Q s + a^T R a)``
from the fixed initial state ``s0`` and truncates (never terminates) after ``horizon`` steps.
Defaults are the paper's system (:func:`nopg.envs.lqg.paper_lqg`, 50 steps). The exact return of
a linear policy is :meth:`nopg.envs.lqg.LQG.expected_return` (``env.unwrapped.problem``).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from numpy.typing import ArrayLike

from nopg.envs.lqg import LQG, PAPER_HORIZON, paper_lqg

__all__ = ["LQG_ENV_ID", "LQGEnv", "register_lqg"]

LQG_ENV_ID = "nopg/LQG-v0"
"""The id under which :func:`register_lqg` registers :class:`LQGEnv` with gymnasium."""


class LQGEnv(gym.Env):
    """Discrete-time linear-quadratic system as a gymnasium environment.

    Parameters
    ----------
    A, B, Q, R : array-like, optional
        System and cost matrices (default: the paper's, see :func:`nopg.envs.lqg.paper_lqg`).
    s0 : array-like, optional
        Initial state (default ``[-1, -1]``).
    gamma : float, default=0.9
        Discount factor of the attached :class:`~nopg.envs.lqg.LQG` problem (the environment
        itself reports undiscounted rewards).
    horizon : int, default=50
        Steps per episode; the last step returns ``truncated=True``.
    transition_std : float, default=0.0
        Standard deviation of isotropic Gaussian noise on the state update (paper: none).
    initial_std : float, default=0.0
        Standard deviation of Gaussian noise added to ``s0`` at reset (paper: none).

    Notes
    -----
    Spaces are unbounded ``Box``es in float64. ``reset(options={"state": s})`` starts from ``s``.
    """

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, A: ArrayLike | None = None, B: ArrayLike | None = None,
                 Q: ArrayLike | None = None, R: ArrayLike | None = None,
                 s0: ArrayLike | None = None, gamma: float = 0.9, horizon: int = PAPER_HORIZON,
                 transition_std: float = 0.0, initial_std: float = 0.0) -> None:
        base = paper_lqg()
        self.problem = LQG(
            A=base.A if A is None else A, B=base.B if B is None else B,
            Q=base.Q if Q is None else Q, R=base.R if R is None else R,
            s0=base.s0 if s0 is None else s0, gamma=gamma, transition_std=transition_std)
        h = LQG.horizon_steps(horizon)
        if h is None:
            raise ValueError("The 'horizon' parameter must be a positive int. Got None.")
        self.horizon = h
        if isinstance(initial_std, bool) or not isinstance(initial_std, (int, float, np.floating)) \
                or not np.isfinite(initial_std) or initial_std < 0.0:
            raise ValueError(f"The 'initial_std' parameter must be a finite float >= 0. Got {initial_std!r}.")
        self.initial_std = float(initial_std)
        d_s, d_a = self.problem.state_dim, self.problem.action_dim
        self.observation_space = spaces.Box(-np.inf, np.inf, shape=(d_s,), dtype=np.float64)
        self.action_space = spaces.Box(-np.inf, np.inf, shape=(d_a,), dtype=np.float64)
        self._state = self.problem.s0.copy()
        self._t = 0

    @property
    def state(self) -> np.ndarray:
        """A copy of the current state, shape (d_s,)."""
        return self._state.copy()

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        if options and "state" in options:
            state = np.asarray(options["state"], dtype=np.float64).reshape(-1)
            if state.shape != (self.problem.state_dim,) or not np.all(np.isfinite(state)):
                raise ValueError(f"options['state'] must be finite with shape "
                                 f"({self.problem.state_dim},). Got {options['state']!r}.")
        else:
            state = self.problem.s0.copy()
            if self.initial_std > 0.0:
                state = state + self.initial_std * self.np_random.standard_normal(state.shape)
        self._state = state
        self._t = 0
        return self._state.copy(), {"t": 0}

    def step(self, action: ArrayLike) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        a = np.asarray(action, dtype=np.float64).reshape(-1)
        if a.shape != (self.problem.action_dim,) or not np.all(np.isfinite(a)):
            raise ValueError(f"The action must be finite with shape ({self.problem.action_dim},). "
                             f"Got {action!r}.")
        reward = float(self.problem.reward(self._state, a))
        nxt = self.problem.mean_next_state(self._state, a)
        if self.problem.transition_std > 0.0:
            nxt = nxt + self.problem.transition_std * self.np_random.standard_normal(nxt.shape)
        self._state = nxt
        self._t += 1
        return self._state.copy(), reward, False, self._t >= self.horizon, {"t": self._t}


def register_lqg() -> None:
    """Register :class:`LQGEnv` with gymnasium as ``nopg/LQG-v0`` (idempotent)."""
    if LQG_ENV_ID not in gym.registry:
        gym.register(id=LQG_ENV_ID, entry_point="nopg.envs.lqg_env:LQGEnv")
