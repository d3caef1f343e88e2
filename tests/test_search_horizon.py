"""``search_horizon``: the model's episode length ranks CMA-ES candidates before ``J_hat``.

- ``AnchoredBellman.episode_lengths`` on exact (linear) dynamics is the true step at which a
  policy drives the state past ``terminal_bounds``, and the full horizon for one that stays;
- the search ranks ``(alive, value)`` scores lexicographically: on a quadratic whose maximum lies
  where the candidates' episodes end, it converges to the best point that keeps them alive, and
  a candidate that keeps fewer episodes alive never replaces the incumbent, whatever its value;
- a fit with ``search_horizon`` logs the incumbent's ``search_alive``, never lowers
  ``(search_alive, J_hat)``, and bad settings are refused.
"""

from __future__ import annotations

import logging
import math

import numpy as np
import pytest
import torch
from test_anchored import A_TRUE, B_TRUE, START, _linear_data
from test_terminal_bounds import BW, _pushing

import nopg
from nopg.experiments import get_task
from nopg.experiments.runner import model_episode_report
from nopg.policies.candidates import CandidatePolicies
from nopg.train.search import EvolutionSearch


def _true_length(start: np.ndarray, force: float, high: float, steps: int) -> int:
    s = start.copy()
    for t in range(1, steps + 1):
        s = A_TRUE @ s + B_TRUE[:, 0] * force
        if s[0] > high:
            return t
    return steps


def test_episode_lengths_are_the_true_steps_to_the_bounds():
    model = nopg.bellman_model(_linear_data(), BW, 0.9, successors="anchored", top_k=8,
                                 neighbors="knn", terminal_bounds=[[None, None], [1.0, None]])
    lengths = model.episode_lengths(_pushing(0.5), START, 60)
    truth = [_true_length(s, 0.5, 1.0, 60) for s in START]
    assert list(lengths) == truth and max(truth) < 60
    # without a push the first start stays, the second coasts past the bound at 0.03 per step
    assert list(model.episode_lengths(_pushing(0.0), START, 60)) == [60, 50]
    assert [_true_length(s, 0.0, 1.0, 60) for s in START] == [60, 50]
    with pytest.raises(ValueError, match="steps"):
        model.episode_lengths(_pushing(0.0), START, 0)
    # the latest solution's anchors give the first steps: the same lengths, within the anchors'
    # horizon (40 steps) and past it (the unpushed first start lasts all 60)
    for force in (0.5, 0.0):
        with torch.no_grad():
            model.solution(_pushing(force), START)
        for steps in (5, model.horizon + 20):
            assert list(model.episode_lengths(_pushing(force), START, steps,
                                              from_anchors=True)) == \
                list(model.episode_lengths(_pushing(force), START, steps))
    with pytest.raises(ValueError, match="anchors"):
        model.episode_lengths(_pushing(0.5), START[:1], 10, from_anchors=True)


def test_episodes_that_nothing_can_end_last_every_step_without_a_rollout(monkeypatch):
    """Without terminal data and without terminal bounds no episode ends (every continuation
    is a convex combination of ones): the lengths are the steps, and nothing is rolled out."""
    data = _linear_data()
    assert not data.terminals.any()
    model = nopg.bellman_model(data, BW, 0.9, successors="anchored", top_k=8, neighbors="knn")
    far = nopg.bellman_model(data, BW, 0.9, successors="anchored", top_k=8, neighbors="knn",
                               terminal_bounds=[[None, None], [None, 1e9]])
    assert list(far.episode_lengths(_pushing(0.5), START, 60)) == [60, 60]    # rolled out
    monkeypatch.setattr(model, "_mean_step", lambda *a: pytest.fail("rolled out"))
    assert list(model.episode_lengths(_pushing(0.5), START, 60)) == [60, 60]
    with pytest.raises(ValueError, match="anchors"):        # the checks still apply
        model.episode_lengths(_pushing(0.5), START[:1], 10, from_anchors=True)


def _quadratic(search: EvolutionSearch, x: torch.Tensor):
    """Maximise ``-|x - (2, 1)|^2``; candidates with ``x_0 > 1`` keep fewer episodes alive."""
    def fitness():
        v = x.detach().numpy()
        alive = 1.0 if v[0] <= 1.0 else max(0.0, 1.0 - 0.5 * (v[0] - 1.0))
        return alive, -float(((v - np.array([2.0, 1.0])) ** 2).sum())
    return fitness


def test_the_search_keeps_the_episodes_alive_first():
    x = torch.zeros(2, dtype=torch.float64, requires_grad=True)
    search = EvolutionSearch([x], 0.5, seed=0)
    for _ in range(60):
        search.step(_quadratic(search, x))
    assert search.best_alive == 1.0
    np.testing.assert_allclose(x.detach().numpy(), [1.0, 1.0], atol=0.05)
    assert search.best_fitness == pytest.approx(-1.0, abs=0.1)


