"""The judge's drawn paths (``AnchoredBellman.sampled_returns``) and the ``sampled`` rule.

- on noise-free linear data the moved successors are exact, so every drawn path is the mean
  rollout: the paths' returns equal the mean rollout's forecast, with no spread;
- a case with a known answer: an unstable system ``x' = 1.5 x + a + noise`` whose episode ends
  at ``|x| > 1``. The policy ``a = -0.4 x`` leaves the closed loop unstable (``x' = 1.1 x``):
  its mean rollout from ``x = 0`` stays put and forecasts the whole return, as does the stable
  ``a = -1.5 x``, but the noise makes the real episodes of the first fall. The drawn paths
  forecast that fall (near the true mean return, simulated), and ``rule="sampled"`` keeps the
  stable policy where the mean rule without a tie-break keeps the first;
- candidates scored with one seed share their random numbers: a policy against itself is a
  tie, and the first is kept;
- bad input: a negative or non-integer ``particles``, a ``sampled`` rule without drawn paths or
  with paths of different shapes, an unknown rule, and the method's settings.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from test_anchored import START, _controller, _linear_data
from test_terminal_bounds import BW

import nopg
from nopg import AutoNOPG, MethodConfig, ModelConfig, NOPGConfig, TransitionDataset
from nopg.select.policy_selection import SAMPLED_Z, best_score, judge_model, score_policy

GROWTH, NOISE, STEPS = 1.5, 0.05, 30
STARTS = np.array([[0.0], [0.05], [-0.05], [0.02]])


def _unstable_judge() -> nopg.AnchoredBellman:
    rng = np.random.default_rng(0)
    n = 600
    x, a = rng.uniform(-1, 1, (n, 1)), rng.uniform(-2, 2, (n, 1))
    nxt = GROWTH * x + a + NOISE * rng.standard_normal((n, 1))
    data = TransitionDataset(states=x, actions=a, rewards=np.ones(n), next_states=nxt,
                             terminals=np.abs(nxt[:, 0]) > 1.0)
    config = NOPGConfig(gamma=0.9, model=ModelConfig(terminal_bounds=[[-1.0], [1.0]],
                                                     state_circles=None, n_mc_next=None))
    return judge_model(data, nopg.Bandwidths(state=[0.1], action=[0.2]), config)


def _gain(k: float) -> nopg.LinearPolicy:
    policy = nopg.LinearPolicy(1, 1).double()
    with torch.no_grad():
        policy.linear.weight.fill_(-k)
        policy.linear.bias.zero_()
    return policy


def _true_return(k: float, episodes: int = 2000) -> float:
    """The real system's mean return of ``a = -k x`` from :data:`STARTS` (simulated)."""
    rng = np.random.default_rng(1)
    total = 0.0
    for start in STARTS[:, 0]:
        for _ in range(episodes):
            x, steps = start, 0
            while steps < STEPS:
                steps += 1
                x = (GROWTH - k) * x + NOISE * rng.standard_normal()
                if abs(x) > 1.0:
                    break
            total += steps
    return total / (episodes * len(STARTS))


def test_drawn_paths_are_the_mean_rollout_on_exact_successors():
    config = NOPGConfig(gamma=0.9, model=ModelConfig(top_k=None, n_mc_next=None,
                                                     state_circles=None))
    judge = judge_model(_linear_data(), BW, config)
    score = score_policy(judge, _controller(), START, 40, seed=0, particles=5)
    assert score.paths.shape == (5, len(START))
    np.testing.assert_allclose(score.paths, score.paths[:1].repeat(5, 0), rtol=1e-7)
    assert score.sampled_mean == pytest.approx(score.episode_return_mean, rel=1e-7)
    assert score.sampled_se < 1e-7 * abs(score.sampled_mean)
    again = type(score)(**json.loads(json.dumps(score.to_dict())))
    np.testing.assert_array_equal(again.paths, score.paths)
    assert again.sampled_mean == score.sampled_mean and again == score


