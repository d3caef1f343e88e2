"""Gradient estimators (nopg.analysis): unbiasedness and consistency against the LQG's exact gradient."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from nopg import Bandwidths, DiagonalLinearPolicy, TransitionDataset, gaussian_log_prob
from nopg.analysis.estimators import (
    DPGEstimator,
    GPOMDPEstimator,
    NOPGEstimator,
    per_sample_scores,
)
from nopg.analysis.lqg_cases import ESTIMATOR_NAMES, lqg_cases, lqg_q_gradient
from nopg.analysis.parallel import parallel_map
from nopg.envs.lqg import LQG, PAPER_BEHAVIOUR_THETA, PAPER_THETA, collect_lqg, paper_lqg

THETA = PAPER_THETA


def _batched_mean_and_se(estimator, policy, data: TransitionDataset, n_batches: int):
    """Estimates on disjoint blocks of episodes: their mean and standard error."""
    episodes = data.episodes()
    blocks = np.array_split(np.arange(len(episodes)), n_batches)
    values = np.array([estimator.estimate(data.subset(np.concatenate([episodes[e] for e in b])),
                                          policy) for b in blocks])
    return values.mean(0), values.std(0, ddof=1) / np.sqrt(n_batches)


@pytest.mark.parametrize("normalize", [True, False])
def test_gpomdp_on_policy_matches_exact_gradient_within_standard_error(normalize):
    lqg = paper_lqg()
    data = collect_lqg(THETA, sigma=1.0, n_episodes=6000, horizon=50, seed=11, alpha=0.0)
    policy = DiagonalLinearPolicy(THETA, sigma=1.0)
    est = GPOMDPEstimator(None, lqg.gamma, normalize=normalize)
    mean, se = _batched_mean_and_se(est, policy, data, n_batches=20)
    truth = lqg.return_gradient(THETA, 1.0, 50)
    assert np.all(np.abs(mean - truth) < 3.5 * se), (mean, truth, se)
    assert np.all(se < 0.07 * np.linalg.norm(truth))  # the check has power
    # the behaviour given explicitly as the target itself: identical weights, identical estimate
    same = GPOMDPEstimator(DiagonalLinearPolicy(THETA, sigma=1.0), lqg.gamma, normalize=normalize)
    small = data.subset(np.arange(500))
    np.testing.assert_allclose(same.estimate(small, policy), est.estimate(small, policy), rtol=1e-12)


def test_plain_importance_sampling_is_unbiased_off_policy():
    """Without normalisation PWIS is unbiased off-policy (short horizon keeps its variance low)."""
    lqg = paper_lqg()
    behaviour = 0.5 * THETA + 0.5 * PAPER_BEHAVIOUR_THETA
    data = collect_lqg(THETA, sigma=1.0, n_episodes=20000, horizon=8, seed=3, alpha=0.5)
    est = GPOMDPEstimator(DiagonalLinearPolicy(behaviour, sigma=1.0), lqg.gamma, normalize=False)
    mean, se = _batched_mean_and_se(est, DiagonalLinearPolicy(THETA, sigma=1.0), data, n_batches=20)
    truth = lqg.return_gradient(THETA, 1.0, 8)
    assert np.all(np.abs(mean - truth) < 3.5 * se), (mean, truth, se)
    assert np.all(se < 0.05 * np.linalg.norm(truth))


def test_normalised_weights_sum_to_one_per_step():
    lqg = paper_lqg()
    data = collect_lqg(THETA, n_episodes=30, horizon=50, seed=0, alpha=1.0)
    est = GPOMDPEstimator(DiagonalLinearPolicy(PAPER_BEHAVIOUR_THETA, sigma=1.0), lqg.gamma)
    w, _, mask = est.weights(data, DiagonalLinearPolicy(THETA, sigma=1.0))
    np.testing.assert_allclose(w.sum(0), 1.0, rtol=1e-12)
    assert mask.all() and np.all(w >= 0) and w.std(0)[-1] > 0   # genuinely off-policy weights


def test_baseline_estimator_is_invariant_to_a_reward_shift():
    """G(PO)MDP+BN's per-step baseline absorbs a constant added to every reward; +N does not."""
    lqg = paper_lqg()
    data = collect_lqg(THETA, n_episodes=40, horizon=50, seed=5, alpha=0.5)
    shifted = TransitionDataset(data.states, data.actions, data.rewards + 7.0, data.next_states,
                                data.terminals, truncations=data.truncations,
                                episode_ids=data.episode_ids)
    behaviour = DiagonalLinearPolicy(0.5 * THETA + 0.5 * PAPER_BEHAVIOUR_THETA, sigma=1.0)
    policy = DiagonalLinearPolicy(THETA, sigma=1.0)
    bn = GPOMDPEstimator(behaviour, lqg.gamma, baseline=True)
    np.testing.assert_allclose(bn.estimate(shifted, policy), bn.estimate(data, policy), rtol=1e-9)
    n = GPOMDPEstimator(behaviour, lqg.gamma)
    assert not np.allclose(n.estimate(shifted, policy), n.estimate(data, policy), rtol=1e-3)


