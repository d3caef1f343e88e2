"""The baseline adapters: d3rlpy's episode layout and isolated worker, PWIS, SB3."""

from __future__ import annotations

import math
import os
import tempfile

import numpy as np
import pytest
import torch

from nopg import TransitionDataset
from nopg.analysis.estimators import GPOMDPEstimator
from nopg.baselines.d3rlpy_bridge import d3rlpy_layout, dataset_sha256, isolated_python
from nopg.baselines.pwis import gaussian_mixture_log_prob, train_pwis, uniform_log_prob
from nopg.experiments import get_task, make_policy
from nopg.policies.networks import GaussianMLPPolicy, gaussian_log_prob


def _d3rlpy_python_or_skip() -> None:
    try:
        isolated_python()
    except ValueError as err:
        if os.environ.get("NOPG_REQUIRE_D3RLPY") == "1":
            raise
        pytest.skip(str(err))


def _mixed_dataset() -> TransitionDataset:
    """A trajectory, one-step transitions, a terminal in a trajectory and a final terminal."""
    rng = np.random.default_rng(3)
    s = rng.normal(size=(12, 2))
    states = np.concatenate([s[:4], s[5:7], s[8:11]])
    next_states = np.concatenate([s[1:5], rng.normal(size=(2, 2)), s[9:12]])
    terminals = np.zeros(9, bool)
    terminals[1] = True               # a terminal inside the first run: the run is cut there
    terminals[8] = True
    return TransitionDataset(states, rng.normal(size=(9, 1)), rng.normal(size=9), next_states,
                             terminals)


