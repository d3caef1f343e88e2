"""State dimensions without information (:mod:`nopg.data.dimensions`): the mask, the reduced data, the
policy wrapper that acts on full states, and the initial states' reduction."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import make_arrays

import nopg
from nopg.data.dimensions import StateSelect, drop_state_dims, informative_state_dims, reduce_states
from nopg.policies.networks import is_stochastic, policy_from_spec

N = 40


def _with_columns(seed: int = 0, episode_ids: bool = False, truncations: bool = True
                  ) -> nopg.TransitionDataset:
    """The conftest transitions with 2 extra state columns, in the middle and at the end:
    exactly constant (0.0, column 1) and nearly constant (3.0 plus 1e-13 noise, column 3);
    columns 0 and 2 vary."""
    arrays = make_arrays(n=N, seed=seed)
    rng = np.random.default_rng(seed + 100)

    def widen(s: np.ndarray) -> np.ndarray:
        return np.column_stack([s[:, 0], np.zeros(len(s)), s[:, 1],
                                3.0 + 1e-13 * rng.standard_normal(len(s))])

    arrays["states"], arrays["next_states"] = widen(arrays["states"]), widen(arrays["next_states"])
    if truncations:
        arrays["truncations"] = np.zeros(N, dtype=bool)
        arrays["truncations"][[9, 30]] = True
    if episode_ids:
        arrays["episode_ids"] = np.repeat(np.arange(4), N // 4)
    return nopg.TransitionDataset(**arrays)


KEEP = np.array([True, False, True, False])


def test_mask_drops_exactly_and_nearly_constant_columns():
    data = _with_columns()
    np.testing.assert_array_equal(informative_state_dims(data), KEEP)


def test_mask_keeps_small_but_real_variation_and_reads_next_states():
    arrays = make_arrays(n=N)
    tiny = 1e-6 * np.random.default_rng(5).standard_normal(N)
    arrays["states"] = np.column_stack([arrays["states"], tiny, np.full(N, 1e6)])
    nxt = np.full(N, 1e6)
    nxt[7] += 1.0                     # the states are constant, one next state is not
    arrays["next_states"] = np.column_stack([arrays["next_states"], tiny, nxt])
    data = nopg.TransitionDataset(**arrays)
    np.testing.assert_array_equal(informative_state_dims(data), [True, True, True, True])
    # the tolerance is relative to the magnitude, absolute below 1: with rtol 1e-5 the spread 1
    # at 1e6 (< 10) and the spread ~5e-6 at ~1e-6 (< 1e-5) both count as constant
    np.testing.assert_array_equal(informative_state_dims(data, rtol=1e-5),
                                  [True, True, False, False])


@pytest.mark.parametrize("rtol", [-1e-9, float("nan"), "1e-9", True])
def test_mask_rejects_a_bad_rtol(rtol):
    with pytest.raises(ValueError, match="rtol"):
        informative_state_dims(_with_columns(), rtol=rtol)


@pytest.mark.parametrize("episode_ids", [False, True])
def test_drop_keeps_everything_but_the_dropped_columns(episode_ids):
    data = _with_columns(episode_ids=episode_ids)
    reduced = drop_state_dims(data, informative_state_dims(data))
    assert reduced.state_dim == 2 and reduced.n == data.n
    np.testing.assert_array_equal(reduced.states, data.states[:, [0, 2]])
    np.testing.assert_array_equal(reduced.next_states, data.next_states[:, [0, 2]])
    for name in ("actions", "rewards", "terminals", "truncations"):
        np.testing.assert_array_equal(getattr(reduced, name), getattr(data, name))
    if episode_ids:
        np.testing.assert_array_equal(reduced.episode_ids, data.episode_ids)
    else:
        assert reduced.episode_ids is None
    np.testing.assert_array_equal(reduced.episode_starts(), data.episode_starts())
    for a, b in zip(reduced.episodes(), data.episodes(), strict=True):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(reduced.episode_returns(0.9), data.episode_returns(0.9))


def test_dropping_a_varying_column_keeps_the_episodes_as_ids():
    # Two episodes whose states differ only in column 0 at the junction: without that column
    # they would read as one episode.
    states = np.array([[0.0, 1.0], [0.5, 2.0], [9.0, 3.0], [9.5, 4.0]])
    next_states = np.array([[0.5, 2.0], [0.7, 3.0], [9.5, 4.0], [9.9, 5.0]])
    data = nopg.TransitionDataset(states=states, actions=np.zeros((4, 1)), rewards=np.arange(4.0),
                                  next_states=next_states, terminals=np.zeros(4, bool))
    assert data.n_episodes == 2
    reduced = drop_state_dims(data, np.array([False, True]))
    assert reduced.n_episodes == 2
    np.testing.assert_array_equal(reduced.episode_ids, [0, 0, 1, 1])


@pytest.mark.parametrize("keep", [np.array([True, False]), np.array([0, 2]),
                                  np.zeros(4, dtype=bool)])
def test_drop_rejects_a_bad_mask(keep):
    with pytest.raises(ValueError, match="keep"):
        drop_state_dims(_with_columns(), keep)


def test_bandwidths_are_refused_on_the_full_data_and_selected_on_the_reduced():
    data = _with_columns()
    with pytest.raises(ValueError, match="dimension 1 is constant"):
        nopg.select_bandwidths(data)            # the current refusal that dropping avoids
    bw = nopg.select_bandwidths(drop_state_dims(data, informative_state_dims(data)))
    assert bw.state.shape == (2,) and np.all(np.isfinite(bw.state)) and np.all(bw.state > 0)


def _states(m: int = 7, seed: int = 3) -> torch.Tensor:
    return torch.tensor(np.random.default_rng(seed).normal(size=(m, 4)))


def _det(seed: int = 0) -> nopg.DeterministicMLPPolicy:
    torch.manual_seed(seed)
    return nopg.DeterministicMLPPolicy(2, 1, action_max=2.0, hidden=(8,), activation="tanh").double()


def _gauss(seed: int = 1) -> nopg.GaussianMLPPolicy:
    torch.manual_seed(seed)
    return nopg.GaussianMLPPolicy(2, 1, action_max=2.0, sigma_max=0.5, hidden=(8,),
                                  activation="tanh").double()


def test_deterministic_wrapper_acts_like_the_policy_on_the_kept_columns():
    inner = _det()
    policy = StateSelect(inner, KEEP)
    s = _states()
    assert policy.state_dim == 4 and policy.keep.dtype == torch.int64
    assert policy.keep.tolist() == [0, 2]
    with torch.no_grad():
        torch.testing.assert_close(policy(s), inner(s[:, [0, 2]]), rtol=0, atol=0)
    assert not is_stochastic(policy)
    assert torch.equal(policy.action_max, inner.action_max)
    assert getattr(policy, "sigma_scale", None) is None
    with pytest.raises(ValueError, match="not a Gaussian"):
        policy.mean_std(s)
    assert [p.data_ptr() for p in policy.parameters()] == [p.data_ptr() for p in inner.parameters()]


def test_gaussian_wrapper_acts_like_the_policy_on_the_kept_columns():
    inner = _gauss()
    policy = StateSelect(inner, KEEP)
    s, reduced = _states(), _states()[:, [0, 2]]
    assert is_stochastic(policy) and policy.action_dim == 1
    with torch.no_grad():
        torch.testing.assert_close(policy(s), inner(reduced), rtol=0, atol=0)
        for got, want in zip(policy.mean_std(s), inner.mean_std(reduced), strict=True):
            torch.testing.assert_close(got, want, rtol=0, atol=0)
        torch.testing.assert_close(policy.sample(s, torch.Generator().manual_seed(4)),
                                   inner.sample(reduced, torch.Generator().manual_seed(4)),
                                   rtol=0, atol=0)
    policy.sigma_scale.fill_(0.25)               # what NOPG-S's sigma decay does, in place
    assert float(inner.sigma_scale) == 0.25
    torch.testing.assert_close(policy.sigma_max, inner.sigma_max)


def test_index_keep_orders_the_columns_and_needs_state_dim():
    inner = _det()
    policy = StateSelect(inner, [2, 0], state_dim=4)
    s = _states()
    with torch.no_grad():
        torch.testing.assert_close(policy(s), inner(s[:, [2, 0]]), rtol=0, atol=0)
    for keep, dim in (([2, 0], None), ([0, 0], 4), ([0, 4], 4), ([], 4),
                      (np.zeros(4, bool), None), (KEEP, 5)):
        with pytest.raises(ValueError):
            StateSelect(inner, keep, state_dim=dim)


@pytest.mark.parametrize("make", [_det, _gauss])
def test_state_dict_round_trips(make):
    policy = StateSelect(make(), KEEP)
    state = policy.state_dict()
    assert torch.equal(state["keep"], torch.tensor([0, 2]))
    fresh = StateSelect(make(seed=11), KEEP)     # other weights
    s = _states()
    with torch.no_grad():
        assert not torch.allclose(fresh(s), policy(s))
        fresh.load_state_dict(state)
        torch.testing.assert_close(fresh(s), policy(s), rtol=0, atol=0)
    # the buffer carries the selection: a wrapper built with another one takes the saved one
    other = StateSelect(make(seed=11), np.array([False, True, False, True]))
    other.load_state_dict(state)
    assert other.keep.tolist() == [0, 2]
    with torch.no_grad():
        torch.testing.assert_close(other(s), policy(s), rtol=0, atol=0)


@pytest.mark.parametrize("make", [_det, _gauss])
def test_spec_rebuilds_the_wrapper(make):
    policy = StateSelect(make(), KEEP)
    spec = policy.spec()
    assert spec["type"] == "StateSelect" and spec["kwargs"]["state_dim"] == 4
    rebuilt = policy_from_spec(spec).double()
    assert isinstance(rebuilt, StateSelect) and type(rebuilt.policy) is type(policy.policy)
    rebuilt.load_state_dict(policy.state_dict())
    with torch.no_grad():
        torch.testing.assert_close(rebuilt(_states()), policy(_states()), rtol=0, atol=0)
    custom = StateSelect(torch.nn.Linear(2, 1).double(), KEEP)
    assert custom.spec()["kwargs"]["policy"] is None
    with pytest.raises(ValueError, match="custom policy"):
        policy_from_spec(custom.spec())


def test_fit_on_reduced_data_and_act_on_full_states(tmp_path):
    data = _with_columns()
    keep = informative_state_dims(data)
    reduced = drop_state_dims(data, keep)
    starts = data.episode_start_states()[:3]
    algo = nopg.NOPG(_det(), nopg.NOPGConfig(gamma=0.9))
    algo.fit(reduced, nopg.select_bandwidths(reduced), reduce_states(starts, keep), n_updates=2,
             progress=False)
    policy = StateSelect(algo.policy, keep)
    with torch.no_grad():
        full = policy(torch.tensor(data.states)).numpy()
    np.testing.assert_array_equal(full, algo.predict(reduced.states))
    # a NOPG holding the wrapper saves and loads it (the spec rebuilds it)
    wrapped = nopg.NOPG(policy, nopg.NOPGConfig(gamma=0.9))
    loaded = nopg.NOPG.load(wrapped.save(tmp_path / "ckpt"))
    assert isinstance(loaded.policy, StateSelect)
    np.testing.assert_array_equal(loaded.predict(data.states), full)


def test_reduce_states():
    starts = np.arange(12.0).reshape(3, 4)
    out = reduce_states(starts, KEEP)
    np.testing.assert_array_equal(out, starts[:, [0, 2]])
    assert out.flags.writeable and out.flags.c_contiguous
    np.testing.assert_array_equal(reduce_states(starts[0], KEEP), [0.0, 2.0])
    with pytest.raises(ValueError, match=r"shape \(m, 4\) or \(4,\).*got shape \(3, 3\)"):
        reduce_states(starts[:, :3], KEEP)
    with pytest.raises(ValueError, match=r"\(m, 4\)"):
        reduce_states(np.zeros((2, 2, 4)), KEEP)


def test_wrapper_refuses_states_of_the_wrong_width():
    with pytest.raises(ValueError, match=r"shape \(batch, 4\)"):
        StateSelect(_det(), KEEP)(_states()[:, :3])
