"""Built-in policies: bounds, Gaussian parameterisation, spec round trip, bad arguments."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from torch import nn

import nopg
from nopg.policies.networks import is_stochastic, policy_from_spec


def states(scale: float = 1.0, n: int = 64, d: int = 2, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return scale * torch.randn(n, d, generator=gen, dtype=torch.float64)


@pytest.mark.parametrize("action_max", [1.0, 2.5, [0.5, 3.0]])
def test_deterministic_output_bounded(action_max):
    torch.manual_seed(0)
    policy = nopg.DeterministicMLPPolicy(2, 2, action_max=action_max, hidden=(16, 16)).double()
    bound = torch.tensor(np.broadcast_to(action_max, (2,)).copy(), dtype=torch.float64)
    for scale in (1.0, 1e3):
        a = policy(states(scale))
        assert a.shape == (64, 2)
        assert torch.all(a.abs() <= bound)
    # Huge inputs saturate the tanh: the bound is attained (so it is really a_max, not 1).
    a = policy(states(1e6))
    assert torch.allclose(a.abs().max(0).values, bound)


def test_gaussian_mean_and_std():
    torch.manual_seed(0)
    sigma_max = [0.3, 1.5]
    policy = nopg.GaussianMLPPolicy(2, 2, action_max=[1.0, 2.0], sigma_max=sigma_max,
                                    hidden=(8,)).double()
    s = states(5.0)
    mean, std = policy.mean_std(s)
    assert mean.shape == std.shape == (64, 2)
    assert torch.all(mean.abs() <= torch.tensor([1.0, 2.0], dtype=torch.float64))
    assert torch.all(std > 0)
    assert torch.all(std <= torch.tensor(sigma_max, dtype=torch.float64))
    assert torch.equal(policy(s), mean)
    assert is_stochastic(policy)
    # sigma_scale multiplies the standard deviation only.
    policy.sigma_scale.fill_(0.25)
    mean2, std2 = policy.mean_std(s)
    assert torch.equal(mean2, mean)
    torch.testing.assert_close(std2, 0.25 * std)


def test_gaussian_sample_is_reparameterised():
    torch.manual_seed(0)
    policy = nopg.GaussianMLPPolicy(2, 1, sigma_max=0.5, hidden=(4,)).double()
    s = states(n=5000)
    a = policy.sample(s, torch.Generator().manual_seed(0))
    mean, std = policy.mean_std(s)
    z = ((a - mean) / std).detach()
    assert abs(float(z.mean())) < 0.1 and abs(float(z.std()) - 1.0) < 0.1
    a.sum().backward()
    assert all(p.grad is not None and float(p.grad.abs().sum()) > 0 for p in policy.parameters())
    a1 = policy.sample(s[:3], torch.Generator().manual_seed(1))
    a2 = policy.sample(s[:3], torch.Generator().manual_seed(1))
    assert torch.equal(a1, a2)


def test_linear_policy_is_zero_initialised_and_linear():
    policy = nopg.LinearPolicy(3, 2).double()
    s = states(d=3)
    assert torch.equal(policy(s), torch.zeros(64, 2, dtype=torch.float64))
    assert not is_stochastic(policy)
    with torch.no_grad():
        policy.linear.weight.copy_(torch.arange(6.0).reshape(2, 3))
        policy.linear.bias.copy_(torch.tensor([1.0, -1.0]))
    expected = s @ torch.arange(6.0, dtype=torch.float64).reshape(2, 3).T + \
        torch.tensor([1.0, -1.0], dtype=torch.float64)
    torch.testing.assert_close(policy(s), expected)
    assert nopg.LinearPolicy(3, 2, bias=False).linear.bias is None


def _randomise(policy: nn.Module) -> None:
    torch.manual_seed(42)
    with torch.no_grad():
        for p in policy.parameters():
            p.copy_(torch.randn_like(p))


@pytest.mark.parametrize("make", [
    lambda: nopg.DeterministicMLPPolicy(3, 2, action_max=[1.0, 2.0], hidden=(7, 5),
                                       activation="elu"),
    lambda: nopg.GaussianMLPPolicy(3, 2, action_max=2.0, sigma_max=[0.2, 0.4], hidden=(6,),
                                   activation="silu"),
    lambda: nopg.LinearPolicy(3, 2, bias=False),
    lambda: nopg.LinearPolicy(3, 2),
])
def test_spec_round_trip(make):
    policy = make()
    _randomise(policy)
    if hasattr(policy, "sigma_scale"):
        policy.sigma_scale.fill_(0.6)
    spec = json.loads(json.dumps(policy.spec()))  # JSON-serialisable
    assert spec["type"] == type(policy).__name__
    rebuilt = policy_from_spec(spec)
    assert type(rebuilt) is type(policy)
    rebuilt.load_state_dict(policy.state_dict())
    s = states(d=3).float()
    assert torch.equal(rebuilt(s), policy(s))
    if is_stochastic(policy):
        m1, s1 = policy.mean_std(s)
        m2, s2 = rebuilt.mean_std(s)
        assert torch.equal(m1, m2) and torch.equal(s1, s2)
    # Double precision survives the round trip as well.
    policy, rebuilt = policy.double(), policy_from_spec(spec).double()
    rebuilt.load_state_dict(policy.state_dict())
    s = states(d=3)
    assert torch.equal(rebuilt(s), policy(s))


def test_policy_from_spec_unknown_type():
    with pytest.raises(ValueError, match="Unknown policy type"):
        policy_from_spec({"type": "TransformerPolicy", "kwargs": {}})
    with pytest.raises(ValueError, match="Unknown policy type"):
        policy_from_spec({})


@pytest.mark.parametrize("make, match", [
    (lambda: nopg.DeterministicMLPPolicy(0, 1), "state_dim"),
    (lambda: nopg.DeterministicMLPPolicy(2, 0), "action_dim"),
    (lambda: nopg.DeterministicMLPPolicy(2, 1, activation="sigmoid"), "activation"),
    (lambda: nopg.DeterministicMLPPolicy(2, 1, hidden=(8, 0)), "hidden"),
    (lambda: nopg.DeterministicMLPPolicy(2, 1, action_max=0.0), "action_max"),
    (lambda: nopg.DeterministicMLPPolicy(2, 1, action_max=-1.0), "action_max"),
    (lambda: nopg.DeterministicMLPPolicy(2, 2, action_max=[1.0, float("nan")]), "action_max"),
    (lambda: nopg.DeterministicMLPPolicy(2, 1, action_max=[1.0, 2.0]), "action_max"),
    (lambda: nopg.GaussianMLPPolicy(-1, 1), "state_dim"),
    (lambda: nopg.GaussianMLPPolicy(2, 1, activation="softplus"), "activation"),
    (lambda: nopg.GaussianMLPPolicy(2, 1, action_max=0.0), "action_max"),
    (lambda: nopg.GaussianMLPPolicy(2, 1, sigma_max=0.0), "sigma_max"),
    (lambda: nopg.GaussianMLPPolicy(2, 1, sigma_max=-0.5), "sigma_max"),
    (lambda: nopg.GaussianMLPPolicy(2, 1, sigma_max=[0.5, 0.5]), "sigma_max"),
    (lambda: nopg.LinearPolicy(0, 1), "state_dim"),
    (lambda: nopg.LinearPolicy(2, 0), "action_dim"),
])
def test_policy_constructor_bad_arguments(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_plain_sequential_is_a_deterministic_policy(dataset, bandwidths, initial_states,
                                                    linear_policy):
    """Any nn.Module mapping states to actions works; it must agree with the same built-in one."""
    seq = nn.Sequential(nn.Linear(2, 1)).double()
    with torch.no_grad():
        seq[0].weight.copy_(linear_policy.linear.weight)
        seq[0].bias.copy_(linear_policy.linear.bias)
    kw = dict(bandwidths=bandwidths, gamma=0.9, initial_states=initial_states, top_k=8)
    a = nopg.policy_gradient(dataset, seq, **kw)
    b = nopg.policy_gradient(dataset, linear_policy, **kw)
    assert a.J == b.J
    assert torch.equal(a.grads[0], b.grads[0]) and torch.equal(a.grads[1], b.grads[1])
    assert not is_stochastic(seq)


@pytest.mark.parametrize("cls", [nopg.DeterministicMLPPolicy, nopg.GaussianMLPPolicy])
def test_input_scaling_standardises_the_mlp_input(cls, tmp_path):
    from nopg.policies.networks import input_scaling_from_data

    data_states = np.random.default_rng(0).normal([5.0, -1.0], [0.01, 3.0], size=(200, 2))
    scaling = input_scaling_from_data(data_states)
    np.testing.assert_allclose(scaling["state_scale"], data_states.std(0))
    torch.manual_seed(0)
    scaled = cls(2, 1, hidden=(8,), **scaling).double()
    plain = cls(2, 1, hidden=(8,)).double()
    plain.load_state_dict(scaled.state_dict())            # same weights, no scaling
    s = torch.tensor(data_states[:10])
    shift = torch.tensor(scaling["state_shift"], dtype=torch.float64)
    z = (s - shift) / torch.tensor(scaling["state_scale"], dtype=torch.float64)
    torch.testing.assert_close(scaled(s), plain(z))
    # The scaling travels with the spec (checkpoints rebuild the policy from it) ...
    rebuilt = policy_from_spec(json.loads(json.dumps(scaled.spec()))).double()
    rebuilt.load_state_dict(scaled.state_dict())
    torch.testing.assert_close(rebuilt(s), scaled(s))
    # ... and old state dicts without the buffers still load (they are not persistent).
    assert "state_scale" not in scaled.state_dict()
    # A constant dimension gets scale 1 instead of a division by zero.
    const = input_scaling_from_data(np.column_stack([np.ones(5), np.arange(5.0)]))
    assert const["state_scale"][0] == 1.0


@pytest.mark.parametrize("kwargs, match", [
    (dict(state_scale=[1.0, 0.0]), "state_scale must be positive"),
    (dict(state_shift=[1.0]), "state_shift must hold 2"),
    (dict(state_scale=[1.0, float("nan")]), "state_scale must hold 2 finite"),
])
def test_input_scaling_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        nopg.DeterministicMLPPolicy(2, 1, **kwargs)
