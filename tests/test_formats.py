"""Import/export of TransitionDataset: npz, D4RL-style HDF5 and Minari (local disk only)."""

from __future__ import annotations

import h5py
import numpy as np
import pytest

from nopg import TransitionDataset
from nopg.data.formats import (
    flatten_observations,
    load_dataset,
    load_hdf5,
    load_minari,
    resolve_location,
    save_dataset,
    save_hdf5,
    save_minari,
)

FIELDS = ("states", "actions", "rewards", "next_states", "terminals", "truncations", "episode_ids")


@pytest.fixture(autouse=True)
def minari_root(tmp_path, monkeypatch):
    root = tmp_path / "minari"
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(root))
    return root


def episodic(lengths=(5, 7, 4), ends=("terminal", "truncation", "none"), ids=(7, 3, 12),
             seed=0, d_s=3, d_a=2) -> TransitionDataset:
    """Chained episodes with non-sequential ids; ``ends`` sets the flag of each last step."""
    rng = np.random.default_rng(seed)
    eps = []
    for t, end in zip(lengths, ends, strict=True):
        term = np.zeros(t, bool)
        trunc = np.zeros(t, bool)
        term[-1] = end == "terminal"
        trunc[-1] = end == "truncation"
        eps.append({"observations": rng.normal(size=(t + 1, d_s)), "actions": rng.normal(size=(t, d_a)),
                    "rewards": rng.normal(size=t), "terminals": term, "truncations": trunc})
    data = TransitionDataset.from_episodes(eps)
    new_ids = np.asarray(ids)[data.episode_ids]
    return TransitionDataset(data.states, data.actions, data.rewards, data.next_states,
                             data.terminals, data.truncations, new_ids)


def assert_identical(a: TransitionDataset, b: TransitionDataset, fields=FIELDS) -> None:
    for name in fields:
        x, y = getattr(a, name), getattr(b, name)
        assert (x is None) == (y is None), name
        if x is not None:
            assert x.dtype == y.dtype and np.array_equal(x, y), name


def test_npz_to_hdf5_round_trip_is_bit_exact(tmp_path):
    data = episodic()
    save_dataset(data, tmp_path / "a.npz")
    save_dataset(load_dataset(tmp_path / "a.npz"), tmp_path / "a.hdf5")
    back = load_dataset(str(tmp_path / "a.hdf5"))
    assert_identical(data, back)
    assert back.terminals.tolist() == [False] * 4 + [True] + [False] * 11
    assert np.flatnonzero(back.truncations).tolist() == [11]
    # A data set without truncation flags or ids comes back without them.
    bare = TransitionDataset(data.states, data.actions, data.rewards, data.next_states, data.terminals)
    save_hdf5(bare, tmp_path / "b.h5")
    assert_identical(bare, load_hdf5(tmp_path / "b.h5"))


def test_hdf5_is_d4rl_layout_and_ignores_infos(tmp_path):
    data = episodic()
    save_hdf5(data, tmp_path / "a.hdf5")
    with h5py.File(tmp_path / "a.hdf5", "a") as fh:
        assert {"observations", "actions", "rewards", "terminals", "timeouts",
                "next_observations"} <= set(fh)
        fh.create_dataset("infos/qpos", data=np.zeros((3, 1)))   # wrong length, ignored
        fh.create_dataset("metadata/algorithm", data="SAC")
    assert_identical(data, load_hdf5(tmp_path / "a.hdf5"))


def test_hdf5_without_next_observations_derives_them_within_episodes(tmp_path):
    # Episodes: 5 steps ending terminal, 7 ending by time limit, 4 where the file just ends.
    data = episodic()
    with h5py.File(tmp_path / "d4rl.hdf5", "w") as fh:
        fh["observations"] = data.states
        fh["actions"] = data.actions
        fh["rewards"] = data.rewards
        fh["terminals"] = data.terminals
        fh["timeouts"] = data.truncations
    got = load_hdf5(tmp_path / "d4rl.hdf5")
    # Dropped: the last step of the truncated episode (row 11) and of the open one (row 15).
    keep = np.array([i for i in range(16) if i not in (11, 15)])
    assert got.n == 14
    for name in ("states", "actions", "rewards", "terminals"):
        assert np.array_equal(getattr(got, name), getattr(data, name)[keep]), name
    # Next states are the true ones, except the terminal row's placeholder (= its own state).
    assert np.array_equal(np.delete(got.next_states, 4, 0), np.delete(data.next_states[keep], 4, 0))
    assert np.array_equal(got.next_states[4], got.states[4]) and got.terminals[4]
    # The episodes that lost their last step now end truncated (original rows 10 and 14).
    assert np.flatnonzero(got.truncations).tolist() == [10, 13]
    assert got.n_episodes == 3
    assert np.allclose(got.discounts(0.9)[4], 0.0)


