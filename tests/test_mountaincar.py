"""Mountain car: the packaged human demonstrations, the keyboard recorder and the experiment task."""

from __future__ import annotations

import numpy as np
import pytest

from nopg.datasets import load_mountaincar_human, mountaincar_human_path
from nopg.envs.mountaincar import (
    GOAL_POSITION,
    KeyboardController,
    ScriptedKeys,
    TerminalKeys,
    collect_demonstrations,
    make_mountaincar_env,
    record_episode,
    render_ascii,
    reset_states,
)

LENGTHS = [499, 338, 371, 285, 301, 208, 442, 422, 421, 302]


def mountaincar_step(states: np.ndarray, actions: np.ndarray) -> np.ndarray:
    """gymnasium's continuous mountain-car dynamics, vectorised (constants: envs/mountaincar.py)."""
    x, v = states[:, 0], states[:, 1]
    force = np.clip(actions[:, 0], -1.0, 1.0)
    v = np.clip(v + 0.0015 * force - 0.0025 * np.cos(3 * x), -0.07, 0.07)
    x = np.clip(x + v, -1.2, 0.6)
    v = np.where((x == -1.2) & (v < 0), 0.0, v)
    return np.stack([x, v], axis=1)


# ----------------------------------------------------------------------------- shipped data
def test_packaged_human_data_matches_its_description():
    assert mountaincar_human_path().name == "mountaincar_human_10.npz"
    data = load_mountaincar_human()
    assert data.n == 3589 and data.n_episodes == 10
    assert [idx.size for idx in data.episodes()] == LENGTHS
    assert data.episode_ids.tolist() == np.repeat(np.arange(10), LENGTHS).tolist()
    returns = data.episode_returns()
    assert returns.min() == pytest.approx(65.3, abs=0.05)
    assert returns.max() == pytest.approx(90.9, abs=0.05)
    assert returns.mean() == pytest.approx(82.39, abs=0.01)
    ends = np.cumsum(LENGTHS) - 1
    # Exactly one terminal per episode, on its last step, which reaches the goal.
    assert np.flatnonzero(data.terminals).tolist() == ends.tolist()
    assert np.all(data.next_states[ends, 0] >= GOAL_POSITION) and np.all(data.next_states[ends, 1] >= 0)
    assert np.all(data.states[:, 0] < GOAL_POSITION)
    # Next states chain within episodes, and every episode starts at rest in the reset range.
    within = data.episode_ids[1:] == data.episode_ids[:-1]
    assert np.array_equal(data.next_states[:-1][within], data.states[1:][within])
    starts = data.episode_start_states()
    assert np.all(starts[:, 1] == 0) and np.all((starts[:, 0] >= -0.6) & (starts[:, 0] <= -0.4))
    # The transitions follow the simulator and its reward (+100 at the goal, -0.1 a^2).
    assert np.allclose(mountaincar_step(data.states, data.actions), data.next_states,
                       rtol=0, atol=1e-12)
    assert np.allclose(data.rewards, 100.0 * data.terminals - 0.1 * data.actions[:, 0] ** 2,
                       rtol=0, atol=1e-12)


def test_human_data_selection_and_time_reward():
    two = load_mountaincar_human([7, 3], reward="time")
    assert two.n == LENGTHS[7] + LENGTHS[3]
    assert two.episode_ids[0] == 7 and two.episode_ids[-1] == 3
    assert np.all(two.rewards == -1.0)
    assert np.array_equal(two.episode_returns(), -np.array([LENGTHS[7], LENGTHS[3]], float))
    full = load_mountaincar_human()
    assert np.array_equal(two.states[: LENGTHS[7]], full.states[full.episode_ids == 7])
    assert load_mountaincar_human(3).n == sum(LENGTHS[:3])
    for bad, message in (([], "empty"), ([1, 1], "distinct"), ([10], r"\[0, 9\]"), (0, r"\[1, 10\]"),
                         (True, "None, an int")):
        with pytest.raises(ValueError, match=message):
            load_mountaincar_human(bad)
    with pytest.raises(ValueError, match="reward"):
        load_mountaincar_human(reward="sparse")


# ---------------------------------------------------------------------------------- keys
def test_keyboard_controller_maps_keys_and_holds():
    ctl = KeyboardController()
    assert [ctl.action(k) for k in (["left"], ["d"], [], ["x"], ["a", "right"], ["space"])] == \
        [-1.0, 1.0, 0.0, 0.0, 1.0, 0.0]
    assert ctl.action(["right", "q"]) is None
    held = KeyboardController(hold_steps=2)
    assert [held.action(k) for k in (["left"], [], [], [], ["s"], [])] == [-1, -1, -1, 0, 0, 0]
    held.action(["d"])
    held.reset()
    assert held.action([]) == 0.0
    with pytest.raises(ValueError, match="hold_steps"):
        KeyboardController(-1)


def test_terminal_key_parsing():
    assert TerminalKeys.parse("\x1b[D\x1b[Ca D q") == ["left", "right", "a", "space", "d", "space", "q"]
    assert TerminalKeys.parse("\x1b[A\x1b[B\x1b") == ["up", "down", "\x1b"]
    line = render_ascii(np.array([GOAL_POSITION, 0.01]), 1.0, 7)
    assert ">>" in line and "@" in line and "t=   7" in line


