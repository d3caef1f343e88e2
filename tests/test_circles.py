"""Angles observed as ``(cos, sin)``: the circles of :mod:`nopg.model.circles` and the moved successors.

- :func:`find_circles` finds the pendulum's ``(cos, sin)`` in float32 data and nothing in random
  or constant columns;
- the local-linear and anchored models keep their successors and rollouts on the circle (and
  leave it without ``state_circles``, so the tests can fail);
- the exact gradient with the projection against finite differences;
- clear errors for bad settings; the setting survives JSON.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from test_anchored import fd_fixed_anchors
from test_gradient import REL_TOL, check_against_fd, flat

import nopg
from nopg.model.circles import find_circles, project_to_circles, resolve_circles

GAMMA = 0.95
BW = nopg.Bandwidths(state=[0.25, 0.25, 1.0], action=[0.5])


def _pendulum_data(n: int = 150, seed: int = 0) -> nopg.TransitionDataset:
    """Pendulum-v1 steps from uniform states and actions, observed as float32 (cos, sin, w)."""
    rng = np.random.default_rng(seed)
    th, w = rng.uniform(-np.pi, np.pi, n), rng.uniform(-4.0, 4.0, n)
    a = rng.uniform(-2.0, 2.0, n)
    w2 = np.clip(w + (15.0 * np.sin(th) + 3.0 * a) * 0.05, -8.0, 8.0)
    th2 = th + w2 * 0.05

    def obs(t, v):
        return np.stack([np.cos(t), np.sin(t), v], 1).astype(np.float32).astype(float)

    reward = -(np.angle(np.exp(1j * th)) ** 2 + 0.1 * w ** 2 + 0.001 * a ** 2)
    return nopg.TransitionDataset(states=obs(th, w), actions=a[:, None], rewards=reward,
                                  next_states=obs(th2, w2), terminals=np.zeros(n, bool))


def _policy(seed: int = 0) -> nopg.DeterministicMLPPolicy:
    torch.manual_seed(seed)
    return nopg.DeterministicMLPPolicy(3, 1, action_max=2.0, hidden=(8,),
                                       activation="tanh").double()


def test_find_circles_finds_the_angle_and_nothing_else():
    data = _pendulum_data()
    assert find_circles(data.states) == [(0, 1)]
    rng = np.random.default_rng(1)
    assert find_circles(rng.normal(size=(500, 4))) == []
    # a circle of radius 2 in columns 1 and 3, beside random and constant columns
    t = rng.uniform(0, 2 * np.pi, 300)
    x = np.stack([rng.normal(size=300), 2 * np.cos(t), np.full(300, 3.0), 2 * np.sin(t)], 1)
    assert find_circles(x) == [(1, 3)]
    assert resolve_circles("auto", x) == [(1, 3, pytest.approx(2.0))]
    # two constant columns are a point, not a circle; a tiny arc is not told from a line
    assert find_circles(np.tile([[0.6, 0.8]], (50, 1))) == []
    t = rng.uniform(0, 1e-5, 50)
    assert find_circles(np.stack([np.cos(t), np.sin(t)], 1)) == []
    # noise of 1e-3 on the radius is not a circle
    t, r = rng.uniform(0, 2 * np.pi, 300), 1 + 1e-3 * rng.normal(size=300)
    assert find_circles(np.stack([r * np.cos(t), r * np.sin(t)], 1)) == []


def test_resolve_circles_settings_and_errors():
    x = _pendulum_data().states
    assert resolve_circles(None, x) == []
    assert resolve_circles([[1, 0]], x) == [(1, 0, pytest.approx(1.0, abs=1e-6))]
    with pytest.raises(ValueError, match="state index 3 .* 3 dimensions"):
        resolve_circles([[0, 3]], x)
    with pytest.raises(ValueError, match="radius 0"):
        resolve_circles([[0, 1]], np.zeros((5, 2)))


def test_project_to_circles_keeps_the_angle_and_is_differentiable():
    x = torch.tensor([[0.3, -0.4, 5.0], [2.0, 0.0, -1.0], [0.0, 0.0, 1.0]], dtype=torch.float64,
                     requires_grad=True)
    y = project_to_circles(x, [(0, 1, 1.0)])
    assert torch.allclose(y[:2, :2].norm(dim=1), torch.ones(2, dtype=torch.float64))
    assert torch.allclose(torch.atan2(y[:2, 1], y[:2, 0]), torch.atan2(x[:2, 1], x[:2, 0]))
    assert torch.equal(y[:, 2], x[:, 2]) and torch.equal(y[2], x[2])   # the origin stays
    assert project_to_circles(x, []) is x
    torch.autograd.gradcheck(lambda z: project_to_circles(z, [(0, 1, 2.0)]), (x[:2].detach()
                             .clone().requires_grad_(True),))


@pytest.mark.parametrize("circles", ["auto", None])
def test_the_moved_successors_stay_on_the_circle(circles):
    data = _pendulum_data()
    model = nopg.bellman_model(data, BW, GAMMA, successors="local-linear", top_k=6,
                                 neighbors="knn", state_circles=circles)
    assert model.circles == ([(0, 1, pytest.approx(1.0, abs=1e-6))] if circles else [])
    # queries off the circle (a drawn next state is) and actions the data did not take
    rng = np.random.default_rng(3)
    states = torch.as_tensor(data.states[:30] * np.array([0.9, 0.9, 1.0])
                             + 0.05 * rng.normal(size=(30, 3)))
    actions = torch.as_tensor(rng.uniform(-2, 2, size=(30, 1, 1)))
    _, _, succ, _ = model._neighbour_successors(states, actions)
    radius = succ[..., :2].norm(dim=-1)
    if circles:
        assert torch.allclose(radius, torch.ones_like(radius), atol=1e-12)
    else:
        assert (radius - 1).abs().max() > 0.05          # without it they leave the circle


@pytest.mark.parametrize("circles", ["auto", None])
def test_the_anchored_rollout_stays_on_the_circle(circles):
    model = nopg.bellman_model(_pendulum_data(300), BW, GAMMA, successors="anchored",
                                 top_k=6, neighbors="knn", anchor_horizon=60,
                                 state_circles=circles)
    path = model.rollout(_policy(), np.array([[-1.0, 0.0, 0.0], [0.0, 1.0, 1.0]]))
    radius = path[..., :2].norm(dim=-1)
    if circles:
        assert torch.allclose(radius, torch.ones_like(radius), atol=1e-12)
    else:
        assert (radius - 1).abs().max() > 1e-3


def test_gradient_with_circles_matches_finite_differences():
    data = _pendulum_data(80)
    check_against_fd(data, _policy(2), bandwidths=BW, gamma=GAMMA,
                     initial_states=data.states[:3], successors="local-linear", top_k=5,
                     neighbors="knn")


def test_anchored_gradient_with_circles_matches_finite_differences():
    # the anchored model's gradient holds the anchors fixed (nopg.model.anchored), so does the FD
    data = _pendulum_data(80)
    model = nopg.bellman_model(data, BW, GAMMA, successors="anchored", top_k=5,
                                 neighbors="knn", anchor_horizon=8)
    assert model.circles
    policy, start = _policy(2), data.states[:3]
    anchors = model.rollout(policy, start)
    sol = model.solution(policy, start, torch.Generator().manual_seed(0), anchors=anchors)
    ad = flat(torch.autograd.grad(sol.surrogate(), list(policy.parameters())))
    fd = fd_fixed_anchors(model, policy, start, anchors, seed=0)
    assert np.linalg.norm(ad) > 1e-3
    np.testing.assert_allclose(ad, fd, rtol=0, atol=REL_TOL * np.abs(ad).max())


@pytest.mark.parametrize("value", ["yes", [[0, 0]], [[0, 1], [1, 2]], [[0]], [[-1, 2]],
                                   [[0.5, 1]], 3, [["a", "b"]]])
def test_bad_state_circles_are_refused(value):
    with pytest.raises(ValueError, match="state_circles"):
        nopg.ModelConfig(state_circles=value)
    with pytest.raises(ValueError, match="state_circles"):
        nopg.NOPGConfig(model=nopg.ModelConfig(state_circles=value))


def test_state_circles_survive_json():
    config = nopg.NOPGConfig(model=nopg.ModelConfig(state_circles=((np.int64(0), 1),)))
    assert config.model.state_circles == [[0, 1]]
    again = nopg.NOPGConfig.from_dict(json.loads(json.dumps(config.to_dict())))
    assert again == config and again.model_config().state_circles == [[0, 1]]
