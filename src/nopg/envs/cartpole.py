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

Equations of motion (voltage ``V`` in volts; ``quanser_robots`` ``CartpoleDynamics``)::

    F   = eta_g Kg eta_m Kt / (Rm r_mp) * (eta_m V - Kg Km x_dot / r_mp)      # ≈ 1.7235 V - 7.7236 x_dot
    M   = [[mp + Jeq,            -mp pl cos theta],
           [-mp pl cos theta,     Jp + mp pl^2   ]]
    b   = [F - Beq x_dot - c * mp pl sin theta * theta_dot^2,
           -Bp theta_dot + mp pl g sin theta]
    M [x_ddot, theta_ddot]^T = b

with ``Jp = mp pl^2 / 3`` and ``Jeq = mc + eta_g Kg^2 Jm / r_mp^2``.  ``c = +1`` is the
Euler-Lagrange equation of a cart with a rigid pole (pole centre of mass at
``(x - pl sin theta, pl cos theta)``); it makes ``d/dt`` of the mechanical energy equal to the
power of the motor force minus the two viscous losses exactly (tested).  ``quanser_robots`` and
SimuRLacra's ``QCartPoleSim`` write the centripetal term with the opposite sign (``c = -1``),
which is not energy-consistent; ``CartPoleParams(centripetal_sign=-1.0)`` reproduces them.  Near
the upright equilibrium the term is second order (``theta * theta_dot^2``) and does not matter
for stabilisation.