def test_hdf5_without_next_observations_uses_episode_ids(tmp_path):
    data = episodic(ends=("none", "none", "none"))
    with h5py.File(tmp_path / "d.hdf5", "w") as fh:
        for key, value in (("observations", data.states), ("actions", data.actions),
                           ("rewards", data.rewards), ("terminals", data.terminals),
                           ("episode_ids", data.episode_ids)):
            fh[key] = value
    got = load_hdf5(tmp_path / "d.hdf5")
    keep = np.array([i for i in range(16) if i not in (4, 11, 15)])
    assert np.array_equal(got.next_states, data.next_states[keep])
    assert np.array_equal(got.episode_ids, data.episode_ids[keep])


@pytest.mark.parametrize("edit, message", [
    (lambda fh: fh.__delitem__("rewards"), "missing the required key 'rewards'"),
    (lambda fh: (fh.__delitem__("actions"), fh.create_dataset("actions", data=np.zeros((15, 2)))),
     "'actions' has 15 rows but 'observations' has 16"),
    (lambda fh: fh["observations"].__setitem__((3, 1), np.nan), "'observations' contains NaN"),
    (lambda fh: fh["next_observations"].__setitem__((0, 0), np.inf), "'next_observations' contains NaN"),
    (lambda fh: (fh.__delitem__("terminals"), fh.create_dataset("terminals", data=np.full(16, 2))),
     "terminals must contain booleans"),
])
def test_malformed_hdf5_raises_naming_the_problem(tmp_path, edit, message):
    save_hdf5(episodic(), tmp_path / "bad.hdf5")
    with h5py.File(tmp_path / "bad.hdf5", "a") as fh:
        edit(fh)
    with pytest.raises(ValueError, match=message):
        load_dataset(tmp_path / "bad.hdf5")


def test_malformed_npz_and_locations(tmp_path):
    data = episodic()
    arrays = {"observations": data.states, "actions": data.actions, "rewards": data.rewards,
              "next_observations": data.next_states}
    np.savez(tmp_path / "missing.npz", **arrays)
    with pytest.raises(ValueError, match="missing the required key 'terminals'"):
        load_dataset(tmp_path / "missing.npz")
    states = data.states.copy()
    states[2, 0] = np.nan
    np.savez(tmp_path / "nan.npz", **{**arrays, "observations": states, "terminals": data.terminals})
    with pytest.raises(ValueError, match="states contains NaN"):
        load_dataset(tmp_path / "nan.npz")
    np.savez(tmp_path / "short.npz", **{**arrays, "rewards": data.rewards[:-1],
                                         "terminals": data.terminals})
    with pytest.raises(ValueError, match="rewards has 15 rows but states has 16"):
        load_dataset(tmp_path / "short.npz")
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    with pytest.raises(ValueError, match="not a readable .npz"):
        load_dataset(tmp_path / "junk.npz")
    (tmp_path / "junk.h5").write_bytes(b"not hdf5")
    with pytest.raises(ValueError, match="not a readable HDF5"):
        load_dataset(tmp_path / "junk.h5")
    with pytest.raises(ValueError, match="does not exist"):
        load_dataset(tmp_path / "absent.npz")
    with pytest.raises(ValueError, match="cannot tell the format"):
        load_dataset(tmp_path / "data.csv")
    save_dataset(data, tmp_path / "x.npz")
    with pytest.raises(ValueError, match="already exists"):
        save_dataset(data, tmp_path / "x.npz")
    assert resolve_location("minari:D4RL/pointmaze/umaze-v2") == ("minari", "D4RL/pointmaze/umaze-v2")
    assert resolve_location("D4RL/pointmaze/umaze-v2") == ("minari", "D4RL/pointmaze/umaze-v2")
    assert resolve_location("runs/d.H5")[0] == "hdf5"


