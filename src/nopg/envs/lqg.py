"""Linear-quadratic Gaussian (LQG) control with a linear Gaussian policy, in closed form.

The paper's gradient-analysis task (paper §6.1 "Linear Quadratic Gaussian Controller" and the
appendix "Gradient Analysis"). Conventions, as in the paper:

* dynamics ``s_{t+1} = A s_t + B a_t`` (no transition noise; ``transition_std`` below adds
  optional isotropic noise ``N(0, transition_std**2 I)`` to the state update),
* reward ``r_t = -(s_t^T Q s_t + a_t^T R a_t)`` (a reward, so returns are negative),
* policy ``a_t = K s_t + Sigma eps_t`` with ``eps_t ~ N(0, I)``; the paper's policy parameters
  are the diagonal ``K = Theta = diag(theta)`` (its displayed ``a_{t+1} = Theta s_t + ...`` is a
  typo for ``a_t``); ``Sigma = 0`` is the deterministic policy,
* objective ``J = E[sum_t gamma^t r_t]`` from the fixed initial state ``s_0``, over ``T`` steps
  (``horizon=T``, ``t = 0 .. T-1``) or the infinite horizon (``horizon=None``).

Paper values (appendix): ``A = diag(1.2, 1.1)``, ``B = Q = Sigma = I``, ``R = 0.1 I``,
``s_0 = [-1, -1]``, ``gamma = 0.9``, 50-step episodes, ``theta = [-0.6, -0.8]``, behaviour
``theta' = [-0.35, -0.5]``; the behaviour policy of the off-policy analysis has the parameters
``(1 - alpha) Theta + alpha Theta'`` (paper §6.2: "a linear combination of Theta and Theta'").

With the closed loop ``F = A + B K``, ``M = Q + K^T R K``, ``W = B Sigma Sigma^T B^T + N`` (``N``
the transition-noise covariance) and ``c = tr(Sigma^T R Sigma)``, the value is
``V_t(s) = -(s^T P_t s + p_t)`` with the backward recursion ``P_T = 0``, ``p_T = 0``,
``P_t = M + gamma F^T P_{t+1} F``, ``p_t = c + gamma (p_{t+1} + tr(P_{t+1} W))``; the infinite
horizon is the fixed point (a discrete Lyapunov equation, which needs the spectral radius of
``sqrt(gamma) F`` below 1). The gradient is ``dJ/dK = -2 sum_t gamma^t L_t X_t`` with
``L_t = R K + gamma B^T P_{t+1} F`` and the state second moments ``X_{t+1} = F X_t F^T + W``,
``X_0 = s_0 s_0^T`` (the adjoint of the derivative recursions ``dP_t``, ``dp_t``); in the infinite
horizon ``dJ/dK = -2 L X`` with ``X = gamma F X F^T + s_0 s_0^T + gamma/(1-gamma) W``. For the
diagonal parametrisation ``dJ/dtheta = diag(dJ/dK)``. This module imports numpy and scipy only.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import ArrayLike
from scipy.linalg import solve_discrete_lyapunov

__all__ = [
    "LQG",
    "PAPER_BEHAVIOUR_THETA",
    "PAPER_HORIZON",
    "PAPER_THETA",
    "collect_lqg",
    "paper_lqg",
]

PAPER_THETA: np.ndarray = np.array([-0.6, -0.8])
"""Parameters ``theta`` of the optimisation policy in the paper's gradient analysis."""

PAPER_BEHAVIOUR_THETA: np.ndarray = np.array([-0.35, -0.5])
"""Off-policy (behaviour) parameters ``theta'`` of the paper's gradient analysis."""

PAPER_HORIZON = 50
"""Episode length of the paper's LQG (appendix "Gradient Analysis")."""


def _finite(name: str, arr: np.ndarray) -> np.ndarray:
    """``arr``, refused (``name`` in the message) if it holds NaN or inf."""
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"The {name} contains NaN or inf values.")
    return arr


def _matrix(name: str, x: ArrayLike, shape: tuple[int, int] | None = None) -> np.ndarray:
    arr = np.array(x, dtype=np.float64)
    if arr.ndim != 2 or (shape is not None and arr.shape != shape):
        want = f"{shape}" if shape is not None else "(rows, cols)"
        raise ValueError(f"The '{name}' matrix must have shape {want}. Got shape {arr.shape}.")
    _finite(f"'{name}' matrix", arr)
    arr.flags.writeable = False
    return arr


