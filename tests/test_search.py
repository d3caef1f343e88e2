"""Derivative-free policy search (``optimizer="cma-es"``, :mod:`nopg.train.search`).

- CMA-ES finds the maximum of a concave quadratic in a policy's parameters; the incumbent's
  fitness never decreases, the incumbent stays loaded, and the first step scores the start;
- a NOPG fit with it: ``J_hat`` never decreases, ends above the start, equals the estimator's
  ``J_hat`` of the final policy, and is the same for the same seed;
- a checkpoint (tensors only) resumes the search from its incumbent;
- clear errors for bad settings.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.nn.utils import parameters_to_vector

import nopg
from nopg.train.search import EvolutionSearch


def _policy() -> nopg.LinearPolicy:
    torch.manual_seed(0)
    return nopg.LinearPolicy(2, 1).double()


def test_cma_es_finds_the_maximum_of_a_quadratic():
    policy = _policy()
    target = torch.tensor([0.7, -1.3, 0.4], dtype=torch.float64)
    params = list(policy.parameters())
    start = parameters_to_vector(params).detach().clone()

    def fitness() -> float:
        return -float(((parameters_to_vector(params) - target) ** 2).sum())

    search = EvolutionSearch(params, sigma=0.5, seed=1)
    best = []
    for _ in range(60):
        search.step(fitness)
        best.append(search.best_fitness)
        # the incumbent is what the parameters hold after every step
        assert fitness() == pytest.approx(search.best_fitness, abs=0)
    assert np.all(np.diff(best) >= 0)
    assert search.evaluations == 1 + 60 * search.population     # the start, then generations
    torch.testing.assert_close(parameters_to_vector(params).detach(), target, atol=1e-4, rtol=0)
    assert best[0] >= -float(((start - target) ** 2).sum())


def test_a_worse_generation_keeps_the_incumbent():
    policy = _policy()
    params = list(policy.parameters())
    start = parameters_to_vector(params).detach().clone()

    def fitness() -> float:         # the start is the best point there is
        return -float(((parameters_to_vector(params) - start) ** 2).sum())

    search = EvolutionSearch(params, sigma=1.0, seed=0)
    search.step(fitness)
    assert search.best_fitness == 0.0
    torch.testing.assert_close(parameters_to_vector(params).detach(), start)


def test_non_finite_scores_are_the_worst():
    policy = _policy()
    params = list(policy.parameters())

    def fitness() -> float:
        x = parameters_to_vector(params)
        return float("nan") if float(x[0]) > 0 else -float((x ** 2).sum())

    search = EvolutionSearch(params, sigma=0.5, seed=3)
    for _ in range(10):
        search.step(fitness)
    assert np.isfinite(search.best_fitness)
    assert float(parameters_to_vector(params)[0]) <= 0


def test_a_stalled_search_restarts_with_twice_the_population():
    policy = _policy()
    params = list(policy.parameters())
    start = parameters_to_vector(params).detach().clone()

    def fitness() -> float:         # flat away from the start: nothing improves on it
        return 1.0 if torch.equal(parameters_to_vector(params).detach(), start) else 0.0

    search = EvolutionSearch(params, sigma=0.5, seed=0, patience=3, restart="ipop")
    first = search.population
    reports = [search.step(fitness) for _ in range(7)]
    assert [r["search_restarts"] for r in reports] == [0, 0, 1, 1, 1, 2, 2]
    assert search.population == 4 * first
    assert search.best_fitness == 1.0
    torch.testing.assert_close(parameters_to_vector(params).detach(), start)
    state = search.state_dict()
    again = EvolutionSearch(params, sigma=0.5, seed=0, patience=3, restart="ipop")
    again.load_state_dict(state)
    assert (again.restarts, again.population) == (2, 4 * first)


def _fit(dataset, bandwidths, initial_states, updates: int, **changes) -> nopg.NOPG:
    settings = {"gamma": 0.9, "optimizer": "cma-es", "optimizer.sigma": 0.3, "model.top_k": 6,
                "model.neighbors": "knn", "model.n_mc_next": None, "behaviour.weight": 0.0,
                "seed": 2, **changes}
    config = nopg.NOPGConfig().replace(**settings)
    return nopg.NOPG(_policy(), config).fit(dataset, bandwidths, initial_states, updates,
                                              progress=False)


def test_nopg_fit_with_cma_es(dataset, bandwidths, initial_states):
    algo = _fit(dataset, bandwidths, initial_states, 6)
    j = [m["J_hat"] for m in algo.history_]
    assert np.all(np.diff(j) >= 0)
    start = nopg.NOPG(_policy(), algo.config)
    start.setup(dataset, bandwidths, initial_states)
    assert j[-1] > start.J_hat() + 1e-6
    assert algo.J_hat() == pytest.approx(j[-1], rel=1e-9)
    assert algo.history_[-1]["evaluations"] == 1 + 6 * algo.optimizer.population
    assert np.isnan(algo.history_[-1]["grad_norm"])
    again = _fit(dataset, bandwidths, initial_states, 6)
    assert [m["J_hat"] for m in again.history_] == j


def test_cma_es_on_the_anchored_model_with_the_behaviour_term(dataset, bandwidths,
                                                              initial_states):
    algo = _fit(dataset, bandwidths, initial_states, 3, **{
        "model.successors": "anchored", "model.anchor_horizon": 5, "behaviour.weight": 0.5,
        "behaviour.pretrain": 0})
    assert len(algo.history_) == 3
    assert all(np.isfinite(m["behaviour_loss"]) for m in algo.history_)
    assert np.isfinite(algo.J_hat())


def test_a_checkpoint_resumes_the_search(tmp_path, dataset, bandwidths, initial_states):
    algo = _fit(dataset, bandwidths, initial_states, 3)
    algo.save(tmp_path / "ckpt")
    loaded = nopg.NOPG.load(tmp_path / "ckpt", _policy())
    assert isinstance(loaded.optimizer, EvolutionSearch)
    torch.testing.assert_close(parameters_to_vector(loaded.policy.parameters()),
                               parameters_to_vector(algo.policy.parameters()))
    assert loaded.optimizer.evaluations == algo.optimizer.evaluations
    loaded.fit(dataset, bandwidths, initial_states, 2, progress=False)
    j = [m["J_hat"] for m in loaded.history_]
    assert j[-1] >= algo.history_[-1]["J_hat"] - 1e-9
    assert loaded.update_ == 5


@pytest.mark.parametrize("changes, match", [
    ({"optimizer.sigma": 0.0}, "'sigma' parameter of CMAES"),
    ({"optimizer.sigma": float("nan")}, "'sigma' parameter of CMAES"),
    ({"optimizer.population": 1}, "'population' parameter of CMAES"),
    ({"optimizer.patience": 0}, "'patience' parameter of CMAES"),
    ({"optimizer.restart": "bipop"}, "'restart' parameter of CMAES"),
    ({"optimizer": "nelder-mead"}, "'optimizer' parameter of NOPGConfig"),
])
def test_bad_search_settings(changes, match):
    with pytest.raises(ValueError, match=match):
        nopg.NOPGConfig(optimizer="cma-es").replace(**changes)


def test_a_fresh_restart_keeps_the_population_and_moves_the_mean():
    """``restart="fresh"``: after ``patience`` stalled generations the search restarts with the
    same population from a mean drawn around the start (deterministic for a seed, different
    per restart), and keeps the incumbent."""
    policy = _policy()
    params = list(policy.parameters())
    start = parameters_to_vector(params).detach().clone()

    def fitness() -> float:
        return 1.0 if torch.equal(parameters_to_vector(params).detach(), start) else 0.0

    def run() -> tuple[EvolutionSearch, list[np.ndarray]]:
        with torch.no_grad():
            for p, v in zip(params, torch.split(start, [p.numel() for p in params])):
                p.copy_(v.view_as(p))
        search = EvolutionSearch(params, sigma=0.5, seed=3, patience=2, restart="fresh")
        means = []
        for _ in range(6):
            search.step(fitness)
            means.append(np.asarray(search._es.mean, float).copy())
        return search, means

    search, means = run()
    first = 4 + int(3 * np.log(start.numel()))
    assert (search.restarts, search.population) == (3, first)
    assert search.best_fitness == 1.0
    torch.testing.assert_close(parameters_to_vector(params).detach(), start)
    # each restart's mean is start + 0.5 z, a fresh draw: far from the start and from the others
    restarted = [means[1], means[3], means[5]]
    for m in restarted:
        assert 0.1 < np.linalg.norm(m - start.numpy()) / np.sqrt(start.numel()) < 2.0
    assert np.linalg.norm(restarted[0] - restarted[1]) > 0.1
    again, means_again = run()
    np.testing.assert_array_equal(np.array(means_again), np.array(means))
    with pytest.raises(ValueError, match="restart"):
        EvolutionSearch(params, sigma=0.5, seed=0, restart="bipop")
