"""LQG closed forms (return, gradient, Q), the gymnasium env and the data collector."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from nopg.envs.lqg import (
    LQG,
    PAPER_BEHAVIOUR_THETA,
    PAPER_HORIZON,
    PAPER_THETA,
    collect_lqg,
    paper_lqg,
)
from nopg.envs.lqg_env import LQG_ENV_ID, LQGEnv, register_lqg

FULL_GAIN = np.array([[-0.6, 0.1], [-0.05, -0.8]])


def _noisy_lqg() -> LQG:
    """A non-diagonal system with transition noise, to exercise every term."""
    return LQG(A=[[1.1, 0.2], [0.0, 0.9]], B=[[1.0, 0.3], [0.1, 0.8]], Q=[[1.0, 0.2], [0.2, 0.5]],
               R=[[0.2, 0.05], [0.05, 0.1]], s0=[0.5, -1.0], gamma=0.85, transition_std=0.3)


def _fd_gradient(lqg: LQG, theta: np.ndarray, sigma, horizon, eps: float = 1e-6) -> np.ndarray:
    grad = np.zeros_like(theta)
    for idx in np.ndindex(theta.shape):
        step = np.zeros_like(theta)
        step[idx] = eps
        grad[idx] = (lqg.expected_return(theta + step, sigma, horizon)
                     - lqg.expected_return(theta - step, sigma, horizon)) / (2 * eps)
    return grad


def _gaussian_mean(fn, mean: np.ndarray, chol: np.ndarray) -> np.ndarray:
    """E[fn(a)], a ~ N(mean, chol chol^T), exact for quadratic fn (symmetric sigma points)."""
    d = mean.shape[0]
    points = [mean + sign * np.sqrt(d) * chol[:, i] for i in range(d) for sign in (1.0, -1.0)]
    return np.mean([fn(p) for p in points], axis=0)


# ---------------------------------------------------------------------- closed-form returns
@pytest.mark.parametrize("sigma", [0.0, 1.0])
def test_finite_horizon_return_matches_monte_carlo(sigma):
    lqg = paper_lqg()
    exact = lqg.expected_return(PAPER_THETA, sigma, PAPER_HORIZON)
    returns = lqg.rollout_returns(PAPER_THETA, sigma, PAPER_HORIZON, 20000, seed=0)
    if sigma == 0.0:
        np.testing.assert_allclose(returns, exact, rtol=1e-12)
    else:
        se = returns.std(ddof=1) / np.sqrt(returns.size)
        assert abs(returns.mean() - exact) < 2 * se
        # the noise constant is large: a wrong trace term would be many standard errors off
        assert abs(exact - lqg.expected_return(PAPER_THETA, 0.0, PAPER_HORIZON)) > 100 * se


def test_infinite_horizon_return_matches_long_monte_carlo_and_recursion():
    lqg = _noisy_lqg()
    theta = np.array([[-0.7, -0.1], [0.0, -0.5]])
    exact = lqg.expected_return(theta, 0.5, None)
    # gamma^400 < 1e-28: the truncated recursion equals the Lyapunov solution
    np.testing.assert_allclose(lqg.expected_return(theta, 0.5, 400), exact, rtol=1e-10)
    returns = lqg.rollout_returns(theta, 0.5, 200, 20000, seed=1)
    se = returns.std(ddof=1) / np.sqrt(returns.size)
    assert abs(returns.mean() - exact) < 2 * se


def test_paper_values_and_stability():
    lqg = paper_lqg()
    assert lqg.is_stable(PAPER_THETA) and lqg.is_stable(PAPER_BEHAVIOUR_THETA)
    # deterministic infinite horizon of a diagonal system: two scalar geometric series
    f, m = np.array([0.6, 0.3]), 1.0 + 0.1 * PAPER_THETA ** 2
    expected = -np.sum(m / (1.0 - 0.9 * f ** 2))
    np.testing.assert_allclose(lqg.expected_return(PAPER_THETA, 0.0, None), expected, rtol=1e-12)
    unstable = np.array([0.5, 0.5])  # sqrt(0.9) * 1.7 > 1
    assert lqg.spectral_radius(unstable) > 1.0
    with pytest.raises(ValueError, match="spectral radius"):
        lqg.expected_return(unstable, 1.0, None)
    with pytest.raises(ValueError, match="spectral radius"):
        lqg.return_gradient(unstable, 1.0, None)
    assert np.isfinite(lqg.expected_return(unstable, 1.0, PAPER_HORIZON))


# ------------------------------------------------------------------------------ gradients
@pytest.mark.parametrize("horizon", [None, PAPER_HORIZON, 3])
@pytest.mark.parametrize("sigma", [0.0, 1.0])
def test_gradient_matches_finite_differences_paper(horizon, sigma):
    lqg = paper_lqg()
    for theta in (PAPER_THETA, PAPER_BEHAVIOUR_THETA):
        grad = lqg.return_gradient(theta, sigma, horizon)
        assert grad.shape == (2,)
        np.testing.assert_allclose(grad, _fd_gradient(lqg, theta, sigma, horizon), rtol=1e-6,
                                   atol=1e-8)


@pytest.mark.parametrize("horizon", [None, 20])
def test_gradient_matches_finite_differences_full_gain_with_noise(horizon):
    lqg = _noisy_lqg()
    grad = lqg.return_gradient(FULL_GAIN, [0.7, 0.4], horizon)
    assert grad.shape == (2, 2)
    np.testing.assert_allclose(grad, _fd_gradient(lqg, FULL_GAIN, [0.7, 0.4], horizon),
                               rtol=1e-6, atol=1e-8)


def test_adjoint_gradient_equals_derivative_lyapunov_solution():
    # forward sensitivity: dP solves dP = G + gamma F^T dP F with G = dK^T L + L^T dK
    from scipy.linalg import solve_discrete_lyapunov

    lqg, sigma = _noisy_lqg(), 0.6
    k, f = lqg.gain(FULL_GAIN), lqg.closed_loop(FULL_GAIN)
    p_mat, _ = lqg.value_matrices(FULL_GAIN, sigma, None)
    s_mat = lqg.noise_matrix(sigma)
    w = lqg.B @ s_mat @ s_mat.T @ lqg.B.T + lqg.transition_std ** 2 * np.eye(2)
    ell = lqg.R @ k + lqg.gamma * lqg.B.T @ p_mat @ f
    grad = np.zeros((2, 2))
    for idx in np.ndindex(2, 2):
        dk = np.zeros((2, 2))
        dk[idx] = 1.0
        d_p = solve_discrete_lyapunov(np.sqrt(lqg.gamma) * f.T, dk.T @ ell + ell.T @ dk)
        d_const = lqg.gamma * np.trace(d_p @ w) / (1 - lqg.gamma)
        grad[idx] = -(lqg.s0 @ d_p @ lqg.s0 + d_const)
    np.testing.assert_allclose(lqg.return_gradient(FULL_GAIN, sigma, None), grad, rtol=1e-10)


def test_gradient_vanishes_at_the_lqr_optimum():
    lqg = paper_lqg()
    # the optimal gain of the discounted LQR: the Riccati fixed point, by value iteration
    p = np.eye(2)
    for _ in range(2000):
        k = -np.linalg.solve(lqg.R + lqg.gamma * lqg.B.T @ p @ lqg.B, lqg.gamma * lqg.B.T @ p @ lqg.A)
        p = lqg.Q + k.T @ lqg.R @ k + lqg.gamma * (lqg.A + lqg.B @ k).T @ p @ (lqg.A + lqg.B @ k)
    np.testing.assert_allclose(lqg.return_gradient(k, 1.0, None), 0.0, atol=1e-9)
    assert lqg.expected_return(k, 0.0, None) > lqg.expected_return(PAPER_THETA, 0.0, None)


# ------------------------------------------------------------------------------ Q-function
@pytest.mark.parametrize("horizon", [None, PAPER_HORIZON])
@pytest.mark.parametrize("sigma", [0.0, 1.0])
def test_q_function_averages_to_the_return(horizon, sigma):
    lqg = paper_lqg()
    k, s_mat = lqg.gain(PAPER_THETA), lqg.noise_matrix(sigma)
    q = lambda a: lqg.q_function(lqg.s0, a, PAPER_THETA, sigma, horizon)  # noqa: E731
    expected_q = _gaussian_mean(q, k @ lqg.s0, s_mat) if sigma else q(k @ lqg.s0)
    np.testing.assert_allclose(expected_q, lqg.expected_return(PAPER_THETA, sigma, horizon),
                               rtol=1e-12)


@pytest.mark.parametrize("horizon", [None, 10])
def test_q_function_satisfies_the_bellman_equation(horizon):
    lqg = _noisy_lqg()
    sigma = np.array([[0.6, 0.0], [0.2, 0.5]])
    rng = np.random.default_rng(3)
    s, a = rng.normal(size=2), rng.normal(size=2)
    t = 4
    t_next = t + 1 if horizon is not None else 0
    k = lqg.gain(FULL_GAIN)
    # E_{s'}: transition noise N(0, 0.3^2 I) by sigma points; E_{a'}: policy noise likewise
    def next_q(s_next):
        return _gaussian_mean(lambda a2: lqg.q_function(s_next, a2, FULL_GAIN, sigma, horizon, t_next),
                              k @ s_next, sigma)
    expected_next = _gaussian_mean(next_q, lqg.mean_next_state(s, a), 0.3 * np.eye(2))
    lhs = lqg.q_function(s, a, FULL_GAIN, sigma, horizon, t)
    np.testing.assert_allclose(lhs, lqg.reward(s, a) + lqg.gamma * expected_next, rtol=1e-10)
    if horizon is not None:  # V_T = 0: the last Q is the reward
        np.testing.assert_allclose(lqg.q_function(s, a, FULL_GAIN, sigma, horizon, horizon - 1),
                                   lqg.reward(s, a), rtol=1e-12)


def test_q_action_gradient_matches_finite_differences_and_is_noise_free():
    lqg = _noisy_lqg()
    rng = np.random.default_rng(4)
    states, actions = rng.normal(size=(5, 2)), rng.normal(size=(5, 2))
    for horizon, t in ((None, 0), (15, 7)):
        grad = lqg.q_action_gradient(states, actions, FULL_GAIN, 0.5, horizon, t)
        assert grad.shape == (5, 2)
        eps = 1e-6
        for j in range(2):
            step = np.zeros(2)
            step[j] = eps
            fd = (lqg.q_function(states, actions + step, FULL_GAIN, 0.5, horizon, t)
                  - lqg.q_function(states, actions - step, FULL_GAIN, 0.5, horizon, t)) / (2 * eps)
            np.testing.assert_allclose(grad[:, j], fd, rtol=1e-6, atol=1e-8)
        np.testing.assert_allclose(grad, lqg.q_action_gradient(states, actions, FULL_GAIN, 0.0,
                                                                horizon, t), rtol=1e-12)


# --------------------------------------------------------------------------- validation
def test_invalid_inputs_raise():
    with pytest.raises(ValueError, match="'A' matrix must be square"):
        LQG(A=np.ones((2, 3)), B=np.eye(2), Q=np.eye(2), R=np.eye(2), s0=[0, 0], gamma=0.9)
    with pytest.raises(ValueError, match="'R' matrix must be positive definite"):
        LQG(A=np.eye(2), B=np.eye(2), Q=np.eye(2), R=np.zeros((2, 2)), s0=[0, 0], gamma=0.9)
    with pytest.raises(ValueError, match="'gamma'"):
        LQG(A=np.eye(2), B=np.eye(2), Q=np.eye(2), R=np.eye(2), s0=[0, 0], gamma=1.0)
    lqg = paper_lqg()
    with pytest.raises(ValueError, match="'theta'"):
        lqg.expected_return(np.zeros(3))
    with pytest.raises(ValueError, match="'sigma'"):
        lqg.expected_return(PAPER_THETA, np.ones(3))
    with pytest.raises(ValueError, match="'horizon'"):
        lqg.expected_return(PAPER_THETA, 1.0, 0)
    with pytest.raises(ValueError, match="time step 't'"):
        lqg.q_function(lqg.s0, lqg.s0, PAPER_THETA, 1.0, 5, 5)
    with pytest.raises(ValueError, match="'alpha'"):
        collect_lqg(alpha=1.5)


# ----------------------------------------------------------------------- gymnasium env
@pytest.mark.filterwarnings("ignore:.*Box (action|observation) space:UserWarning")
def test_env_passes_check_env_and_registers():
    env = LQGEnv()
    check_env(env, skip_render_check=True)
    register_lqg()
    register_lqg()  # idempotent
    made = gym.make(LQG_ENV_ID, horizon=7)
    obs, _ = made.reset(seed=0)
    np.testing.assert_array_equal(obs, [-1.0, -1.0])
    made.close()


def test_env_rollout_matches_closed_form_and_truncates():
    env = LQGEnv(horizon=PAPER_HORIZON)
    lqg = env.problem
    obs, _ = env.reset(seed=0)
    k = lqg.gain(PAPER_THETA)
    ret, steps, done = 0.0, 0, False
    while not done:
        obs, reward, terminated, truncated, _ = env.step(k @ obs)
        assert not terminated
        ret += lqg.gamma ** steps * reward
        steps += 1
        done = truncated
    assert steps == PAPER_HORIZON
    np.testing.assert_allclose(ret, lqg.expected_return(PAPER_THETA, 0.0, PAPER_HORIZON), rtol=1e-12)
    obs, _ = env.reset(options={"state": [2.0, 0.5]})
    np.testing.assert_array_equal(obs, [2.0, 0.5])
    with pytest.raises(ValueError, match="action"):
        env.step(np.ones(3))


def test_env_transition_noise_is_seeded():
    env = LQGEnv(transition_std=0.5, initial_std=0.1)
    first = [env.reset(seed=11)[0]] + [env.step(np.zeros(2))[0] for _ in range(3)]
    second = [env.reset(seed=11)[0]] + [env.step(np.zeros(2))[0] for _ in range(3)]
    np.testing.assert_array_equal(np.array(first), np.array(second))
    assert not np.allclose(first[0], [-1.0, -1.0])


# --------------------------------------------------------------------------- collector
def test_collector_shapes_flags_and_dynamics():
    data = collect_lqg(n_episodes=4, horizon=6, seed=0)
    lqg = paper_lqg()
    assert data.n == 24 and data.state_dim == 2 and data.action_dim == 2
    assert not data.terminals.any()
    np.testing.assert_array_equal(np.flatnonzero(data.truncations), [5, 11, 17, 23])
    np.testing.assert_array_equal(data.episode_ids, np.repeat(np.arange(4), 6))
    np.testing.assert_array_equal(data.episode_start_states(), np.tile(lqg.s0, (4, 1)))
    np.testing.assert_allclose(data.next_states, lqg.mean_next_state(data.states, data.actions),
                               rtol=1e-14)
    np.testing.assert_allclose(data.rewards, lqg.reward(data.states, data.actions), rtol=1e-14)
    within = np.ones(24, dtype=bool)
    within[[5, 11, 17, 23]] = False
    np.testing.assert_array_equal(data.next_states[within], data.states[np.flatnonzero(within) + 1])
    again = collect_lqg(n_episodes=4, horizon=6, seed=0)
    np.testing.assert_array_equal(again.actions, data.actions)


@pytest.mark.parametrize("alpha", [0.0, 0.5, 1.0])
def test_collector_behaviour_interpolates_parameters(alpha):
    data = collect_lqg(n_episodes=400, horizon=10, seed=1, alpha=alpha)
    # least-squares regression of actions on states recovers the behaviour gain and Sigma = I
    coef, *_ = np.linalg.lstsq(data.states, data.actions, rcond=None)
    expected = np.diag((1 - alpha) * PAPER_THETA + alpha * PAPER_BEHAVIOUR_THETA)
    np.testing.assert_allclose(coef.T, expected, atol=0.03)
    residual = data.actions - data.states @ coef
    np.testing.assert_allclose(np.cov(residual.T), np.eye(2), atol=0.08)


def test_lqg_math_imports_no_gymnasium():
    import subprocess
    import sys

    code = "import sys, nopg.envs.lqg; print('gymnasium' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
