"""The behaviour-cloning term (``NOPGConfig.behaviour_weight``) and the action predictability."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

import nopg
from nopg.train.behaviour import AUTO_SCALE, action_predictability, behaviour_targets


def _data(states: np.ndarray, actions: np.ndarray) -> nopg.TransitionDataset:
    n = states.shape[0]
    return nopg.TransitionDataset(states=states, actions=actions.reshape(n, -1),
                                  rewards=np.zeros(n), next_states=states,
                                  terminals=np.zeros(n, dtype=bool))


def test_predictability_separates_exploration_from_a_policy():
    rng = np.random.default_rng(0)
    s = rng.normal(size=(2000, 2))
    random_actions = rng.uniform(-1, 1, size=2000)
    assert action_predictability(_data(s, random_actions)) == 0.0
    assert action_predictability(_data(s, np.tanh(s[:, 0] - s[:, 1]))) > 0.95
    # equal parts signal and noise: R^2 about 1/2
    signal = np.sin(2 * s[:, 0])
    noisy = signal + signal.std() * rng.normal(size=2000)
    assert 0.35 < action_predictability(_data(s, noisy)) < 0.55


def test_own_action_is_left_out_with_duplicate_states():
    # every state twice, with independent actions: the twin predicts nothing; a prediction that
    # included the point's own action would score 1 with k = 1
    rng = np.random.default_rng(1)
    s = np.repeat(rng.normal(size=(300, 2)), 2, axis=0)
    a = rng.normal(size=600)
    assert action_predictability(_data(s, a), k=1) == 0.0
    # identical twins' actions are predicted exactly
    assert action_predictability(_data(s, np.repeat(a[::2], 2)), k=1) == 1.0


def test_predictability_is_deterministic_for_a_seed_and_averages_action_dimensions():
    rng = np.random.default_rng(2)
    s = rng.normal(size=(3000, 3))
    a = np.stack([np.tanh(s[:, 0]), rng.uniform(-1, 1, 3000)], axis=1)
    data = _data(s, a)
    one = action_predictability(data, max_queries=500, seed=3)
    assert one == action_predictability(data, max_queries=500, seed=3)
    assert 0.4 < one < 0.5          # one predictable dimension (about 0.9) and one random (0)
    a_const = np.stack([np.tanh(s[:, 0]), np.zeros(3000)], axis=1)
    assert action_predictability(_data(s, a_const)) == pytest.approx(
        action_predictability(_data(s, a[:, 0])) / 2)


@pytest.mark.parametrize("kw, match", [(dict(k=0), "'k' parameter"),
                                       (dict(max_queries=0), "'max_queries' parameter")])
def test_predictability_bad_arguments(dataset, kw, match):
    with pytest.raises(ValueError, match=match):
        action_predictability(dataset, **kw)


@pytest.mark.parametrize("value", [-0.1, float("nan"), float("inf"), "fast", True])
def test_bad_behaviour_weight(value):
    with pytest.raises(ValueError, match="'weight' parameter of Behaviour"):
        nopg.NOPGConfig(behaviour=nopg.Behaviour(weight=value))


def _objective(algo: nopg.NOPG, weight: float, scale: float,
               sample_weights: torch.Tensor | None = None) -> float:
    sol = algo.model_.solution(algo.policy, algo.initial_states_, torch.Generator().manual_seed(0))
    return sol.J / scale - weight * float(
        algo._behaviour.loss(algo.policy, weights=sample_weights).detach())


@pytest.mark.parametrize("policy_name, behaviour_filter", [
    ("det_policy", "none"), ("gauss_policy", "none"), ("det_policy", "weighted"),
    ("gauss_policy", "weighted")])
def test_step_ascends_the_exact_gradient_of_the_regularised_objective(
        dataset, bandwidths, initial_states, policy_name, behaviour_filter, request):
    # with the weighted filter the sample weights are held at the update's values (as in
    # advantage-weighted regression): the step is the exact gradient of the weighted objective
    weight = 0.7
    policy = request.getfixturevalue(policy_name)
    config = nopg.NOPGConfig(gamma=0.9, model=nopg.ModelConfig(n_mc_policy=1),
                             behaviour=nopg.Behaviour(weight=weight, filter=behaviour_filter,
                                                      temperature=0.05))
    algo = nopg.NOPG(policy, config, stochastic=False,
                     optimizer=torch.optim.SGD(policy.parameters(), lr=1.0))
    algo.setup(dataset, bandwidths, initial_states)
    before = [p.detach().clone() for p in policy.parameters()]
    sol0 = algo.model_.solution(policy, algo.initial_states_, torch.Generator().manual_seed(0))
    scale = abs(sol0.J)
    sample_weights = None
    if behaviour_filter == "weighted":
        sample_weights = algo._behaviour_weights(sol0.q)[0]
        assert float(sample_weights.std()) > 0.05 * float(sample_weights.mean())  # not uniform
    metrics = algo.step()
    assert metrics["behaviour_loss"] > 0
    step = torch.cat([(p.detach() - b).reshape(-1) for p, b in zip(policy.parameters(), before)])
    with torch.no_grad():
        for p, b in zip(policy.parameters(), before):
            p.copy_(b)
    fd = []
    eps = 1e-6
    for p in policy.parameters():
        flat = p.data.view(-1)
        for i in range(flat.numel()):
            old = flat[i].item()
            flat[i] = old + eps
            up = _objective(algo, weight, scale, sample_weights)
            flat[i] = old - eps
            down = _objective(algo, weight, scale, sample_weights)
            flat[i] = old
            fd.append((up - down) / (2 * eps))
    fd = np.asarray(fd)
    ad = step.numpy()
    assert np.linalg.norm(ad) > 1e-3
    np.testing.assert_allclose(ad, fd, rtol=0, atol=1e-5 * np.abs(ad).max())
    # the behaviour term changes the step: without it the step is the J_hat gradient alone
    assert not np.allclose(ad * scale, _j_gradient(dataset, bandwidths, initial_states, before,
                                                   policy), atol=1e-6)


def _j_gradient(dataset, bandwidths, initial_states, params, policy) -> np.ndarray:
    other = copy.deepcopy(policy)
    with torch.no_grad():
        for p, b in zip(other.parameters(), params):
            p.copy_(b)
    config = nopg.NOPGConfig(gamma=0.9, model=nopg.ModelConfig(n_mc_policy=1),
                             behaviour=nopg.Behaviour(weight=0.0))
    algo = nopg.NOPG(other, config,
                     stochastic=False, optimizer=torch.optim.SGD(other.parameters(), lr=1.0))
    algo.setup(dataset, bandwidths, initial_states)
    algo.step()
    return torch.cat([(p.detach() - b).reshape(-1) for p, b in zip(other.parameters(), params)]).numpy()


def test_auto_weight_is_off_on_exploration_data(dataset, bandwidths, initial_states, det_policy):
    runs = []
    for weight in ("auto", 0.0):
        policy = copy.deepcopy(det_policy)
        algo = nopg.NOPG(policy, nopg.NOPGConfig(gamma=0.9, behaviour=nopg.Behaviour(weight=weight)))
        algo.fit(dataset, bandwidths, initial_states, 5, progress=False)
        runs.append([m["J_hat"] for m in algo.history_])
        assert algo.behaviour_weight_ == 0.0
    assert runs[0] == runs[1]


def _controller_data(n: int = 200, seed: int = 4) -> nopg.TransitionDataset:
    rng = np.random.default_rng(seed)
    s = rng.normal(scale=0.8, size=(n, 2))
    a = np.tanh(-s[:, :1] - 0.5 * s[:, 1:])           # a logged controller
    return nopg.TransitionDataset(states=s, actions=a, rewards=-(s ** 2).sum(1),
                                  next_states=s + 0.3 * a, terminals=np.zeros(n, dtype=bool))


def test_auto_weight_on_policy_data_pretrains_then_keeps_the_behaviour(bandwidths, initial_states,
                                                                       det_policy):
    data = _controller_data()
    algo = nopg.NOPG(det_policy, nopg.NOPGConfig(gamma=0.9))
    algo.setup(data, bandwidths, initial_states)
    untrained = float(algo._behaviour.loss(det_policy).detach())
    algo.fit(data, bandwidths, initial_states, 30, progress=False)
    assert algo.action_predictability_ > 0.8
    assert algo.behaviour_weight_ == pytest.approx(AUTO_SCALE * algo.action_predictability_)
    losses = [m["behaviour_loss"] for m in algo.history_]
    # 500 pretraining steps fit the controller far better than the initial policy
    assert losses[0] < 0.05 * untrained and max(losses) < 0.1 * untrained


def _params(policy) -> np.ndarray:
    return torch.cat([p.detach().reshape(-1) for p in policy.parameters()]).numpy()


@pytest.mark.parametrize("kw", [dict(weight=0.0), dict(pretrain=0)])
def test_no_pretraining_without_the_term_or_when_turned_off(bandwidths, initial_states,
                                                           det_policy, kw):
    before = _params(det_policy)
    algo = nopg.NOPG(det_policy, nopg.NOPGConfig(gamma=0.9, behaviour=nopg.Behaviour(**kw)))
    algo.fit(_controller_data(), bandwidths, initial_states, 0, progress=False)
    np.testing.assert_array_equal(_params(algo.policy), before)


def test_pretraining_in_batches_is_deterministic(bandwidths, initial_states, det_policy,
                                                 monkeypatch):
    import nopg.train.behaviour as behaviour

    monkeypatch.setattr(behaviour, "PRETRAIN_BATCH", 32)      # 200 samples: random batches
    fitted = []
    for _ in range(2):
        policy = copy.deepcopy(det_policy)
        algo = nopg.NOPG(policy, nopg.NOPGConfig(gamma=0.9, behaviour=nopg.Behaviour(pretrain=300)))
        algo.fit(_controller_data(), bandwidths, initial_states, 0, progress=False)
        fitted.append(_params(policy))
        assert float(algo._behaviour.loss(policy).detach()) < 0.05
    np.testing.assert_array_equal(fitted[0], fitted[1])


@pytest.mark.parametrize("value", [-1, 2.5, None])
def test_bad_behaviour_pretrain(value):
    with pytest.raises(ValueError, match="'pretrain' parameter of Behaviour"):
        nopg.NOPGConfig(behaviour=nopg.Behaviour(pretrain=value))


def test_term_stays_on_through_continuation_stages(bandwidths, initial_states, det_policy):
    config = nopg.NOPGConfig(gamma=0.9, behaviour=nopg.Behaviour(pretrain=0),
                             continuation=nopg.Continuation(factor=4.0, stages=3))
    algo = nopg.NOPG(det_policy, config)
    algo.fit(_controller_data(), bandwidths, initial_states, 6, progress=False)
    assert algo.behaviour_weight_ > 1.5
    assert all(np.isfinite(m["behaviour_loss"]) for m in algo.history_)


def test_kept_samples_alone_enter_the_filtered_loss(det_policy):
    rng = np.random.default_rng(5)
    data = _data(rng.normal(size=(40, 2)), rng.uniform(-1, 1, size=40))
    targets = behaviour_targets(data, 1.0, torch.device("cpu"), torch.float64)
    keep = torch.from_numpy(rng.random(40) < 0.4)
    with torch.no_grad():
        err = (det_policy(targets.states) - targets.actions) * targets.inv_std
        per_sample = (err * err).sum(-1)
        filtered = float(targets.loss(det_policy, weights=keep))
        assert filtered == pytest.approx(float(per_sample[keep].mean()), rel=1e-12)
        assert float(targets.loss(det_policy)) == pytest.approx(float(per_sample.mean()), rel=1e-12)
        assert float(targets.loss(det_policy, weights=torch.zeros(40, dtype=torch.bool))) == 0.0


def _two_action_data(n: int = 40) -> nopg.TransitionDataset:
    # one place, two logged actions: +1 earns 1, -1 earns -1, and every step ends the episode,
    # so q_i = r_i and the model's Q(s, a) tilts towards the reward of the nearer action
    rng = np.random.default_rng(6)
    s = rng.normal(scale=0.05, size=(n, 2))
    a = np.where(np.arange(n) % 2 == 0, 1.0, -1.0)
    return nopg.TransitionDataset(states=s, actions=a[:, None], rewards=a.copy(), next_states=s,
                                  terminals=np.ones(n, dtype=bool))


def _zero_policy() -> nopg.DeterministicMLPPolicy:
    policy = nopg.DeterministicMLPPolicy(2, 1, action_max=1.0, hidden=(4,)).double()
    with torch.no_grad():
        for p in policy.parameters():
            p.zero_()                                   # pi(s) = 0 everywhere
    return policy


def test_advantage_filter_keeps_the_actions_the_model_values_above_the_policys(initial_states):
    data = _two_action_data()
    policy = _zero_policy()
    config = nopg.NOPGConfig(gamma=0.9, model=nopg.ModelConfig(top_k=None),
                             behaviour=nopg.Behaviour(weight=1.0, pretrain=0, filter="advantage"))
    algo = nopg.NOPG(policy, config, optimizer=torch.optim.SGD(policy.parameters(), lr=0.0))
    algo.setup(data, nopg.Bandwidths(state=[1.0, 1.0], action=[0.5]), initial_states)
    sol = algo.model_.solution(policy, algo.initial_states_)
    np.testing.assert_allclose(sol.q.numpy(), data.rewards, atol=1e-12)
    keep = algo._behaviour_weights(sol.q)[0].numpy() > 0
    np.testing.assert_array_equal(keep, data.actions[:, 0] > 0)
    metrics = algo.step()
    assert metrics["behaviour_kept"] == pytest.approx(0.5)
    # only the +1 samples are cloned: the loss is ||(0 - 1) / std(a)||^2 = 1 (std(a) = 1)
    assert metrics["behaviour_loss"] == pytest.approx(1.0, rel=1e-12)


@pytest.mark.parametrize("temperature", [0.05, 0.5, 1e6])
def test_weighted_filter_weighs_samples_by_their_exponentiated_advantage(initial_states,
                                                                        temperature):
    data = _two_action_data()
    policy = _zero_policy()
    config = nopg.NOPGConfig(gamma=0.9, model=nopg.ModelConfig(top_k=None),
                             behaviour=nopg.Behaviour(weight=1.0, pretrain=0, filter="weighted",
                                                      temperature=temperature))
    algo = nopg.NOPG(policy, config, optimizer=torch.optim.SGD(policy.parameters(), lr=0.0))
    algo.setup(data, nopg.Bandwidths(state=[1.0, 1.0], action=[0.5]), initial_states)
    sol = algo.model_.solution(policy, algo.initial_states_)
    adv = algo.model_.q_value(data.states, data.actions, sol.q) \
        - algo.model_.value(policy, data.states, sol.q)
    assert np.all(adv[data.actions[:, 0] > 0] > 0) and np.all(adv[data.actions[:, 0] < 0] < 0)
    beta = temperature * np.std(data.rewards)                  # std(q) = 1 here
    expected = np.exp(np.minimum(adv / beta, np.log(20.0)))
    weights, kept = algo._behaviour_weights(sol.q)
    np.testing.assert_allclose(weights.numpy(), expected, rtol=1e-10)
    assert kept == pytest.approx(0.5)
    # the loss is the weighted mean of ||(0 - a_i) / std(a)||^2 = 1 for every sample
    metrics = algo.step()
    assert metrics["behaviour_loss"] == pytest.approx(1.0, rel=1e-10)
    if temperature > 1e3:                               # equal weights: plain cloning
        np.testing.assert_allclose(weights.numpy(), 1.0, atol=1e-5)
    if temperature == 0.05:                             # the better action dominates, capped at 20
        assert weights.numpy()[data.actions[:, 0] > 0].max() == pytest.approx(20.0)


@pytest.mark.parametrize("shift, scale", [(5.0, 1.0), (-3.0, 2.5)])
def test_weighted_filter_ignores_a_shift_and_a_scale_of_the_rewards(dataset, bandwidths,
                                                                   initial_states, det_policy,
                                                                   shift, scale):
    # no terminals: every row of eps and P sums to 1 (times gamma), so r -> scale r + shift moves
    # q to scale q + shift / (1 - gamma), leaves every advantage times scale, std(q) times scale
    weights = []
    for s, c in ((1.0, 0.0), (scale, shift)):
        data = nopg.TransitionDataset(states=dataset.states, actions=dataset.actions,
                                      rewards=s * dataset.rewards + c,
                                      next_states=dataset.next_states,
                                      terminals=np.zeros(dataset.n, dtype=bool))
        config = nopg.NOPGConfig(gamma=0.9, model=nopg.ModelConfig(top_k=None),
                                 behaviour=nopg.Behaviour(weight=1.0, pretrain=0, temperature=0.05))
        algo = nopg.NOPG(det_policy, config)
        algo.setup(data, bandwidths, initial_states)
        sol = algo.model_.solution(det_policy, algo.initial_states_)
        weights.append(algo._behaviour_weights(sol.q)[0].numpy())
    assert weights[0].std() > 0.05 * weights[0].mean()
    np.testing.assert_allclose(weights[1], weights[0], rtol=1e-7)


def test_weighted_loss_is_the_weighted_mean(det_policy):
    rng = np.random.default_rng(7)
    data = _data(rng.normal(size=(30, 2)), rng.uniform(-1, 1, size=30))
    targets = behaviour_targets(data, 1.0, torch.device("cpu"), torch.float64)
    w = torch.from_numpy(rng.exponential(size=30))
    with torch.no_grad():
        err = (det_policy(targets.states) - targets.actions) * targets.inv_std
        per_sample = (err * err).sum(-1)
        assert float(targets.loss(det_policy, weights=w)) == pytest.approx(
            float((per_sample * w).sum() / w.sum()), rel=1e-12)


@pytest.mark.parametrize("value", [0.0, -1e-3, float("inf"), "big", None])
def test_bad_behaviour_temperature(value):
    with pytest.raises(ValueError, match="'temperature' parameter of Behaviour"):
        nopg.NOPGConfig(behaviour=nopg.Behaviour(temperature=value))


def test_unfiltered_term_reports_no_kept_share(dataset, bandwidths, initial_states, det_policy):
    algo = nopg.NOPG(det_policy,
                     nopg.NOPGConfig(gamma=0.9, behaviour=nopg.Behaviour(weight=0.5, filter="none")))
    algo.setup(dataset, bandwidths, initial_states)
    metrics = algo.step()
    assert np.isnan(metrics["behaviour_kept"]) and np.isnan(metrics["behaviour_ess"])


def test_weighted_filter_is_the_default_and_reports_its_effective_sample_share(
        dataset, bandwidths, initial_states, det_policy):
    algo = nopg.NOPG(det_policy, nopg.NOPGConfig(gamma=0.9, behaviour=nopg.Behaviour(weight=0.5)))
    assert algo.config.behaviour.filter == "weighted"
    algo.setup(dataset, bandwidths, initial_states)
    sol = algo.model_.solution(det_policy, algo.initial_states_)
    w = algo._behaviour_weights(sol.q)[0].numpy()
    metrics = algo.step()
    assert 0 < metrics["behaviour_ess"] <= 1
    assert metrics["behaviour_ess"] == pytest.approx(w.sum() ** 2 / (w * w).sum() / w.size,
                                                     rel=1e-9)


@pytest.mark.parametrize("value", ["advantages", None, 1])
def test_bad_behaviour_filter(value):
    with pytest.raises(ValueError, match="'filter' parameter of Behaviour"):
        nopg.NOPGConfig(behaviour=nopg.Behaviour(filter=value))


@pytest.mark.parametrize("top_k", [None, 3])
def test_logged_pair_values_match_the_general_query(dataset, bandwidths, initial_states, det_policy,
                                                   top_k):
    algo = nopg.NOPG(det_policy,
                     nopg.NOPGConfig(gamma=0.9, model=nopg.ModelConfig(top_k=top_k, sparse_min_n=1)))
    algo.setup(dataset, bandwidths, initial_states)
    for seed in (0, 1):                      # the cached rows serve every later q
        q = torch.from_numpy(np.random.default_rng(seed).normal(size=dataset.n))
        np.testing.assert_allclose(algo.model_.logged_q_value(q),
                                   algo.model_.q_value(dataset.states, dataset.actions, q),
                                   rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("top_k, unsupported", [(None, "extrapolate"), (3, "extrapolate"),
                                                (3, "absorb")])
def test_data_state_values_match_the_general_query(dataset, bandwidths, initial_states,
                                                   det_policy, top_k, unsupported):
    algo = nopg.NOPG(det_policy,
                     nopg.NOPGConfig(gamma=0.9,
                                     model=nopg.ModelConfig(top_k=top_k, sparse_min_n=1,
                                                            unsupported=unsupported)))
    algo.setup(dataset, bandwidths, initial_states)
    q = torch.from_numpy(np.random.default_rng(9).normal(size=dataset.n))
    for _ in range(2):                 # the kept preparation serves the policy after a change
        np.testing.assert_allclose(algo.model_.data_value(det_policy, q),
                                   algo.model_.value(det_policy, dataset.states, q),
                                   rtol=1e-12, atol=1e-12)
        with torch.no_grad():
            for p in det_policy.parameters():
                p.add_(0.3)
