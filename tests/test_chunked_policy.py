"""The policy evaluated chunk by chunk with a recomputed backward pass (:mod:`nopg.policies.chunked`).

- outputs and parameter gradients equal the plain call's (deterministic and Gaussian policies,
  one output or both, chunks that do not divide the states);
- the model's gradient with every query chunked matches finite differences of ``J_hat`` and the
  unchunked gradient (NOPG-D and NOPG-S, drawn next states);
- it falls back to the plain call where chunks would not reproduce the forward pass (batch
  normalisation or dropout in training mode), without autograd, for states that need a gradient,
  and for few states; a bad chunk size is refused.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from test_gradient import GAMMA, check_against_fd
from torch import nn

import nopg
import nopg.policies.chunked as cp


def _grads(outputs, policy, weights):
    loss = sum((o * w).sum() for o, w in zip(outputs, weights))
    return torch.autograd.grad(loss, [p for p in policy.parameters()])


@pytest.mark.parametrize("chunk", [7, 64, 500])
def test_deterministic_outputs_and_gradients_equal_the_plain_call(det_policy, chunk):
    states = torch.randn(301, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    weights = [torch.randn(301, 1, dtype=torch.float64, generator=torch.Generator().manual_seed(1))]
    plain = det_policy(states)
    chunked = cp.policy_outputs(det_policy, det_policy, states, chunk=chunk, min_states=1)
    assert isinstance(chunked, torch.Tensor) and chunked.grad_fn is not None
    torch.testing.assert_close(chunked, plain, rtol=0, atol=1e-14)
    for g, h in zip(_grads([chunked], det_policy, weights), _grads([plain], det_policy, weights)):
        torch.testing.assert_close(g, h, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("used", ["both", "mean", "std"])
def test_gaussian_mean_std_gradients_equal_the_plain_call(gauss_policy, used):
    states = torch.randn(257, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    w = torch.randn(257, 1, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    plain = gauss_policy.mean_std(states)
    chunked = cp.policy_outputs(gauss_policy.mean_std, gauss_policy, states, chunk=50, min_states=1)
    assert isinstance(chunked, tuple) and len(chunked) == 2
    pick = {"both": (0, 1), "mean": (0,), "std": (1,)}[used]
    g = _grads([chunked[i] for i in pick], gauss_policy, [w] * len(pick))
    h = _grads([plain[i] for i in pick], gauss_policy, [w] * len(pick))
    for a, b in zip(g, h):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-14)


@pytest.fixture
def chunk_everything(monkeypatch):
    """Every query of the model chunked, in chunks of 7 states."""
    monkeypatch.setattr(cp, "MIN_STATES", 1)
    monkeypatch.setattr(cp, "CHUNK", 7)


def test_model_gradient_chunked_matches_finite_differences(dataset, bandwidths, initial_states,
                                                           det_policy, chunk_everything):
    check_against_fd(dataset, det_policy, bandwidths=bandwidths, gamma=GAMMA,
                     initial_states=initial_states, top_k=8, seed=3)


@pytest.mark.parametrize("stochastic", [False, True])
def test_model_gradient_chunked_equals_unchunked(dataset, bandwidths, initial_states, det_policy,
                                                 gauss_policy, monkeypatch, stochastic):
    policy = gauss_policy if stochastic else det_policy
    kw = dict(bandwidths=bandwidths, gamma=GAMMA, initial_states=initial_states, top_k=8, seed=5,
              stochastic=stochastic, n_mc_policy=3 if stochastic else None, n_mc_next=2)
    plain = nopg.policy_gradient(dataset, policy, **kw)
    monkeypatch.setattr(cp, "MIN_STATES", 1)
    monkeypatch.setattr(cp, "CHUNK", 9)
    chunked = nopg.policy_gradient(dataset, policy, **kw)
    assert chunked.J == pytest.approx(plain.J, rel=1e-13)
    for g, h in zip(chunked.grads, plain.grads):
        np.testing.assert_allclose(g.numpy(), h.numpy(), rtol=1e-10, atol=1e-13)
    assert max(float(g.abs().max()) for g in plain.grads) > 1e-3


def test_falls_back_where_chunks_would_differ(det_policy):
    states = torch.randn(100, 2, dtype=torch.float64)
    assert cp.chunkable(det_policy, states, min_states=1)
    assert not cp.chunkable(det_policy, states, min_states=101)
    with torch.no_grad():
        assert not cp.chunkable(det_policy, states, min_states=1)
    assert not cp.chunkable(det_policy, states.clone().requires_grad_(), min_states=1)
    bn = nn.Sequential(nn.Linear(2, 4), nn.BatchNorm1d(4), nn.Linear(4, 1)).double()
    assert not cp.chunkable(bn, states, min_states=1)
    out = cp.policy_outputs(bn, bn, states, chunk=10, min_states=1)   # the plain, batch-wide call
    torch.testing.assert_close(out, bn(states))
    assert cp.chunkable(bn.eval(), states, min_states=1)
    drop = nn.Sequential(nn.Linear(2, 4), nn.Dropout(0.5)).double()
    assert not cp.chunkable(drop, states, min_states=1)


def test_bad_chunk_size_is_refused(det_policy):
    with pytest.raises(ValueError, match="chunk must be a positive integer"):
        cp.policy_outputs(det_policy, det_policy, torch.zeros(5, 2, dtype=torch.float64), chunk=0)