Integration (``quanser_robots`` ``common.py``): semi-implicit (symplectic) Euler with
``dt = 1/fs``, ``v += dt * acc`` then ``q += dt * v``; the NOPG registration uses
``fs = fs_ctrl = 50`` Hz, one simulation step per control step, ``dt = 0.02`` s.  The returned
angle is wrapped to ``[-pi, pi)``.  Omitted from ``quanser_robots``: the ``1e-6 N(0, 1)`` noise
it adds to the voltage every step (drawn from the global numpy generator).  Voltages are clipped
to the amplifier range ``±24`` V (``quanser_robots`` declares ``Box(-24, 24)`` but does not clip
in simulation; the paper's policies output ``5 tanh`` and never reach it).

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

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import ArrayLike

if TYPE_CHECKING:  # pragma: no cover - typing only
    from nopg.data import TransitionDataset

import gymnasium as gym
from gymnasium import spaces

__all__ = [
    "CARTPOLE_ENV_ID",
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

CARTPOLE_ENV_ID = "nopg/QuanserCartpoleStabShort-v0"
DT = 0.02
"""Control (= simulation) period in seconds: ``fs = fs_ctrl = 50`` Hz (nopg's registration)."""
V_MAX = 24.0
"""Amplifier voltage range of the Quanser system, ``quanser_robots`` ``action_space``."""
TRACK_HALF_LENGTH = 0.814 / 2.0
"""Half of the track length ``X_LIM = 0.814`` m (``quanser_robots`` ``_x_lim``)."""
X_LIMIT = TRACK_HALF_LENGTH - 0.1
"""Termination at ``|x| > _x_lim - safe_range = 0.307`` m."""
STABILIZATION_THETA = 0.25
"""Termination at ``|theta| > stabilization_th = 0.25`` rad (≈ 14.3°) from upright."""
INIT_THETA_MAX = 0.1
"""Initial angles are uniform in ``[-0.1, 0.1]`` rad around upright (``Cartpole._calibrate``)."""
EVAL_STEPS = 10_000
"""Episode length of the NOPG registration ``CartpoleStabShort-v1`` and of the paper's evaluation."""


@dataclass(frozen=True)
class CartPoleParams:
    """Physical parameters of the Quanser cart-pole, short pole.

    Defaults are ``quanser_robots`` ``CartpoleDynamics(long=False)``.

    Attributes
    ----------
    g : float
        Gravitational acceleration [m/s^2].
    eta_m, eta_g : float
        Motor and planetary-gearbox efficiencies.
    Kg : float
        Gear ratio.
    Jm : float
        Rotor inertia [kg m^2].
    r_mp : float
        Motor pinion radius [m].
    Rm : float
        Armature resistance [Ohm].
    Kt, Km : float
        Motor torque constant [N m/A] and back-EMF constant [V s/rad].
    mc : float
        Cart mass [kg].
    mp : float
        Pole mass [kg] (short pole).
    pl : float
        Half pole length, the distance from the pivot to the pole's centre of mass [m].
    Beq : float
        Equivalent viscous damping of the cart [N s/m].
    Bp : float
        Viscous damping at the pole pivot [N m s/rad].
    centripetal_sign : float
        ``+1`` for the Euler-Lagrange equations, ``-1`` for ``quanser_robots``' sign of the
        ``mp pl sin(theta) theta_dot^2`` term (see the module docstring).
    """

    g: float = 9.81
    eta_m: float = 1.0
    eta_g: float = 1.0
    Kg: float = 3.71
    Jm: float = 3.9e-7
    r_mp: float = 6.35e-3
    Rm: float = 2.6
    Kt: float = 0.00767
    Km: float = 0.00767
    mc: float = 0.37
    mp: float = 0.127
    pl: float = 0.3365 / 2.0
    Beq: float = 5.4
    Bp: float = 0.0024
    centripetal_sign: float = 1.0

    def __post_init__(self) -> None:
        for name in ("g", "eta_m", "eta_g", "Kg", "r_mp", "Rm", "mc", "mp", "pl"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise ValueError(f"The '{name}' parameter of CartPoleParams must be a positive "
                                 f"finite float. Got {value!r} instead.")
        for name in ("Jm", "Kt", "Km", "Beq", "Bp"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                raise ValueError(f"The '{name}' parameter of CartPoleParams must be a "
                                 f"non-negative finite float. Got {value!r} instead.")
        if self.centripetal_sign not in (1.0, -1.0):
            raise ValueError("The 'centripetal_sign' parameter of CartPoleParams must be +1 or -1. "
                             f"Got {self.centripetal_sign!r} instead.")

    @property
    def Jp(self) -> float:
        """Pole inertia about its centre of mass, ``mp pl^2 / 3`` [kg m^2]."""
        return self.pl**2 * self.mp / 3.0

    @property
    def Jeq(self) -> float:
        """Equivalent cart mass including the reflected rotor inertia [kg]."""
        return self.mc + self.eta_g * self.Kg**2 * self.Jm / self.r_mp**2

    @property
    def voltage_gain(self) -> float:
        """Force per volt, ``eta_g Kg eta_m^2 Kt / (Rm r_mp)`` [N/V]."""
        return self.eta_g * self.Kg * self.eta_m**2 * self.Kt / (self.Rm * self.r_mp)

    @property
    def back_emf_gain(self) -> float:
        """Force per cart velocity from the back-EMF, ``eta_g Kg^2 eta_m Kt Km / (Rm r_mp^2)``."""
        return self.eta_g * self.Kg**2 * self.eta_m * self.Kt * self.Km / (self.Rm * self.r_mp**2)


DEFAULT_PARAMS = CartPoleParams()


def _states(state: ArrayLike, name: str = "state") -> np.ndarray:
    arr = np.asarray(state, dtype=np.float64)
    if arr.ndim == 0 or arr.shape[-1] != 4:
        raise ValueError(f"The '{name}' must have shape (..., 4) = (x, theta, x_dot, theta_dot). "
                         f"Got shape {arr.shape}.")
    return arr


def cartpole_accelerations(state: ArrayLike, voltage: ArrayLike,
                           params: CartPoleParams = DEFAULT_PARAMS) -> np.ndarray:
    """Continuous-time accelerations ``(x_ddot, theta_ddot)`` (equations in the module docstring).

    Parameters
    ----------
    state : array_like of shape (..., 4)
        ``(x, theta, x_dot, theta_dot)``, ``theta = 0`` upright.
    voltage : array_like of shape (...) or (..., 1)
        Motor voltage (not clipped here).
    params : CartPoleParams

    Returns
    -------
    numpy.ndarray of shape (..., 2)
    """
    s = _states(state)
    v = np.asarray(voltage, dtype=np.float64)
    if v.ndim == s.ndim and v.shape[-1:] == (1,):
        v = v[..., 0]
    _, th, xd, thd = np.moveaxis(s, -1, 0)
    p = params
    force = p.voltage_gain * v - p.back_emf_gain * xd
    sin, cos = np.sin(th), np.cos(th)
    m11 = p.mp + p.Jeq
    m12 = -p.mp * p.pl * cos
    m22 = p.Jp + p.mp * p.pl**2
    b1 = force - p.Beq * xd - p.centripetal_sign * p.mp * p.pl * sin * thd**2
    b2 = -p.Bp * thd + p.mp * p.pl * p.g * sin
    det = m11 * m22 - m12**2  # > 0: (mp + Jeq)(Jp + mp pl^2) > (mp pl)^2
    return np.stack([(m22 * b1 - m12 * b2) / det, (m11 * b2 - m12 * b1) / det], axis=-1)


def cartpole_step(state: ArrayLike, voltage: ArrayLike, dt: float = DT,
                  params: CartPoleParams = DEFAULT_PARAMS, wrap: bool = True) -> np.ndarray:
    """One symplectic-Euler step: velocities first, then positions with the new velocities.

    Parameters
    ----------
    state : array_like of shape (..., 4)
    voltage : array_like of shape (...) or (..., 1)
        Clipped to ``±V_MAX``.
    dt : float
        Step in seconds (``0.02`` for 50 Hz).
    params : CartPoleParams
    wrap : bool
        Wrap ``theta`` to ``[-pi, pi)``.

    Returns
    -------
    numpy.ndarray of shape (..., 4)
    """
    s = _states(state)
    acc = cartpole_accelerations(s, np.clip(np.asarray(voltage, np.float64), -V_MAX, V_MAX), params)
    vel = s[..., 2:] + dt * acc
    pos = s[..., :2] + dt * vel
    if wrap:
        pos[..., 1] = (pos[..., 1] + np.pi) % (2.0 * np.pi) - np.pi
    return np.concatenate([pos, vel], axis=-1)


def cartpole_energy(state: ArrayLike, params: CartPoleParams = DEFAULT_PARAMS) -> np.ndarray:
    """Mechanical energy ``1/2 q_dot^T M q_dot + mp g pl cos theta`` (potential 0 at the pivot)."""
    s = _states(state)
    _, th, xd, thd = np.moveaxis(s, -1, 0)
    p = params
    kinetic = 0.5 * ((p.mp + p.Jeq) * xd**2 - 2.0 * p.mp * p.pl * np.cos(th) * xd * thd
                     + (p.Jp + p.mp * p.pl**2) * thd**2)
    return kinetic + p.mp * p.g * p.pl * np.cos(th)


def state_to_obs(state: ArrayLike) -> np.ndarray:
    """``(x, theta, x_dot, theta_dot) -> [x, sin theta, cos theta, x_dot, theta_dot]``."""
    s = _states(state)
    return np.stack([s[..., 0], np.sin(s[..., 1]), np.cos(s[..., 1]), s[..., 2], s[..., 3]], -1)


def obs_to_state(obs: ArrayLike) -> np.ndarray:
    """Inverse of :func:`state_to_obs` (``theta = atan2(sin, cos)``)."""
    o = np.asarray(obs, dtype=np.float64)
    if o.ndim == 0 or o.shape[-1] != 5:
        raise ValueError("Cart-pole observations must have shape (..., 5) = "
                         f"[x, sin th, cos th, x_dot, th_dot]. Got shape {o.shape}.")
    return np.stack([o[..., 0], np.arctan2(o[..., 1], o[..., 2]), o[..., 3], o[..., 4]], -1)


def outside_region(state: ArrayLike, theta_limit: float = STABILIZATION_THETA,
                   x_limit: float = X_LIMIT) -> np.ndarray:
    """True where ``|theta| > theta_limit`` (wrapped) or ``|x| > x_limit``."""
    s = _states(state)
    th = (s[..., 1] + np.pi) % (2.0 * np.pi) - np.pi
    return (np.abs(th) > theta_limit) | (np.abs(s[..., 0]) > x_limit)


def _positive(name: str, value: float) -> float:
    try:
        out = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"The '{name}' parameter must be a positive float. Got {value!r}.") from None
    if not (math.isfinite(out) and out > 0):
        raise ValueError(f"The '{name}' parameter must be a positive float. Got {value!r}.")
    return out


def _count(name: str, value: int) -> int:
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
    size = _count("size", size)
    theta_max = _positive("theta_max", theta_max)
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
    n_steps = _count("n_steps", n_steps)
    s = _states(initial_states, "initial_states").reshape(-1, 4).copy()
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
    from nopg.data import TransitionDataset

    n_samples = _count("n_samples", n_samples)
    max_episode_steps = _count("max_episode_steps", max_episode_steps)
    action_max = _positive("action_max", action_max)
    theta_limit = _positive("theta_limit", theta_limit)
    x_limit = _positive("x_limit", x_limit)
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


class QuanserCartPoleEnv(gym.Env):
    """Gymnasium wrapper of :func:`cartpole_step` (module docstring: dynamics, reward, limits).

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
        self.theta_limit = _positive("theta_limit", theta_limit)
        self.x_limit = _positive("x_limit", x_limit)
        self.init_theta_max = _positive("init_theta_max", init_theta_max)
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
    max_episode_steps = _count("max_episode_steps", max_episode_steps)
    if CARTPOLE_ENV_ID not in gym.registry:
        gym.register(CARTPOLE_ENV_ID, entry_point=QuanserCartPoleEnv, max_episode_steps=EVAL_STEPS)
    return gym.make(CARTPOLE_ENV_ID, max_episode_steps=max_episode_steps, **kwargs)
