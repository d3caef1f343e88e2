"""Tests for nopg.data.dataset.TransitionDataset."""

from __future__ import annotations

import json

import numpy as np
import pytest

from nopg.data.dataset import TransitionDataset, concatenate
from nopg.datasets import mountaincar_human_path


def chain(lengths: list[int], seed: int = 0, d_s: int = 2, d_a: int = 1) -> dict:
    """Contiguous episodes (next_states[i] == states[i+1] within an episode)."""
    rng = np.random.default_rng(seed)
    s, a, r, ns, term = [], [], [], [], []
    for t in lengths:
        traj = rng.normal(size=(t + 1, d_s))
        s.append(traj[:-1])
        ns.append(traj[1:])
        a.append(rng.normal(size=(t, d_a)))
        r.append(rng.normal(size=t))
        done = np.zeros(t, dtype=bool)
        done[-1] = True
        term.append(done)
    return {
        "states": np.concatenate(s),
        "actions": np.concatenate(a),
        "rewards": np.concatenate(r),
        "next_states": np.concatenate(ns),
        "terminals": np.concatenate(term),
    }


@pytest.fixture
def arrays() -> dict:
    return chain([3, 4, 2])


def test_basic_properties_and_positional_constructor(arrays):
    ds = TransitionDataset(
        arrays["states"], arrays["actions"], arrays["rewards"],
        arrays["next_states"], arrays["terminals"],
    )
    assert ds.n == len(ds) == 9
    assert (ds.state_dim, ds.action_dim) == (2, 1)
    assert ds.states.dtype == np.float64 and ds.terminals.dtype == np.bool_
    assert "n=9" in repr(ds) and "n_episodes=3" in repr(ds)


def test_shape_normalisation():
    ds = TransitionDataset(
        [[0.0], [1.0]], [1, 2], [[0.5], [1.5]], [[1.0], [2.0]], [0, 1.0]
    )
    assert ds.actions.shape == (2, 1)
    assert ds.rewards.shape == (2,)
    np.testing.assert_array_equal(ds.terminals, [False, True])


def test_arrays_are_copies_and_read_only(arrays):
    states = arrays["states"].copy()
    ds = TransitionDataset(**{**arrays, "states": states})
    states[0, 0] = 1e6
    assert ds.states[0, 0] != 1e6
    for arr in (ds.states, ds.actions, ds.rewards, ds.next_states, ds.terminals):
        assert not arr.flags.writeable
        with pytest.raises(ValueError):
            arr[0] = 0


def test_discounts_terminal_and_truncation():
    ds = TransitionDataset(
        np.zeros((3, 1)), np.zeros(3), np.zeros(3), np.zeros((3, 1)),
        [False, True, False], truncations=[False, False, True],
    )
    np.testing.assert_allclose(ds.discounts(0.9), [0.9, 0.0, 0.9])
    np.testing.assert_allclose(ds.discounts(0.0), [0.0, 0.0, 0.0])
    for bad in (1.0, -0.1, float("nan"), True, "0.9"):
        with pytest.raises(ValueError, match="'gamma' parameter must be a float in"):
            ds.discounts(bad)


def test_episode_starts_inferred_from_contiguity(arrays):
    ds = TransitionDataset(**arrays)
    np.testing.assert_array_equal(ds.episode_starts(), [0, 3, 7])
    np.testing.assert_array_equal(ds.episode_start_states(), arrays["states"][[0, 3, 7]])
    eps = ds.episodes()
    assert [e.tolist() for e in eps] == [[0, 1, 2], [3, 4, 5, 6], [7, 8]]
    # No terminal flags: a jump in the state still starts a new episode.
    no_term = TransitionDataset(**{**arrays, "terminals": np.zeros(9, dtype=bool)})
    np.testing.assert_array_equal(no_term.episode_starts(), [0, 3, 7])
    # A truncation ends an episode even when the states are contiguous.
    s = np.arange(5.0)[:, None]
    trunc = TransitionDataset(
        s, np.zeros(5), np.zeros(5), s + 1, np.zeros(5), truncations=[0, 1, 0, 0, 0]
    )
    np.testing.assert_array_equal(trunc.episode_starts(), [0, 2])


def test_episode_starts_from_ids_and_returns(arrays):
    ids = np.array([5, 5, 2, 2, 5, 7, 7, 2, 9])
    ds = TransitionDataset(**arrays, episode_ids=ids)
    np.testing.assert_array_equal(ds.episode_starts(), [0, 2, 5, 8])
    assert [e.tolist() for e in ds.episodes()] == [[0, 1, 4], [2, 3, 7], [5, 6], [8]]
    r = arrays["rewards"]
    np.testing.assert_allclose(
        ds.episode_returns(), [r[[0, 1, 4]].sum(), r[[2, 3, 7]].sum(), r[5] + r[6], r[8]]
    )
    np.testing.assert_allclose(ds.episode_returns(0.5)[0], r[0] + 0.5 * r[1] + 0.25 * r[4])


