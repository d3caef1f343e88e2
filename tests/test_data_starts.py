"""Data states as extra starts of the objective (``NOPGConfig.data_starts``, :mod:`nopg.train.starts`)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.spatial.distance import cdist

import nopg
from nopg.train.gradient import surrogate_gradient
from nopg.train.starts import farthest_data_states


def plane_data(n: int = 80, seed: int = 0) -> nopg.TransitionDataset:
    """2-D states, the second dimension on a scale 100 times the first's; reward -(a - s_0)^2."""
    rng = np.random.default_rng(seed)
    s = rng.uniform(-1, 1, size=(n, 2)) * [1.0, 100.0]
    a = rng.uniform(-1, 1, size=(n, 1))
    s1 = np.clip(s + 0.2 * a * [1.0, 100.0], [-1, -100], [1, 100])
    return nopg.TransitionDataset(s, a, -(a[:, 0] - s[:, 0]) ** 2, s1, np.zeros(n, dtype=bool))


def policy(seed: int = 0) -> nopg.DeterministicMLPPolicy:
    torch.manual_seed(seed)
    return nopg.DeterministicMLPPolicy(2, 1, action_max=1.0, hidden=(8,), activation="tanh")


Z = np.array([[0.0, 0.0]])
BW = nopg.Bandwidths(state=[0.3, 30.0], action=0.3)


def test_each_chosen_state_is_the_farthest_from_the_starts_and_those_before_it():
    data = plane_data()
    x = data.states / data.states.std(axis=0)
    z = Z / data.states.std(axis=0)
    chosen = farthest_data_states(data.states, Z, 6)
    assert len(set(chosen.tolist())) == 6
    centres = z
    for i in chosen:
        nearest = cdist(x, centres).min(axis=1)
        assert nearest[i] == pytest.approx(nearest.max(), rel=1e-12)
        centres = np.vstack([centres, x[i]])
    # In units of each dimension's spread: rescaling a dimension changes nothing.
    scaled = data.states * [1000.0, 0.01]
    np.testing.assert_array_equal(farthest_data_states(scaled, Z * [1000.0, 0.01], 6), chosen)


def test_a_few_chosen_states_cover_the_data():
    # 3 clusters far apart and the start in the first: 2 states land in the other two clusters.
    rng = np.random.default_rng(1)
    centres = np.array([[0.0, 0.0], [10.0, 0.0], [0.0, 10.0]])
    states = np.concatenate([c + 0.1 * rng.standard_normal((30, 2)) for c in centres])
    chosen = farthest_data_states(states, centres[:1], 2)
    assert sorted(int(i) // 30 for i in chosen) == [1, 2]


@pytest.mark.parametrize("k, match", [(0, r"\[1, 80\]"), (81, r"\[1, 80\]"), (True, "starts.data"),
                                      (2.0, "starts.data")])
def test_bad_counts_get_clear_errors(k, match):
    with pytest.raises(ValueError, match=match):
        farthest_data_states(plane_data().states, Z, k)
    with pytest.raises(ValueError, match="share d"):
        farthest_data_states(plane_data().states, np.zeros((1, 3)), 2)


@pytest.mark.parametrize("k", [0, -1, 1.5, True])
def test_the_config_refuses_a_bad_count(k):
    with pytest.raises(ValueError, match="'data' parameter of Starts"):
        nopg.NOPGConfig(starts=nopg.Starts(data=k))


def test_j_hat_and_its_gradient_are_the_means_over_the_initial_and_the_data_starts():
    data = plane_data()
    config = nopg.NOPGConfig(gamma=0.8, starts=nopg.Starts(data=4), model=nopg.ModelConfig(
        top_k=8, solver="dense", n_mc_next=None, dtype="float64"))
    algo = nopg.NOPG(policy(), config).setup(data, BW, Z)
    np.testing.assert_array_equal(algo.initial_states_, Z)           # what the user gave is kept
    picked = farthest_data_states(data.states, Z, 4)
    np.testing.assert_array_equal(algo.starts_, np.vstack([Z, data.states[picked]]))

    def j_and_grad(starts: np.ndarray) -> tuple[float, np.ndarray]:
        sol = algo.model_.solution(algo.policy, starts)
        grads = surrogate_gradient(sol.surrogate(), list(algo.policy.parameters()))
        return float(sol.J), torch.cat([g.reshape(-1) for g in grads]).numpy()

    j_all, g_all = j_and_grad(algo.starts_)
    each = [j_and_grad(z[None]) for z in algo.starts_]
    assert algo.J_hat() == pytest.approx(float(np.mean([j for j, _ in each])), rel=1e-10)
    assert j_all == pytest.approx(algo.J_hat(), rel=1e-12)
    np.testing.assert_allclose(g_all, np.mean([g for _, g in each], axis=0), rtol=1e-8, atol=1e-12)
    plain = nopg.NOPG(policy(), config.replace(**{"starts.data": None}))
    assert plain.setup(data, BW, Z).J_hat() == pytest.approx(each[0][0], rel=1e-10)


def test_data_starts_survive_a_checkpoint(tmp_path):
    data = plane_data()
    algo = nopg.NOPG(policy(),
                     nopg.NOPGConfig(gamma=0.8, seed=2, model=nopg.ModelConfig(top_k=8),
                                     starts=nopg.Starts(data=3)))
    algo.fit(data, BW, Z, n_updates=2, progress=False)
    algo.save(tmp_path / "c")
    loaded = nopg.NOPG.load(tmp_path / "c")
    np.testing.assert_array_equal(loaded.starts_, algo.starts_)
    assert loaded.config.starts.data == 3
    assert loaded.J_hat() == algo.J_hat()