def test_a_candidate_with_fewer_episodes_alive_never_replaces_the_incumbent():
    x = torch.zeros(1, dtype=torch.float64, requires_grad=True)
    search = EvolutionSearch([x], 0.5, seed=1)
    scores = iter([(1.0, -5.0)] + [(0.9, 100.0 + k) for k in range(200)])
    report = search.step(lambda: next(scores))
    assert (search.best_alive, search.best_fitness) == (1.0, -5.0)
    assert report["search_alive"] == 1.0 and report["generation_best"] > 100.0
    torch.testing.assert_close(x.detach(), torch.zeros(1, dtype=torch.float64))
    plain = EvolutionSearch([x], 0.5, seed=1)
    plain.step(lambda: -1.0)                    # a float is (1, value)
    assert plain.best_alive == 1.0 and plain.best_fitness == -1.0


def test_a_fit_with_search_horizon(dataset, bandwidths, initial_states):
    policy = nopg.LinearPolicy(2, 1).double()
    config = nopg.NOPGConfig(gamma=0.9, seed=2, optimizer=nopg.CMAES(sigma=0.3, horizon=30),
                             model=nopg.ModelConfig(top_k=6, neighbors="knn", n_mc_next=None,
                                                    successors="anchored", anchor_horizon=5,
                                                    terminal_bounds=[[None, None], [0.5, None]]),
                             behaviour=nopg.Behaviour(weight=0.0))
    algo = nopg.NOPG(policy, config).fit(dataset, bandwidths, initial_states, 4, progress=False)
    keys = [(m["search_alive"], m["J_hat"]) for m in algo.history_]
    assert all(0.0 <= a <= 1.0 for a, _ in keys)
    assert all(later >= earlier for earlier, later in zip(keys, keys[1:]))
    lengths = algo.model_.episode_lengths(algo.policy, initial_states, 30,
                                          torch.Generator().manual_seed(2))
    assert math.isclose(keys[-1][0], float(np.mean(lengths)) / 30)


@pytest.mark.parametrize("changes, match", [
    ({"optimizer.horizon": 0}, "'horizon' parameter of CMAES"),
    ({"optimizer.horizon": 100, "optimizer": "adam"}, "'optimizer.horizon' of the 'adam'"),
    ({"optimizer.horizon": 100, "model.successors": "local-linear"},
     "'optimizer.horizon' parameter of NOPGConfig must be None unless"),
])
def test_bad_search_horizon(changes, match):
    settings = {"optimizer": "cma-es", "model.successors": "anchored", "model.top_k": 10,
                **changes}
    with pytest.raises(ValueError, match=match):
        nopg.NOPGConfig().replace(**settings)


def _pushed_fit(force: float, starts: np.ndarray, successors: str = "anchored") -> nopg.NOPG:
    config = nopg.NOPGConfig(gamma=0.9, behaviour=nopg.Behaviour(weight=0.0), model=nopg.ModelConfig(
        successors=successors, top_k=8, neighbors="knn", n_mc_next=None,
        terminal_bounds=[[None, None], [1.0, None]]))
    algo = nopg.NOPG(_pushing(force), config)
    algo.setup(_linear_data(), BW, starts)
    return algo


def test_the_fits_model_episode_lengths_and_the_runners_report(caplog):
    """``NOPG.model_episode_lengths`` is the true step to the bound from the fit's initial states;
    the experiments' report logs them and warns where they end before half the evaluation's."""
    pushed = _pushed_fit(0.5, START)
    assert list(pushed.model_episode_lengths(60)) == [_true_length(s, 0.5, 1.0, 60)
                                                      for s in START]
    assert list(pushed.model_episode_lengths(60, START[1:])) == [_true_length(START[1], 0.5, 1.0,
                                                                              60)]
    config = get_task("cartpole-random").default_config().replace(**{"task.eval_steps": 60})
    with caplog.at_level(logging.INFO, logger="nopg.select.auto"):
        report = model_episode_report(config, _pushed_fit(0.0, START), seed=3)
    assert report == {"model_episode_steps_mean": 55.0, "model_episode_steps_min": 50,
                      "model_episode_steps_of": 60}          # the second start coasts out at 50
    assert any("last 55.0 of the evaluation's 60 steps" in r.getMessage()
               for r in caplog.records)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]   # more than half
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="nopg.select.auto"):
        report = model_episode_report(config.replace(**{"task.eval_steps": 120}),
                                      _pushed_fit(0.5, START), seed=3)
    truth = [_true_length(s, 0.5, 1.0, 120) for s in START]
    assert report["model_episode_steps_mean"] == np.mean(truth) < 60
    assert any(r.levelno == logging.WARNING and "predicts a failure" in r.getMessage()
               for r in caplog.records)
    kernel = _pushed_fit(0.0, START, successors="kernel")
    assert model_episode_report(config, kernel, seed=3) == {}
    with pytest.raises(ValueError, match="anchored"):
        kernel.model_episode_lengths(60)


