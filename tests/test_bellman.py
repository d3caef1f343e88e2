"""The nonparametric Bellman model: P, eps0, q, mu, V, Q, visitation and their closed forms."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

import nopg
from nopg.model.bellman import NonparametricBellman
from nopg.train.gradient import surrogate_gradient

GAMMA = 0.9


def model(dataset, bandwidths, gamma=GAMMA, **kw) -> NonparametricBellman:
    return nopg.bellman_model(dataset, bandwidths, gamma, **kw)


def query_states(dataset, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """States near the data and states about 1e3 away from it (in every direction)."""
    rng = np.random.default_rng(seed)
    near = rng.normal(scale=1.0, size=(30, dataset.state_dim))
    directions = rng.normal(size=(20, dataset.state_dim))
    directions /= np.linalg.norm(directions, axis=1, keepdims=True)
    far = 1e3 * directions
    far = np.vstack([far, [[1e3, 1e3], [-1e3, 0.0], [0.0, 5e3]]])
    return near, far


# ---------------------------------------------------------------------------- bound (Prop. 2)
@pytest.mark.parametrize("top_k", [None, 8])
@pytest.mark.parametrize("kind", ["det", "gauss"])
def test_value_bound_near_and_far(dataset, bandwidths, initial_states, det_policy, gauss_policy,
                                  top_k, kind):
    stochastic = kind == "gauss"
    policy = gauss_policy if stochastic else det_policy
    m = model(dataset, bandwidths, top_k=top_k, stochastic=stochastic, n_mc_policy=4)
    sol = m.solution(policy, initial_states)
    bound = np.abs(dataset.rewards).max() / (1 - GAMMA)
    near, far = query_states(dataset)
    for states in (near, far):
        v = m.value(policy, states, sol.q)
        assert v.shape == (states.shape[0],)
        assert np.all(np.isfinite(v))
        assert np.all(np.abs(v) <= bound * (1 + 1e-12) + 1e-12)
    assert np.isfinite(sol.J) and abs(sol.J) <= bound * (1 + 1e-12)
    assert np.all(np.abs(sol.q.numpy()) <= bound * (1 + 1e-12))
    # Q(s, a) is bounded as well, even for actions far from the data.
    near, far = query_states(dataset, seed=1)
    acts = np.concatenate([np.full((near.shape[0], 1), 0.2), np.full((far.shape[0], 1), -500.0)])
    qv = m.q_value(np.vstack([near, far]), acts, sol.q)
    assert np.all(np.isfinite(qv)) and np.all(np.abs(qv) <= bound * (1 + 1e-12))


def test_value_far_away_is_nearest_neighbour_value(dataset, bandwidths, initial_states,
                                                   det_policy):
    """Far from the data the softmax must not underflow to 0/0: it picks the closest sample."""
    m = model(dataset, bandwidths)
    sol = m.solution(det_policy, initial_states)
    s = np.array([[2e3, -1e3]])
    a = np.array([[0.0]])
    h_s, h_a = np.asarray(bandwidths.state), np.asarray(bandwidths.action)
    d = (((s - dataset.states) / h_s) ** 2).sum(1) + (((a - dataset.actions) / h_a) ** 2).sum(1)
    nearest = int(np.argmin(d))
    assert m.q_value(s, a, sol.q)[0] == pytest.approx(float(sol.q[nearest]), abs=1e-9)


# ---------------------------------------------------------------------------- P and eps0
def _check_rows(P: np.ndarray, dataset, gamma: float) -> None:
    term = dataset.terminals
    assert np.all(P >= 0)
    assert np.all(P[term] == 0.0), "terminal rows of P must be exactly zero"
    np.testing.assert_allclose(P[~term].sum(1), gamma, rtol=0, atol=1e-12)


@pytest.mark.parametrize("top_k", [None, 8])
@pytest.mark.parametrize("n_mc_next", [None, 3])
def test_transition_matrix_rows(dataset, bandwidths, det_policy, top_k, n_mc_next):
    assert dataset.terminals.sum() == 2
    m = model(dataset, bandwidths, top_k=top_k, n_mc_next=n_mc_next)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        P = m.transition_matrix(det_policy, gen).to_dense().numpy()
    assert P.shape == (dataset.n, dataset.n)
    _check_rows(P, dataset, GAMMA)
    if top_k is not None:
        per_sample = top_k * (n_mc_next or 1)
        assert np.all((P > 0).sum(1) <= per_sample)


def test_transition_matrix_rows_stochastic(dataset, bandwidths, gauss_policy):
    for top_k in (None, 5):
        m = model(dataset, bandwidths, top_k=top_k, n_mc_next=2, stochastic=True, n_mc_policy=3)
        with torch.no_grad():
            P = m.transition_matrix(gauss_policy, torch.Generator().manual_seed(1)).to_dense()
        _check_rows(P.numpy(), dataset, GAMMA)


def test_top_k_rows_are_renormalised_largest_dense_entries(dataset, bandwidths, det_policy):
    k = 6
    with torch.no_grad():
        dense = model(dataset, bandwidths).transition_matrix(det_policy).to_dense().numpy()
        sparse = model(dataset, bandwidths, top_k=k).transition_matrix(det_policy).to_dense().numpy()
    for i in range(dataset.n):
        if dataset.terminals[i]:
            assert np.all(sparse[i] == 0)
            continue
        keep = np.argsort(-dense[i])[:k]
        expected = np.zeros(dataset.n)
        expected[keep] = GAMMA * dense[i, keep] / dense[i, keep].sum()
        np.testing.assert_allclose(sparse[i], expected, rtol=0, atol=1e-12)


def test_top_k_equal_n_matrix_equals_dense(dataset, bandwidths, initial_states, gauss_policy):
    kw = dict(stochastic=True, n_mc_policy=3, n_mc_next=2)
    with torch.no_grad():
        d = model(dataset, bandwidths, **kw).solution(gauss_policy, initial_states,
                                                      torch.Generator().manual_seed(4))
        s = model(dataset, bandwidths, top_k=dataset.n, **kw).solution(
            gauss_policy, initial_states, torch.Generator().manual_seed(4))
    np.testing.assert_allclose(s.P.to_dense().numpy(), d.P.to_dense().numpy(), atol=1e-12)
    np.testing.assert_allclose(s.eps0.numpy(), d.eps0.numpy(), atol=1e-12)
    np.testing.assert_allclose(s.q.numpy(), d.q.numpy(), atol=1e-10)
    np.testing.assert_allclose(s.mu.numpy(), d.mu.numpy(), atol=1e-10)
    assert s.J == pytest.approx(d.J, abs=1e-10)


@pytest.mark.parametrize("top_k", [None, 8])
def test_eps0_and_responsibilities_are_distributions(dataset, bandwidths, initial_states,
                                                     det_policy, top_k):
    m = model(dataset, bandwidths, top_k=top_k)
    with torch.no_grad():
        eps0 = m.initial_vector(det_policy, initial_states).numpy()
        R = m.responsibilities(det_policy, query_states(dataset)[1]).to_dense().numpy()
    assert np.all(eps0 >= 0) and eps0.sum() == pytest.approx(1.0, abs=1e-12)
    assert np.all(R >= 0) and np.all(np.isfinite(R))
    np.testing.assert_allclose(R.sum(1), 1.0, atol=1e-12)


# ---------------------------------------------------------------------------- closed forms
def test_gamma_zero_J_is_eps0_dot_r(dataset, bandwidths, initial_states, det_policy):
    m = model(dataset, bandwidths, gamma=0.0)
    sol = m.solution(det_policy, initial_states)
    r = dataset.rewards
    np.testing.assert_allclose(sol.q.numpy(), r, rtol=0, atol=1e-14)
    assert sol.J == pytest.approx(float(sol.eps0.detach().numpy() @ r), abs=1e-14)
    np.testing.assert_allclose(sol.mu.numpy(), sol.eps0.detach().numpy(), atol=1e-14)


def _gauss_kernel(x: np.ndarray, centres: np.ndarray, h: np.ndarray) -> np.ndarray:
    """Explicit product of normalised 1-D Gaussian densities, shape (m, n)."""
    z = (x[:, None, :] - centres[None, :, :]) / h
    return np.prod(np.exp(-0.5 * z ** 2) / (np.sqrt(2 * np.pi) * h), axis=-1)


def _policy_np(policy, s: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return policy(torch.tensor(np.array(s), dtype=torch.float64)).numpy()


def _reference(dataset, h_s, h_a, gamma, policy, s0):
    """Brute-force NOPG-D with the kernel-mean next state, straight from the paper's formulas."""
    S, A, R, S1 = dataset.states, dataset.actions, dataset.rewards, dataset.next_states
    gam = np.where(dataset.terminals, 0.0, gamma)

    def eps_pi(x):
        k = _gauss_kernel(x, S, h_s) * _gauss_kernel(_policy_np(policy, x), A, h_a)
        return k / k.sum(1, keepdims=True)

    P = gam[:, None] * eps_pi(S1)
    eps0 = eps_pi(s0).mean(0)
    lam = np.eye(dataset.n) - P
    q = np.linalg.solve(lam, R)
    mu = np.linalg.solve(lam.T, eps0)
    return dict(P=P, eps0=eps0, q=q, mu=mu, J=eps0 @ q, eps_pi=eps_pi)


