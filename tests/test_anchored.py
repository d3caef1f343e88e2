"""Anchored local-linear successors (``successors="anchored"``, :mod:`nopg.model.anchored`).

- on data from linear dynamics with a linear reward the anchored ``J_hat`` of a linear
  controller is its true discounted return (to 1e-4), where the local-linear model without
  anchors is off by more than 0.5%, and a short rollout leaves a larger error;
- the rollout is the true trajectory there, and the anchors are appended to the columns;
- the exact gradient with the anchors held fixed against finite differences (NOPG-D, NOPG-S,
  drawn next states, the penalty);
- the Bellman fixed point at the anchors; the thinness stays measured against the data;
- the ``auto`` horizon, the sizes, and clear errors for bad settings.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from test_gradient import EPS, GAMMA, REL_TOL, flat

import nopg
from nopg.model.anchored import AnchoredBellman, resolve_anchor_horizon
from nopg.model.bellman import NonparametricBellman
from nopg.model.local_linear import BOX_MARGIN

A_TRUE = np.array([[1.0, 0.1], [0.0, 1.0]])
B_TRUE = np.array([[0.0], [0.1]])
GAIN = np.array([-1.0, -1.5])
START = np.array([[0.6, 0.0], [-0.5, 0.3]])


def _linear_data(n: int = 400, seed: int = 0) -> nopg.TransitionDataset:
    """A double integrator's uniform random transitions; the reward ``1 + 0.5 x + 0.2 a``."""
    rng = np.random.default_rng(seed)
    s = rng.uniform(-1, 1, size=(n, 2))
    a = rng.uniform(-1, 1, size=(n, 1))
    return nopg.TransitionDataset(states=s, actions=a, next_states=s @ A_TRUE.T + a @ B_TRUE.T,
                                  rewards=1 + 0.5 * s[:, 0] + 0.2 * a[:, 0],
                                  terminals=np.zeros(n, bool))


def _controller() -> nopg.LinearPolicy:
    policy = nopg.LinearPolicy(2, 1).double()
    with torch.no_grad():
        policy.linear.weight.copy_(torch.tensor([GAIN]))
        policy.linear.bias.zero_()
    return policy


def _true_return(gamma: float, steps: int = 600) -> float:
    total = 0.0
    for s0 in START:
        s, ret = s0.copy(), 0.0
        for t in range(steps):
            a = GAIN @ s
            ret += gamma ** t * (1 + 0.5 * s[0] + 0.2 * a)
            s = A_TRUE @ s + B_TRUE[:, 0] * a
        total += ret
    return total / len(START)


def _model(successors: str = "anchored", **kw) -> NonparametricBellman:
    bw = nopg.Bandwidths(state=[0.15, 0.15], action=[0.3])
    settings = {"top_k": 8, "neighbors": "knn", **kw}
    return nopg.bellman_model(_linear_data(), bw, 0.9, successors=successors, **settings)


def test_j_hat_is_the_true_return_on_linear_dynamics():
    truth = _true_return(0.9)
    with torch.no_grad():
        anchored = _model().solution(_controller(), START).J
        plain = _model("local-linear").solution(_controller(), START).J
        short = _model(anchor_horizon=5).solution(_controller(), START).J
    assert abs(anchored - truth) <= 1e-4 * abs(truth)
    assert abs(plain - truth) >= 5e-3 * abs(truth)         # the jump the anchors remove
    assert abs(short - truth) >= 10 * abs(anchored - truth)


def test_the_rollout_is_the_true_trajectory_and_the_anchors_are_columns():
    model = _model()
    assert isinstance(model, AnchoredBellman)
    assert model.horizon == 40                              # ceil(4 / (1 - 0.9))
    path = model.rollout(_controller(), START)
    assert path.shape == (40, 2, 2)
    s = START.copy()
    for t in range(40):
        s = s @ (A_TRUE + B_TRUE @ GAIN[None, :]).T
        np.testing.assert_allclose(path[t].numpy(), s, atol=1e-5)   # the fits' ridge
    with torch.no_grad():
        sol = model.solution(_controller(), START)
    assert model.n_columns == model.n + 80
    assert sol.q.shape == (model.n + 80,) and sol.mu.shape == (model.n + 80,)
    np.testing.assert_allclose(model.anchors.numpy(), path.reshape(-1, 2).numpy())


