"""Relevance bandwidths (nopg.bandwidth.relevance): the held-out objective's gradient, irrelevant
dimensions found wide, the model exact with the fitted bandwidths, and clear errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from test_gradient import GAMMA, check_against_fd

import nopg
from nopg.bandwidth.relevance import (
    MIN_TRANSITIONS,
    fit_relevance,
    heldout_prediction_loss,
    one_step_prediction_error,
    relevance_bandwidths,
    relevance_fit,
)
from nopg.bandwidth.selection import METHODS, knn_bandwidths, resolve_method, select_bandwidths
from nopg.data.dataset import TransitionDataset


def _masked_problem(seed: int = 0):
    """Queries = the first 12 of 30 support points (3-D inputs, 2 targets), self pairs excluded."""
    gen = torch.Generator().manual_seed(seed)
    support = torch.randn(30, 3, generator=gen, dtype=torch.float64)
    targets = torch.stack([torch.sin(2 * support[:, 0]), support[:, 1] * support[:, 2]], 1)
    excluded = torch.zeros(12, 30, dtype=torch.bool)
    excluded[torch.arange(12), torch.arange(12)] = True
    return support[:12], targets[:12], support, targets, excluded


def test_objective_gradient_matches_central_differences():
    queries, q_targets, support, s_targets, excluded = _masked_problem()
    log_h = torch.tensor([-0.3, 0.2, 0.5], dtype=torch.float64, requires_grad=True)
    loss = heldout_prediction_loss(log_h, queries, q_targets, support, s_targets, excluded)
    (grad,) = torch.autograd.grad(loss, log_h)
    eps = 1e-6
    fd = np.empty(3)
    with torch.no_grad():
        for i in range(3):
            step = torch.zeros(3, dtype=torch.float64)
            step[i] = eps
            up = heldout_prediction_loss(log_h + step, queries, q_targets, support, s_targets, excluded)
            down = heldout_prediction_loss(log_h - step, queries, q_targets, support, s_targets, excluded)
            fd[i] = float(up - down) / (2 * eps)
    assert np.linalg.norm(grad.numpy()) > 1e-2
    np.testing.assert_allclose(grad.numpy(), fd, rtol=1e-6, atol=1e-9)


def test_objective_leaves_each_query_out():
    """A query's own target does not enter its prediction (its support copy has weight 0)."""
    queries, q_targets, support, s_targets, excluded = _masked_problem()
    log_h = torch.zeros(3, dtype=torch.float64)
    moved = s_targets.clone()
    moved[0] += 5.0                                             # the first query's own target
    again = heldout_prediction_loss(log_h, queries[:1], moved[:1], support, moved, excluded[:1])
    base = heldout_prediction_loss(log_h, queries[:1], moved[:1], support, s_targets, excluded[:1])
    assert torch.allclose(again, base)
    kept = torch.zeros_like(excluded[:1])                       # without the mask it would
    with_own = heldout_prediction_loss(log_h, queries[:1], moved[:1], support, moved, kept)
    assert not torch.allclose(with_own, heldout_prediction_loss(log_h, queries[:1], moved[:1], support,
                                                                s_targets, kept))


def _relevant_and_noise(n: int = 600, seed: int = 0) -> TransitionDataset:
    """States (s0..s3), one action; the dynamics and the reward depend on s0 and a only."""
    rng = np.random.default_rng(seed)
    s = rng.normal(size=(n, 4))
    a = rng.uniform(-1.0, 1.0, size=(n, 1))
    delta = np.column_stack([0.5 * np.sin(2 * s[:, 0]) + 0.8 * a[:, 0], 0.3 * np.tanh(s[:, 0]),
                             0.02 * rng.normal(size=n), 0.02 * rng.normal(size=n)])
    reward = -s[:, 0] ** 2 + 0.8 * a[:, 0]
    return TransitionDataset(s, a, reward, s + delta, np.zeros(n, dtype=bool))


def test_noise_dimensions_get_wide_bandwidths_and_the_error_falls():
    data = _relevant_and_noise()
    fit = relevance_fit(data, max_samples=300, support_samples=600, seed=0)
    assert fit.start == knn_bandwidths(data, seed=np.random.default_rng(0))
    assert fit.loss < 0.8 * fit.loss_start and fit.loss < fit.loss_mean
    relevant = min(fit.relevance_state[0], fit.relevance_action[0])
    noise = np.array(fit.relevance_state[1:])
    assert noise.max() < 0.5 * relevant and noise.mean() < 0.25 * relevant, \
        (fit.relevance_state, fit.relevance_action)
    # relative to their spread: the noise dimensions widened 3x or more, s0 did not widen
    assert np.all(fit.bandwidths.state[1:] > 3 * fit.start.state[1:])
    assert fit.bandwidths.state[0] <= fit.start.state[0]
    assert fit.bandwidths.next_state is None and fit.n_queries == 300 and fit.n_support == 600
    assert fit.iterations >= 1 and fit.evaluations >= fit.iterations
    # bounded: no bandwidth beyond 10 standard deviations of its column
    assert min(fit.relevance_state + fit.relevance_action) >= 0.1 * (1 - 1e-9)
    # reproducible, and the error on other transitions falls as well
    assert relevance_bandwidths(data, max_samples=300, support_samples=600, seed=0) == fit.bandwidths
    test = _relevant_and_noise(400, seed=1)
    before = one_step_prediction_error(data, test, fit.start)
    after = one_step_prediction_error(data, test, fit.bandwidths)
    assert after["all"] < before["all"] and set(after) == {"state", "reward", "all"}