def _parameter_matrix(name: str, value: ArrayLike, shape: tuple[int, int],
                      expand: Callable[[np.ndarray], np.ndarray | None], allowed: str) -> np.ndarray:
    """``value`` as a finite float64 matrix of ``shape``: a copy when it has that shape, else
    ``expand(value)`` (the matrix of a shorter form); refused when ``expand`` returns None
    (the message says the parameter must ``allowed``)."""
    arr = np.asarray(value, dtype=np.float64)
    out = arr.copy() if arr.shape == shape else expand(arr)
    if out is None:
        raise ValueError(f"The '{name}' parameter must {allowed}. Got shape {arr.shape}.")
    return _finite(f"'{name}' parameter", out)


def _check_psd(name: str, m: np.ndarray, strict: bool) -> None:
    if not np.allclose(m, m.T, rtol=1e-12, atol=1e-12):
        raise ValueError(f"The '{name}' matrix must be symmetric.")
    low = float(np.linalg.eigvalsh(m).min())
    if low < (1e-12 if strict else -1e-12):
        kind = "positive definite" if strict else "positive semi-definite"
        raise ValueError(f"The '{name}' matrix must be {kind}; its smallest eigenvalue is {low:.3g}.")


@dataclass(frozen=True, eq=False)
class LQG:
    """A discounted LQG problem with a linear Gaussian policy ``a = K s + Sigma eps``.

    Parameters
    ----------
    A : array of shape (d_s, d_s)
        State transition matrix.
    B : array of shape (d_s, d_a)
        Control matrix.
    Q : array of shape (d_s, d_s)
        State cost (symmetric positive semi-definite).
    R : array of shape (d_a, d_a)
        Action cost (symmetric positive definite).
    s0 : array of shape (d_s,)
        Fixed initial state.
    gamma : float
        Discount factor in ``(0, 1)``.
    transition_std : float, default=0.0
        Standard deviation of optional isotropic Gaussian noise on the state update (the paper
        has none).

    Notes
    -----
    Policy arguments ``theta`` are either a vector of shape ``(d_s,)`` (the paper's
    ``K = diag(theta)``, needs ``d_a == d_s``) or a full gain matrix ``K`` of shape
    ``(d_a, d_s)``; gradients are returned in the same shape. ``sigma`` is a scalar, a vector
    of shape ``(d_a,)`` (diagonal) or a matrix of shape ``(d_a, d_a)``; ``0`` is deterministic.
    ``horizon=None`` is the infinite horizon.
    """

    A: np.ndarray
    B: np.ndarray
    Q: np.ndarray
    R: np.ndarray
    s0: np.ndarray
    gamma: float
    transition_std: float = 0.0
    _dims: tuple[int, int] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        a = _matrix("A", self.A)
        d_s = a.shape[0]
        if a.shape != (d_s, d_s):
            raise ValueError(f"The 'A' matrix must be square. Got shape {a.shape}.")
        b = _matrix("B", self.B)
        if b.shape[0] != d_s:
            raise ValueError(f"The 'B' matrix must have {d_s} rows (the state dimension). "
                             f"Got shape {b.shape}.")
        d_a = b.shape[1]
        q = _matrix("Q", self.Q, (d_s, d_s))
        r = _matrix("R", self.R, (d_a, d_a))
        _check_psd("Q", q, strict=False)
        _check_psd("R", r, strict=True)
        s0 = np.array(self.s0, dtype=np.float64).reshape(-1)
        if s0.shape != (d_s,) or not np.all(np.isfinite(s0)):
            raise ValueError(f"The 's0' vector must be finite with shape ({d_s},). Got {self.s0!r}.")
        s0.flags.writeable = False
        g = self.gamma
        if isinstance(g, bool) or not isinstance(g, (int, float, np.floating)) or not 0.0 < g < 1.0:
            raise ValueError(f"The 'gamma' parameter must be a float in (0, 1). Got {g!r} instead.")
        ts = self.transition_std
        if isinstance(ts, bool) or not isinstance(ts, (int, float, np.floating)) \
                or not np.isfinite(ts) or ts < 0.0:
            raise ValueError(f"The 'transition_std' parameter must be a finite float >= 0. Got {ts!r}.")
        for name, value in (("A", a), ("B", b), ("Q", q), ("R", r), ("s0", s0),
                            ("gamma", float(g)), ("transition_std", float(ts)), ("_dims", (d_s, d_a))):
            object.__setattr__(self, name, value)

    # ---------------------------------------------------------------------------- helpers
    @property
    def state_dim(self) -> int:
        return self._dims[0]

    @property
    def action_dim(self) -> int:
        return self._dims[1]

    def gain(self, theta: ArrayLike) -> np.ndarray:
        """The gain matrix ``K`` of shape (d_a, d_s): ``diag(theta)`` for a vector ``theta``."""
        d_s, d_a = self._dims

        def from_vector(th: np.ndarray) -> np.ndarray | None:
            if th.ndim != 1:
                return None
            if d_a != d_s or th.shape != (d_s,):
                raise ValueError(f"A parameter vector 'theta' (K = diag(theta)) needs shape ({d_s},) "
                                 f"and d_a == d_s; got shape {th.shape} with d_a = {d_a}.")
            return np.diag(th)

        return _parameter_matrix("theta", theta, (d_a, d_s), from_vector,
                                 f"have shape ({d_s},) or ({d_a}, {d_s})")

    def noise_matrix(self, sigma: ArrayLike) -> np.ndarray:
        """The policy noise matrix ``Sigma`` of shape (d_a, d_a) from a scalar/vector/matrix."""
        d_a = self.action_dim

        def from_scalar_or_vector(sg: np.ndarray) -> np.ndarray | None:
            if sg.ndim == 0:
                return float(sg) * np.eye(d_a)
            return np.diag(sg) if sg.shape == (d_a,) else None

        return _parameter_matrix("sigma", sigma, (d_a, d_a), from_scalar_or_vector,
                                 f"be a scalar or have shape ({d_a},) or ({d_a}, {d_a})")

    @staticmethod
    def horizon_steps(horizon: int | None) -> int | None:
        """Validate an episode length: a positive int, or ``None`` (infinite horizon)."""
        if horizon is None:
            return None
        if isinstance(horizon, bool) or not isinstance(horizon, (int, np.integer)) or horizon < 1:
            raise ValueError(f"The 'horizon' parameter must be a positive int or None. Got {horizon!r}.")
        return int(horizon)

    def closed_loop(self, theta: ArrayLike) -> np.ndarray:
        """``F = A + B K``, shape (d_s, d_s)."""
        return self.A + self.B @ self.gain(theta)

    def spectral_radius(self, theta: ArrayLike) -> float:
        """Spectral radius of ``sqrt(gamma) F``; the infinite-horizon return is finite iff < 1."""
        return float(np.sqrt(self.gamma) * np.max(np.abs(np.linalg.eigvals(self.closed_loop(theta)))))

    def is_stable(self, theta: ArrayLike) -> bool:
        """Whether the discounted infinite-horizon return of ``theta`` is finite."""
        return self.spectral_radius(theta) < 1.0

    def check_stable(self, theta: ArrayLike) -> None:
        """Raise a ValueError unless ``sqrt(gamma) (A + B K(theta))`` has spectral radius < 1."""
        rho = self.spectral_radius(theta)
        if not rho < 1.0:
            raise ValueError(
                f"The closed loop A + B K is not discount-stable: the spectral radius of "
                f"sqrt(gamma) (A + B K) is {rho:.4f} >= 1, so the infinite-horizon return is -inf. "
                "Use a finite 'horizon' or a stabilising 'theta'.")

    def _parts(self, theta: ArrayLike, sigma: ArrayLike
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, float]:
        """``K, F, M, W, c`` for the policy ``(theta, sigma)``."""
        k = self.gain(theta)
        s = self.noise_matrix(sigma)
        f = self.A + self.B @ k
        m = self.Q + k.T @ self.R @ k
        w = self.B @ s @ s.T @ self.B.T + self.transition_std ** 2 * np.eye(self.state_dim)
        c = float(np.trace(s.T @ self.R @ s))
        return k, f, m, w, c

    # ------------------------------------------------------------------- value functions
    def value_matrices(self, theta: ArrayLike, sigma: ArrayLike = 0.0, horizon: int | None = None
                       ) -> tuple[np.ndarray, np.ndarray]:
        """Quadratic value coefficients: ``V_t(s) = -(s^T P_t s + p_t)``.

        Returns
        -------
        P : array of shape (T + 1, d_s, d_s), or (d_s, d_s) for ``horizon=None``
            ``P[t]`` for ``t = 0 .. T`` (``P[T] = 0``).
        p : array of shape (T + 1,), or a 0-d array for ``horizon=None``
            The constant terms from the policy (and transition) noise.

        Raises
        ------
        ValueError
            For ``horizon=None`` when ``sqrt(gamma) (A + B K)`` has spectral radius >= 1.
        """
        horizon = self.horizon_steps(horizon)
        _, f, m, w, c = self._parts(theta, sigma)
        g = self.gamma
        if horizon is None:
            self.check_stable(theta)
            p_mat = solve_discrete_lyapunov(np.sqrt(g) * f.T, m)
            p_mat = 0.5 * (p_mat + p_mat.T)
            return p_mat, np.asarray((c + g * np.trace(p_mat @ w)) / (1.0 - g))
        d_s = self.state_dim
        p_mats = np.zeros((horizon + 1, d_s, d_s))
        p_vec = np.zeros(horizon + 1)
        for t in range(horizon - 1, -1, -1):
            p_mats[t] = m + g * f.T @ p_mats[t + 1] @ f
            p_vec[t] = c + g * (p_vec[t + 1] + np.trace(p_mats[t + 1] @ w))
        return p_mats, p_vec

    def expected_return(self, theta: ArrayLike, sigma: ArrayLike = 0.0,
                        horizon: int | None = None) -> float:
        """Exact ``J = E[sum_{t<T} gamma^t r_t]`` from ``s0`` (``horizon=None``: T = inf)."""
        p_mat, p_vec = self.value_matrices(theta, sigma, horizon)
        if horizon is not None:
            p_mat, p_vec = p_mat[0], p_vec[0]
        return float(-(self.s0 @ p_mat @ self.s0 + p_vec))

    def return_gradient(self, theta: ArrayLike, sigma: ArrayLike = 0.0,
                        horizon: int | None = None) -> np.ndarray:
        """Exact ``dJ/dtheta`` (the ascent direction), in the shape of ``theta``.

        See the module docstring for the adjoint formula ``dJ/dK = -2 sum_t gamma^t L_t X_t``.
        ``sigma`` is held fixed (it does not depend on ``theta``).
        """
        horizon = self.horizon_steps(horizon)
        k, f, _, w, _ = self._parts(theta, sigma)
        g = self.gamma
        x0 = np.outer(self.s0, self.s0)
        if horizon is None:
            self.check_stable(theta)
            p_mat, _ = self.value_matrices(theta, sigma, None)
            x = solve_discrete_lyapunov(np.sqrt(g) * f, x0 + g / (1.0 - g) * w)
            grad_k = -2.0 * (self.R @ k + g * self.B.T @ p_mat @ f) @ x
        else:
            p_mats, _ = self.value_matrices(theta, sigma, horizon)
            grad_k = np.zeros_like(k)
            x = x0
            for t in range(horizon):
                grad_k -= 2.0 * g ** t * (self.R @ k + g * self.B.T @ p_mats[t + 1] @ f) @ x
                x = f @ x @ f.T + w
        return np.diag(grad_k).copy() if np.ndim(theta) == 1 else grad_k

    # ----------------------------------------------------------------------- Q-function
    def _next_value_terms(self, theta: ArrayLike, sigma: ArrayLike, horizon: int | None, t: int
                          ) -> tuple[np.ndarray, float]:
        horizon = self.horizon_steps(horizon)
        if isinstance(t, bool) or not isinstance(t, (int, np.integer)) or t < 0 \
                or (horizon is not None and t >= horizon):
            raise ValueError(f"The time step 't' must be an int in [0, horizon). Got {t!r}.")
        p_mat, p_vec = self.value_matrices(theta, sigma, horizon)
        if horizon is None:
            return p_mat, float(p_vec)
        return p_mat[t + 1], float(p_vec[t + 1])

    def _states_actions(self, states: ArrayLike, actions: ArrayLike
                        ) -> tuple[np.ndarray, np.ndarray]:
        s = np.asarray(states, dtype=np.float64)
        a = np.asarray(actions, dtype=np.float64)
        if s.shape[-1:] != (self.state_dim,) or a.shape[-1:] != (self.action_dim,):
            raise ValueError(f"states must have shape (..., {self.state_dim}) and actions "
                             f"(..., {self.action_dim}); got {s.shape} and {a.shape}.")
        return s, a

    def reward(self, states: ArrayLike, actions: ArrayLike) -> np.ndarray:
        """``r(s, a) = -(s^T Q s + a^T R a)`` for batches of shape (..., d_s), (..., d_a)."""
        s, a = self._states_actions(states, actions)
        return -(np.einsum("...i,ij,...j->...", s, self.Q, s) + np.einsum("...i,ij,...j->...", a, self.R, a))

    def mean_next_state(self, states: ArrayLike, actions: ArrayLike) -> np.ndarray:
        """``A s + B a`` (the next state without transition noise), shape (..., d_s)."""
        s, a = self._states_actions(states, actions)
        return s @ self.A.T + a @ self.B.T

    def q_function(self, states: ArrayLike, actions: ArrayLike, theta: ArrayLike,
                   sigma: ArrayLike = 0.0, horizon: int | None = None, t: int = 0) -> np.ndarray:
        """Exact ``Q_t(s, a) = r(s, a) + gamma E[V_{t+1}(s')]`` of the policy ``(theta, sigma)``.

        ``t`` is the time step (finite horizon only; ``V_T = 0``). The stochastic policy's Q
        differs from the deterministic one only by the constant ``-gamma p_{t+1}``.

        Returns
        -------
        array of shape (...)
        """
        p_next, c_next = self._next_value_terms(theta, sigma, horizon, t)
        nxt = self.mean_next_state(states, actions)
        noise = self.transition_std ** 2 * np.trace(p_next)
        v_next = -(np.einsum("...i,ij,...j->...", nxt, p_next, nxt) + c_next + noise)
        return self.reward(states, actions) + self.gamma * v_next

    def q_action_gradient(self, states: ArrayLike, actions: ArrayLike, theta: ArrayLike,
                          sigma: ArrayLike = 0.0, horizon: int | None = None, t: int = 0
                          ) -> np.ndarray:
        """``dQ_t/da = -2 R a - 2 gamma B^T P_{t+1} (A s + B a)``, shape (..., d_a).

        This is the same for the deterministic and the stochastic policy (the noise only shifts
        Q by a constant).
        """
        p_next, _ = self._next_value_terms(theta, sigma, horizon, t)
        s, a = self._states_actions(states, actions)
        nxt = self.mean_next_state(s, a)
        return -2.0 * a @ self.R.T - 2.0 * self.gamma * nxt @ (p_next @ self.B)

    # ---------------------------------------------------------------------------- sampling
    def rollout_returns(self, theta: ArrayLike, sigma: ArrayLike, horizon: int, n_episodes: int,
                        seed: np.random.Generator | int | None = None) -> np.ndarray:
        """Discounted returns of ``n_episodes`` simulated episodes of ``horizon`` steps, (m,);
        ``seed`` (formerly ``rng``) seeds ``numpy.random.default_rng``."""
        horizon = self.horizon_steps(horizon)
        if horizon is None:
            raise ValueError("rollout_returns needs a finite 'horizon'.")
        rng = np.random.default_rng(seed)
        k = self.gain(theta)
        s_mat = self.noise_matrix(sigma)
        s = np.tile(self.s0, (int(n_episodes), 1))
        out = np.zeros(int(n_episodes))
        for t in range(horizon):
            a = s @ k.T + rng.standard_normal((s.shape[0], self.action_dim)) @ s_mat.T
            out += self.gamma ** t * self.reward(s, a)
            s = self.mean_next_state(s, a)
            if self.transition_std > 0.0:
                s = s + self.transition_std * rng.standard_normal(s.shape)
        return out


