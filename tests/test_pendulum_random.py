"""The paper's random-agent pendulum data set (two-Gaussian mixture from the upright position)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy.stats import norm

from nopg.envs.pendulum import UPRIGHT_STATE, angle_normalize, collect_pendulum_random, obs_to_angle


def _clipped_mixture_moments(means=(-2.0, 2.0), std=1.0, bound=2.0) -> tuple[float, float]:
    """Exact mean and second moment of clip(a, -bound, bound), a ~ equal mixture of N(m, std^2)."""
    m1 = m2 = 0.0
    for mu in means:
        lo, hi = (-bound - mu) / std, (bound - mu) / std
        p_lo, p_hi = norm.cdf(lo), norm.sf(hi)
        mass = norm.cdf(hi) - norm.cdf(lo)
        # moments of mu + std z restricted to z in [lo, hi]
        e_z = norm.pdf(lo) - norm.pdf(hi)
        e_z2 = mass + lo * norm.pdf(lo) - hi * norm.pdf(hi)
        inner1 = mu * mass + std * e_z
        inner2 = mu ** 2 * mass + 2 * mu * std * e_z + std ** 2 * e_z2
        m1 += (inner1 - bound * p_lo + bound * p_hi) / len(means)
        m2 += (inner2 + bound ** 2 * (p_lo + p_hi)) / len(means)
    return m1, m2


def test_sizes_starts_flags_and_episode_ids():
    data = collect_pendulum_random(n_samples=250, trajectory_length=100, seed=0)
    assert data.n == 250 and data.state_dim == 3 and data.action_dim == 1
    assert not data.terminals.any()
    # 100 + 100 + 50: the budget cuts the last trajectory, which still ends in a truncation
    np.testing.assert_array_equal(np.flatnonzero(data.truncations), [99, 199, 249])
    np.testing.assert_array_equal(np.bincount(data.episode_ids), [100, 100, 50])
    np.testing.assert_array_equal(data.episode_starts(), [0, 100, 200])
    np.testing.assert_array_equal(data.episode_start_states(), np.tile(UPRIGHT_STATE, (3, 1)))
    # consecutive within a trajectory
    same = data.episode_ids[1:] == data.episode_ids[:-1]
    np.testing.assert_allclose(data.next_states[:-1][same], data.states[1:][same], atol=1e-12)
    # valid observations: unit circle, speed within the simulator's limit
    np.testing.assert_allclose(np.hypot(data.states[:, 0], data.states[:, 1]), 1.0, atol=1e-12)
    assert np.all(np.abs(data.states[:, 2]) <= 8.0)


def test_trajectory_count_and_dynamics():
    data = collect_pendulum_random(n_samples=None, n_trajectories=2, trajectory_length=30, seed=1)
    assert data.n == 60 and data.n_episodes == 2
    # gymnasium Pendulum-v1 dynamics (g = 10, m = l = 1, dt = 0.05) on the recorded transitions
    th, thd = obs_to_angle(data.states)
    u = data.actions[:, 0]
    new_thd = np.clip(thd + (15.0 * np.sin(th) + 3.0 * u) * 0.05, -8.0, 8.0)
    new_th = th + new_thd * 0.05
    np.testing.assert_allclose(data.next_states[:, 2], new_thd, atol=1e-10)
    np.testing.assert_allclose(data.next_states[:, 0], np.cos(new_th), atol=1e-10)
    cost = angle_normalize(th) ** 2 + 0.1 * thd ** 2 + 0.001 * u ** 2
    np.testing.assert_allclose(data.rewards, -cost, atol=1e-10)


def test_action_moments_match_the_mixture():
    # The recorded actions are the applied (clipped) torques; the sampled ones are the mixture.
    clipped = collect_pendulum_random(n_samples=4000, trajectory_length=200, seed=2).actions[:, 0]
    raw = collect_pendulum_random(n_samples=4000, trajectory_length=200, seed=2,
                                  clip_actions=False).actions[:, 0]
    n = raw.size
    # sampled: mean 0, variance 4 + 1 = 5, fourth moment E[(m + z)^4] = 16 + 6*4 + 3 = 43
    assert abs(raw.mean()) < 3 * np.sqrt(5.0 / n)
    assert abs(np.mean(raw ** 2) - 5.0) < 3 * np.sqrt((43.0 - 25.0) / n)
    assert np.all(np.abs(clipped) <= 2.0)
    np.testing.assert_array_equal(clipped, np.clip(raw, -2.0, 2.0))
    m1, m2 = _clipped_mixture_moments()
    assert abs(clipped.mean() - m1) < 3 * np.sqrt(m2 / n)
    assert abs(np.mean(clipped ** 2) - m2) < 3 * np.sqrt(16.0 / n)
    # bimodal: about half of the mass on each side, little mass near zero
    assert abs(np.mean(raw > 0) - 0.5) < 3 * np.sqrt(0.25 / n)
    np.testing.assert_allclose(np.mean(np.abs(raw) < 0.5), 2 * 0.5 * (norm.cdf(-1.5) - norm.cdf(-2.5)),
                               atol=0.02)


def test_reproducible_by_seed():
    a = collect_pendulum_random(n_samples=120, trajectory_length=50, seed=7)
    b = collect_pendulum_random(n_samples=120, trajectory_length=50, seed=7)
    c = collect_pendulum_random(n_samples=120, trajectory_length=50, seed=8)
    for field in ("states", "actions", "rewards", "next_states"):
        np.testing.assert_array_equal(getattr(a, field), getattr(b, field))
    assert not np.array_equal(a.actions, c.actions)


def test_invalid_arguments_raise():
    with pytest.raises(ValueError, match="Exactly one of 'n_samples' and 'n_trajectories'"):
        collect_pendulum_random(n_samples=10, n_trajectories=2)
    with pytest.raises(ValueError, match="Exactly one"):
        collect_pendulum_random(n_samples=None)
    with pytest.raises(ValueError, match="'trajectory_length'"):
        collect_pendulum_random(n_samples=10, trajectory_length=0)
    with pytest.raises(ValueError, match="'component_std'"):
        collect_pendulum_random(n_samples=10, component_std=0.0)


def test_pendulum_random_experiment_smoke(tmp_path):
    from nopg.experiments import SeedResult, get_task, run_experiment

    task = get_task("pendulum-random")
    config = task.default_config()
    assert config.n_updates == 2000 and config.nopg.model.n_mc_policy == 10
    assert config.nopg.model.top_k == 10
    config = config.replace(seeds=(0,), n_updates=2, eval_every=1, **{
        "task.n_samples": 80, "task.trajectory_length": 40, "task.eval_steps": 20,
        "task.portrait_resolution": 8, "nopg.model.top_k": None})
    run = run_experiment(task, config, out=tmp_path, progress=False, run_name="smoke")
    summary = run.to_dict()
    # The typed records are what summary.json holds, and the statistics come from the seeds.
    assert json.loads((tmp_path / "smoke" / "summary.json").read_text()) == \
        json.loads(json.dumps(summary))
    assert isinstance(run.seeds[0], SeedResult) and run.seeds[0].seed == 0
    assert run.return_mean == run.seeds[0].return_mean == float(np.mean(run.seeds[0].returns))
    assert run.return_ci == [run.return_mean, run.return_mean]           # one seed
    seed = summary["seeds"][0]
    assert seed["n_samples"] == 80 and np.isfinite(seed["return_mean"]) and np.isfinite(seed["J_hat"])
    assert (tmp_path / "smoke" / "seed_0" / "phase_portraits.png").is_file()