class PumpingKeys:
    """A scripted 'human' pumping energy: presses right while moving right, left otherwise."""

    def __init__(self, env):
        self.env = env
        self.pressed: list[str] = []

    def read(self) -> list[str]:
        key = "right" if self.env.unwrapped.state[1] >= 0 else "left"
        self.pressed.append(key)
        return [key]


def test_recorded_bang_bang_episode_reaches_the_goal_and_replays_exactly():
    env = make_mountaincar_env()
    keys = PumpingKeys(env)
    ep = record_episode(env, keys, seed=5)
    t = ep["actions"].shape[0]
    assert ep["terminals"].tolist() == [False] * (t - 1) + [True] and not ep["truncations"].any()
    assert 50 < t < 300                                         # bang-bang reaches the goal fast
    assert np.array_equal(ep["actions"][:, 0], np.where(np.array(keys.pressed) == "right", 1.0, -1.0))
    assert ep["observations"][-1, 0] >= GOAL_POSITION
    assert ep["rewards"].sum() == pytest.approx(100.0 - 0.1 * t)
    # Replaying the recorded actions from the same reset reproduces every observation.
    obs, _ = env.reset(seed=5)
    replay = [obs]
    for a in ep["actions"]:
        replay.append(env.step(a.astype(np.float32))[0])
    assert np.array_equal(np.asarray(replay, dtype=np.float64), ep["observations"])
    env.close()


def test_collect_demonstrations_builds_a_dataset_and_handles_limits_and_quit(tmp_path):
    from nopg.data.formats import load_dataset, save_dataset

    # Episode 0 replays a pumping run's keys (reaches the goal), episode 1 presses nothing until
    # the time limit, episode 2 is quit after 5 steps.
    env = make_mountaincar_env()
    pump = PumpingKeys(env)
    first = record_episode(env, pump, seed=0)
    env.close()
    t0 = first["actions"].shape[0]
    limit = t0 + 10
    script = pump.pressed + [None] * limit + [None] * 5 + ["q"]
    data = collect_demonstrations(3, ScriptedKeys(script), seed=0, max_episode_steps=limit)
    assert data is not None
    lengths = [idx.size for idx in data.episodes()]
    assert lengths[0] == t0 and data.terminals[t0 - 1]
    assert np.array_equal(data.states[:t0], first["observations"][:-1])
    # Episode 1: no key for the whole time limit -> truncated, zero actions, zero return.
    assert lengths[1] == limit and data.truncations[-1] and not data.terminals[t0:].any()
    assert np.all(data.actions[t0:] == 0) and np.all(data.rewards[t0:] == 0)
    assert data.episode_ids.tolist() == [0] * t0 + [1] * lengths[1]       # episode 2 was quit
    within = data.episode_ids[1:] == data.episode_ids[:-1]
    assert np.array_equal(data.next_states[:-1][within], data.states[1:][within])
    save_dataset(data, tmp_path / "demos.hdf5")
    back = load_dataset(tmp_path / "demos.hdf5")
    assert np.array_equal(back.truncations, data.truncations)
    assert collect_demonstrations(1, ScriptedKeys(["q"])) is None


def test_reset_states_follow_the_env_start_distribution():
    s0 = reset_states(15, seed=0)
    assert s0.shape == (15, 2) and np.all(s0[:, 1] == 0)
    assert np.all((s0[:, 0] >= -0.6) & (s0[:, 0] <= -0.4)) and np.unique(s0[:, 0]).size == 15
    assert np.array_equal(s0, reset_states(15, seed=0))
    with pytest.raises(ValueError, match="positive int"):
        reset_states(0, seed=0)


# ------------------------------------------------------------------------------ experiment
def test_task_demonstrations_depend_on_the_seed_and_options():
    from nopg.experiments import get_task
    from nopg.experiments.mountaincar_human import demonstrations_for_seed

    task = get_task("mountaincar-human")
    cfg = task.default_config()
    assert cfg.n_updates == 1500 and cfg.nopg.optimizer.learning_rate == 1e-2
    assert cfg.nopg.model.n_mc_policy == 15
    picks = [demonstrations_for_seed(cfg, s) for s in range(5)]
    assert all(len(p) == 2 and len(set(p)) == 2 for p in picks)
    assert picks == [demonstrations_for_seed(cfg, s) for s in range(5)]   # deterministic
    assert len({tuple(p) for p in picks}) > 1                             # and seed dependent
    data = task.make_dataset(cfg, 0)
    assert sorted(np.unique(data.episode_ids).tolist()) == picks[0] and np.all(data.rewards == -1)
    env_cfg = cfg.replace(**{"task.demonstrations": [1, 2, 3], "task.reward": "env"})
    data = task.make_dataset(env_cfg, 0)
    assert data.n_episodes == 3 and data.rewards.max() == pytest.approx(100.0, abs=0.2)
    s0 = task.initial_states(data, cfg, 1)
    assert s0.shape == (15, 2) and np.all(s0[:, 1] == 0)
    with pytest.raises(ValueError, match="n_demonstrations"):
        demonstrations_for_seed(cfg.replace(**{"task.n_demonstrations": 11}), 0)
    with pytest.raises(ValueError, match="task.reward"):
        task.make_dataset(cfg.replace(**{"task.reward": "x"}), 0)
