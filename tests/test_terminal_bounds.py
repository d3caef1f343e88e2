"""``terminal_bounds``: where the episode ends, for the models whose successors move.

- a local-linear successor past the bounds carries no value onwards (its row of ``T`` is empty),
  one within them keeps the model's row unchanged, and the reward is still paid;
- the clipping box reaches out to the bounds, so that a successor can cross them, and one
  clipped onto a bound it crossed stays past it;
- the anchored model ends its rollout's episode at the bounds: the anchors past them do not go
  on, and ``J_hat`` of a controller that drives the state out of them comes close to the true
  return of the episode that ends there (without the bounds it is far from it);
- the exact gradient with successors on both sides of the bounds against finite differences;
- bad settings are refused with a message naming ``terminal_bounds``; the setting survives JSON;
- the experiments take cart-pole's stabilisation region and the inverted pendulum's angle limit
  as the bounds of the moved successors.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from test_anchored import A_TRUE, B_TRUE, START, _linear_data, fd_fixed_anchors
from test_gradient import GAMMA, REL_TOL, flat

import nopg
from nopg.experiments import get_task
from nopg.experiments.runner import task_terminal_bounds, with_task_bounds
from nopg.model.bellman import NonparametricBellman

BW = nopg.Bandwidths(state=[0.15, 0.15], action=[0.3])


def _pushing(force: float) -> nopg.LinearPolicy:
    """A constant action: the double integrator accelerates towards ``+x`` for a positive one."""
    policy = nopg.LinearPolicy(2, 1).double()
    with torch.no_grad():
        policy.linear.weight.zero_()
        policy.linear.bias.fill_(force)
    return policy


def _model(successors: str = "local-linear", **kw) -> NonparametricBellman:
    return nopg.bellman_model(_linear_data(), BW, 0.9, successors=successors, top_k=8,
                                neighbors="knn", **kw)


def test_a_successor_past_the_bounds_carries_no_value():
    bounded = _model(terminal_bounds=[[None, None], [0.5, None]])
    free = _model()
    x = torch.tensor([[0.45, 0.8], [0.46, 0.9], [0.0, 0.2], [-0.3, -0.5]], dtype=torch.float64)
    u = torch.zeros((4, 1, 1), dtype=torch.float64)
    # the exact successors' x: 0.53 and 0.55 (past 0.5), 0.02 and -0.35 (within)
    T, rho, _ = bounded.successor_rows(x, u)
    T_free, rho_free, _ = free.successor_rows(x, u)
    sums, sums_free = T.values.sum(1), T_free.values.sum(1)
    torch.testing.assert_close(sums[:2], torch.zeros(2, dtype=torch.float64))
    assert torch.all(sums_free[:2] > 0.5)
    torch.testing.assert_close(T.values[2:], T_free.values[2:])
    torch.testing.assert_close(T.index, T_free.index)
    torch.testing.assert_close(rho, rho_free)                 # the step's reward is paid
    flags = bounded.within_terminal_bounds(torch.tensor([[0.5, 9.0], [0.51, 0.0]]))
    assert flags.tolist() == [1.0, 0.0]                       # the limit itself is within
    assert free.within_terminal_bounds(torch.tensor([[9.0, 9.0]])).tolist() == [1.0]


def test_the_box_reaches_out_to_the_bounds():
    """The data's box, widened by one width, ends near +-3.2; a bound at 5 extends it to 5 so
    that a successor can get there, and ``state_bounds`` still clip."""
    model = _model(terminal_bounds=[[None, -4.0], [5.0, None]])
    low, high = model.state_box
    free_low, free_high = _model().state_box
    assert float(free_high[0]) < 3.5 and float(free_low[1]) > -3.5
    assert float(high[0]) == 5.0 and float(low[1]) == -4.0
    assert float(low[0]) == float(free_low[0]) and float(high[1]) == float(free_high[1])
    x = torch.tensor([[3.9, 1.0]], dtype=torch.float64)
    succ, _ = model._moved(x, torch.zeros((1, 1, 1), dtype=torch.float64), torch.tensor([[0]]))
    torch.testing.assert_close(succ[0, 0], torch.tensor([4.0, 1.0], dtype=torch.float64),
                               atol=1e-6, rtol=0)
    clipped = _model(terminal_bounds=[[None, None], [5.0, None]], state_bounds=[[None, None],
                                                                               [3.95, None]])
    succ, _ = clipped._moved(x, torch.zeros((1, 1, 1), dtype=torch.float64), torch.tensor([[0]]))
    assert float(succ[0, 0, 0]) == pytest.approx(3.95)


@pytest.mark.parametrize("state_high", [None, 5.0])
def test_a_successor_clipped_onto_a_bound_it_crossed_stays_past_it(state_high):
    """The box ends on the bound at 5 (the data lie within +-3.2), or ``state_bounds`` put a
    limit on it: a successor that crosses it (5.08) is clipped one float past it, not onto it,
    and is terminal, while one that stops short of it keeps its place and its value."""
    model = _model(terminal_bounds=[[None, None], [5.0, None]],
                   state_bounds=[[None, None], [state_high, None]])
    assert float(model.state_box[1][0]) == 5.0
    x = torch.tensor([[4.98, 0.8], [4.8, 0.5]], dtype=torch.float64)
    u = torch.zeros((2, 1, 1), dtype=torch.float64)
    succ, _ = model._moved(x, u, torch.tensor([[0], [0]]))
    assert 5.0 < float(succ[0, 0, 0]) < 5.0 + 1e-12
    torch.testing.assert_close(succ[1, 0], torch.tensor([4.85, 0.5], dtype=torch.float64),
                               atol=1e-6, rtol=0)
    assert model.within_terminal_bounds(succ[:, 0]).tolist() == [0.0, 1.0]
    T, _, _ = model.successor_rows(x, u)
    sums = T.values.sum(1)
    assert float(sums[0]) == 0.0 and float(sums[1]) > 0.5


def test_a_state_bound_inside_a_terminal_bound_holds_the_successor():
    """``state_bounds`` are hard limits: with one at 4.9 inside the terminal bound at 5, the
    successor that would cross 5 stays at 4.9 and goes on."""
    model = _model(terminal_bounds=[[None, None], [5.0, None]],
                   state_bounds=[[None, None], [4.9, None]])
    x = torch.tensor([[4.98, 0.8]], dtype=torch.float64)
    succ, _ = model._moved(x, torch.zeros((1, 1, 1), dtype=torch.float64), torch.tensor([[0]]))
    assert float(succ[0, 0, 0]) == pytest.approx(4.9)
    assert model.within_terminal_bounds(succ[:, 0]).tolist() == [1.0]


def test_the_anchored_rollout_ends_at_a_bound_the_box_ends_on():
    """The judge's rollout (``episode_returns``, ``episode_lengths``) of a controller that pushes
    the state past a bound the box ends on: the episode ends there, as the true one does (clipped
    onto the bound, the state stayed on it and the episode went on to the last step)."""
    policy = _pushing(0.5)
    model = _model("anchored", terminal_bounds=[[None, None], [5.0, None]])
    assert float(model.state_box[1][0]) == 5.0
    steps = 300
    lengths = model.episode_lengths(policy, START, steps)
    returns, lengths_r = model.episode_returns(policy, START, steps)
    assert np.all(lengths < steps) and np.all(lengths_r < steps)
    s, t = START[0].copy(), 0                 # the true episode from the first start
    while s[0] <= 5.0:
        s, t = A_TRUE @ s + B_TRUE[:, 0] * 0.5, t + 1
    assert abs(int(lengths[0]) - t) <= 0.2 * t
    assert np.all(np.isfinite(returns))


def _true_return(force: float, high: float, gamma: float = 0.9, steps: int = 400) -> float:
    """The discounted return of the constant action from ``START`` on the true dynamics, the
    episode ending on the step whose next state has ``x > high``."""
    total = 0.0
    for s0 in START:
        s, ret = s0.copy(), 0.0
        for t in range(steps):
            ret += gamma ** t * (1 + 0.5 * s[0] + 0.2 * force)
            s = A_TRUE @ s + B_TRUE[:, 0] * force
            if s[0] > high:
                break
        total += ret
    return total / len(START)


@pytest.mark.parametrize("high", [0.8, 1.0])      # within the data's reward range
def test_the_anchored_episode_ends_at_the_bounds(high):
    policy, bounds = _pushing(0.5), [[None, None], [high, None]]
    with torch.no_grad():
        model = _model("anchored", terminal_bounds=bounds)
        J = model.solution(policy, START).J
        J_free = _model("anchored").solution(policy, START).J
    truth = _true_return(0.5, high)
    past = model.anchors[:, 0] > high
    assert past.any() and (~past).any()
    going_on = model._points_continuing[model.n:]
    assert torch.all(going_on[past] == 0)
    assert torch.all(going_on[~past] > 0.99)
    assert abs(J - truth) <= 0.05 * abs(truth)
    assert abs(J - truth) <= 0.15 * abs(J_free - truth)      # without the bounds: far off


def test_gradient_with_successors_past_the_bounds_matches_finite_differences(
        dataset, bandwidths, initial_states, det_policy):
    cut = float(np.median(dataset.next_states[:, 0]))
    model = nopg.bellman_model(dataset, bandwidths, GAMMA, successors="anchored", top_k=6,
                                 neighbors="knn", anchor_horizon=6,
                                 terminal_bounds=[[None, None], [cut, None]])
    anchors = model.rollout(det_policy, initial_states, torch.Generator().manual_seed(9))
    sol = model.solution(det_policy, initial_states, torch.Generator().manual_seed(3),
                         anchors=anchors)
    with torch.no_grad():
        T, _, _ = model.successor_rows(model.next_states,
                                       model.policy_actions(det_policy, model.next_states))
    empty = T.values.sum(1) == 0
    assert empty.any() and (~empty).any()                     # successors on both sides
    ad = flat(torch.autograd.grad(sol.surrogate(), list(det_policy.parameters())))
    fd = fd_fixed_anchors(model, det_policy, initial_states, anchors, 3)
    assert np.linalg.norm(ad) > 1e-3
    assert np.linalg.norm(fd - ad) / np.linalg.norm(ad) <= REL_TOL


@pytest.mark.parametrize("value", [[[0.0], [1.0, 2.0]], [[1.0], [0.0]], [[math.nan], [1.0]],
                                   "track", [[True], [2.0]]])
def test_bad_terminal_bounds_are_refused(value):
    with pytest.raises(ValueError, match="terminal_bounds"):
        nopg.ModelConfig(terminal_bounds=value)
    with pytest.raises(ValueError, match="terminal_bounds"):
        nopg.NOPGConfig(model=nopg.ModelConfig(terminal_bounds=value))


def test_a_wrong_length_is_refused():
    with pytest.raises(ValueError, match="terminal_bounds has 3 entries"):
        _model(terminal_bounds=[[0, 0, 0], [1, 1, 1]])


def test_terminal_bounds_survive_json():
    config = nopg.NOPGConfig(model=nopg.ModelConfig(terminal_bounds=[np.array([-0.3, -np.inf]), [0.3, None]]))
    assert config.model.terminal_bounds == [[-0.3, None], [0.3, None]]
    again = nopg.NOPGConfig.from_dict(json.loads(json.dumps(config.to_dict())))
    assert again == config
    assert again.model_config().terminal_bounds == [[-0.3, None], [0.3, None]]


def test_cartpole_gives_its_stabilisation_region_to_the_moved_successors():
    task = get_task("cartpole-random")
    config = task.default_config()
    anchored = config.replace(**{"nopg.model.successors": "anchored"})
    low, high = task_terminal_bounds(task, anchored, 5)
    assert low[1::2] == [None, None] and high[1:] == [None] * 4
    assert (low[0], low[2], high[0]) == pytest.approx((-0.307, math.cos(0.25), 0.307))
    assert with_task_bounds(task, anchored, 5).nopg.model.terminal_bounds == [low, high]   # as run
    assert task_terminal_bounds(task, config, 5) == [low, high]          # the task's knowledge
    assert with_task_bounds(task, config, 5) == config                   # the kernel model
    assert task_terminal_bounds(task, anchored.replace(env_terminal_bounds=False), 5) is None
    own_bounds = [[-1.0, None, None, None, None], [1.0, None, None, None, None]]
    own = anchored.replace(**{"nopg.model.terminal_bounds": own_bounds})
    assert with_task_bounds(task, own, 5).nopg.model.terminal_bounds == own_bounds   # explicit: kept
    inverted = get_task("invertedpendulum-random")
    assert task_terminal_bounds(inverted, inverted.default_config().replace(
        **{"nopg.model.successors": "local-linear"}), 4) == [[None, -0.2, None, None],
                                                       [None, 0.2, None, None]]
    pendulum = get_task("pendulum-uniform")
    assert task_terminal_bounds(pendulum, pendulum.default_config().replace(
        **{"nopg.model.successors": "anchored"}), 3) is None
