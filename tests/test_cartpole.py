"""Tests for the Quanser cart-pole (dynamics, gymnasium env, random-agent data, experiment)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from gymnasium.utils.env_checker import check_env

from nopg.envs.cartpole import (
    DT,
    EVAL_STEPS,
    STABILIZATION_THETA,
    V_MAX,
    X_LIMIT,
    CartPoleParams,
    QuanserCartPoleEnv,
    cartpole_accelerations,
    cartpole_energy,
    cartpole_step,
    collect_cartpole_random,
    make_cartpole_env,
    obs_to_state,
    outside_region,
    sample_initial_states,
    simulate_cartpole,
    state_to_obs,
)

P = CartPoleParams()


def quanser_reference(state_q: np.ndarray, volts: float) -> np.ndarray:
    """``quanser_robots`` ``CartpoleDynamics`` (TASK_FACTS §1.3), theta_q = 0 hanging down."""
    x, th, xd, thd = state_q
    force = 1.0 * 3.71 * 1.0 * 0.00767 / (2.6 * 6.35e-3) * (1.0 * volts - 3.71 * 0.00767 * xd / 6.35e-3)
    mp, pl, jeq = 0.127, 0.3365 / 2, 0.37 + 3.71**2 * 3.9e-7 / 6.35e-3**2
    jp = pl**2 * mp / 3
    m = np.array([[mp + jeq, mp * pl * np.cos(th)], [mp * pl * np.cos(th), jp + mp * pl**2]])
    b = np.array([force - 5.4 * xd - mp * pl * np.sin(th) * thd**2,
                  -0.0024 * thd - mp * pl * 9.81 * np.sin(th)])
    return np.linalg.solve(m, b)


def random_states(n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.column_stack([rng.uniform(-0.3, 0.3, n), rng.uniform(-np.pi, np.pi, n),
                            rng.normal(0, 1, n), rng.normal(0, 3, n)])


# ------------------------------------------------------------------------------- dynamics
def test_constants_match_quanser_robots():
    assert P.Jp == pytest.approx(1.1984e-3, rel=1e-4)
    assert P.Jeq == pytest.approx(0.50313, rel=1e-4)
    assert P.voltage_gain == pytest.approx(1.72354, rel=1e-5)
    assert P.back_emf_gain == pytest.approx(7.72356, rel=1e-5)
    assert (DT, V_MAX, STABILIZATION_THETA, EVAL_STEPS) == (0.02, 24.0, 0.25, 10_000)
    assert X_LIMIT == pytest.approx(0.814 / 2 - 0.1)


def test_matches_quanser_equations_with_their_sign_and_shifted_angle():
    legacy = CartPoleParams(centripetal_sign=-1.0)
    for s, v in zip(random_states(20), np.linspace(-6, 6, 20)):
        s_q = s + np.array([0.0, np.pi, 0.0, 0.0])   # theta_q = theta + pi
        np.testing.assert_allclose(cartpole_accelerations(s, v, legacy), quanser_reference(s_q, v),
                                   rtol=1e-12, atol=1e-12)


def test_power_balance_is_exact():
    """dE/dt = F x_dot - Beq x_dot^2 - Bp theta_dot^2 (Euler-Lagrange; fails for the legacy sign)."""
    s = random_states(50, seed=1)
    volts = np.random.default_rng(2).uniform(-10, 10, 50)

    def power_residual(params: CartPoleParams) -> np.ndarray:
        acc = cartpole_accelerations(s, volts, params)
        h = 1e-6   # dE/dt = grad_q E . q_dot + grad_qdot E . q_ddot, gradients by central differences
        grad = np.stack([(cartpole_energy(s + h * e, params) - cartpole_energy(s - h * e, params))
                         / (2 * h) for e in np.eye(4)], axis=-1)
        de_dt = (grad * np.column_stack([s[:, 2:], acc])).sum(-1)
        force = params.voltage_gain * volts - params.back_emf_gain * s[:, 2]
        return de_dt - (force * s[:, 2] - params.Beq * s[:, 2] ** 2 - params.Bp * s[:, 3] ** 2)

    assert np.max(np.abs(power_residual(P))) < 1e-6
    assert np.max(np.abs(power_residual(CartPoleParams(centripetal_sign=-1.0)))) > 1e-2


def test_upright_and_hanging_rest_are_equilibria():
    for theta in (0.0, np.pi):
        s = np.array([0.1, theta, 0.0, 0.0])
        np.testing.assert_allclose(cartpole_accelerations(s, 0.0), 0.0, atol=1e-13)  # sin(pi) ~ 1e-16
        for _ in range(100):
            s = cartpole_step(s, 0.0, wrap=False)
        np.testing.assert_allclose(s, [0.1, theta, 0.0, 0.0], atol=1e-12)


def test_small_tilt_falls_further_and_pushes_the_cart_the_other_way():
    s = np.array([0.0, 0.01, 0.0, 0.0])
    acc = cartpole_accelerations(s, 0.0)
    assert acc[1] > 0 and acc[0] > 0   # pole leans to -x (CoM at x - pl sin theta), cart recoils +x
    thetas = []
    while not outside_region(s):
        s = cartpole_step(s, 0.0)
        thetas.append(s[1])
    assert np.all(np.diff(thetas) > 0) and s[1] > STABILIZATION_THETA
    mirrored = cartpole_accelerations(np.array([0.0, -0.01, 0.0, 0.0]), 0.0)
    np.testing.assert_allclose(mirrored, -acc, rtol=1e-14)


def test_positive_voltage_accelerates_cart_forward_and_tilts_pole_back():
    acc = cartpole_accelerations(np.zeros(4), 5.0)
    assert acc[0] > 0 and acc[1] > 0
    # Without the pole the cart obeys (Jeq) x_ddot = gain V (pole mass -> tiny).
    light = CartPoleParams(mp=1e-9)
    assert cartpole_accelerations(np.zeros(4), 5.0, light)[0] == pytest.approx(
        light.voltage_gain * 5.0 / light.Jeq, rel=1e-6)


def test_symplectic_euler_step_and_wrap_and_clip():
    s = np.array([0.05, 3.1, 0.3, 2.0])
    acc = cartpole_accelerations(s, 2.0)
    vel = s[2:] + DT * acc
    pos = s[:2] + DT * vel
    out = cartpole_step(s, 2.0)
    np.testing.assert_allclose(out[2:], vel, rtol=1e-15)
    assert out[0] == pytest.approx(pos[0], rel=1e-15)
    assert out[1] == pytest.approx(pos[1] - 2 * np.pi, rel=1e-12)    # wrapped to [-pi, pi)
    np.testing.assert_array_equal(cartpole_step(s, 100.0), cartpole_step(s, V_MAX))
    batch = random_states(7)
    np.testing.assert_allclose(cartpole_step(batch, np.ones(7))[3], cartpole_step(batch[3], 1.0))


def test_observation_round_trip_and_bad_shapes():
    s = random_states(10)
    obs = state_to_obs(s)
    np.testing.assert_allclose(obs[:, 1] ** 2 + obs[:, 2] ** 2, 1.0)
    np.testing.assert_allclose(obs_to_state(obs), s, atol=1e-12)
    with pytest.raises(ValueError, match="shape"):
        state_to_obs(np.zeros(3))
    with pytest.raises(ValueError, match="shape"):
        obs_to_state(np.zeros((2, 4)))
    with pytest.raises(ValueError, match="Bp"):
        CartPoleParams(Bp=-1.0)


def test_region_limits():
    assert not outside_region([0.0, 0.249, 0.0, 0.0])
    assert outside_region([0.0, -0.251, 0.0, 0.0])
    assert outside_region([0.0, 2 * np.pi + 0.3, 0.0, 0.0])     # angles are wrapped first
    assert not outside_region([0.306, 0.0, 0.0, 0.0])
    assert outside_region([-0.308, 0.0, 0.0, 0.0])


def lqr_gain() -> np.ndarray:
    """Discrete LQR on the finite-difference linearisation of ``cartpole_step`` at upright."""
    h = 1e-6
    a = np.column_stack([(cartpole_step(h * e, 0.0) - cartpole_step(-h * e, 0.0)) / (2 * h)
                         for e in np.eye(4)])
    b = ((cartpole_step(np.zeros(4), h) - cartpole_step(np.zeros(4), -h)) / (2 * h))[:, None]
    q, r, p = np.diag([10.0, 10.0, 1.0, 1.0]), np.array([[0.1]]), np.eye(4)
    for _ in range(2000):
        k = np.linalg.solve(r + b.T @ p @ b, b.T @ p @ a)
        p = q + a.T @ p @ (a - b @ k)
    return k


def test_lqr_balances_full_episode_and_returns_near_optimum():
    k = lqr_gain()
    policy = lambda obs: -(obs_to_state(obs) @ k.T)   # noqa: E731
    s0 = sample_initial_states(np.random.default_rng(0), 3)
    out = simulate_cartpole(policy, s0, n_steps=EVAL_STEPS)
    assert np.all(out["lengths"] == EVAL_STEPS) and not out["terminated"].any()
    assert np.all(out["returns"] > 0.999 * EVAL_STEPS) and np.all(out["returns"] <= EVAL_STEPS)
    zero = simulate_cartpole(lambda obs: np.zeros(len(obs)), s0, n_steps=EVAL_STEPS)
    assert zero["terminated"].all() and np.all(zero["lengths"] < 100)
    np.testing.assert_allclose(zero["returns"], [np.cos(
        _trajectory(s, zero["lengths"][i])[:, 1]).sum() for i, s in enumerate(s0)], rtol=1e-12)


def _trajectory(s: np.ndarray, steps: int) -> np.ndarray:
    out = []
    for _ in range(steps):
        out.append(s)
        s = cartpole_step(s, 0.0)
    return np.asarray(out)


# ------------------------------------------------------------------------------ gymnasium
def test_check_env_and_api():
    env = QuanserCartPoleEnv()
    check_env(env, skip_render_check=True)
    obs, info = env.reset(seed=3)
    assert obs.shape == (5,) and obs.dtype == np.float64
    s0 = info["state"]
    assert s0[0] == pytest.approx(DT**2 * cartpole_accelerations(np.r_[0, s0[1] - s0[3] * DT, 0, 0], 0)[0]
                                  , abs=1e-6)
    assert abs(s0[1]) <= 0.1 + 1e-3 and s0[2] != 0.0      # one zero-voltage step after calibration
    obs2, _ = env.reset(seed=3)
    np.testing.assert_array_equal(obs, obs2)
    obs, reward, terminated, truncated, info = env.step(np.array([1.5]))
    assert reward == pytest.approx(np.cos(s0[1]))            # reward of the pre-step state
    np.testing.assert_allclose(info["state"], cartpole_step(s0, 1.5))
    assert not terminated and not truncated
    with pytest.raises(ValueError, match="action"):
        env.step(np.array([np.nan]))


def test_env_set_state_and_termination_at_limits():
    env = QuanserCartPoleEnv()
    obs, _ = env.reset(options={"state": [0.0, 0.0, 0.0, 0.0]})
    np.testing.assert_array_equal(obs, [0, 0, 1, 0, 0])
    for _ in range(10):
        obs, reward, terminated, _, _ = env.step(np.zeros(1))
        assert reward == 1.0 and not terminated
    env.set_state([X_LIMIT - 0.001, 0.0, 1.0, 0.0])
    assert env.step(np.zeros(1))[2]
    env.set_state([0.0, 0.24, 0.0, 2.0])
    assert env.step(np.zeros(1))[2]
    with pytest.raises(ValueError, match="state"):
        env.set_state([0.0, 0.0])


def test_time_limit_truncates_and_simulation_matches_env():
    env = make_cartpole_env(max_episode_steps=5)
    env.reset(seed=0, options={"state": [0.0, 0.0, 0.0, 0.0]})
    flags = [env.step(np.zeros(1))[2:4] for _ in range(5)]
    assert flags[-1] == (False, True) and all(f == (False, False) for f in flags[:-1])
    assert make_cartpole_env().spec.max_episode_steps == EVAL_STEPS

    k = np.array([[-5.0, -30.0, -5.0, -3.0]])    # a weak, imperfect controller
    policy = lambda obs: -(obs_to_state(obs) @ k.T)[:, 0]   # noqa: E731
    raw = QuanserCartPoleEnv()
    obs, info = raw.reset(seed=1)
    total, steps, done = 0.0, 0, False
    while not done and steps < 300:
        obs, r, done, _, _ = raw.step(policy(obs[None]))
        total, steps = total + r, steps + 1
    sim = simulate_cartpole(policy, info["state"][None], n_steps=300)
    assert sim["lengths"][0] == steps and sim["returns"][0] == pytest.approx(total, rel=1e-12)


# ------------------------------------------------------------------------------ collector
def test_random_agent_dataset_flags_and_chaining():
    data = collect_cartpole_random(400, seed=5, max_episode_steps=30)
    assert data.n == 400 and data.states.shape == (400, 5) and data.actions.shape == (400, 1)
    assert np.all(np.abs(data.actions) <= 5.0)
    np.testing.assert_allclose(data.rewards, data.states[:, 2])      # r = cos theta (pre-step)
    ids = data.episode_ids
    assert ids[0] == 0 and np.all(np.diff(ids) >= 0) and np.all(np.diff(ids) <= 1)
    for idx in data.episodes():
        assert not (data.terminals[idx[:-1]].any() or data.truncations[idx[:-1]].any())
        np.testing.assert_array_equal(data.next_states[idx[:-1]], data.states[idx[1:]])
        last = idx[-1]
        assert data.terminals[last] != data.truncations[last]      # exactly one ending flag
        out = outside_region(obs_to_state(data.next_states[last]))
        assert data.terminals[last] == out
        assert data.truncations[last] == (not out)
        if data.truncations[last] and last != data.n - 1:
            assert idx.size == 30
        assert not outside_region(obs_to_state(data.states[idx])).any()
        assert not outside_region(obs_to_state(data.next_states[idx[:-1]])).any()
    assert data.terminals.sum() > 5
    np.testing.assert_array_equal(data.discounts(0.99)[data.terminals], 0.0)
    # states follow the dynamics
    s, s_next = obs_to_state(data.states), obs_to_state(data.next_states)
    np.testing.assert_allclose(cartpole_step(s, data.actions[:, 0]), s_next, atol=1e-12)


def test_random_agent_seeds_and_limits():
    a, b = collect_cartpole_random(200, seed=1), collect_cartpole_random(200, seed=1)
    np.testing.assert_array_equal(a.states, b.states)
    np.testing.assert_array_equal(a.actions, b.actions)
    c = collect_cartpole_random(200, seed=2)
    assert not np.array_equal(a.actions, c.actions)
    tight = collect_cartpole_random(200, seed=1, theta_limit=np.deg2rad(3.0), init_theta_max=0.04)
    assert tight.n_episodes > a.n_episodes
    assert np.all(np.abs(obs_to_state(tight.states)[:, 1]) <= np.deg2rad(3.0))
    with pytest.raises(ValueError, match="n_samples"):
        collect_cartpole_random(0)
    with pytest.raises(ValueError, match="init_theta_max"):
        collect_cartpole_random(10, theta_limit=0.01)


# ----------------------------------------------------------------------------- experiment
def test_experiment_runs_end_to_end(tmp_path):
    from nopg.experiments import TASKS, get_task, run_experiment

    assert "cartpole-random" in TASKS
    task = get_task("cartpole-random")
    config = task.default_config().replace(
        seeds=(0,), n_updates=3, eval_every=2, eval_episodes=2, final_eval_episodes=2,
        **{"task.n_samples": 80, "task.eval_steps": 40, "task.plot_steps": 20,
           "task.n_initial_states": 4})
    torch.manual_seed(0)
    summary = run_experiment(task, config, out=tmp_path, progress=False, run_name="cp").to_dict()
    seed = summary["seeds"][0]
    assert seed["n_samples"] == 80 and len(seed["returns"]) == 2
    assert all(0 < r <= 40 for r in seed["returns"])
    assert (tmp_path / "cp" / "seed_0" / "episode.png").stat().st_size > 0
    assert json.loads((tmp_path / "cp" / "config.json").read_text())["n_updates"] == 3
    s0 = task.initial_states(None, config, 0)
    assert s0.shape == (4, 5) and np.all(np.abs(s0[:, 1]) < 0.11)


def test_task_evaluation_takes_a_module_without_parameters():
    # An exported baseline (d3rlpy's TorchScript policy) is a module with no parameters; the
    # task's evaluation must run it (it once failed with StopIteration) and give the same
    # returns as the same controller written as a function.
    from nopg.experiments.cartpole_random import evaluate_cartpole

    k = torch.tensor(lqr_gain(), dtype=torch.float32)

    class Scripted(torch.nn.Module):
        def forward(self, obs: torch.Tensor) -> torch.Tensor:
            th = torch.atan2(obs[:, 1], obs[:, 2])          # obs = [x, sin, cos, x_dot, th_dot]
            state = torch.stack([obs[:, 0], th, obs[:, 3], obs[:, 4]], dim=1)
            return -(state.to(torch.float32) @ k.T)

    module = Scripted()
    assert not list(module.parameters())
    out = evaluate_cartpole(module, episodes=2, seed=0, n_steps=300)
    assert np.all(out["lengths"] == 300) and np.all(out["returns"] > 0.99 * 300)