def _transitions_from_layout(lay: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """d3rlpy's reading of episodes: next state = next row; the last step only if terminal."""
    ends = np.flatnonzero((lay["episode_terminals"] + lay["episode_timeouts"]) > 0)
    rows: dict[str, list] = {k: [] for k in ("states", "actions", "rewards", "next_states",
                                              "terminals")}
    start = 0
    for end in ends:
        terminal = lay["episode_terminals"][end] > 0
        for t in range(start, end + 1 if terminal else end):
            last = t == end
            rows["states"].append(lay["observations"][t])
            rows["actions"].append(lay["episode_actions"][t])
            rows["rewards"].append(lay["episode_rewards"][t])
            rows["next_states"].append(np.zeros(2) if last else lay["observations"][t + 1])
            rows["terminals"].append(terminal and last)
        start = end + 1
    return {k: np.asarray(v) for k, v in rows.items()}


def test_d3rlpy_layout_holds_every_transition_once():
    data = _mixed_dataset()
    lay = d3rlpy_layout(data)
    got = _transitions_from_layout(lay)
    order = lay["order"]
    assert sorted(order.tolist()) == list(range(data.n))
    np.testing.assert_array_equal(got["states"], data.states[order])
    np.testing.assert_array_equal(got["actions"], data.actions[order])
    np.testing.assert_array_equal(got["rewards"], data.rewards[order])
    np.testing.assert_array_equal(got["terminals"], data.terminals[order])
    keep = ~data.terminals[order]
    np.testing.assert_array_equal(got["next_states"][keep], data.next_states[order][keep])


def test_dataset_hash_sees_every_array():
    data = _mixed_dataset()
    other = TransitionDataset(data.states, data.actions, data.rewards + 1e-12, data.next_states,
                              data.terminals)
    assert dataset_sha256(data) == dataset_sha256(_mixed_dataset())
    assert dataset_sha256(data) != dataset_sha256(other)


def test_d3rlpy_adapters_train_and_are_evaluated_by_the_task(tmp_path):
    """BC runs through the whole sweep in test_sample_efficiency; the others here, in one worker."""
    _d3rlpy_python_or_skip()
    from nopg.baselines.d3rlpy_bridge import train_d3rlpy_many

    task = get_task("pendulum-random")
    config = task.default_config().replace(**{"task.n_samples": 120, "task.eval_steps": 50})
    data = task.make_dataset(config, 0)
    algorithms = ["TD3+BC", "IQL", "CQL", "BCQ", "BEAR"]
    results = train_d3rlpy_many(algorithms, data, 3, 0, -2 * np.ones(1), 2 * np.ones(1), tmp_path)
    assert list(results) == algorithms
    assert not (tmp_path / "data.npz").exists() and (tmp_path / "TD3pBC" / "policy.pt").is_file()
    for name, result in results.items():
        assert result.sha256 == dataset_sha256(data), name
        actions = result.policy(torch.randn(7, 3, dtype=torch.float64))
        assert actions.shape == (7, 1) and torch.all(actions.abs() <= 2.0 + 1e-6), name
        returns = task.evaluate(result.policy, config, 0, 1)
        assert len(returns) == 1 and math.isfinite(returns[0]) and returns[0] < 0, name


def test_d3rlpy_errors_are_clear(tmp_path, monkeypatch):
    from nopg.baselines.d3rlpy_bridge import train_d3rlpy

    data = _mixed_dataset()
    with pytest.raises(ValueError, match="unknown d3rlpy algorithm 'SAC'"):
        train_d3rlpy("SAC", data, 3, 0, -np.ones(1), np.ones(1), tmp_path)
    with pytest.raises(ValueError, match="n_steps must be a positive int"):
        train_d3rlpy("BC", data, 0, 0, -np.ones(1), np.ones(1), tmp_path)
    monkeypatch.setenv("NOPG_D3RLPY_PYTHON", str(tmp_path / "missing" / "python"))
    with pytest.raises(ValueError, match="python -m nopg.baselines.d3rlpy_bridge setup"):
        train_d3rlpy("BC", data, 3, 0, -np.ones(1), np.ones(1), tmp_path)


def test_mixture_and_uniform_log_densities():
    a = np.array([[-3.0], [0.0], [0.5], [2.0]])
    got = gaussian_mixture_log_prob((-2.0, 2.0), 1.0)(np.zeros((4, 3)), a)
    pdf = 0.5 * (np.exp(-0.5 * (a[:, 0] + 2) ** 2) + np.exp(-0.5 * (a[:, 0] - 2) ** 2)) \
        / math.sqrt(2 * math.pi)
    np.testing.assert_allclose(got, np.log(pdf), rtol=1e-12)
    np.testing.assert_allclose(uniform_log_prob(-5.0, 5.0)(np.zeros((4, 5)), a), -math.log(10.0))
    with pytest.raises(ValueError, match="high > low"):
        uniform_log_prob(1.0, 1.0)


def test_gpomdp_with_a_behaviour_density_matches_the_behaviour_module():
    task = get_task("pendulum-random")
    config = task.default_config().replace(**{"task.n_samples": 60, "task.trajectory_length": 20})
    data = task.make_dataset(config, 1)
    torch.manual_seed(0)
    target = GaussianMLPPolicy(3, 1, action_max=2.0, hidden=(8,)).double()
    behaviour = GaussianMLPPolicy(3, 1, action_max=2.0, hidden=(8,)).double()

    def density(states, actions):
        with torch.no_grad():
            return gaussian_log_prob(behaviour, torch.tensor(states), torch.tensor(actions)).numpy()

    by_module = GPOMDPEstimator(behaviour, 0.99).estimate(data, target)
    by_density = GPOMDPEstimator(None, 0.99, behaviour_log_prob=density).estimate(data, target)
    np.testing.assert_allclose(by_density, by_module, rtol=1e-10)
    with pytest.raises(ValueError, match="not both"):
        GPOMDPEstimator(behaviour, 0.99, behaviour_log_prob=density)


def test_pwis_moves_the_policy_and_is_evaluated_by_the_task():
    task = get_task("cartpole-random")
    config = task.default_config().replace(**{"task.n_samples": 80, "task.eval_steps": 30,
                                              "stochastic": True})
    data = task.make_dataset(config, 0)
    torch.manual_seed(0)
    policy = make_policy(task, config, data)
    before = [p.detach().clone().double() for p in policy.parameters()]
    result = train_pwis(policy, data, uniform_log_prob(-5.0, 5.0), 0.99, 3)
    assert any(not torch.equal(a, b) for a, b in zip(before, result.policy.parameters()))
    assert math.isfinite(result.J_hat) and result.ess >= 1.0
    returns = task.evaluate(result.policy, config, 0, 2)
    assert len(returns) == 2 and all(0 < r <= 30 for r in returns)
    with pytest.raises(ValueError, match="n_updates"):
        train_pwis(policy, data, uniform_log_prob(-5.0, 5.0), 0.99, 0)


@pytest.mark.parametrize("algorithm", ["DDPG", "SAC"])
def test_online_baseline_is_evaluated_at_its_budgets(algorithm, tmp_path, monkeypatch):
    """TD3 runs through the whole sweep in test_sample_efficiency. SB3 leaves no log folder in
    the temporary directory (its default logger makes one per run)."""
    from nopg.baselines.online import train_online

    monkeypatch.delenv("SB3_LOGDIR", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    from nopg.envs.pendulum import make_pendulum_env

    task = get_task("pendulum-random")
    config = task.default_config().replace(**{"task.eval_steps": 30})
    seen = []

    def evaluate(policy):
        seen.append(policy(torch.zeros(2, 3)))
        return float(task.evaluate(policy, config, 0, 1)[0])

    rows = train_online(algorithm, lambda: make_pendulum_env(30), [129, 140], 0, evaluate)
    assert [r["env_steps"] for r in rows] == [129, 140]
    assert all(math.isfinite(r["return"]) and r["wall_time_s"] > 0 for r in rows)
    assert all(a.shape == (2, 1) and torch.all(a.abs() <= 2.0) for a in seen)
    assert list(tmp_path.glob("SB3-*")) == []


def test_online_hyperparameters_are_the_papers():
    from nopg.baselines.online import paper_hyperparameters

    hp = paper_hyperparameters("SAC")
    assert hp["batch_size"] == 64 and hp["tau"] == 5e-3 and hp["learning_starts"] == 128
    assert hp["policy_kwargs"]["net_arch"] == {"pi": [50], "qf": [50, 50]}
    with pytest.raises(ValueError, match="unknown online algorithm 'PPO'"):
        paper_hyperparameters("PPO")