def test_per_sample_scores_match_the_closed_form():
    rng = np.random.default_rng(0)
    s = torch.tensor(rng.normal(size=(7, 2)))
    a = torch.tensor(rng.normal(size=(7, 2)))
    policy = DiagonalLinearPolicy(THETA, sigma=[0.5, 2.0])
    expected = (a - s * torch.tensor(THETA)) * s / torch.tensor([0.25, 4.0])
    torch.testing.assert_close(per_sample_scores(policy, s, a), expected, rtol=1e-12, atol=1e-12)
    # and the log-density itself against scipy's normal
    from scipy.stats import norm
    ref = norm.logpdf(a.numpy(), loc=(s * torch.tensor(THETA)).numpy(), scale=[0.5, 2.0]).sum(1)
    np.testing.assert_allclose(gaussian_log_prob(policy, s, a).detach().numpy(), ref, rtol=1e-12)


def _deterministic_trajectory(lqg: LQG, theta: np.ndarray, horizon: int) -> TransitionDataset:
    k = np.diag(theta)
    s = lqg.s0.copy()
    states, actions = [], []
    for _ in range(horizon):
        states.append(s)
        actions.append(k @ s)
        s = lqg.mean_next_state(states[-1], actions[-1])
    states, actions = np.array(states), np.array(actions)
    next_states = np.vstack([states[1:], s])
    return TransitionDataset(states, actions, lqg.reward(states, actions), next_states,
                             np.zeros(horizon, bool), episode_ids=np.zeros(horizon, int))


def test_dpg_with_exact_q_on_policy_states_is_the_exact_gradient():
    """The DPG theorem: on the deterministic policy's own states with gamma^t weights, exact."""
    lqg = paper_lqg()
    data = _deterministic_trajectory(lqg, THETA, 50)
    est = DPGEstimator(lqg_q_gradient(lqg, THETA, 50), lqg.gamma, discounting="proper")
    np.testing.assert_allclose(est.estimate(data, DiagonalLinearPolicy(THETA)),
                               lqg.return_gradient(THETA, 0.0, 50), rtol=1e-10)
    # at another gain, and the infinite-horizon oracle on a long trajectory
    other = np.array([-0.3, -0.9])
    est = DPGEstimator(lqg_q_gradient(lqg, other, 50), lqg.gamma, discounting="proper")
    np.testing.assert_allclose(est.estimate(_deterministic_trajectory(lqg, other, 50),
                                            DiagonalLinearPolicy(other)),
                               lqg.return_gradient(other, 0.0, 50), rtol=1e-10)
    est = DPGEstimator(lqg_q_gradient(lqg, THETA, None), lqg.gamma, discounting="proper")
    np.testing.assert_allclose(est.estimate(_deterministic_trajectory(lqg, THETA, 400),
                                            DiagonalLinearPolicy(THETA)),
                               lqg.return_gradient(THETA, 0.0, None), rtol=1e-10)