def test_fixed_point_at_the_anchors():
    """``v`` solves ``v = rho + T v`` at the data's next states and at the anchors, ``value``
    there is ``v``, and ``J_hat`` is the mean value at the initial states."""
    model, policy = _model(), _controller()
    with torch.no_grad():
        sol = model.solution(policy, START)
    v = sol.q.numpy()
    at_anchors = model.value(policy, model.anchors.numpy(), sol.q)
    np.testing.assert_allclose(at_anchors, v[model.n:], rtol=0, atol=1e-8 * np.abs(v).max())
    at_next = model.value(policy, model.next_states.numpy(), sol.q)
    np.testing.assert_allclose(at_next, v[:model.n], rtol=0, atol=1e-8 * np.abs(v).max())
    assert sol.J == pytest.approx(model.value(policy, START, sol.q).mean(), rel=1e-10)


def test_thinness_is_measured_against_the_data():
    """An anchor far from the data is a column of the interpolation, but a successor there is
    still thin: the penalty does not count the rollout as data."""
    model = _model(unsupported="penalty")
    far = torch.tensor([[5.0, 5.0]], dtype=torch.float64)
    model.set_anchors(far)
    cols, weights, thin = model.interpolation(far)
    assert int(cols[0, int(weights[0].argmax())]) == model.n      # the anchor itself
    assert float(thin[0]) > 0.99


def fd_fixed_anchors(model, policy, start, anchors, seed, eps=EPS) -> np.ndarray:
    def J() -> float:
        with torch.no_grad():
            return model.solution(policy, start, torch.Generator().manual_seed(seed),
                                  anchors=anchors).J
    out = []
    for p in policy.parameters():
        flat_p = p.data.view(-1)
        for i in range(flat_p.numel()):
            old = flat_p[i].item()
            flat_p[i] = old + eps
            plus = J()
            flat_p[i] = old - eps
            minus = J()
            flat_p[i] = old
            out.append((plus - minus) / (2 * eps))
    return np.array(out)


@pytest.mark.parametrize("case", ["deterministic", "penalty-drawn", "stochastic"])
def test_gradient_with_fixed_anchors_matches_finite_differences(
        dataset, bandwidths, initial_states, det_policy, gauss_policy, case):
    kw = dict(successors="anchored", top_k=6, neighbors="knn", anchor_horizon=6)
    policy, seed = det_policy, 3
    if case == "penalty-drawn":
        kw.update(unsupported="penalty", n_mc_next=3)
        bandwidths = bandwidths.scaled(0.5, 0.5)
    if case == "stochastic":
        kw.update(stochastic=True, n_mc_policy=3, unsupported="penalty")
        policy, seed = gauss_policy, 4
    model = nopg.bellman_model(dataset, bandwidths, GAMMA, **kw)
    anchors = model.rollout(policy, initial_states, torch.Generator().manual_seed(9))
    sol = model.solution(policy, initial_states, torch.Generator().manual_seed(seed),
                         anchors=anchors)
    grads = torch.autograd.grad(sol.surrogate(), list(policy.parameters()))
    ad = flat(grads)
    fd = fd_fixed_anchors(model, policy, initial_states, anchors, seed)
    assert np.linalg.norm(ad) > 1e-3
    rel = np.linalg.norm(fd - ad) / np.linalg.norm(ad)
    assert rel <= REL_TOL, f"relative error {rel:.2e}"
    np.testing.assert_allclose(ad, fd, rtol=0, atol=REL_TOL * np.abs(ad).max())


def test_the_anchors_follow_the_policy(dataset, bandwidths, initial_states, det_policy):
    model = nopg.bellman_model(dataset, bandwidths, GAMMA, successors="anchored", top_k=6,
                                 neighbors="knn", anchor_horizon=4)
    with torch.no_grad():
        first = model.solution(det_policy, initial_states).J
        before = model.anchors.clone()
        for p in det_policy.parameters():
            p.add_(0.3)
        model.solution(det_policy, initial_states)
    assert not torch.allclose(before, model.anchors)
    assert np.isfinite(first)


def test_auto_horizon_and_settings():
    assert resolve_anchor_horizon("auto", 0.99) == 400
    assert resolve_anchor_horizon("auto", 0.9) == 40
    assert resolve_anchor_horizon(7, 0.99) == 7
    with pytest.raises(ValueError, match="anchor_horizon"):
        nopg.NOPGConfig(model=nopg.ModelConfig(anchor_horizon=0))
    with pytest.raises(ValueError, match="anchor_horizon"):
        nopg.ModelConfig(anchor_horizon="long")
    with pytest.raises(ValueError, match="absorb"):
        nopg.NOPGConfig(model=nopg.ModelConfig(successors="anchored", unsupported="absorb"))
    with pytest.raises(ValueError, match="top_k"):
        _model(top_k=None, neighbors="auto")