def paper_lqg() -> LQG:
    """The paper's 2-D LQG (appendix "Gradient Analysis"): ``A = diag(1.2, 1.1)``, ``B = Q = I``,
    ``R = 0.1 I``, ``s0 = [-1, -1]``, ``gamma = 0.9``, no transition noise (policy noise
    ``Sigma = I`` is passed as ``sigma=1.0``)."""
    return LQG(A=np.diag([1.2, 1.1]), B=np.eye(2), Q=np.eye(2), R=0.1 * np.eye(2),
               s0=np.array([-1.0, -1.0]), gamma=0.9)


def collect_lqg(
    theta: ArrayLike = PAPER_THETA,
    sigma: ArrayLike = 1.0,
    n_episodes: int = 10,
    horizon: int = PAPER_HORIZON,
    seed: int = 0,
    alpha: float = 0.0,
    behaviour_theta: ArrayLike = PAPER_BEHAVIOUR_THETA,
    problem: LQG | None = None,
):
    """Sample LQG episodes from the paper's off-policy behaviour policy.

    The behaviour policy is ``a = ((1 - alpha) K(theta) + alpha K(theta')) s + Sigma eps``: a
    linear interpolation of the parameters (paper §6.2, "a policy which is a linear
    combination of Theta and Theta'"; ``alpha = 0`` is on-policy, ``alpha = 1`` samples from
    ``theta'``), not a mixture of the two policies.

    Parameters
    ----------
    theta : array-like, default=PAPER_THETA
        Parameters of the target policy (vector for ``diag``, or a gain matrix).
    sigma : scalar or array-like, default=1.0
        Policy noise ``Sigma`` of the behaviour policy (the paper's ``Sigma = I``).
    n_episodes : int, default=10
        Number of episodes.
    horizon : int, default=50
        Steps per episode; the last transition of each episode is a truncation, not terminal.
    seed : int, default=0
        Seed of ``numpy.random.default_rng`` (policy and transition noise).
    alpha : float in [0, 1], default=0.0
        Degree of off-policiness.
    behaviour_theta : array-like, default=PAPER_BEHAVIOUR_THETA
        The off-policy parameters ``theta'`` (same shape as ``theta``).
    problem : LQG, optional
        The system (default :func:`paper_lqg`).

    Returns
    -------
    TransitionDataset
        ``n_episodes * horizon`` transitions in episode order, with ``episode_ids``,
        ``truncations`` at each episode end and no terminals.
    """
    from nopg.data.dataset import TransitionDataset

    lqg = paper_lqg() if problem is None else problem
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float, np.floating)) \
            or not 0.0 <= float(alpha) <= 1.0:
        raise ValueError(f"The 'alpha' parameter must be a float in [0, 1]. Got {alpha!r}.")
    if isinstance(n_episodes, bool) or not isinstance(n_episodes, (int, np.integer)) or n_episodes < 1:
        raise ValueError(f"The 'n_episodes' parameter must be a positive int. Got {n_episodes!r}.")
    horizon = lqg.horizon_steps(horizon)
    if horizon is None:
        raise ValueError("collect_lqg needs a finite 'horizon'.")
    k = (1.0 - float(alpha)) * lqg.gain(theta) + float(alpha) * lqg.gain(behaviour_theta)
    s_mat = lqg.noise_matrix(sigma)
    rng = np.random.default_rng(seed)
    m, d_s, d_a = int(n_episodes), lqg.state_dim, lqg.action_dim
    states = np.empty((m, horizon, d_s))
    actions = np.empty((m, horizon, d_a))
    s = np.tile(lqg.s0, (m, 1))
    for t in range(horizon):
        states[:, t] = s
        actions[:, t] = s @ k.T + rng.standard_normal((m, d_a)) @ s_mat.T
        s = lqg.mean_next_state(s, actions[:, t])
        if lqg.transition_std > 0.0:
            s = s + lqg.transition_std * rng.standard_normal(s.shape)
    next_states = np.concatenate([states[:, 1:], s[:, None]], axis=1)
    rewards = lqg.reward(states, actions)
    truncations = np.zeros((m, horizon), dtype=bool)
    truncations[:, -1] = True
    n = m * horizon
    return TransitionDataset(
        states=states.reshape(n, d_s), actions=actions.reshape(n, d_a),
        rewards=rewards.reshape(n), next_states=next_states.reshape(n, d_s),
        terminals=np.zeros(n, dtype=bool), truncations=truncations.reshape(n),
        episode_ids=np.repeat(np.arange(m), horizon))