def test_dpg_improper_discounting_spreads_the_discounted_mass_uniformly():
    lqg = paper_lqg()
    data = collect_lqg(THETA, n_episodes=3, horizon=50, seed=0)
    proper = DPGEstimator(lqg_q_gradient(lqg, THETA, 50), lqg.gamma, discounting="proper")
    improper = DPGEstimator(lqg_q_gradient(lqg, THETA, 50), lqg.gamma)
    wp, wi = proper.state_weights(data), improper.state_weights(data)
    np.testing.assert_allclose(wi.sum(), wp.sum(), rtol=1e-12)
    np.testing.assert_allclose(wi, wi[0])
    np.testing.assert_allclose(wp[:50], lqg.gamma ** np.arange(50) / 3)


def _lqg_1d() -> LQG:
    return LQG(A=[[0.9]], B=[[1.0]], Q=[[1.0]], R=[[0.1]], s0=[1.0], gamma=0.8)


def test_nopg_converges_to_the_exact_gradient_as_data_grow_and_bandwidth_shrinks():
    """On-policy data of a 1-D LQG: the mean relative error falls along (n, kappa) and ends small."""
    lqg, theta, horizon = _lqg_1d(), [-0.4], 20
    schedule = [(10, 0.4), (50, 0.15), (100, 0.05)]
    errors = {"NOPG-D": [], "NOPG-S": []}
    for episodes, kappa in schedule:
        per_seed = {name: [] for name in errors}
        for seed in range(2):
            data = collect_lqg(theta, sigma=0.5, n_episodes=episodes, horizon=horizon, seed=seed,
                               behaviour_theta=theta, problem=lqg)
            cases = lqg_cases(lqg, theta, theta, sigma=0.5, horizon=horizon, bandwidth=kappa,
                              names=list(errors), n_mc_policy=5, seed=seed)
            for name, case in cases.items():
                g = case.estimate(data)
                per_seed[name].append(np.linalg.norm(g - case.truth) / np.linalg.norm(case.truth))
        for name in errors:
            errors[name].append(float(np.mean(per_seed[name])))
    for name, errs in errors.items():
        assert errs[0] > errs[1] > errs[2], (name, errs)
        assert errs[0] > 0.8 and errs[2] < 0.3, (name, errs)


def test_lqg_cases_truths_and_policies():
    lqg = paper_lqg()
    cases = lqg_cases(lqg, THETA, PAPER_BEHAVIOUR_THETA, bandwidth=0.3)
    assert list(cases) == list(ESTIMATOR_NAMES)
    det, sto = lqg.return_gradient(THETA, 0.0, 50), lqg.return_gradient(THETA, 1.0, 50)
    for name, case in cases.items():
        expected = det if name in ("NOPG-D", "DPG+Q") else sto
        np.testing.assert_allclose(case.truth, expected)
    data = collect_lqg(THETA, n_episodes=4, horizon=50, seed=1, alpha=1.0)
    for name, case in cases.items():
        g = case.estimate(data)
        assert g.shape == (2,) and np.all(np.isfinite(g)), name
    with pytest.raises(ValueError, match="unknown estimators"):
        lqg_cases(lqg, THETA, THETA, names=["REINFORCE"])


def test_nopg_estimator_matches_the_policy_gradient_and_takes_a_bandwidth_rule():
    from nopg import policy_gradient, select_bandwidths

    lqg = paper_lqg()
    data = collect_lqg(THETA, n_episodes=4, horizon=50, seed=2, alpha=0.5)
    bw = Bandwidths(state=0.4, action=0.3)
    policy = DiagonalLinearPolicy(THETA)
    ref = policy_gradient(data, policy, bandwidths=bw, gamma=lqg.gamma, initial_states=lqg.s0[None])
    est = NOPGEstimator(bw, lqg.gamma, lqg.s0)
    np.testing.assert_allclose(est.estimate(data, policy), ref.grads[0].numpy(), rtol=1e-12)
    assert est.last_J == pytest.approx(ref.J)
    rule = NOPGEstimator(lambda d: select_bandwidths(d, "silverman"), lqg.gamma, lqg.s0)
    assert np.all(np.isfinite(rule.estimate(data, policy)))