def test_subset_keeps_optional_arrays(arrays):
    ds = TransitionDataset(**arrays, truncations=np.zeros(9), episode_ids=[0] * 3 + [1] * 6)
    sub = ds.subset([1, 4, 8])
    assert sub.n == 3
    np.testing.assert_array_equal(sub.states, arrays["states"][[1, 4, 8]])
    np.testing.assert_array_equal(sub.episode_ids, [0, 1, 1])
    assert sub.truncations is not None
    mask = np.zeros(9, dtype=bool)
    mask[:3] = True
    assert ds.subset(mask).n == 3
    with pytest.raises(ValueError, match="dataset is empty"):
        ds.subset(np.array([], dtype=int))
    with pytest.raises(ValueError, match="out of range"):
        ds.subset([9])


def test_concatenate_renumbers_episode_ids():
    a = TransitionDataset(**chain([2, 3], seed=1), episode_ids=[4, 4, 9, 9, 9])
    b = TransitionDataset(**chain([2], seed=2))  # no ids: inferred episodes
    c = TransitionDataset(**chain([1], seed=3), episode_ids=[4], truncations=[True])
    ds = concatenate([a, b, c])
    assert ds.n == 8
    np.testing.assert_array_equal(ds.episode_ids, [0, 0, 1, 1, 1, 2, 2, 3])
    np.testing.assert_array_equal(ds.truncations, [False] * 7 + [True])
    assert ds.n_episodes == 4
    both = TransitionDataset.concatenate([b, b])
    assert both.n == 4 and both.episode_ids is None
    with pytest.raises(ValueError, match="different actions dimensions"):
        concatenate([a, TransitionDataset(**chain([2], d_a=2))])
    with pytest.raises(ValueError, match="empty"):
        concatenate([])


def test_save_load_round_trip(tmp_path, arrays):
    ds = TransitionDataset(
        **arrays, truncations=np.arange(9) % 4 == 0, episode_ids=np.arange(9) // 3
    )
    path = tmp_path / "data.npz"
    ds.save(path)
    with np.load(path, allow_pickle=False) as npz:
        assert int(npz["format_version"]) == 1
    loaded = TransitionDataset.load(path)
    for name in ("states", "actions", "rewards", "next_states", "terminals",
                 "truncations", "episode_ids"):
        np.testing.assert_array_equal(getattr(loaded, name), getattr(ds, name))
        assert getattr(loaded, name).dtype == getattr(ds, name).dtype
    minimal = TransitionDataset(**arrays)
    minimal.save(tmp_path / "min.npz")
    with np.load(tmp_path / "min.npz", allow_pickle=False) as npz:
        assert "truncations" not in npz.files and "episode_ids" not in npz.files
    again = TransitionDataset.load(tmp_path / "min.npz")
    assert again.truncations is None and again.episode_ids is None


def test_load_aliases_and_missing_key(tmp_path, arrays):
    path = tmp_path / "d4rl.npz"
    np.savez(
        path, observations=arrays["states"], actions=arrays["actions"],
        rewards=arrays["rewards"], next_observations=arrays["next_states"],
        terminals=arrays["terminals"], timeouts=np.zeros(9, dtype=bool),
    )
    ds = TransitionDataset.load(path)
    np.testing.assert_array_equal(ds.next_states, arrays["next_states"])
    assert ds.truncations is not None and not ds.truncations.any()
    bad = tmp_path / "bad.npz"
    np.savez(bad, states=arrays["states"], actions=arrays["actions"], rewards=arrays["rewards"],
             terminals=arrays["terminals"])
    with pytest.raises(ValueError, match="missing the required key 'next_states'"):
        TransitionDataset.load(bad)
    future = tmp_path / "future.npz"
    np.savez(future, format_version=2, **arrays)
    with pytest.raises(ValueError, match="unsupported format_version 2"):
        TransitionDataset.load(future)


def test_load_shipped_mountaincar_file():
    ds = TransitionDataset.load(mountaincar_human_path())            # the file the package ships
    assert ds.n == 3589 and ds.state_dim == 2 and ds.action_dim == 1
    episodes = ds.episodes()
    assert len(episodes) == 10
    assert all(ds.terminals[idx[-1]] for idx in episodes)
    assert int(ds.terminals.sum()) == 10
    summary = ds.summary()
    json.dumps(summary)
    assert summary["n_episodes"] == 10 and summary["n_terminals"] == 10


