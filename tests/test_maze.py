"""Tests for the U-Maze environment helpers, the D4RL-style data generator and the umaze task."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

pytest.importorskip("gymnasium_robotics")

from gymnasium.utils.env_checker import check_env  # noqa: E402

from nopg.data.dataset import TransitionDataset  # noqa: E402
from nopg.envs.maze import (  # noqa: E402
    GOAL_RADIUS,
    UMAZE_GOAL,
    UMAZE_MAP,
    WaypointController,
    cell_to_xy,
    collect_umaze_d4rl_style,
    d4rl_to_gymnasium_states,
    free_cells,
    make_umaze_env,
    shortest_path,
    umaze_reward,
    xy_to_cell,
)
from nopg.experiments import TASKS, get_task, run_experiment  # noqa: E402

START_CELLS = [(1, 2), (1, 3), (2, 3), (3, 3), (3, 2), (3, 1)]


class ControllerPolicy:
    """The noiseless waypoint controller aimed at the fixed goal, as an obs -> action callable."""

    def __init__(self) -> None:
        self.controller = WaypointController(noise=0.0, seed=np.random.default_rng(0))

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        if self.controller.target is None:
            self.controller.set_target(UMAZE_GOAL, obs[:2])
        return self.controller.act(obs[:2], obs[2:])


def test_cell_geometry_round_trip_and_goal():
    assert free_cells() == [(1, 1), (1, 2), (1, 3), (2, 3), (3, 1), (3, 2), (3, 3)]
    for cell in free_cells():
        xy = cell_to_xy(cell)
        assert xy_to_cell(xy) == cell
        assert xy_to_cell(xy + 0.49) == cell and xy_to_cell(xy - 0.49) == cell
    np.testing.assert_array_equal(UMAZE_GOAL, [-1.0, 1.0])
    np.testing.assert_array_equal(cell_to_xy((3, 3)), [1.0, -1.0])
    with pytest.raises(ValueError, match="outside"):
        cell_to_xy((5, 0))


def test_shortest_path_goes_round_the_u():
    path = shortest_path(UMAZE_MAP, (3, 1), (1, 1))
    assert path == [(3, 1), (3, 2), (3, 3), (2, 3), (1, 3), (1, 2), (1, 1)]
    assert shortest_path(UMAZE_MAP, (1, 2), (1, 2)) == [(1, 2)]
    for a, b in zip(path[:-1], path[1:], strict=True):
        assert abs(a[0] - b[0]) + abs(a[1] - b[1]) == 1
    with pytest.raises(ValueError, match="wall"):
        shortest_path(UMAZE_MAP, (2, 2), (1, 1))


def test_env_passes_check_env_and_pins_the_goal():
    env = make_umaze_env()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check_env(env, skip_render_check=True)
    assert env.observation_space.shape == (4,)
    for seed in range(5):
        obs, info = env.reset(seed=seed)
        assert obs.shape == (4,) and obs.dtype == np.float64
        np.testing.assert_array_equal(env.unwrapped.goal, UMAZE_GOAL)
        np.testing.assert_array_equal(info["goal"], UMAZE_GOAL)
        # Resets never start inside the goal cell (gymnasium-robotics' reset cells exclude 'g').
        assert xy_to_cell(obs[:2]) != (1, 1)
        np.testing.assert_array_equal(obs[2:], 0.0)
    env.close()


def test_env_reward_time_limit_and_no_termination():
    env = make_umaze_env(max_episode_steps=300)
    obs, _ = env.reset(seed=3, options={"reset_cell": (1, 2)})
    rewards, positions = [], []
    rng = np.random.default_rng(0)
    for t in range(300):
        action = np.array([-1.0, rng.uniform(-0.3, 0.3)])  # push left, into the goal cell
        obs, reward, terminated, truncated, info = env.step(action)
        rewards.append(reward)
        positions.append(obs[:2])
        assert not terminated
        assert truncated == (t == 299)
        assert info["success"] == (reward == 1.0)
    np.testing.assert_array_equal(rewards, umaze_reward(np.array(positions)))
    assert max(rewards) == 1.0  # the ball did enter the goal disc
    assert np.all(np.abs(np.array(positions)) < 1.5)  # walls keep it inside the maze
    env.close()


def test_umaze_reward_sparse_and_dense():
    p = np.array([[-1.0, 1.0], [-1.0 + GOAL_RADIUS, 1.0], [-1.0, 1.0 - GOAL_RADIUS - 1e-9], [1, -1]])
    np.testing.assert_array_equal(umaze_reward(p), [1.0, 1.0, 0.0, 0.0])
    np.testing.assert_allclose(umaze_reward(p, "dense"),
                               np.exp(-np.array([0.0, GOAL_RADIUS, GOAL_RADIUS + 1e-9, np.sqrt(8)])))
    with pytest.raises(ValueError, match="reward_type"):
        umaze_reward(p, "shaped")


@pytest.mark.parametrize("start", START_CELLS)
def test_noiseless_controller_reaches_the_goal(start):
    env = make_umaze_env(max_episode_steps=300)
    obs, _ = env.reset(seed=11, options={"reset_cell": start})
    controller = WaypointController(noise=0.0, seed=np.random.default_rng(1))
    controller.set_target(UMAZE_GOAL, obs[:2])
    budget = 60 * len(shortest_path(UMAZE_MAP, start, (1, 1)))
    for _ in range(budget):
        obs, _, _, _, _ = env.step(controller.act(obs[:2], obs[2:]))
        if controller.reached(obs[:2]):
            break
    env.close()
    assert np.linalg.norm(obs[:2] - UMAZE_GOAL) < controller.solve_thresh


def test_controller_waypoints_follow_the_path_with_jitter():
    rng = np.random.default_rng(5)
    controller = WaypointController(seed=rng)
    controller.set_target(UMAZE_GOAL, cell_to_xy((3, 1)))
    waypoints = controller.waypoints
    cells = shortest_path(UMAZE_MAP, (3, 1), (1, 1))[1:]
    assert len(waypoints) == len(cells)
    for w, c in zip(waypoints[:-1], cells[:-1], strict=True):
        shift = w - cell_to_xy(c)
        assert np.all(shift <= 0) and np.all(shift >= -controller.jitter)
    np.testing.assert_array_equal(waypoints[-1], UMAZE_GOAL)
    action = controller.act(cell_to_xy((3, 1)), np.zeros(2))
    assert np.all(np.abs(action) <= 1.0) and action[0] > 0  # heads right, along the U
    with pytest.raises(ValueError, match="set_target"):
        WaypointController().act(np.zeros(2), np.zeros(2))


def test_generated_data_flags_shapes_and_continuity():
    data = collect_umaze_d4rl_style(1500, seed=0)
    assert (data.n, data.state_dim, data.action_dim) == (1500, 4, 2)
    assert not data.terminals.any()  # the maze never terminates: episode cuts are truncations
    assert data.truncations[-1]
    ends = np.flatnonzero(data.truncations)
    assert ends.size >= 5  # several targets were reached (mean episode length ~70 steps)
    np.testing.assert_array_equal(np.flatnonzero(np.diff(data.episode_ids)), ends[:-1])
    lengths = np.diff(np.concatenate([[-1], ends]))
    assert lengths.max() <= 300
    # One continuing stream: the ball is never reset, not even at episode boundaries.
    np.testing.assert_array_equal(data.next_states[:-1], data.states[1:])
    np.testing.assert_array_equal(data.rewards, umaze_reward(data.next_states[:, :2]))
    assert 0 < data.rewards.mean() < 0.5
    assert np.all(np.abs(data.actions) <= 1.0)
    assert np.all(np.abs(data.states[:, :2]) < 1.5)
    # Every free cell is visited.
    visited = {xy_to_cell(p) for p in data.states[:, :2]}
    assert visited == set(free_cells())


def test_generated_data_is_seed_reproducible():
    a = collect_umaze_d4rl_style(300, seed=4)
    b = collect_umaze_d4rl_style(300, seed=4)
    c = collect_umaze_d4rl_style(300, seed=5)
    for key in ("states", "actions", "rewards", "next_states", "truncations", "episode_ids"):
        np.testing.assert_array_equal(getattr(a, key), getattr(b, key))
    assert not np.array_equal(a.actions, c.actions)
    # Noise matters: the noiseless controller gives different actions from the same start.
    d = collect_umaze_d4rl_style(300, seed=4, action_noise=0.0)
    np.testing.assert_array_equal(d.states[0], a.states[0])
    assert not np.array_equal(a.actions, d.actions)
    with pytest.raises(ValueError, match="n_samples"):
        collect_umaze_d4rl_style(0)


def test_d4rl_frame_conversion():
    # D4RL puts cell (row, col) at (qx, qy) = (row, col); moving +qx means moving down.
    d4rl = np.array([[1.0, 1.0, 0.0, 0.0], [3.0, 3.0, 2.0, -1.0]])
    out = d4rl_to_gymnasium_states(d4rl)
    np.testing.assert_allclose(out[0], [*cell_to_xy((1, 1)), 0.0, 0.0])
    np.testing.assert_allclose(out[1], [*cell_to_xy((3, 3)), -1.0, -2.0])
    with pytest.raises(ValueError, match="shape"):
        d4rl_to_gymnasium_states(np.zeros((3, 2)))


def test_task_data_initial_states_and_evaluation(tmp_path):
    task = get_task("umaze")
    assert "umaze" in TASKS
    config = task.default_config().replace(**{"task.n_samples": 200, "task.source_steps": 600,
                                              "task.n_initial_states": 7})
    data = task.make_dataset(config, seed=0)
    assert data.n == 200 and data.state_dim == task.state_dim
    s0 = task.initial_states(data, config, seed=0)
    assert s0.shape == (7, 4)
    assert all(xy_to_cell(p) != (1, 1) for p in s0[:, :2])
    np.testing.assert_array_equal(s0, task.initial_states(data, config, seed=0))

    returns = task.evaluate(ControllerPolicy(), config, seed=0, episodes=3)
    assert task._last_eval["success_rate"] == 1.0 and min(returns) > 0
    returns = task.evaluate(lambda obs: np.zeros(2), config, seed=0, episodes=2)
    assert returns == [0.0, 0.0] and task._last_eval["success_rate"] == 0.0

    # An external .npz in D4RL's frame: converted, rewards relabelled for the fixed goal.
    raw = collect_umaze_d4rl_style(120, seed=1)
    inverse = np.stack([2 - raw.states[:, 1], raw.states[:, 0] + 2, -raw.states[:, 3],
                        raw.states[:, 2]], axis=1)
    inverse_next = np.stack([2 - raw.next_states[:, 1], raw.next_states[:, 0] + 2,
                             -raw.next_states[:, 3], raw.next_states[:, 2]], axis=1)
    path = tmp_path / "maze2d.npz"
    TransitionDataset(inverse, raw.actions, np.zeros(raw.n), inverse_next, raw.terminals,
                      raw.truncations).save(path)
    ext = task.make_dataset(config.replace(**{"task.dataset": str(path), "task.n_samples": None,
                                              "task.dataset_frame": "d4rl"}), seed=0)
    np.testing.assert_allclose(ext.states, raw.states, atol=1e-12)
    np.testing.assert_array_equal(ext.rewards, raw.rewards)
    with pytest.raises(ValueError, match="4-D states"):
        bad = tmp_path / "bad.npz"
        TransitionDataset(raw.states[:, :3], raw.actions, raw.rewards, raw.next_states[:, :3],
                          raw.terminals).save(bad)
        task.make_dataset(config.replace(**{"task.dataset": str(bad)}), seed=0)


def test_umaze_runs_end_to_end(tmp_path):
    task = get_task("umaze")
    config = task.default_config().replace(
        seeds=[0], n_updates=2, eval_every=2, eval_episodes=1, final_eval_episodes=2,
        **{"task.n_samples": 80, "task.source_steps": 200, "task.n_initial_states": 4,
           "task.eval_steps": 30})
    summary = run_experiment(task, config, out=tmp_path, progress=False, run_name="run").to_dict()
    seed = summary["seeds"][0]
    assert seed["n_samples"] == 80 and np.isfinite(seed["J_hat"])
    ev = json.loads((tmp_path / "run" / "seed_0" / "evaluation.json").read_text())
    assert ev["episodes"] == 2 and 0.0 <= ev["success_rate"] <= 1.0
    assert (tmp_path / "run" / "seed_0" / "maze.png").is_file()


def test_task_imports_a_d4rl_maze2d_hdf5(tmp_path):
    """A D4RL maze2d-style file: D4RL frame, no next_observations, episode cuts as terminals."""
    pytest.importorskip("nopg.data.formats")
    h5py = pytest.importorskip("h5py")
    raw = collect_umaze_d4rl_style(400, seed=2)
    to_d4rl = np.stack([2 - raw.states[:, 1], raw.states[:, 0] + 2, -raw.states[:, 3],
                        raw.states[:, 2]], axis=1)
    path = tmp_path / "maze2d-umaze-sparse-v1.hdf5"
    with h5py.File(path, "w") as f:
        f["observations"] = to_d4rl
        f["actions"] = raw.actions
        f["rewards"] = np.zeros(raw.n)  # D4RL generated zeros, then relabelled
        f["terminals"] = raw.truncations  # D4RL stored "target reached / timeout" as terminals
        f["infos/goal"] = np.zeros((raw.n, 2))
    task = get_task("umaze")
    config = task.default_config().replace(**{"task.dataset": str(path), "task.n_samples": None,
                                              "task.dataset_frame": "d4rl"})
    data = task.make_dataset(config, seed=0)
    assert not data.terminals.any()
    keep = ~raw.truncations  # the rows D4RL flagged have no known next state and are dropped
    np.testing.assert_allclose(data.states, raw.states[keep], atol=1e-12)
    np.testing.assert_allclose(data.next_states, raw.next_states[keep], atol=1e-12)
    np.testing.assert_array_equal(data.rewards, umaze_reward(data.next_states[:, :2]))
    # The row before each dropped one now ends its episode as a truncation.
    cut = np.flatnonzero(raw.truncations)
    expected = np.zeros(raw.n, bool)
    expected[cut[cut > 0] - 1] = True
    np.testing.assert_array_equal(data.truncations, expected[keep])


def test_task_imports_a_local_minari_pointmaze(tmp_path, monkeypatch):
    """Minari PointMaze data hold dict observations; the task keeps the 'observation' entry."""
    pytest.importorskip("nopg.data.formats")
    minari = pytest.importorskip("minari")
    from minari.data_collector import EpisodeBuffer

    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path))
    raw = collect_umaze_d4rl_style(150, seed=3)
    buffers = []
    for j, idx in enumerate(raw.episodes()):
        obs = np.concatenate([raw.states[idx], raw.next_states[idx[-1:]]])
        buffers.append(EpisodeBuffer(
            id=j, observations={"observation": obs, "achieved_goal": obs[:, :2].copy(),
                                "desired_goal": np.tile(UMAZE_GOAL, (len(idx) + 1, 1))},
            actions=raw.actions[idx], rewards=np.zeros(len(idx)).tolist(),
            terminations=[False] * len(idx), truncations=raw.truncations[idx].tolist(), infos={}))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        minari.create_dataset_from_buffers("nopgtest/pointmaze/umaze-v0", buffer=buffers,
                                           env="PointMaze_UMaze-v3", algorithm_name="waypoint",
                                           description="test")
    task = get_task("umaze")
    config = task.default_config().replace(**{"task.dataset": "minari:nopgtest/pointmaze/umaze-v0",
                                              "task.n_samples": 100})
    data = task.make_dataset(config, seed=0)
    assert data.n == 100 and data.state_dim == 4
    rows = {tuple(s) for s in raw.states}
    assert all(tuple(s) in rows for s in data.states)
    np.testing.assert_array_equal(data.rewards, umaze_reward(data.next_states[:, :2]))