def test_estimator_errors_are_clear():
    lqg = paper_lqg()
    data = collect_lqg(THETA, n_episodes=2, horizon=50, seed=0)
    with pytest.raises(ValueError, match="Gaussian target"):
        GPOMDPEstimator(None, 0.9).estimate(data, DiagonalLinearPolicy(THETA))
    with pytest.raises(ValueError, match="behaviour policy must be Gaussian"):
        GPOMDPEstimator(DiagonalLinearPolicy(THETA), 0.9)
    with pytest.raises(ValueError, match="NOPG-S needs a Gaussian"):
        NOPGEstimator(Bandwidths(0.3, 0.3), 0.9, lqg.s0, stochastic=True).estimate(
            data, DiagonalLinearPolicy(THETA))
    with pytest.raises(ValueError, match="discounting"):
        DPGEstimator(lqg_q_gradient(lqg, THETA, 50), 0.9, discounting="sometimes")
    with pytest.raises(ValueError, match="gamma"):
        GPOMDPEstimator(None, 1.0)
    bad_q = DPGEstimator(lambda s, a, t: np.zeros((1, 2)), 0.9)
    with pytest.raises(ValueError, match="q_action_gradient must return"):
        bad_q.estimate(data, DiagonalLinearPolicy(THETA))
    with pytest.raises(ValueError, match="deterministic"):
        DiagonalLinearPolicy(THETA).mean_std(torch.zeros(1, 2, dtype=torch.float64))


def _square(x: int) -> int:
    return x * x


def test_parallel_map_processes_equal_serial():
    items = list(range(7))
    assert parallel_map(_square, items, workers=2, progress=False) == [x * x for x in items]
    assert parallel_map(_square, items, workers=1, progress=False) == [x * x for x in items]
    with pytest.raises(ValueError, match="workers"):
        parallel_map(_square, items, workers=0)


def test_parallel_map_on_a_local_ray_instance():
    pytest.importorskip("ray")
    import math  # a function Ray's workers can import (they do not see the tests folder)

    assert parallel_map(math.factorial, list(range(6)), workers=2, ray_address="local",
                        progress=False) == [1, 1, 2, 6, 24, 120]


def test_diagonal_linear_policy_spec_round_trip_and_stochastic_flag():
    from nopg.policies.networks import is_stochastic, policy_from_spec

    s = torch.tensor([[1.0, -2.0], [0.5, 3.0]], dtype=torch.float64)
    for sigma in (None, [0.5, 2.0]):
        policy = DiagonalLinearPolicy(THETA, sigma=sigma)
        again = policy_from_spec(policy.spec())
        torch.testing.assert_close(again(s), s * torch.tensor(THETA))
        assert is_stochastic(again) is (sigma is not None)
    torch.testing.assert_close(again.mean_std(s)[1], torch.tensor([[0.5, 2.0]] * 2, dtype=torch.float64))
    with pytest.raises(ValueError, match="finite vector"):
        DiagonalLinearPolicy([np.nan, 1.0])


def test_lqg_cases_take_a_model_config_or_its_settings():
    """``config=`` and keyword settings build the same NOPG models; ``stochastic`` is per estimator."""
    from nopg import ModelConfig

    lqg = paper_lqg()
    data = collect_lqg(THETA, n_episodes=2, horizon=50, seed=3, alpha=0.5)
    by_keywords = lqg_cases(lqg, THETA, THETA, names=["NOPG-D", "NOPG-S"], n_mc_policy=4, seed=2)
    config = ModelConfig(top_k=None, n_mc_policy=4, n_mc_next=None, solver_tol=1e-10,
                         dense_max_n=2000, stochastic=True)
    by_config = lqg_cases(lqg, THETA, THETA, names=["NOPG-D", "NOPG-S"], config=config, seed=2)
    for name in by_keywords:
        assert by_config[name].estimator.config == by_keywords[name].estimator.config
        np.testing.assert_array_equal(by_config[name].estimate(data), by_keywords[name].estimate(data))
    assert not by_config["NOPG-D"].estimator.stochastic and by_config["NOPG-S"].estimator.stochastic
