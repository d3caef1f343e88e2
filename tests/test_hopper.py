"""Tests for the Hopper environment helpers, the local collector and the hopper task."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("mujoco")

from nopg.data.dataset import TransitionDataset  # noqa: E402
from nopg.envs.hopper import (  # noqa: E402
    collect_hopper,
    hopper_is_healthy,
    make_hopper_env,
)
from nopg.experiments import get_task, run_experiment  # noqa: E402


def _set_state(env, qpos, qvel=None):
    base = env.unwrapped
    base.set_state(np.asarray(qpos, float), np.zeros(6) if qvel is None else np.asarray(qvel, float))


def test_env_api_spaces_and_reset_state():
    env = make_hopper_env()
    assert env.spec.max_episode_steps == 1000
    assert env.observation_space.shape == (11,)
    np.testing.assert_array_equal(env.action_space.low, -1.0)
    np.testing.assert_array_equal(env.action_space.high, 1.0)
    obs, _ = env.reset(seed=0)
    # Reset: qpos = (0, 1.25, 0, 0, 0, 0) + U(-5e-3, 5e-3); obs drops x, so obs[0] is z.
    assert abs(obs[0] - 1.25) <= 5e-3 and np.all(np.abs(obs[1:]) <= 5e-3)
    assert hopper_is_healthy(obs)
    with pytest.raises(ValueError, match="max_episode_steps"):
        make_hopper_env(0)
    env.close()


@pytest.mark.parametrize(("qpos", "healthy"), [
    ([0, 1.25, 0.0, 0, 0, 0], True),
    ([0, 0.69, 0.0, -1.2, -1.2, 0], False),  # crouched below z = 0.7 (straight legs would
    #                                           hit the floor and bounce above 0.7)
    ([0, 1.25, 0.25, 0, 0, 0], False),     # torso tilted beyond 0.2 rad
    ([0, 1.25, -0.25, 0, 0, 0], False),
    ([0, 1.25, 0.1, 0.5, -0.5, 0.3], True),
])
def test_termination_matches_the_healthy_ranges(qpos, healthy):
    env = make_hopper_env()
    env.reset(seed=0)
    _set_state(env, qpos)
    obs, reward, terminated, truncated, _ = env.step(np.zeros(3))
    # One 8 ms step barely moves a resting hopper, so the post-step state keeps the verdict.
    assert terminated == (not healthy)
    assert not truncated
    assert bool(hopper_is_healthy(obs)) == healthy
    # healthy_reward 1 only while healthy (Hopper-v5), plus x-velocity, minus 0 control cost.
    assert abs(reward - (1.0 if healthy else 0.0)) < 0.2
    env.close()


def test_state_range_uses_unclipped_velocities():
    env = make_hopper_env()
    env.reset(seed=0)
    _set_state(env, [0, 1.25, 0, 0, 0, 0], [0, 0, 0, 150.0, 0, 0])
    obs, _, terminated, _, _ = env.step(np.zeros(3))
    assert terminated  # |thigh velocity| > 100 violates healthy_state_range ...
    assert obs[8] == 10.0  # ... but the observation clips it to 10
    env.close()


def test_is_healthy_agrees_with_env_on_random_rollouts():
    env = make_hopper_env()
    rng = np.random.default_rng(0)
    checked = 0
    for ep in range(5):
        env.reset(seed=ep)
        while True:
            obs, _, terminated, truncated, _ = env.step(rng.uniform(-1, 1, 3))
            assert bool(hopper_is_healthy(obs)) == (not terminated)
            checked += 1
            if terminated or truncated:
                break
    assert checked > 20
    with pytest.raises(ValueError, match="11"):
        hopper_is_healthy(np.zeros(10))
    env.close()


def test_time_limit_is_a_truncation_not_a_terminal():
    data = collect_hopper(30, behaviour=lambda obs: np.zeros(3), seed=0, max_episode_steps=7)
    # A resting hopper stays healthy for 7 steps: every episode is cut by the time limit.
    assert not data.terminals.any()
    np.testing.assert_array_equal(np.flatnonzero(data.truncations), [6, 13, 20, 27, 29])
    np.testing.assert_array_equal(data.episode_ids, np.repeat(np.arange(5), [7, 7, 7, 7, 2]))


def test_uniform_collector_flags_shapes_and_continuity():
    data = collect_hopper(400, seed=3)
    assert (data.n, data.state_dim, data.action_dim) == (400, 11, 3)
    assert np.all(np.abs(data.actions) <= 1.0)
    # Random torques topple the hopper within ~10-80 steps: real terminals, never time limits.
    assert data.terminals.sum() >= 5
    np.testing.assert_array_equal(data.terminals, ~hopper_is_healthy(data.next_states))
    assert not (data.terminals & data.truncations).any()
    assert data.truncations.sum() == (0 if data.terminals[-1] else 1) and \
        (data.terminals[-1] or data.truncations[-1])
    ends = np.flatnonzero(data.terminals | data.truncations)
    np.testing.assert_array_equal(np.flatnonzero(np.diff(data.episode_ids)), ends[:-1])
    # Within an episode s'_t = s_{t+1}; every episode starts from a reset state.
    inside = np.setdiff1d(np.arange(data.n - 1), ends)
    np.testing.assert_array_equal(data.next_states[inside], data.states[inside + 1])
    starts = data.episode_starts()
    assert np.all(np.abs(data.states[starts, 0] - 1.25) <= 5e-3)
    # Seeded: identical data for the same seed, different for another.
    again = collect_hopper(400, seed=3)
    np.testing.assert_array_equal(again.states, data.states)
    np.testing.assert_array_equal(again.actions, data.actions)
    assert not np.array_equal(collect_hopper(50, seed=4).actions, data.actions[:50])
    with pytest.raises(ValueError, match="behaviour"):
        collect_hopper(10, behaviour="expert")


def test_task_external_dataset_and_initial_states(tmp_path):
    task = get_task("hopper")
    config = task.default_config().replace(**{"task.n_samples": 50, "task.n_initial_states": 9})
    data = task.make_dataset(config, seed=0)
    assert data.n == 50 and data.state_dim == task.state_dim
    s0 = task.initial_states(data, config, seed=1)
    assert s0.shape == (9, 11) and np.all(hopper_is_healthy(s0))
    assert len({tuple(s) for s in s0}) == 9  # distinct reset draws
    path = tmp_path / "hopper.npz"
    collect_hopper(120, seed=5).save(path)
    ext = task.make_dataset(config.replace(**{"task.dataset": str(path), "task.n_samples": 40}),
                            seed=2)
    full = TransitionDataset.load(path)
    assert ext.n == 40
    rows = {tuple(s) for s in full.states}
    assert all(tuple(s) in rows for s in ext.states)
    bad = tmp_path / "bad.npz"
    TransitionDataset(full.states[:, :4], full.actions, full.rewards, full.next_states[:, :4],
                      full.terminals).save(bad)
    with pytest.raises(ValueError, match="11-D"):
        task.make_dataset(config.replace(**{"task.dataset": str(bad)}), seed=0)


def test_hopper_runs_end_to_end(tmp_path):
    task = get_task("hopper")
    config = task.default_config().replace(
        seeds=[0], n_updates=2, eval_every=2, eval_episodes=1, final_eval_episodes=2,
        hidden=[16], **{"task.n_samples": 60, "task.n_initial_states": 5,
                        "task.eval_steps": 50, "nopg.model.top_k": None})
    summary = run_experiment(task, config, out=tmp_path, progress=False, run_name="run").to_dict()
    assert summary["seeds"][0]["n_samples"] == 60 and np.isfinite(summary["seeds"][0]["J_hat"])
    ev = json.loads((tmp_path / "run" / "seed_0" / "evaluation.json").read_text())
    assert ev["episodes"] == 2 and all(1 <= length <= 50 for length in ev["lengths"])


def test_task_imports_a_d4rl_hopper_hdf5(tmp_path):
    """D4RL hopper layout (as in hopper-*-v2): next_observations, terminals and timeouts."""
    pytest.importorskip("nopg.data.formats")
    h5py = pytest.importorskip("h5py")
    raw = collect_hopper(200, behaviour=lambda obs: np.zeros(3), seed=1, max_episode_steps=60,
                         action_noise=0.5)
    path = tmp_path / "hopper-random-v2.hdf5"
    with h5py.File(path, "w") as f:
        f["observations"] = raw.states.astype(np.float32)
        f["next_observations"] = raw.next_states.astype(np.float32)
        f["actions"] = raw.actions.astype(np.float32)
        f["rewards"] = raw.rewards.astype(np.float32)
        f["terminals"] = raw.terminals
        f["timeouts"] = raw.truncations
        f["infos/qpos"] = np.zeros((raw.n, 6))
    task = get_task("hopper")
    config = task.default_config().replace(**{"task.dataset": str(path), "task.n_samples": None})
    data = task.make_dataset(config, seed=0)
    assert data.n == raw.n
    np.testing.assert_allclose(data.states, raw.states, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(data.terminals, raw.terminals)
    np.testing.assert_array_equal(data.truncations, raw.truncations)
    assert raw.terminals.any() and raw.truncations.any()
    np.testing.assert_array_equal(data.discounts(0.99)[raw.terminals], 0.0)