@pytest.mark.parametrize("policy_name", ["det_policy", "linear_policy"])
def test_matches_brute_force_reference(request, dataset, bandwidths, initial_states, policy_name):
    policy = request.getfixturevalue(policy_name)
    h_s, h_a = np.asarray(bandwidths.state), np.asarray(bandwidths.action)
    ref = _reference(dataset, h_s, h_a, GAMMA, policy, initial_states)
    m = model(dataset, bandwidths)
    sol = m.solution(policy, initial_states)
    np.testing.assert_allclose(sol.P.to_dense().detach().numpy(), ref["P"], rtol=0, atol=1e-12)
    np.testing.assert_allclose(sol.eps0.detach().numpy(), ref["eps0"], rtol=0, atol=1e-12)
    np.testing.assert_allclose(sol.q.numpy(), ref["q"], rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(sol.mu.numpy(), ref["mu"], rtol=1e-10, atol=1e-10)
    assert sol.J == pytest.approx(ref["J"], rel=1e-10, abs=1e-10)
    near, _ = query_states(dataset)
    np.testing.assert_allclose(m.value(policy, near, sol.q), ref["eps_pi"](near) @ ref["q"],
                               rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(m.visitation(policy, near, sol.mu), ref["eps_pi"](near) @ ref["mu"],
                               rtol=1e-10, atol=1e-10)
    # Q at arbitrary pairs against the explicit kernel product.
    rng = np.random.default_rng(5)
    acts = rng.uniform(-1, 1, size=(near.shape[0], 1))
    k = _gauss_kernel(near, dataset.states, h_s) * _gauss_kernel(acts, dataset.actions, h_a)
    np.testing.assert_allclose(m.q_value(near, acts, sol.q), (k / k.sum(1, keepdims=True)) @ ref["q"],
                               rtol=1e-10, atol=1e-10)


def test_next_state_bandwidth_is_used_for_monte_carlo_only(dataset, bandwidths, initial_states,
                                                           det_policy):
    """``h_s'`` only enters through the Monte-Carlo next states; the kernel mean ignores it."""
    wide = nopg.Bandwidths(state=bandwidths.state, action=bandwidths.action, next_state=[3.0, 3.0])
    with torch.no_grad():
        a = model(dataset, bandwidths).solution(det_policy, initial_states)
        b = model(dataset, wide).solution(det_policy, initial_states)
        c = model(dataset, bandwidths, n_mc_next=2).solution(
            det_policy, initial_states, torch.Generator().manual_seed(0))
        d = model(dataset, wide, n_mc_next=2).solution(
            det_policy, initial_states, torch.Generator().manual_seed(0))
    assert a.J == pytest.approx(b.J, abs=1e-14)
    assert abs(c.J - d.J) > 1e-6


def test_q_at_policy_action_equals_value(dataset, bandwidths, initial_states, det_policy):
    for top_k in (None, 8):
        m = model(dataset, bandwidths, top_k=top_k)
        sol = m.solution(det_policy, initial_states)
        near, far = query_states(dataset)
        states = np.vstack([near, far, dataset.states])
        v = m.value(det_policy, states, sol.q)
        qv = m.q_value(states, _policy_np(det_policy, states), sol.q)
        np.testing.assert_allclose(qv, v, rtol=0, atol=1e-12)


def test_bellman_equation_and_terminal_values(dataset, bandwidths, initial_states, det_policy):
    m = model(dataset, bandwidths, top_k=8)
    sol = m.solution(det_policy, initial_states)
    q = sol.q.numpy()
    P = sol.P.to_dense().detach().numpy()
    np.testing.assert_allclose(q, dataset.rewards + P @ q, atol=1e-10)
    # A terminal transition does not bootstrap: its value is its reward.
    np.testing.assert_allclose(q[dataset.terminals], dataset.rewards[dataset.terminals], atol=1e-14)
    # Value at the data's own next states equals the bootstrapped part of q.
    v_next = m.value(det_policy, dataset.next_states, sol.q)
    nt = ~dataset.terminals
    np.testing.assert_allclose(q[nt], dataset.rewards[nt] + GAMMA * v_next[nt], atol=1e-10)


def test_visitation_no_terminals(dataset_no_terminals, bandwidths, initial_states, det_policy):
    m = model(dataset_no_terminals, bandwidths)
    sol = m.solution(det_policy, initial_states)
    mu = sol.mu.numpy()
    assert np.all(mu >= -1e-12)
    assert mu.sum() == pytest.approx(1.0 / (1.0 - GAMMA), rel=1e-10)
    assert mu.sum() == pytest.approx(1.0 + GAMMA * mu.sum(), rel=1e-10)
    near, far = query_states(dataset_no_terminals)
    vis = m.visitation(det_policy, np.vstack([near, far]), sol.mu)
    assert np.all(np.isfinite(vis)) and np.all(vis >= -1e-12)


@pytest.mark.parametrize("top_k", [None, 8])
def test_visitation_mass_with_terminals(dataset, bandwidths, initial_states, gauss_policy, top_k):
    """1^T mu = 1^T eps0 + (P 1)^T mu = 1 + sum_i gamma_i mu_i (terminal rows contribute 0)."""
    m = model(dataset, bandwidths, top_k=top_k, stochastic=True, n_mc_policy=3)
    sol = m.solution(gauss_policy, initial_states, torch.Generator().manual_seed(0))
    mu = sol.mu.numpy()
    gam = dataset.discounts(GAMMA)
    assert np.all(mu >= -1e-12)
    assert mu.sum() == pytest.approx(1.0 + gam @ mu, rel=1e-10)
    assert mu.sum() < 1.0 / (1.0 - GAMMA)
    vis = m.visitation(gauss_policy, query_states(dataset)[0], sol.mu)
    assert np.all(vis >= -1e-12)


def test_query_seed_makes_stochastic_value_reproducible(dataset, bandwidths, initial_states,
                                                        gauss_policy):
    m = model(dataset, bandwidths, stochastic=True, n_mc_policy=3)
    sol = m.solution(gauss_policy, initial_states)
    s = query_states(dataset)[0]
    np.testing.assert_array_equal(m.value(gauss_policy, s, sol.q, seed=3),
                                  m.value(gauss_policy, s, sol.q, seed=3))


def test_value_accepts_large_query_batches_in_chunks(dataset, bandwidths, initial_states,
                                                     det_policy):
    m = model(dataset, bandwidths)
    sol = m.solution(det_policy, initial_states)
    s = np.random.default_rng(0).normal(size=(50, 2))
    whole = m._query(det_policy, s, sol.q, chunk=4096)
    chunked = m._query(det_policy, s, sol.q, chunk=7)
    np.testing.assert_allclose(chunked, whole, atol=1e-14)


# ---------------------------------------------------------------------------- bad inputs
@pytest.mark.parametrize("kw, match", [
    (dict(top_k=41), "top_k"),
    (dict(top_k=0), "top_k"),
    (dict(solver="gmres!"), "solver"),
    (dict(gamma=1.0), "gamma"),
    (dict(n_mc_policy=0), "n_mc_policy"),
    (dict(solver_tol=0.0), "solver_tol"),
])
def test_model_bad_arguments(dataset, bandwidths, kw, match):
    args = dict(gamma=GAMMA)
    args.update(kw)
    gamma = args.pop("gamma")
    with pytest.raises(ValueError, match=match):
        nopg.bellman_model(dataset, bandwidths, gamma, **args)


def test_model_bad_dataset_and_bandwidths(dataset, bandwidths):
    with pytest.raises(ValueError, match="TransitionDataset"):
        nopg.bellman_model({"states": 1}, bandwidths, GAMMA)
    with pytest.raises(ValueError, match="Bandwidths"):
        nopg.bellman_model(dataset, [0.5, 0.5], GAMMA)
    with pytest.raises(ValueError, match="state bandwidth"):
        nopg.bellman_model(dataset, nopg.Bandwidths(state=[1.0, 1.0, 1.0], action=1.0), GAMMA)


@pytest.mark.parametrize("s0, match", [
    (np.zeros((2, 3)), "initial_states"),
    (np.array([[np.nan, 0.0]]), "NaN"),
    (np.array([[np.inf, 0.0]]), "inf"),
    (np.zeros((0, 2)), "empty"),
])
def test_evaluate_bad_initial_states(dataset, bandwidths, det_policy, s0, match):
    with pytest.raises(ValueError, match=match):
        model(dataset, bandwidths).solution(det_policy, s0)


def test_evaluate_stochastic_needs_gaussian_policy(dataset, bandwidths, initial_states,
                                                   det_policy):
    with pytest.raises(ValueError, match="stochastic=True"):
        model(dataset, bandwidths, stochastic=True).solution(det_policy, initial_states)


def test_evaluate_wrong_action_dimension(dataset, bandwidths, initial_states):
    policy = nn.Linear(2, 3).double()
    with pytest.raises(ValueError, match="dimension 3"):
        model(dataset, bandwidths).solution(policy, initial_states)


def test_query_bad_shapes(dataset, bandwidths, initial_states, det_policy):
    m = model(dataset, bandwidths)
    sol = m.solution(det_policy, initial_states)
    with pytest.raises(ValueError, match="states"):
        m.value(det_policy, np.zeros((4, 5)), sol.q)
    with pytest.raises(ValueError, match="rows"):
        m.q_value(np.zeros((4, 2)), np.zeros((3, 1)), sol.q)


def test_solution_exposes_the_queried_actions(dataset, bandwidths, initial_states, det_policy):
    """``initial_actions``/``next_actions`` are the policy's outputs at the queries of ``eps0`` and
    ``P``: chained with the policy's Jacobians, the surrogate's gradient through them is the full
    gradient (the public hook for per-query gradient terms)."""
    m = model(dataset, bandwidths)
    sol = m.solution(det_policy, initial_states)
    z = torch.as_tensor(initial_states, dtype=torch.float64)
    assert sol.initial_actions.shape == (z.shape[0], 1, dataset.action_dim)
    assert sol.next_actions.shape == (dataset.n, 1, dataset.action_dim)
    torch.testing.assert_close(sol.next_actions[:, 0].detach(), det_policy(m.next_states).detach())
    params = list(det_policy.parameters())
    d_a0, d_next, *grads = surrogate_gradient(sol.surrogate(),
                                              [sol.initial_actions, sol.next_actions, *params])
    chained = [torch.zeros_like(p) for p in params]
    for states, d_a in ((z, d_a0[:, 0]), (m.next_states, d_next[:, 0])):
        terms = torch.autograd.grad(det_policy(states), params, grad_outputs=d_a)
        chained = [c + t for c, t in zip(chained, terms)]
    for g, c in zip(grads, chained):
        torch.testing.assert_close(c, g, rtol=1e-10, atol=1e-12)
