"""Local-linear successors (``successors="local-linear"``, :mod:`nopg.model.local_linear`).

- the exact gradient against finite differences of ``J_hat`` (sparse paths, NOPG-D and NOPG-S,
  drawn next states, the penalty);
- exactness on linear data: the fitted slopes are the true ones, so every neighbour's moved
  successor is the true next state of the query;
- the Bellman fixed point: the model's value at the data's next states is the solved ``v``, and
  ``J_hat`` is the mean value at the initial states; the rows are non-negative and sum to
  ``sum_j eps_j gamma_j``;
- the penalty is linear in its scale and vanishes at scale 0;
- clear errors for settings the model does not support.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from test_gradient import GAMMA, check_against_fd

import nopg
from nopg.model.local_linear import BOX_MARGIN, LocalLinearBellman, local_linear_slopes

LL = dict(successors="local-linear", top_k=6)


@pytest.mark.parametrize("neighbors", ["knn", "candidates", "dense"])
def test_gradient_matches_finite_differences(dataset, bandwidths, initial_states, det_policy,
                                             neighbors):
    check_against_fd(dataset, det_policy, bandwidths=bandwidths, gamma=GAMMA,
                     initial_states=initial_states, neighbors=neighbors, **LL)


def test_gradient_with_penalty_and_drawn_next_states(dataset, bandwidths, initial_states,
                                                     det_policy):
    # Narrow bandwidths: the successors' thinness is far from 0 and 1, so its gradient matters.
    check_against_fd(dataset, det_policy, bandwidths=bandwidths.scaled(0.5, 0.5), gamma=GAMMA,
                     initial_states=initial_states, unsupported="penalty", n_mc_next=3, seed=2,
                     neighbors="knn", **LL)


def test_gradient_stochastic(dataset, bandwidths, initial_states, gauss_policy):
    check_against_fd(dataset, gauss_policy, bandwidths=bandwidths, gamma=GAMMA,
                     initial_states=initial_states, stochastic=True, n_mc_policy=3, seed=4,
                     unsupported="penalty", **LL)


def _linear_data(n: int = 80, seed: int = 0) -> tuple[nopg.TransitionDataset, np.ndarray,
                                                      np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    F = np.array([[0.9, 0.2], [-0.3, 1.1]])
    G = np.array([[0.5], [-0.7]])
    c = np.array([0.4, -1.2])
    s = rng.normal(size=(n, 2))
    a = rng.uniform(-1, 1, size=(n, 1))
    data = nopg.TransitionDataset(states=s, actions=a, next_states=s @ F.T + a @ G.T,
                                  rewards=s @ c + 0.8 * a[:, 0], terminals=np.zeros(n, bool))
    return data, F, G, c


def test_exact_on_linear_dynamics():
    data, F, G, c = _linear_data()
    bw = nopg.Bandwidths(state=[0.6, 0.4], action=[0.5])
    slopes = local_linear_slopes(data.states, data.actions, data.next_states, data.rewards,
                                 np.array([0.6, 0.4]), np.array([0.5]))
    for j in (0, 17, 79):
        np.testing.assert_allclose(slopes[j, :2, :2], (F - np.eye(2)).T, atol=1e-6)
        np.testing.assert_allclose(slopes[j, 2, :2], G[:, 0], atol=1e-6)
        np.testing.assert_allclose(slopes[j, :, 2], [*c, 0.8], atol=1e-6)
    model = nopg.bellman_model(data, bw, 0.9, top_k=5, neighbors="knn",
                                 successors="local-linear")
    assert isinstance(model, LocalLinearBellman)
    rng = np.random.default_rng(1)
    x = torch.tensor(rng.normal(size=(7, 2)))
    u = torch.tensor(rng.uniform(-1, 1, size=(7, 3, 1)))
    idx = torch.tensor(rng.integers(0, data.n, size=(7, 3)))    # any neighbours at all
    succ, reward = model._moved(x, u, idx)
    truth = x[:, None, :] @ torch.tensor(F.T) + u @ torch.tensor(G.T)
    torch.testing.assert_close(succ, truth, atol=1e-5, rtol=0)   # the fits' ridge
    torch.testing.assert_close(reward, x @ torch.tensor(c)[:, None] + 0.8 * u[..., 0],
                               atol=1e-5, rtol=0)


def test_the_moved_reward_stays_in_the_datas_range():
    """A linear reward extrapolates past every reward in the data; the model clips it to their
    range, so ``J_hat`` stays within ``[min r, max r] / (1 - gamma)`` for any policy."""
    data, _, _, c = _linear_data()
    bw = nopg.Bandwidths(state=[0.6, 0.4], action=[0.5])
    model = nopg.bellman_model(data, bw, 0.9, top_k=5, neighbors="knn",
                                 successors="local-linear")
    lo, hi = data.rewards.min(), data.rewards.max()
    x = torch.tensor(data.states[:6])
    far = torch.full((6, 1, 1), 40.0, dtype=torch.float64)     # 0.8 * 40 past every reward
    idx = torch.arange(6)[:, None]
    _, reward = model._moved(x, far, idx)
    assert torch.all(reward == hi)
    _, reward = model._moved(x, -far, idx)
    assert torch.all(reward == lo)
    # Inside the range the reward is the fit's, as in test_exact_on_linear_dynamics.
    u = torch.tensor(data.actions[:6])[:, None, :]
    _, reward = model._moved(x, u, idx)
    torch.testing.assert_close(reward[:, 0], x @ torch.tensor(c) + 0.8 * u[:, 0, 0], atol=1e-5,
                               rtol=0)

    class Push(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = torch.nn.Parameter(torch.tensor(40.0, dtype=torch.float64))

        def forward(self, s: torch.Tensor) -> torch.Tensor:
            return self.w * torch.ones_like(s[..., :1])

    with torch.no_grad():
        J = model.solution(Push(), data.states[:10]).J
    assert lo / (1 - 0.9) - 1e-9 <= J <= hi / (1 - 0.9) + 1e-9


def test_the_moved_successor_stays_in_the_datas_box():
    """A linear successor extrapolates past every state in the data; the model clips it, per
    dimension, to the box of the data's states and next states widened by ``BOX_MARGIN`` widths.
    Inside that box it is the fit's, also past the data's own box."""
    data, F, G, _ = _linear_data()
    bw = nopg.Bandwidths(state=[0.6, 0.4], action=[0.5])
    model = nopg.bellman_model(data, bw, 0.9, top_k=5, neighbors="knn",
                                 successors="local-linear")
    seen = np.concatenate([data.states, data.next_states])
    width = seen.max(0) - seen.min(0)
    lo = torch.tensor(seen.min(0) - BOX_MARGIN * width)
    hi = torch.tensor(seen.max(0) + BOX_MARGIN * width)
    x = torch.tensor(data.states[:6])
    idx = torch.arange(6)[:, None]
    far = torch.full((6, 1, 1), 80.0, dtype=torch.float64)     # G * 80 leaves the widened box
    truth = x[:, None, :] @ torch.tensor(F.T) + far @ torch.tensor(G.T)
    assert torch.all(truth[..., 0] > hi[0]) and torch.all(truth[..., 1] < lo[1])
    succ, _ = model._moved(x, far, idx)
    torch.testing.assert_close(succ[..., 0], hi[0].expand(6, 1))
    torch.testing.assert_close(succ[..., 1], lo[1].expand(6, 1))
    # Inside the widened box the successor is the fit's, past the data's own box too.
    u = torch.full((6, 1, 1), 8.0, dtype=torch.float64)
    succ, _ = model._moved(x, u, idx)
    inside = x[:, None, :] @ torch.tensor(F.T) + u @ torch.tensor(G.T)
    assert torch.all((inside > lo) & (inside < hi))
    assert torch.all(inside[..., 0] > seen.max(0)[0])
    torch.testing.assert_close(succ, inside, atol=1e-5, rtol=0)


def test_state_bounds_clip_the_moved_successor_inside_the_box():
    """``state_bounds`` (a hard limit such as a speed limit) clip the moved successor within the
    data's widened box; ``None`` leaves a dimension to the box; a wrong length is refused."""
    data, F, G, _ = _linear_data()
    bw = nopg.Bandwidths(state=[0.6, 0.4], action=[0.5])
    model = nopg.bellman_model(data, bw, 0.9, top_k=5, neighbors="knn",
                                 successors="local-linear", state_bounds=[[None, -0.5], [1.0, None]])
    x = torch.tensor(data.states[:6])
    idx = torch.arange(6)[:, None]
    u = torch.full((6, 1, 1), 8.0, dtype=torch.float64)
    inside = x[:, None, :] @ torch.tensor(F.T) + u @ torch.tensor(G.T)   # dim 0 up, dim 1 down
    assert torch.all(inside[..., 0] > 1.0) and torch.all(inside[..., 1] < -0.5)
    succ, _ = model._moved(x, u, idx)
    torch.testing.assert_close(succ, torch.stack([torch.full((6, 1), 1.0, dtype=torch.float64),
                                                  torch.full((6, 1), -0.5, dtype=torch.float64)],
                                                 -1))
    succ, _ = model._moved(x, -u, idx)               # the other way: no bound, the fit's value
    torch.testing.assert_close(succ, x[:, None, :] @ torch.tensor(F.T) - u @ torch.tensor(G.T),
                               atol=1e-5, rtol=0)
    with pytest.raises(ValueError, match="state_bounds has 3 entries"):
        nopg.bellman_model(data, bw, 0.9, top_k=5, neighbors="knn", successors="local-linear",
                             state_bounds=[[0, 0, 0], [1, 1, 1]])


