"""The full NOPG gradient (paper Eq. 6) against finite differences of J_hat.

``policy_gradient`` differentiates the surrogate ``eps0 . stop(q) + stop(mu)^T P stop(q)``; the
result must be the gradient of ``J_hat(theta)`` itself, which we estimate by central differences,
re-solving the Bellman system at every perturbed parameter with the same Monte-Carlo seed.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

import nopg

GAMMA = 0.9
EPS = 1e-6
REL_TOL = 1e-5


def _J(data, policy, **kw) -> float:
    return nopg.policy_gradient(data, policy, **kw).J


def fd_gradient(data, policy, eps: float = EPS, **kw) -> list[torch.Tensor]:
    """Central finite differences of J_hat over every parameter entry (re-solving each time)."""
    out = []
    for p in policy.parameters():
        g = torch.zeros_like(p)
        flat = p.data.view(-1)
        gflat = g.view(-1)
        for i in range(flat.numel()):
            old = flat[i].item()
            flat[i] = old + eps
            j_plus = _J(data, policy, **kw)
            flat[i] = old - eps
            j_minus = _J(data, policy, **kw)
            flat[i] = old
            gflat[i] = (j_plus - j_minus) / (2 * eps)
        out.append(g)
    return out


def flat(tensors) -> np.ndarray:
    return torch.cat([t.detach().reshape(-1) for t in tensors]).numpy()


def check_against_fd(data, policy, **kw) -> float:
    res = nopg.policy_gradient(data, policy, **kw)
    ad = flat(res.grads)
    fd = flat(fd_gradient(data, policy, **kw))
    assert np.all(np.isfinite(ad))
    # The gradient must be non-trivial, otherwise the comparison proves nothing.
    assert np.linalg.norm(ad) > 1e-3
    rel = np.linalg.norm(fd - ad) / np.linalg.norm(ad)
    assert rel <= REL_TOL, f"relative error {rel:.2e} between autograd and finite differences"
    # Entry-wise as well (a wrong small entry would hide in the norm).
    np.testing.assert_allclose(ad, fd, rtol=0, atol=REL_TOL * np.abs(ad).max())
    return rel


@pytest.mark.parametrize("top_k", [None, 8])
def test_gradient_deterministic_mlp(dataset, bandwidths, initial_states, det_policy, top_k):
    check_against_fd(dataset, det_policy, bandwidths=bandwidths, gamma=GAMMA,
                     initial_states=initial_states, top_k=top_k, seed=3)


@pytest.mark.parametrize("top_k", [None, 8])
def test_gradient_linear_policy(dataset, bandwidths, initial_states, linear_policy, top_k):
    check_against_fd(dataset, linear_policy, bandwidths=bandwidths, gamma=GAMMA,
                     initial_states=initial_states, top_k=top_k, seed=3)


@pytest.mark.parametrize("top_k", [None, 8])
def test_gradient_gaussian_stochastic(dataset, bandwidths, initial_states, gauss_policy, top_k):
    check_against_fd(dataset, gauss_policy, bandwidths=bandwidths, gamma=GAMMA,
                     initial_states=initial_states, top_k=top_k, stochastic=True, n_mc_policy=5,
                     seed=7)


@pytest.mark.parametrize("top_k", [None, 8])
def test_gradient_monte_carlo_next_states_deterministic(dataset, bandwidths, initial_states,
                                                       det_policy, top_k):
    check_against_fd(dataset, det_policy, bandwidths=bandwidths, gamma=GAMMA,
                     initial_states=initial_states, top_k=top_k, n_mc_next=3, seed=11)


def test_gradient_monte_carlo_next_states_gaussian(dataset, bandwidths, initial_states,
                                                   gauss_policy):
    check_against_fd(dataset, gauss_policy, bandwidths=bandwidths, gamma=GAMMA,
                     initial_states=initial_states, top_k=8, stochastic=True, n_mc_policy=4,
                     n_mc_next=3, seed=5)


def test_gradient_relu_mlp_and_high_gamma(dataset, bandwidths, initial_states):
    torch.manual_seed(4)
    policy = nopg.DeterministicMLPPolicy(2, 1, action_max=1.5, hidden=(6,), activation="relu")
    policy = policy.double()
    check_against_fd(dataset, policy, bandwidths=bandwidths, gamma=0.99,
                     initial_states=initial_states, seed=0)


def test_gradient_plain_sequential_policy(dataset, bandwidths, initial_states):
    torch.manual_seed(2)
    policy = nn.Sequential(nn.Linear(2, 5), nn.Tanh(), nn.Linear(5, 1)).double()
    check_against_fd(dataset, policy, bandwidths=bandwidths, gamma=GAMMA,
                     initial_states=initial_states)


def test_gradient_terminals_matter(dataset, bandwidths, initial_states, det_policy):
    """The same data without its terminal flags gives a different J and gradient."""
    kw = dict(bandwidths=bandwidths, gamma=GAMMA, initial_states=initial_states)
    no_term = nopg.TransitionDataset(dataset.states, dataset.actions, dataset.rewards,
                                     dataset.next_states, np.zeros(dataset.n, dtype=bool))
    with_t = nopg.policy_gradient(dataset, det_policy, **kw)
    without = nopg.policy_gradient(no_term, det_policy, **kw)
    assert abs(with_t.J - without.J) > 1e-6
    assert np.linalg.norm(flat(with_t.grads) - flat(without.grads)) > 1e-6


@pytest.mark.parametrize("kind", ["det", "gauss"])
def test_top_k_equal_n_is_dense(dataset, bandwidths, initial_states, det_policy, gauss_policy,
                                kind):
    policy = det_policy if kind == "det" else gauss_policy
    kw = dict(bandwidths=bandwidths, gamma=GAMMA, initial_states=initial_states,
              stochastic=kind == "gauss", n_mc_policy=3, seed=9)
    dense = nopg.policy_gradient(dataset, policy, top_k=None, **kw)
    topk = nopg.policy_gradient(dataset, policy, top_k=dataset.n, **kw)
    assert topk.J == pytest.approx(dense.J, abs=1e-10)
    np.testing.assert_allclose(topk.q, dense.q, rtol=0, atol=1e-10)
    np.testing.assert_allclose(topk.mu, dense.mu, rtol=0, atol=1e-10)
    np.testing.assert_allclose(flat(topk.grads), flat(dense.grads), rtol=0, atol=1e-10)


def test_top_k_smaller_than_n_differs_from_dense(dataset, bandwidths, initial_states, det_policy):
    kw = dict(bandwidths=bandwidths, gamma=GAMMA, initial_states=initial_states)
    dense = nopg.policy_gradient(dataset, det_policy, **kw)
    topk = nopg.policy_gradient(dataset, det_policy, top_k=3, **kw)
    assert abs(topk.J - dense.J) > 1e-8


def test_same_seed_same_estimate_other_seed_differs(dataset, bandwidths, initial_states,
                                                    gauss_policy):
    kw = dict(bandwidths=bandwidths, gamma=GAMMA, initial_states=initial_states, stochastic=True,
              n_mc_policy=3, n_mc_next=2)
    a = nopg.policy_gradient(dataset, gauss_policy, seed=1, **kw)
    b = nopg.policy_gradient(dataset, gauss_policy, seed=1, **kw)
    c = nopg.policy_gradient(dataset, gauss_policy, seed=2, **kw)
    assert a.J == b.J
    np.testing.assert_array_equal(flat(a.grads), flat(b.grads))
    assert a.J != c.J


def test_result_fields(dataset, bandwidths, initial_states, det_policy):
    res = nopg.policy_gradient(dataset, det_policy, bandwidths=bandwidths, gamma=GAMMA,
                               initial_states=initial_states)
    assert isinstance(res, nopg.PolicyGradientResult)
    assert res.q.shape == (dataset.n,) and res.mu.shape == (dataset.n,)
    params = list(det_policy.parameters())
    assert len(res.grads) == len(params)
    for g, p in zip(res.grads, params):
        assert g.shape == p.shape and g.dtype == p.dtype
    eps0 = _eps0(dataset, det_policy, bandwidths, initial_states)
    assert res.J == pytest.approx(float(eps0 @ res.q), abs=1e-12)


def _eps0(dataset, policy, bandwidths, initial_states) -> np.ndarray:
    model = nopg.NonparametricBellman(dataset, bandwidths, GAMMA)
    with torch.no_grad():
        return model.initial_vector(policy, initial_states).numpy()


class _WithUnused(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.used = nn.Linear(2, 1)
        self.unused = nn.Parameter(torch.ones(3))

    def forward(self, s):
        return torch.tanh(self.used(s))


def test_unused_parameter_gets_zero_gradient(dataset, bandwidths, initial_states):
    torch.manual_seed(0)
    policy = _WithUnused().double()
    res = nopg.policy_gradient(dataset, policy, bandwidths=bandwidths, gamma=GAMMA,
                               initial_states=initial_states)
    names = [name for name, _ in policy.named_parameters()]
    grads = dict(zip(names, res.grads))
    assert torch.equal(grads["unused"], torch.zeros(3, dtype=torch.float64))
    assert float(grads["used.weight"].abs().sum()) > 0


class _FixedController(nn.Module):
    """A fixed linear feedback ``a = tanh(s . k)``, optionally with a parameter it never uses."""

    def __init__(self, with_parameter: bool) -> None:
        super().__init__()
        self.register_buffer("gain", torch.tensor([[0.8], [-0.5]], dtype=torch.float64))
        if with_parameter:
            self.unused = nn.Parameter(torch.zeros(1, dtype=torch.float64))

    def forward(self, s: torch.Tensor) -> torch.Tensor:
        return torch.tanh(s @ self.gain)


def test_policy_without_parameters_is_evaluated(dataset, bandwidths, initial_states):
    # Off-policy evaluation of a fixed controller: the same J_hat, q and mu as the same
    # controller carrying a parameter, and no gradients.
    kw = dict(bandwidths=bandwidths, gamma=GAMMA, initial_states=initial_states, top_k=10)
    fixed = nopg.policy_gradient(dataset, _FixedController(False), **kw)
    carried = nopg.policy_gradient(dataset, _FixedController(True), **kw)
    assert fixed.grads == []
    assert fixed.J == pytest.approx(carried.J, rel=1e-12, abs=1e-12)
    np.testing.assert_allclose(fixed.q, carried.q, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(fixed.mu, carried.mu, rtol=1e-10, atol=1e-12)
    assert float(carried.grads[0].abs().sum()) == 0.0


# ---------------------------------------------------------------------------- bad inputs
def _pg(dataset, policy, bandwidths, initial_states, **kw):
    args = dict(bandwidths=bandwidths, gamma=GAMMA, initial_states=initial_states)
    args.update(kw)
    return nopg.policy_gradient(dataset, policy, **args)


@pytest.mark.parametrize("kw, match", [
    (dict(top_k=41), "top_k"),
    (dict(top_k=0), "top_k"),
    (dict(top_k=-3), "top_k"),
    (dict(solver="cholesky"), "solver"),
    (dict(gamma=1.0), "gamma"),
    (dict(gamma=-0.1), "gamma"),
    (dict(n_mc_next=0), "n_mc_next"),
    (dict(stochastic=True), "mean_std"),
])
def test_policy_gradient_bad_arguments(dataset, bandwidths, initial_states, det_policy, kw, match):
    with pytest.raises(ValueError, match=match):
        _pg(dataset, det_policy, bandwidths, initial_states, **kw)


@pytest.mark.parametrize("s0, match", [
    (np.zeros((3, 3)), "initial_states"),
    (np.array([[0.0, np.nan]]), "NaN"),
    (np.zeros((0, 2)), "empty"),
])
def test_policy_gradient_bad_initial_states(dataset, bandwidths, det_policy, s0, match):
    with pytest.raises(ValueError, match=match):
        _pg(dataset, det_policy, bandwidths, s0)


def test_policy_gradient_wrong_action_dimension(dataset, bandwidths, initial_states):
    policy = nn.Sequential(nn.Linear(2, 2)).double()
    with pytest.raises(ValueError, match="dimension"):
        _pg(dataset, policy, bandwidths, initial_states)