def _candidate_params(policy: torch.nn.Module, forces: list[float]) -> list[dict]:
    out = []
    for f in forces:
        params = {k: v.detach().clone() for k, v in policy.named_parameters()}
        params["linear.bias"].fill_(f)
        out.append(params)
    return out


def test_candidate_rollouts_are_each_candidates_own_rollout_and_lengths():
    """One batch of every candidate's states gives each one's anchors (its own ``rollout``, to
    rounding) and its ``episode_lengths`` (exactly), within the anchors' horizon and past it."""
    model = nopg.bellman_model(_linear_data(), BW, 0.9, successors="anchored", top_k=8,
                               neighbors="knn", terminal_bounds=[[None, None], [1.0, None]])
    forces = [0.5, 0.0, 0.2, -0.3]
    policy = _pushing(0.0)
    for steps in (5, model.horizon + 20):
        anchors, lengths = model.candidate_rollouts(
            CandidatePolicies(policy, _candidate_params(policy, forces), len(START)), START,
            steps)
        assert len(anchors) == len(lengths) == len(forces)
        for force, path, length in zip(forces, anchors, lengths):
            assert path.shape == (model.horizon, len(START), 2)
            torch.testing.assert_close(path, model.rollout(_pushing(force), START),
                                       rtol=1e-12, atol=1e-12)
            assert list(length) == list(model.episode_lengths(_pushing(force), START, steps))
    assert [list(x) for x in lengths] != [list(lengths[0])] * len(forces)   # they differ
    with pytest.raises(ValueError, match="policies carry 4 rows, not 4 candidates x 2"):
        model.candidate_rollouts(CandidatePolicies(policy, _candidate_params(policy, forces), 1),
                                 START, 10)
    with pytest.raises(ValueError, match="at least one"):
        CandidatePolicies(policy, [], 2)


def test_candidate_policies_act_as_each_candidate():
    policy = _pushing(0.0)
    batch = CandidatePolicies(policy, _candidate_params(policy, [1.0, -2.0]), 3)
    states = torch.arange(12, dtype=torch.float64).reshape(6, 2)
    torch.testing.assert_close(batch(states)[:, 0], torch.tensor([1.0] * 3 + [-2.0] * 3,
                                                                 dtype=torch.float64))
    batch.keep(torch.tensor([True, False, False, True, True, False]))
    torch.testing.assert_close(batch(states[:3])[:, 0], torch.tensor([1.0, -2.0, -2.0],
                                                                     dtype=torch.float64))
    with pytest.raises(ValueError, match="candidate rows"):
        batch(states)


def test_a_batched_generation_scores_as_one_candidate_at_a_time(dataset, bandwidths,
                                                                 initial_states, monkeypatch):
    """The CMA-ES fit with ``search_horizon`` scores a generation in one batch; the fit is the
    one that scores each candidate alone (the same incumbents, ``J_hat`` to rounding)."""
    def fit() -> nopg.NOPG:
        config = nopg.NOPGConfig(gamma=0.9, seed=2, optimizer=nopg.CMAES(sigma=0.3, horizon=30),
                                 model=nopg.ModelConfig(top_k=6, neighbors="knn", n_mc_next=None,
                                                        successors="anchored", anchor_horizon=5,
                                                        terminal_bounds=[[None, None], [0.5, None]]),
                                 behaviour=nopg.Behaviour(weight=0.0))
        return nopg.NOPG(nopg.LinearPolicy(2, 1).double(), config).fit(
            dataset, bandwidths, initial_states, 4, progress=False)

    calls = []
    original = nopg.AnchoredBellman.candidate_rollouts
    monkeypatch.setattr(nopg.AnchoredBellman, "candidate_rollouts",
                        lambda self, *a: calls.append(1) or original(self, *a))
    batched = fit()
    assert len(calls) == 4
    step = EvolutionSearch.step
    monkeypatch.setattr(EvolutionSearch, "step",
                        lambda self, fitness, fitness_many=None: step(self, fitness))
    alone = fit()
    assert len(calls) == 4
    for a, b in zip(batched.history_, alone.history_):
        assert a["search_alive"] == b["search_alive"]
        assert a["J_hat"] == pytest.approx(b["J_hat"], rel=1e-9)
    torch.testing.assert_close(batched.policy.linear.weight, alone.policy.linear.weight)