def test_from_episodes_both_formats():
    rng = np.random.default_rng(0)
    traj = rng.normal(size=(5, 2))  # Minari style: T + 1 = 5 observations
    minari = {"observations": traj, "actions": rng.normal(size=(4, 1)),
              "rewards": np.ones(4), "terminations": [0, 0, 0, 1]}
    explicit = {"states": traj[:3], "next_states": traj[1:4], "actions": np.zeros(3),
                "rewards": np.zeros(3), "truncations": [0, 0, 1]}
    ds = TransitionDataset.from_episodes([minari, explicit])
    assert ds.n == 7
    np.testing.assert_array_equal(ds.states[:4], traj[:4])
    np.testing.assert_array_equal(ds.next_states[:4], traj[1:])
    np.testing.assert_array_equal(ds.episode_ids, [0] * 4 + [1] * 3)
    np.testing.assert_array_equal(ds.terminals, [0, 0, 0, 1, 0, 0, 0])
    np.testing.assert_array_equal(ds.truncations, [0, 0, 0, 0, 0, 0, 1])
    np.testing.assert_allclose(ds.episode_returns(), [4.0, 0.0])
    no_trunc = TransitionDataset.from_episodes([minari])
    assert no_trunc.truncations is None
    with pytest.raises(ValueError, match="episodes is empty"):
        TransitionDataset.from_episodes([])
    with pytest.raises(ValueError, match="episode 0: without next_states"):
        TransitionDataset.from_episodes([{**minari, "observations": traj[:4]}])
    with pytest.raises(ValueError, match="episode 0: missing the key 'rewards'"):
        TransitionDataset.from_episodes([{"states": traj, "actions": np.zeros(4)}])


def test_summary_values(arrays):
    ds = TransitionDataset(**arrays)
    s = ds.summary()
    assert json.loads(json.dumps(s)) == s
    assert s["n"] == 9 and s["n_episodes"] == 3 and s["n_terminals"] == 3
    assert s["n_truncations"] == 0
    assert s["state_min"] == pytest.approx(arrays["states"].min(axis=0).tolist())
    assert s["action_max"] == pytest.approx(arrays["actions"].max(axis=0).tolist())
    assert s["reward_mean"] == pytest.approx(arrays["rewards"].mean())
    assert s["episode_return_mean"] == pytest.approx(arrays["rewards"].sum() / 3)


@pytest.mark.parametrize("name", ["states", "actions", "rewards", "next_states"])
@pytest.mark.parametrize("value", [np.nan, np.inf])
def test_non_finite_values_rejected(arrays, name, value):
    bad = arrays[name].copy()
    bad.flat[1] = value
    with pytest.raises(ValueError, match=f"^{name} contains NaN or inf values"):
        TransitionDataset(**{**arrays, name: bad})


def test_invalid_inputs(arrays):
    with pytest.raises(ValueError, match=r"actions has 5 rows but states has 9"):
        TransitionDataset(**{**arrays, "actions": arrays["actions"][:5]})
    with pytest.raises(ValueError, match=r"rewards has 8 rows but states has 9"):
        TransitionDataset(**{**arrays, "rewards": arrays["rewards"][:8]})
    with pytest.raises(ValueError, match=r"terminals has 3 rows"):
        TransitionDataset(**{**arrays, "terminals": [0, 1, 0]})
    with pytest.raises(ValueError, match=r"episode_ids has 2 rows"):
        TransitionDataset(**arrays, episode_ids=[0, 1])
    with pytest.raises(ValueError, match=r"states must have shape \(n, d\)"):
        TransitionDataset(**{**arrays, "states": arrays["states"][:, 0]})
    with pytest.raises(ValueError, match=r"rewards must have shape \(n,\)"):
        TransitionDataset(**{**arrays, "rewards": np.zeros((9, 2))})
    with pytest.raises(ValueError, match="next_states has 3 columns but states has 2"):
        TransitionDataset(**{**arrays, "next_states": np.zeros((9, 3))})
    with pytest.raises(ValueError, match="dataset is empty"):
        TransitionDataset(np.zeros((0, 2)), np.zeros((0, 1)), [], np.zeros((0, 2)), [])
    with pytest.raises(ValueError, match="terminals must contain booleans or 0/1 values"):
        TransitionDataset(**{**arrays, "terminals": np.full(9, 2)})
    with pytest.raises(ValueError, match="terminals must contain booleans or 0/1 values"):
        TransitionDataset(**{**arrays, "terminals": np.full(9, 0.5)})
    with pytest.raises(ValueError, match="truncations must contain booleans"):
        TransitionDataset(**arrays, truncations=["a"] * 9)
    with pytest.raises(ValueError, match="episode_ids must contain integer values"):
        TransitionDataset(**arrays, episode_ids=np.full(9, 0.5))
    with pytest.raises(ValueError, match="states must be a numeric array-like"):
        TransitionDataset(**{**arrays, "states": [["x", "y"]] * 9})
