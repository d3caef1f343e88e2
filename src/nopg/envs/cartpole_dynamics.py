"""The Quanser linear cart-pole's dynamics (the short pole of the NOPG paper's stabilisation task),
in NumPy: the constants, :class:`CartPoleParams`, the accelerations, one integration step, the
energy, the observation map and the stabilisation region. Conventions (angle, state,
observation): :mod:`nopg.envs.cartpole`.

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
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

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
    "cartpole_accelerations",
    "cartpole_energy",
    "cartpole_step",
    "check_states",
    "obs_to_state",
    "outside_region",
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


def check_states(state: ArrayLike, name: str = "state") -> np.ndarray:
    """``state`` as a float64 array of shape (..., 4) = (x, theta, x_dot, theta_dot); else a
    ``ValueError`` naming it ``name``."""
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
    s = check_states(state)
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
    s = check_states(state)
    acc = cartpole_accelerations(s, np.clip(np.asarray(voltage, np.float64), -V_MAX, V_MAX), params)
    vel = s[..., 2:] + dt * acc
    pos = s[..., :2] + dt * vel
    if wrap:
        pos[..., 1] = (pos[..., 1] + np.pi) % (2.0 * np.pi) - np.pi
    return np.concatenate([pos, vel], axis=-1)


def cartpole_energy(state: ArrayLike, params: CartPoleParams = DEFAULT_PARAMS) -> np.ndarray:
    """Mechanical energy ``1/2 q_dot^T M q_dot + mp g pl cos theta`` (potential 0 at the pivot)."""
    s = check_states(state)
    _, th, xd, thd = np.moveaxis(s, -1, 0)
    p = params
    kinetic = 0.5 * ((p.mp + p.Jeq) * xd**2 - 2.0 * p.mp * p.pl * np.cos(th) * xd * thd
                     + (p.Jp + p.mp * p.pl**2) * thd**2)
    return kinetic + p.mp * p.g * p.pl * np.cos(th)


def state_to_obs(state: ArrayLike) -> np.ndarray:
    """``(x, theta, x_dot, theta_dot) -> [x, sin theta, cos theta, x_dot, theta_dot]``."""
    s = check_states(state)
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
    s = check_states(state)
    th = (s[..., 1] + np.pi) % (2.0 * np.pi) - np.pi
    return (np.abs(th) > theta_limit) | (np.abs(s[..., 0]) > x_limit)
