"""Tests for the pendulum environment helpers, the grid data set and policy evaluation."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from nopg.envs.evaluation import evaluate_policy, rollout
from nopg.envs.pendulum import (
    BOTTOM_STATE,
    angle_normalize,
    angle_to_obs,
    collect_pendulum_grid,
    evaluate_pendulum_from_bottom,
    make_pendulum_env,
    obs_to_angle,
    pendulum_bottom_setter,
    set_pendulum_state,
)

G, M, L, DT, MAX_SPEED, MAX_TORQUE = 10.0, 1.0, 1.0, 0.05, 8.0, 2.0


def reference_step(theta, theta_dot, u):
    """gymnasium Pendulum-v1 dynamics and reward (TASK_FACTS 4.1), written out by hand."""
    u = np.clip(u, -MAX_TORQUE, MAX_TORQUE)
    reward = -(angle_normalize(theta) ** 2 + 0.1 * theta_dot**2 + 0.001 * u**2)
    new_thdot = theta_dot + (3 * G / (2 * L) * np.sin(theta) + 3.0 / (M * L**2) * u) * DT
    new_thdot = np.clip(new_thdot, -MAX_SPEED, MAX_SPEED)
    new_th = theta + new_thdot * DT
    return new_th, new_thdot, reward


def hand_controller(obs: np.ndarray) -> np.ndarray:
    """Energy-pumping swing-up with a PD controller near the top.

    With ``m = l = 1``, ``g = 10`` the dynamics are ``th_ddot = 15 sin th + 3 u``, so
    ``E = thdot**2 / 2 + 15 cos th`` has ``dE/dt = 3 u thdot`` and equals 15 upright at rest.
    """
    c, s, thd = obs
    theta = np.arctan2(s, c)
    if c > 0.85:
        return np.array([-(10.0 * theta + 2.0 * thd)])
    energy = 0.5 * thd**2 + 15.0 * c
    direction = np.sign(thd) if thd != 0 else 1.0
    return np.array([(15.0 - energy) * direction])


# --------------------------------------------------------------------------- environment
def test_make_env_time_limit_and_spaces():
    env = make_pendulum_env()
    assert env.spec is not None and env.spec.max_episode_steps == 500
    assert env.action_space.shape == (1,)
    assert env.observation_space.shape == (3,)
    env.close()
    assert make_pendulum_env(max_episode_steps=7).spec.max_episode_steps == 7


@pytest.mark.parametrize("bad", [0, -3, 2.5, True])
def test_make_env_rejects_bad_length(bad):
    with pytest.raises(ValueError, match="max_episode_steps"):
        make_pendulum_env(max_episode_steps=bad)


def test_angle_obs_round_trip():
    rng = np.random.default_rng(0)
    theta = rng.uniform(-np.pi, np.pi, size=(4, 5))
    theta_dot = rng.uniform(-8, 8, size=(4, 5))
    obs = angle_to_obs(theta, theta_dot)
    assert obs.shape == (4, 5, 3) and obs.dtype == np.float64
    th2, thd2 = obs_to_angle(obs)
    np.testing.assert_allclose(th2, theta, atol=1e-12)
    np.testing.assert_allclose(thd2, theta_dot)
    # scalars and broadcasting
    assert angle_to_obs(0.0, 1.0).shape == (3,)
    np.testing.assert_allclose(angle_to_obs(np.pi, 0.0), BOTTOM_STATE, atol=1e-15)
    assert angle_to_obs(np.zeros(3), 0.5).shape == (3, 3)


def test_obs_to_angle_rejects_bad_shape():
    with pytest.raises(ValueError, match=r"\(\.\.\., 3\)"):
        obs_to_angle(np.zeros((4, 2)))


def test_set_pendulum_state_round_trip():
    env = make_pendulum_env()
    env.reset(seed=1)
    obs = set_pendulum_state(env, 0.3, -1.2)
    np.testing.assert_allclose(env.unwrapped.state, [0.3, -1.2])
    assert obs.dtype == np.float64
    np.testing.assert_allclose(obs, [np.cos(0.3), np.sin(0.3), -1.2])
    theta, theta_dot = obs_to_angle(obs)
    assert theta == pytest.approx(0.3) and theta_dot == pytest.approx(-1.2)
    # the next step starts from the state we set
    next_obs, reward, *_ = env.step(np.array([0.5], dtype=np.float32))
    new_th, new_thd, ref_reward = reference_step(0.3, -1.2, 0.5)
    np.testing.assert_allclose(next_obs, angle_to_obs(new_th, new_thd), atol=1e-6)
    assert reward == pytest.approx(ref_reward)
    with pytest.raises(ValueError, match="finite"):
        set_pendulum_state(env, np.nan, 0.0)
    env.close()
    np.testing.assert_allclose(pendulum_bottom_setter(make_pendulum_env()), BOTTOM_STATE,
                               atol=1e-15)


# --------------------------------------------------------------------------- grid data set
@pytest.fixture(scope="module")
def grid():
    return collect_pendulum_grid()


def test_grid_shapes_and_flags(grid):
    n = 15 * 15 * 2
    assert grid.states.shape == (n, 3) and grid.next_states.shape == (n, 3)
    assert grid.actions.shape == (n, 1) and grid.rewards.shape == (n,)
    assert grid.states.dtype == np.float64
    assert not np.any(grid.terminals)
    assert not np.any(grid.truncations)
    np.testing.assert_array_equal(grid.episode_ids, np.arange(n))


def test_grid_hits_exact_grid_values(grid):
    theta, theta_dot = obs_to_angle(grid.states)
    thetas = np.linspace(-np.pi, np.pi, 15)
    theta_dots = np.linspace(-8.0, 8.0, 15)
    # theta = ±pi are the same point: compare on the circle
    wrapped = np.abs(angle_normalize(theta[:, None] - thetas[None, :]))
    assert np.all(wrapped.min(axis=1) < 1e-12)
    np.testing.assert_allclose(np.sort(np.unique(theta_dot)), theta_dots)
    np.testing.assert_array_equal(np.unique(grid.actions), [-2.0, 2.0])
    # Cartesian product: every (theta, theta_dot, u) combination appears exactly once
    th_grid, thd_grid, u_grid = np.meshgrid(thetas, theta_dots, [-2.0, 2.0], indexing="ij")
    np.testing.assert_allclose(grid.states, angle_to_obs(th_grid.ravel(), thd_grid.ravel()))
    np.testing.assert_array_equal(grid.actions[:, 0], u_grid.ravel())


def test_grid_next_states_match_dynamics(grid):
    th_grid, thd_grid, u_grid = np.meshgrid(
        np.linspace(-np.pi, np.pi, 15), np.linspace(-8, 8, 15), [-2.0, 2.0], indexing="ij"
    )
    new_th, new_thd, reward = reference_step(th_grid.ravel(), thd_grid.ravel(), u_grid.ravel())
    np.testing.assert_allclose(grid.next_states, angle_to_obs(new_th, new_thd), atol=1e-12)
    np.testing.assert_allclose(grid.rewards, reward, atol=1e-12)
    # speeds saturate at the grid's edges
    assert np.max(np.abs(grid.next_states[:, 2])) == pytest.approx(8.0)


def test_grid_custom_sizes_and_bad_input():
    data = collect_pendulum_grid(n_theta=3, n_theta_dot=4, n_action=5)
    assert data.states.shape == (60, 3)
    np.testing.assert_allclose(np.unique(data.actions), np.linspace(-2, 2, 5))
    with pytest.raises(ValueError, match="n_theta"):
        collect_pendulum_grid(n_theta=0)
    with pytest.raises(ValueError, match="theta_dot_range"):
        collect_pendulum_grid(theta_dot_range=(8.0, -8.0))


# --------------------------------------------------------------------------- evaluation
def test_zero_policy_from_bottom_stays_down():
    ret = evaluate_pendulum_from_bottom(lambda obs: np.zeros(1))
    assert ret == pytest.approx(-500 * np.pi**2, rel=1e-9)  # ≈ -4934.8


def test_rollout_record():
    env = make_pendulum_env()
    result = rollout(env, lambda obs: np.array([5.0]), pendulum_bottom_setter, seed=3)
    assert result["length"] == 500
    assert result["states"].shape == (501, 3)
    assert result["actions"].shape == (500, 1)
    assert result["rewards"].shape == (500,)
    np.testing.assert_allclose(result["actions"], 2.0)  # clipped to the action space
    np.testing.assert_allclose(result["states"][0], BOTTOM_STATE, atol=1e-15)
    assert result["truncated"] and not result["terminated"]
    assert result["return"] == pytest.approx(result["rewards"].sum())
    short = rollout(env, lambda obs: np.zeros(1), seed=0, max_steps=10)
    assert short["length"] == 10 and short["truncated"]
    env.close()


def test_hand_controller_beats_threshold():
    ret = evaluate_pendulum_from_bottom(hand_controller)
    assert ret > -1500.0
    assert ret > evaluate_pendulum_from_bottom(lambda obs: np.zeros(1)) + 3000


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_torch_module_policy(dtype):
    torch.manual_seed(0)
    policy = torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    policy = policy.to(dtype)
    ret = evaluate_pendulum_from_bottom(policy)
    assert np.isfinite(ret) and -500 * 16.6 < ret <= 0.0

    class Zero(torch.nn.Module):
        def forward(self, x):
            assert x.shape == (1, 3)
            return torch.zeros(1, 1, dtype=x.dtype)

    assert evaluate_pendulum_from_bottom(Zero()) == pytest.approx(-500 * np.pi**2, rel=1e-6)


def test_evaluate_policy_seeds_and_lengths():
    out = evaluate_policy(
        lambda: make_pendulum_env(max_episode_steps=20), lambda obs: np.zeros(1), n_episodes=3
    )
    assert out["lengths"] == [20, 20, 20]
    assert len(out["returns"]) == 3
    assert out["mean"] == pytest.approx(np.mean(out["returns"]))
    assert out["std"] > 0  # different seeds give different random initial states
    again = evaluate_policy(
        lambda: make_pendulum_env(max_episode_steps=20), lambda obs: np.zeros(1), n_episodes=3
    )
    assert again["returns"] == out["returns"]
    fixed = evaluate_policy(
        make_pendulum_env, lambda obs: np.zeros(1), n_episodes=2,
        initial_state_setter=pendulum_bottom_setter,
    )
    assert fixed["std"] == pytest.approx(0.0) and fixed["lengths"] == [500, 500]
    with pytest.raises(ValueError, match="n_episodes"):
        evaluate_policy(make_pendulum_env, lambda obs: np.zeros(1), n_episodes=0)


def test_bad_policy_output():
    env = make_pendulum_env(max_episode_steps=5)
    with pytest.raises(ValueError, match="size"):
        rollout(env, lambda obs: np.zeros(2))
    with pytest.raises(ValueError, match="non-finite"):
        rollout(env, lambda obs: np.array([np.nan]))
    env.close()