def test_fixed_point_rows_and_initial_value(dataset, dataset_no_terminals, bandwidths,
                                            initial_states, det_policy):
    without = nopg.bellman_model(dataset_no_terminals, bandwidths, GAMMA, top_k=6,
                                   neighbors="knn", successors="local-linear")
    with torch.no_grad():
        T = without.solution(det_policy, initial_states).P.to_dense().numpy()
    # Without terminals every row keeps gamma times the responsibilities' mass (1).
    assert T.min() >= 0
    np.testing.assert_allclose(T.sum(1), GAMMA, rtol=1e-12)
    model = nopg.bellman_model(dataset, bandwidths, GAMMA, top_k=6, neighbors="knn",
                                 successors="local-linear")
    with torch.no_grad():
        sol = model.solution(det_policy, initial_states)
        T = sol.P.to_dense().numpy()
    assert T.min() >= 0 and T.sum(1).max() <= GAMMA * (1 + 1e-12)
    # No column of a terminal next state carries value onwards.
    assert np.abs(T[:, dataset.terminals]).max() == 0.0
    v = sol.q.numpy()
    # The value the model gives the data's next states solves v = rho + T v.
    np.testing.assert_allclose(model.value(det_policy, dataset.next_states, sol.q), v,
                               rtol=1e-8, atol=1e-8)
    assert sol.J == pytest.approx(model.value(det_policy, initial_states, sol.q).mean(), rel=1e-10)
    mu = sol.mu.numpy()
    np.testing.assert_allclose((np.eye(dataset.n) - T).T @ mu, sol.eps0.detach().numpy(),
                               atol=1e-9)
    assert 0.0 <= sol.support_gap <= 1.0
    q_logged = model.logged_q_value(sol.q)
    assert q_logged.shape == (dataset.n,) and np.all(np.isfinite(q_logged))
    visits = model.visitation(det_policy, dataset.next_states, sol.mu)
    assert visits.shape == (dataset.n,) and np.all(visits >= 0)


