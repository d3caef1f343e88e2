"""MOPO and MOReL: the dynamics ensemble, the penalised reward, halting, the sweep's protocol."""

from __future__ import annotations

import math
import tempfile

import numpy as np
import pytest
import torch

from nopg import TransitionDataset
from nopg.baselines.d3rlpy_bridge import dataset_sha256
from nopg.baselines.dynamics_ensemble import EnsembleConfig, EnsemblePrediction, fit_ensemble
from nopg.baselines.model_based import (
    LearnedModelEnv,
    default_config,
    halt_reward,
    mixed_replay_buffer_class,
    mopo_reward,
    morel_disagreement,
    morel_threshold,
    real_transitions,
    train_model_based,
)
from nopg.experiments import get_task
from nopg.experiments.sample_efficiency import SampleEfficiencyConfig
from nopg.experiments.sample_efficiency_jobs import run_job
from nopg.experiments.sample_efficiency_sweep import plan

A = np.array([[0.9, 0.2], [-0.1, 0.8]])
B = np.array([[0.0], [0.5]])
C = np.array([1.0, -2.0])
SMALL = EnsembleConfig(n_models=4, n_elites=3, hidden=(32, 32), max_epochs=150, batch_size=64,
                       learning_rate=3e-3, patience=10)


def _linear_data(n: int = 300, seed: int = 0) -> TransitionDataset:
    """``s' = A s + B a + noise``, ``r = C s``: states and actions uniform in [-1, 1]."""
    rng = np.random.default_rng(seed)
    s, a = rng.uniform(-1, 1, (n, 2)), rng.uniform(-1, 1, (n, 1))
    s_next = s @ A.T + a @ B.T + 0.01 * rng.normal(size=(n, 2))
    return TransitionDataset(s, a, s @ C, s_next, np.zeros(n, bool))


@pytest.fixture(scope="module")
def linear_ensemble():
    return fit_ensemble(_linear_data(), SMALL, seed=0, dtype=torch.float64)


def test_ensemble_fits_a_linear_system_and_is_unsure_far_from_the_data(linear_ensemble):
    test = _linear_data(100, seed=1)
    pred = linear_ensemble.predict(test.states, test.actions)
    assert pred.mean.shape == (3, 100, 3) and pred.std.shape == (3, 100, 3)
    change = test.next_states - test.states
    err = np.abs(pred.mean.mean(0) - np.column_stack([change, test.rewards]))
    assert err.mean() < 0.03                 # the targets' scale is ~0.5-1
    far_s, far_a = np.full((100, 2), 4.0), np.full((100, 1), -3.0)
    far = linear_ensemble.predict(far_s, far_a)

    def total_std(p):                     # the members' mixture: aleatoric + epistemic
        return np.sqrt((p.std ** 2).mean(0) + p.mean.var(0)).sum(1).mean()
    assert total_std(far) > 2.5 * total_std(pred)
    on_dis = morel_disagreement(pred.mean_standardised).mean()
    assert morel_disagreement(far.mean_standardised).mean() > 5 * on_dis
    assert np.all(pred.terminal_prob == 0)   # no terminals in the data: no terminal head


def test_ensemble_is_seeded_and_refuses_bad_input():
    data = _linear_data(40)
    config = EnsembleConfig(n_models=2, n_elites=1, hidden=(8,), max_epochs=3)
    one, two = (fit_ensemble(data, config, seed=3, dtype=torch.float64) for _ in range(2))
    np.testing.assert_array_equal(one.predict(data.states, data.actions).mean,
                                  two.predict(data.states, data.actions).mean)
    with pytest.raises(ValueError, match="at least 2 transitions"):
        fit_ensemble(TransitionDataset(data.states[:1], data.actions[:1], data.rewards[:1],
                                       data.next_states[:1], data.terminals[:1]), config)
    nan = data.rewards.copy()
    nan[3] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        fit_ensemble(TransitionDataset(data.states, data.actions, nan, data.next_states,
                                       data.terminals), config)
    with pytest.raises(ValueError, match="n_elites"):
        EnsembleConfig(n_models=2, n_elites=3)
    with pytest.raises(ValueError, match="'activation'"):
        EnsembleConfig(activation="tanh")
    with pytest.raises(ValueError, match="non-finite"):
        one.predict(np.full((1, 2), np.nan), np.zeros((1, 1)))


class _Stub:
    """An ensemble whose prediction is given (2 members, one state dimension plus reward)."""

    def __init__(self, mean: np.ndarray, std: np.ndarray) -> None:
        self.pred = EnsemblePrediction(mean[:, None], std[:, None], mean[:, None], np.zeros(1))

    def predict(self, states: np.ndarray, actions: np.ndarray) -> EnsemblePrediction:
        return self.pred


def test_mopo_reward_is_the_reward_minus_lambda_times_the_largest_std_norm():
    std = np.array([[[3.0, 4.0], [0.0, 1.0]], [[1.0, 0.0], [6.0, 8.0]]])   # (K=2, B=2, D=2)
    np.testing.assert_allclose(mopo_reward(np.array([1.0, 2.0]), std, 0.5), [-1.5, -3.0])
    # in the model's environment: the reward's std is 0, so the sampled reward is the mean's
    stub = _Stub(np.array([[0.1, 0.1, -1.0], [0.2, 0.1, -1.0]]),
                 np.array([[3.0, 4.0, 0.0], [0.0, 1.0, 0.0]]))
    config = default_config("MOPO")
    env = LearnedModelEnv(stub, np.zeros((1, 2)), [-1.0], [1.0], config)
    env.reset(seed=0)
    for t in range(config.horizon):
        _, reward, terminated, truncated, _ = env.step(np.zeros(1))
        assert reward == pytest.approx(-1.0 - config.penalty * 5.0)
        assert not terminated and truncated == (t == config.horizon - 1)