def test_minari_round_trip_keeps_arrays_flags_and_ids(minari_root):
    data = episodic()
    assert save_dataset(data, "minari:nopgtest/episodic-v0") == "minari"
    assert (minari_root / "nopgtest" / "episodic-v0").is_dir()
    back = load_dataset("minari:nopgtest/episodic-v0")
    assert_identical(data, back)
    assert back.episode_ids.tolist() == [7] * 5 + [3] * 7 + [12] * 4
    with pytest.raises(ValueError, match="already exists"):
        save_minari(data, "nopgtest/episodic-v0")
    # Without truncation flags and episode ids: all-False truncations and Minari's ids 0..m-1.
    bare = TransitionDataset(data.states, data.actions, data.rewards, data.next_states, data.terminals)
    save_minari(bare, "nopgtest/episodic-v0", overwrite=True)
    back = load_minari("nopgtest/episodic-v0")
    assert_identical(bare, back, FIELDS[:5])
    assert not back.truncations.any()
    assert back.episode_ids.tolist() == [0] * 5 + [1] * 7 + [2] * 4


def test_minari_errors(tmp_path):
    data = episodic()
    with pytest.raises(ValueError, match="never downloads"):
        load_dataset("minari:nopgtest/absent-v0")
    # An episode (by id) whose transitions do not chain cannot be stored as T + 1 observations.
    ns = data.next_states.copy()
    ns[1] += 1.0
    broken = TransitionDataset(data.states, data.actions, data.rewards, ns, data.terminals,
                               data.truncations, data.episode_ids)
    with pytest.raises(ValueError, match="episode 0 is not a chain: next_states of transition 1"):
        save_minari(broken, "nopgtest/broken-v0", datasets_path=tmp_path / "elsewhere")


def test_minari_dict_observations_are_flattened(minari_root):
    import gymnasium as gym
    import minari
    from minari.data_collector import EpisodeBuffer

    rng = np.random.default_rng(3)
    t = 6
    obs = {"observation": rng.normal(size=(t + 1, 4)), "desired_goal": rng.normal(size=(t + 1, 2)),
           "achieved_goal": rng.normal(size=(t + 1, 2))}
    box = lambda d: gym.spaces.Box(-np.inf, np.inf, (d,), np.float64)  # noqa: E731
    space = gym.spaces.Dict({k: box(v.shape[1]) for k, v in obs.items()})
    buf = EpisodeBuffer(id=0, observations=obs, actions=rng.normal(size=(t, 2)),
                        rewards=list(rng.normal(size=t)), terminations=[False] * t,
                        truncations=[False] * (t - 1) + [True])
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        minari.create_dataset_from_buffers("nopgtest/maze-v0", [buf], observation_space=space,
                                           action_space=box(2), algorithm_name="test")
    full = load_dataset("minari:nopgtest/maze-v0")
    order = np.hstack([obs["achieved_goal"], obs["desired_goal"], obs["observation"]])
    assert np.array_equal(full.states, order[:-1]) and np.array_equal(full.next_states, order[1:])
    assert full.truncations.tolist() == [False] * 5 + [True]
    one = load_dataset("minari:nopgtest/maze-v0", obs_keys="observation")
    assert np.array_equal(one.states, obs["observation"][:-1])
    two = load_minari("nopgtest/maze-v0", obs_keys=["desired_goal", "observation"])
    assert two.state_dim == 6 and np.array_equal(two.next_states[:, :2], obs["desired_goal"][1:])
    with pytest.raises(ValueError, match="not found; available"):
        load_minari("nopgtest/maze-v0", obs_keys="goal")


def test_flatten_observations_nested_and_tuple():
    a, b, c = np.ones((3, 2)), np.zeros((3, 1)), np.full((3, 2, 2), 2.0)
    out = flatten_observations({"z": a, "m": {"y": b, "x": c}})
    assert np.array_equal(out, np.hstack([c.reshape(3, 4), b, a]))
    assert np.array_equal(flatten_observations((a, b)), np.hstack([a, b]))
    with pytest.raises(ValueError, match="different lengths"):
        flatten_observations({"a": a, "b": np.zeros((2, 1))})