def test_penalty_is_linear_in_its_scale(dataset, bandwidths, initial_states, det_policy):
    bw = bandwidths.scaled(0.5, 0.5)
    top = float(dataset.rewards.max()) / (1 - GAMMA)   # absorbing value at which lambda = 0

    def J(lam: float, unsupported: str = "penalty") -> float:
        model = nopg.bellman_model(dataset, bw, GAMMA, unsupported=unsupported,
                                     absorbing_value=top - lam / (1 - GAMMA), **LL)
        assert model.penalty_scale == pytest.approx(lam if unsupported == "penalty" else 0.0)
        with torch.no_grad():
            return model.solution(det_policy, initial_states).J

    plain = J(0.0, "extrapolate")
    assert J(0.0) == pytest.approx(plain, rel=1e-12)
    one, two = J(10.0), J(20.0)
    assert one < plain - 1e-3
    assert two - one == pytest.approx(one - plain, rel=1e-8)


def test_nopg_fit_improves_j_hat_and_reports(dataset, bandwidths, initial_states, det_policy,
                                             tmp_path):
    config = nopg.NOPGConfig(gamma=0.9,
                             model=nopg.ModelConfig(top_k=6, successors="local-linear", unsupported="penalty",
                                                    n_mc_next=2))
    algo = nopg.NOPG(det_policy, config)
    algo.fit(dataset, bandwidths, initial_states, n_updates=25, progress=False)
    assert isinstance(algo.model_, LocalLinearBellman)
    history = [h["J_hat"] for h in algo.history_]
    assert history[-1] > history[0]
    assert all(0 <= h["support_gap"] <= 1 for h in algo.history_)
    values = algo.value(dataset.states[:5])
    assert values.shape == (5,) and np.all(np.isfinite(values))
    config_kernel_mean = nopg.NOPGConfig(gamma=0.9,
                                         model=nopg.ModelConfig(top_k=6, successors="local-linear"))
    plain = nopg.NOPG(det_policy, config_kernel_mean)
    plain.fit(dataset, bandwidths, initial_states, n_updates=2, progress=False)
    loaded = nopg.NOPG.load(plain.save(tmp_path / "checkpoint"))
    assert isinstance(loaded.model_, LocalLinearBellman)
    assert loaded.J_hat() == pytest.approx(plain.J_hat(), rel=1e-12)