def test_the_sampled_rule_sees_an_unstable_loop_that_the_mean_rollout_hides():
    judge = _unstable_judge()
    unstable, stable = (score_policy(judge, _gain(k), STARTS, STEPS, seed=0, particles=32)
                        for k in (0.4, 1.5))
    # the mean rollouts both last the whole evaluation: a tie
    assert unstable.episode_return_mean == pytest.approx(STEPS, abs=1e-6)
    assert stable.episode_return_mean == pytest.approx(STEPS, abs=1e-6)
    # the drawn paths see the fall, near the real mean return; the stable loop keeps every path
    truth = _true_return(0.4)
    assert truth < STEPS - 3
    assert unstable.sampled_mean < STEPS - 5 * unstable.sampled_se
    assert abs(unstable.sampled_mean - truth) < 0.5 * (STEPS - truth)
    assert stable.sampled_mean == pytest.approx(STEPS, abs=1e-6) and _true_return(1.5) == STEPS
    assert best_score([unstable, stable], tie_break=False) == 0
    assert best_score([unstable, stable], rule="sampled") == 1
    assert best_score([stable, unstable], rule="sampled") == 0
    # without the mean rollout the forecast and the lengths are the drawn paths'
    alone = score_policy(judge, _gain(0.4), STARTS, STEPS, seed=0, particles=32,
                         mean_rollout=False)
    np.testing.assert_array_equal(alone.paths, unstable.paths)
    assert alone.episode_return_mean == unstable.sampled_mean
    returns, lengths = judge.sampled_returns(_gain(0.4), STARTS, STEPS, 32,
                                             torch.Generator().manual_seed(0))
    np.testing.assert_array_equal(returns, unstable.paths)
    assert alone.episode_steps_mean == lengths.mean() and alone.episode_steps_min == lengths.min()
    # every step earns 1 times the path's weight (the probability that it still goes on), and
    # the length L is the first step after which the weight is below 1/2: the steps up to L
    # earn at least 1/2 each and at most 1, the later ones less than 1/2
    assert lengths.min() < STEPS and np.all((lengths >= 1) & (lengths <= STEPS))
    assert np.all(returns >= 0.5 * lengths - 1e-9)
    assert np.all(returns <= lengths + 0.5 * (STEPS - lengths) + 1e-9)


def test_candidates_share_their_random_numbers():
    judge = _unstable_judge()
    first, again = (score_policy(judge, _gain(0.4), STARTS, STEPS, seed=3, particles=8)
                    for _ in range(2))
    np.testing.assert_array_equal(first.paths, again.paths)
    assert best_score([first, again], rule="sampled") == 0
    other = score_policy(judge, _gain(0.4), STARTS, STEPS, seed=4, particles=8)
    assert not np.array_equal(first.paths, other.paths)
    # a gain within z standard errors of the paired difference does not replace the kept one
    assert best_score([first, other], rule="sampled", z=1e6) == 0
    assert SAMPLED_Z > 0


def test_bad_sampled_settings():
    judge = _unstable_judge()
    with pytest.raises(ValueError, match="particles"):
        score_policy(judge, _gain(1.5), STARTS, STEPS, seed=0, particles=-1)
    with pytest.raises(ValueError, match="particles"):
        judge.sampled_returns(_gain(1.5), STARTS, STEPS, 0)
    with pytest.raises(ValueError, match="drawn paths'"):
        score_policy(judge, _gain(1.5), STARTS, STEPS, seed=0, mean_rollout=False)
    with pytest.raises(ValueError, match="steps"):
        judge.sampled_returns(_gain(1.5), STARTS, 0, 4)
    plain = score_policy(judge, _gain(1.5), STARTS, STEPS, seed=0)
    drawn = score_policy(judge, _gain(1.5), STARTS, STEPS, seed=0, particles=4)
    more = score_policy(judge, _gain(1.5), STARTS, STEPS, seed=0, particles=6)
    for scores in ([plain, drawn], [drawn, more]):
        with pytest.raises(ValueError, match="drawn paths"):
            best_score(scores, rule="sampled")
    with pytest.raises(ValueError, match="rule"):
        best_score([drawn], rule="median")
    with pytest.raises(ValueError, match="'z'"):
        best_score([drawn, drawn], rule="sampled", z=-1.0)
    with pytest.raises(ValueError, match="judge_rule"):
        MethodConfig(judge_rule="best")
    with pytest.raises(ValueError, match="judge_particles"):
        MethodConfig(judge_particles=-2)
    with pytest.raises(ValueError, match=">= 2"):
        MethodConfig(judge_rule="sampled", judge_particles=1)


def test_the_method_records_the_drawn_forecasts(tmp_path):
    rng = np.random.default_rng(0)
    n = 120
    x, a = rng.uniform(-1, 1, (n, 1)), rng.uniform(-2, 2, (n, 1))
    nxt = GROWTH * x + a + NOISE * rng.standard_normal((n, 1))
    data = TransitionDataset(states=x, actions=a, rewards=-np.abs(nxt[:, 0]), next_states=nxt,
                             terminals=np.zeros(n, bool))
    config = MethodConfig(n_updates=20, snapshot_every=5, recipes=("given",), judge_rule="sampled",
                          judge_particles=4, nopg=NOPGConfig(gamma=0.9))
    method = AutoNOPG(config, seed=0).fit(data, STARTS, progress=False, horizon=10)
    choice = method.report_.candidates[0].snapshot
    assert choice is not None and len(choice.scores) >= 2
    assert all(s.paths.shape == (4, len(STARTS)) for s in choice.scores)
    assert choice.update == choice.updates[best_score(choice.scores, rule="sampled")]
    assert choice.to_dict()["sampled_forecasts"] == [s.sampled_mean for s in choice.scores]