def test_selected_by_name_and_the_model_stays_exact(dataset, initial_states, det_policy):
    """``method="relevance"`` is the rule with its defaults; with its bandwidths the NOPG
    gradient still matches finite differences of ``J_hat``."""
    assert "relevance" in METHODS and resolve_method("relevance") == "relevance"
    assert select_bandwidths(dataset, "auto") == knn_bandwidths(dataset)
    bw = select_bandwidths(dataset, "relevance", seed=0)
    assert bw == relevance_bandwidths(dataset, seed=0)
    assert bw != knn_bandwidths(dataset, seed=0)
    scaled = select_bandwidths(dataset, "relevance", state_factor=2.0, action_factor=[0.5], seed=0)
    np.testing.assert_allclose(scaled.state, 2.0 * bw.state)
    np.testing.assert_allclose(scaled.action, 0.5 * bw.action)
    check_against_fd(dataset, det_policy, bandwidths=bw, gamma=GAMMA,
                     initial_states=initial_states, top_k=None, seed=3)
    by_hand = nopg.Bandwidths(list(bw.state), list(bw.action))
    a = nopg.policy_gradient(dataset, det_policy, bandwidths=bw, gamma=GAMMA,
                             initial_states=initial_states, seed=3)
    b = nopg.policy_gradient(dataset, det_policy, bandwidths=by_hand, gamma=GAMMA,
                             initial_states=initial_states, seed=3)
    assert a.J == b.J
    for ga, gb in zip(a.grads, b.grads):
        assert torch.equal(ga, gb)


def test_a_given_start_and_a_constant_column():
    """A constant state column keeps its starting bandwidth; the others move."""
    data = _relevant_and_noise(200)
    states = data.states.copy()
    states[:, 3] = 1.5
    data = TransitionDataset(states, data.actions, data.rewards, data.next_states, data.terminals)
    start = nopg.Bandwidths([0.5, 0.5, 0.5, 0.25], [0.4])
    fit = relevance_fit(data, start=start, max_samples=100, support_samples=200, seed=1)
    assert fit.start == start and fit.bandwidths.state[3] == 0.25
    assert not np.allclose(fit.bandwidths.state[:3], 0.5)


@pytest.mark.parametrize("kwargs, match", [
    (dict(max_samples=1), "max_samples"),
    (dict(max_samples=2.5), "max_samples"),
    (dict(support_samples=0), "support_samples"),
    (dict(max_factor=0.0), "max_factor"),
    (dict(max_factor=-1.0), "max_factor"),
    (dict(max_factor=float("nan")), "max_factor"),
    (dict(max_iter=0), "max_iter"),
])
def test_bad_options(kwargs, match):
    data = _relevant_and_noise(50)
    with pytest.raises(ValueError, match=match):
        relevance_bandwidths(data, start=nopg.Bandwidths(1.0, 1.0), **kwargs)


def test_bad_data():
    data = _relevant_and_noise(MIN_TRANSITIONS - 1)
    with pytest.raises(ValueError, match="at least 10 transitions"):
        relevance_bandwidths(data)
    with pytest.raises(ValueError, match="at least 10 transitions"):
        select_bandwidths(data, "relevance")
    with pytest.raises(TypeError, match="TransitionDataset"):
        relevance_bandwidths(data.states)
    x = np.random.default_rng(0).normal(size=(40, 2))
    bad = x.copy()
    bad[3, 1] = np.nan
    with pytest.raises(ValueError, match="inputs contains NaN"):
        fit_relevance(bad, x[:, 0], [1.0, 1.0])
    with pytest.raises(ValueError, match="targets contains NaN"):
        fit_relevance(x, bad[:, 1], [1.0, 1.0])
    with pytest.raises(ValueError, match="NaN"):           # the data set refuses them first
        TransitionDataset(bad, x[:, :1], x[:, 0], bad, np.zeros(40, dtype=bool))
    with pytest.raises(ValueError, match="start"):
        fit_relevance(x, x[:, 0], [1.0, 0.0])
    with pytest.raises(ValueError, match="distinct"):
        fit_relevance(np.repeat(x[:3], 10, axis=0), np.arange(30.0), [1.0, 1.0])
    with pytest.raises(ValueError, match="constant"):
        fit_relevance(x, np.ones(40), [1.0, 1.0])