@pytest.mark.parametrize("settings, match", [
    (dict(successors="local-linear", top_k=None), "needs top_k"),
    (dict(successors="local-linear", top_k=6, unsupported="absorb"), "unsupported"),
    (dict(successors="linear", top_k=6), "successors"),
])
def test_unsupported_settings_are_refused(dataset, bandwidths, settings, match):
    with pytest.raises(ValueError, match=match):
        nopg.bellman_model(dataset, bandwidths, GAMMA, **settings)


def test_stochastic_model_needs_a_stochastic_policy(dataset, bandwidths, initial_states,
                                                    det_policy):
    model = nopg.bellman_model(dataset, bandwidths, GAMMA, stochastic=True, **LL)
    with pytest.raises(ValueError, match="mean_std"):
        model.solution(det_policy, initial_states)


def test_the_episode_ends_where_the_moved_successor_lands():
    """On linear data that end where the first coordinate of the next state passes 1, a query
    whose true successor lands well past it keeps no mass onwards, one that lands well before
    it keeps gamma, whatever its neighbours' own records say."""
    data, F, G, _ = _linear_data(n=400, seed=3)
    ends = data.next_states[:, 0] > 1.0
    data = nopg.TransitionDataset(states=data.states, actions=data.actions,
                                  next_states=data.next_states, rewards=data.rewards,
                                  terminals=ends)
    bw = nopg.Bandwidths(state=[0.3, 0.3], action=[0.5])
    model = nopg.bellman_model(data, bw, 0.9, top_k=5, neighbors="knn",
                                 successors="local-linear")
    # Actions beyond the data's (uniform in [-1, 1]): the neighbours, with actions near +-1,
    # mostly went on from the first query and mostly ended from the second, while the queries' own successors
    # land past the boundary and well before it.
    states = np.array([[0.4, 0.0], [2.0, 0.0]])
    actions = np.array([[3.0], [-3.0]])
    truth = states @ F.T + actions @ G.T
    assert truth[0, 0] > 1.8 and truth[1, 0] < 0.4
    for s, a in zip(states, actions):          # what the neighbours' own records say
        d2 = ((data.states - s) ** 2).sum(1) / 0.09 + ((data.actions - a) ** 2).sum(1) / 0.25
        near = np.argsort(d2)[:5]
        assert ends[near].mean() <= 0.2 if s[0] < 1 else ends[near].mean() >= 0.8
    with torch.no_grad():
        T, _, _ = model.successor_rows(torch.tensor(states), torch.tensor(actions)[:, None, :])
    sums = T.to_dense().sum(1).numpy()
    assert sums[0] < 0.05 * 0.9 and sums[1] > 0.95 * 0.9