@pytest.mark.parametrize("gap, halted", [(0.999, False), (1.0, False), (1.001, True)])
def test_morel_halts_exactly_when_the_disagreement_passes_the_threshold(gap, halted):
    stub = _Stub(np.array([[0.0, 0.0, 0.5], [gap, 0.0, 0.5]]), np.zeros((2, 3)))
    env = LearnedModelEnv(stub, np.zeros((1, 2)), [-1.0], [1.0], default_config("MOReL"),
                          threshold=1.0, halt=-123.0)
    env.reset(seed=0)
    _, reward, terminated, truncated, info = env.step(np.zeros(1))
    assert terminated == halted and not truncated
    assert reward == (-123.0 if halted else 0.5) and info.get("halted", False) == halted


def test_morel_disagreement_threshold_and_halting_reward(linear_ensemble):
    means = np.array([[[0.0, 0.0]], [[3.0, 4.0]], [[1.0, 1.0]]])            # (K=3, B=1, D=2)
    assert morel_disagreement(means)[0] == pytest.approx(5.0)
    data = _linear_data()
    dis = morel_disagreement(linear_ensemble.predict(data.states, data.actions)
                             .mean_standardised[..., :-1])
    assert morel_threshold(linear_ensemble, data, 0.9) == pytest.approx(np.quantile(dis, 0.9))
    assert halt_reward(np.array([-2.0, 1.0]), 0.9) == pytest.approx(-2.0 - 3.0 / 0.1)
    assert halt_reward(np.array([-1.0, -1.0]), 0.99) < -1.0 / (1 - 0.99)   # worse than staying


def test_replay_batches_hold_the_real_data_ratio():
    from gymnasium import spaces

    data = _linear_data(50)
    real = real_transitions(TransitionDataset(data.states, 4 * data.actions, data.rewards + 1000,
                                              data.next_states, data.terminals), -2.0, 2.0)
    assert real["actions"].min() >= -1 and real["actions"].max() <= 1      # scaled and clipped
    buffer = mixed_replay_buffer_class()(
        100, spaces.Box(-np.inf, np.inf, (2,)), spaces.Box(-1.0, 1.0, (1,)), device="cpu",
        real=real, real_ratio=0.25)
    np.random.seed(0)                 # noqa: NPY002 (SB3's buffers draw from the global generator)
    assert (buffer.sample(8).rewards >= 900).all()          # the model part is empty: all real
    for _ in range(20):
        buffer.add(np.zeros(2), np.zeros(2), np.zeros(1), np.zeros(1), np.zeros(1), [{}])
    batch = buffer.sample(100)
    assert int((batch.rewards >= 900).sum()) == 25 and batch.observations.shape == (100, 2)


def test_adapters_train_and_are_evaluated_through_the_sweep(tmp_path, monkeypatch):
    monkeypatch.delenv("SB3_LOGDIR", raising=False)
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))       # SB3's default log folders
    cfg = SampleEfficiencyConfig(task="pendulum-random", algorithms=("MOPO", "MOReL"),
                                 sizes=(60,), seeds=(0,), model_based_steps=20,
                                 settings={"task.eval_steps": 40})
    jobs, skipped = plan(cfg, tmp_path)
    assert len(jobs) == 2 and skipped == []
    task = get_task("pendulum-random")
    data = task.make_dataset(task.default_config().replace(**{"task.n_samples": 60}), 0)
    rows = [row for job in jobs for row in run_job(job)]
    assert sorted(r["algorithm"] for r in rows) == ["MOPO", "MOReL"]
    for row in rows:
        assert row["error"] is None and math.isfinite(row["return"]) and row["return"] < 0
        assert row["data_sha256"] == dataset_sha256(data) and row["kind"] == "offline"
        assert row["train_steps"] == 20 and row["wall_time_s"] > 0
    assert list(scratch.glob("SB3-*")) == []


def test_terminal_head_and_seeded_training_on_cartpole():
    task = get_task("cartpole-random")
    data = task.make_dataset(task.default_config().replace(**{"task.n_samples": 80}), 0)
    assert data.terminals.any()
    box = np.full(task.action_dim, float(task.action_max))
    states = torch.as_tensor(data.states[:10].copy())
    runs = [train_model_based("MOReL", data, 10, 4, -box, box) for _ in range(2)]
    prob = runs[0].ensemble.predict(data.states, data.actions).terminal_prob
    assert prob.shape == (data.n,) and np.all((prob >= 0) & (prob <= 1))
    np.testing.assert_array_equal(runs[0].policy(states).numpy(), runs[1].policy(states).numpy())
    assert runs[0].threshold == runs[1].threshold
    with pytest.raises(ValueError, match="unknown model-based algorithm 'BRAC'"):
        train_model_based("BRAC", data, 10, 0, -box, box)
    with pytest.raises(ValueError, match="n_steps must be a positive int"):
        train_model_based("MOPO", data, 0, 0, -box, box)
    with pytest.raises(ValueError, match="unknown MOPO setting"):
        train_model_based("MOPO", data, 5, 0, -box, box, lambda_=2.0)