def test_a_diverging_rollout_is_reported(dataset, bandwidths, initial_states, det_policy):
    model = nopg.bellman_model(dataset, bandwidths, GAMMA, successors="anchored", top_k=6,
                                 neighbors="knn", anchor_horizon=4)
    with pytest.raises(FloatingPointError, match="rollout"):
        model.set_anchors(torch.tensor([[np.nan, 0.0]], dtype=torch.float64))


def test_an_unstable_rollout_stays_in_the_datas_box():
    """A controller that pushes the double integrator away: the true trajectory grows without
    bound, the model's rollout stops at the data's state box widened by ``BOX_MARGIN`` (the moved
    successors are clipped there), so the anchors stay finite and ``J_hat`` is a finite value."""
    model = _model()
    policy = nopg.LinearPolicy(2, 1).double()
    with torch.no_grad():
        policy.linear.weight.copy_(torch.tensor([[3.0, 3.0]]))
        policy.linear.bias.zero_()
    s, closed = START.copy(), A_TRUE + B_TRUE @ np.array([[3.0, 3.0]])
    for _ in range(model.horizon):
        s = s @ closed.T
    assert np.abs(s).max() > 1e3                             # the truth diverges
    path = model.rollout(policy, START)
    data = _linear_data()
    seen = np.concatenate([data.states, data.next_states])
    width = seen.max(0) - seen.min(0)
    assert np.all(path.numpy() >= seen.min(0) - BOX_MARGIN * width - 1e-12)
    assert np.all(path.numpy() <= seen.max(0) + BOX_MARGIN * width + 1e-12)
    with torch.no_grad():
        J = model.solution(policy, START).J
    assert np.isfinite(J) and 0.0 <= J <= data.rewards.max() / (1 - 0.9)


def test_nopg_fit_on_the_anchored_model_with_adam(dataset, bandwidths, initial_states, det_policy):
    config = nopg.NOPGConfig(gamma=GAMMA,
                             model=nopg.ModelConfig(successors="anchored", anchor_horizon=5, top_k=6,
                                                    neighbors="knn", n_mc_next=None),
                             behaviour=nopg.Behaviour(weight=0.0))
    algo = nopg.NOPG(det_policy, config).fit(dataset, bandwidths, initial_states, 3,
                                               progress=False)
    assert len(algo.history_) == 3
    assert np.isfinite(algo.J_hat())
    assert algo.solution().q.shape == (dataset.n + 5 * len(initial_states),)


def test_the_solver_is_chosen_by_the_systems_size_with_its_anchors():
    # 400 samples and 2 x 40 anchors: solver="auto" solves by the dense LU up to dense_max_n
    # states of the whole system, by BiCGSTAB above, to the same J_hat.
    dense = _model(dense_max_n=480, solver_tol=1e-12)
    iterative = _model(dense_max_n=479, solver_tol=1e-12)
    with torch.no_grad():
        j_dense = dense.solution(_controller(), START).J
        j_iterative = iterative.solution(_controller(), START).J
    assert dense.linear_solver.n == iterative.linear_solver.n == dense.n_columns == 480
    assert dense.linear_solver.dense and not iterative.linear_solver.dense
    assert j_iterative == pytest.approx(j_dense, rel=1e-9)


def test_each_anchor_row_is_built_once_as_k_identical_queries():
    # With n_mc_next = 3 draws per data next state, an anchor's row is the row of 3 identical
    # queries at the anchor (group 3), built once: the same matrix, a third of the successors.
    model = _model(n_mc_next=3)
    policy = _controller()
    with torch.no_grad():
        model.set_anchors(model.rollout(policy, START))
        T, rho, _, actions = model._next_queries_rows(policy, torch.Generator().manual_seed(0))
        k, m = 3, model.anchors.shape[0]
        copies = model.anchors[:, None, :].expand(-1, k, -1).reshape(-1, 2)
        Tk, rho_k, _ = model.successor_rows(copies, model.policy_actions(policy, copies), k)
    assert T.shape == (model.n + m, model.n_columns) and actions.shape[0] == k * model.n + m
    torch.testing.assert_close(T.to_dense()[model.n:], Tk.to_dense(), rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(rho[model.n:], rho_k, rtol=1e-12, atol=1e-14)

