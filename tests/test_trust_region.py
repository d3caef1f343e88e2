"""The trust-region experiment: exact per-sample gradient split, log-likelihood, data, config, run."""

from __future__ import annotations

import csv
import json
import math

import numpy as np
import pytest
import torch
from scipy.stats import norm

import nopg
from nopg.experiments.trust_region import (
    PARAM_NAMES,
    TrustRegionConfig,
    bin_contributions,
    collect_gaussian_pendulum,
    constant_policy,
    gradient_contributions,
    log_likelihood,
    run_trust_region,
)

GAMMA = 0.95


@pytest.fixture(scope="module")
def small():
    """200 samples (2 episodes of 100 steps), Silverman bandwidths, dense model, start states."""
    data = collect_gaussian_pendulum(n_episodes=2, steps_per_episode=100, seed=0)
    bw = nopg.select_bandwidths(data, method="silverman")
    model = nopg.NonparametricBellman(data, bw, GAMMA, dtype=torch.float64)
    return data, bw, model, data.episode_start_states()


def _general_policy(seed: int = 3) -> nopg.LinearPolicy:
    policy = nopg.LinearPolicy(3, 1, bias=True).double()
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        policy.linear.weight.copy_(0.3 * torch.randn(1, 3, generator=gen, dtype=torch.float64))
        policy.linear.bias.fill_(0.4)
    return policy


@pytest.mark.parametrize("make", [lambda: constant_policy(0.3), _general_policy])
def test_contributions_sum_to_the_gradient(small, make):
    data, bw, model, s0 = small
    policy = make()
    split = gradient_contributions(model, policy, s0)
    assert split.per_sample.shape == (data.n, 4) and split.initial.shape == (s0.shape[0], 4)
    total = split.per_sample.sum(0) + split.initial.sum(0)
    np.testing.assert_allclose(total, split.grad, rtol=0, atol=1e-10 * max(1.0, np.abs(split.grad).max()))
    # independent path: nopg.policy_gradient on the same data and policy
    ref = nopg.policy_gradient(data, policy, bandwidths=bw, gamma=GAMMA, initial_states=s0)
    flat = torch.cat([g.reshape(-1) for g in ref.grads]).numpy()
    np.testing.assert_allclose(total, flat, rtol=1e-10, atol=1e-10)
    assert split.J == pytest.approx(ref.J, rel=1e-12)
    # a linear policy's Jacobian at s'_i is [s'_i, 1]: every term is a multiple of it
    feats = np.column_stack([data.next_states, np.ones(data.n)])
    scale = split.per_sample[:, 3]
    np.testing.assert_allclose(split.per_sample, scale[:, None] * feats, atol=1e-12)


def test_gradient_matches_finite_differences_of_J_hat(small):
    data, bw, model, s0 = small
    th3, eps = 0.3, 1e-5
    split = gradient_contributions(model, constant_policy(th3), s0)
    j_plus = model.solution(constant_policy(th3 + eps), s0).J
    j_minus = model.solution(constant_policy(th3 - eps), s0).J
    fd = (j_plus - j_minus) / (2 * eps)
    assert split.grad[3] == pytest.approx(fd, rel=1e-5, abs=1e-6)


def test_gradient_norm_is_smaller_far_from_the_data(small):
    data, bw, model, s0 = small
    norms = {th: np.linalg.norm(gradient_contributions(model, constant_policy(th), s0).grad)
             for th in (-2.0, 0.0, 2.0)}
    assert norms[0.0] > norms[-2.0] and norms[0.0] > norms[2.0]


def test_log_likelihood_matches_the_normal_density(small):
    data = small[0]
    for th3 in (-1.5, 0.0, 0.7):
        expected = norm.logpdf(data.actions[:, 0], loc=th3, scale=math.sqrt(0.2)).mean()
        assert log_likelihood(constant_policy(th3), data, 0.2) == pytest.approx(expected, rel=1e-12)
    policy = _general_policy()
    mean = data.states @ policy.linear.weight.detach().numpy()[0] + 0.4
    expected = norm.logpdf(data.actions[:, 0], loc=mean, scale=math.sqrt(0.5)).mean()
    assert log_likelihood(policy, data, 0.5) == pytest.approx(expected, rel=1e-12)
    with pytest.raises(ValueError, match="variance"):
        log_likelihood(policy, data, 0.0)


def test_collector_shapes_variance_and_seed():
    data = collect_gaussian_pendulum(n_episodes=4, steps_per_episode=500, seed=1, clip_actions=False)
    assert data.states.shape == (2000, 3) and data.actions.shape == (2000, 1)
    assert data.next_states.shape == (2000, 3) and data.rewards.shape == (2000,)
    np.testing.assert_array_equal(data.episode_starts(), [0, 500, 1000, 1500])
    np.testing.assert_array_equal(np.flatnonzero(data.truncations), [499, 999, 1499, 1999])
    # variance 0.2: the sample variance of 2000 draws has a relative std of sqrt(2/2000) ~ 3%
    assert data.actions.var() == pytest.approx(0.2, rel=0.1)
    assert abs(data.actions.mean()) < 4 * math.sqrt(0.2 / 2000)
    same = data.episode_ids[1:] == data.episode_ids[:-1]
    np.testing.assert_allclose(data.next_states[:-1][same], data.states[1:][same], atol=1e-12)
    np.testing.assert_allclose((data.states[:, :2] ** 2).sum(1), 1.0, atol=1e-12)
    assert np.all(np.abs(data.episode_start_states()[:, 2]) <= 1.0)   # gymnasium's reset
    again = collect_gaussian_pendulum(n_episodes=4, steps_per_episode=500, seed=1, clip_actions=False)
    np.testing.assert_array_equal(again.states, data.states)
    np.testing.assert_array_equal(again.actions, data.actions)
    other = collect_gaussian_pendulum(n_episodes=4, steps_per_episode=500, seed=2, clip_actions=False)
    assert not np.array_equal(other.actions, data.actions)
    clipped = collect_gaussian_pendulum(n_episodes=1, steps_per_episode=50, action_variance=25.0, seed=0)
    assert np.abs(clipped.actions).max() == 2.0


def test_bin_contributions_counts_and_means():
    w = np.array([-3.0, -3.0, 0.1, 3.0])
    wd = np.array([-7.0, -7.5, 0.2, 7.9])
    out = bin_contributions(w, wd, np.array([1.0, 3.0, 5.0, 7.0]), 2, 2)
    np.testing.assert_array_equal(out["count"], [[2, 0], [0, 2]])
    np.testing.assert_array_equal(out["sum"], [[4, 0], [0, 12]])
    assert out["mean"][0, 0] == 2.0 and out["mean"][1, 1] == 6.0 and np.isnan(out["mean"][0, 1])


def test_config_validation():
    cfg = TrustRegionConfig()
    assert cfg.theta3_grid().shape == (41,) and cfg.theta3_grid()[20] == 0.0
    assert cfg.replace(n_theta3=5).to_dict()["n_theta3"] == 5
    with pytest.raises(ValueError, match="unknown trust-region setting"):
        cfg.replace(n_thetas=5)
    bad = [dict(n_episodes=0), dict(action_variance=-0.2), dict(gamma=1.0), dict(top_k=0),
           dict(theta3_min=2.0, theta3_max=-2.0), dict(initial_states="middle"), dict(heatmap_stat="max"),
           dict(bandwidth_method="nope"), dict(state_factor=float("nan")), dict(dense_fraction=0.0),
           dict(n_theta3=True), dict(heatmap_theta3=float("inf"))]
    for change in bad:
        with pytest.raises(ValueError):
            cfg.replace(**change)
    with pytest.raises(ValueError, match="TrustRegionConfig"):
        run_trust_region({"n_theta3": 3})  # type: ignore[arg-type]


def test_the_model_settings_are_nested_and_keep_their_former_names():
    """``model`` holds the Bellman model's settings; ``top_k`` (config files written before) and
    ``model.<name>`` keys reach it; the gradient split needs NOPG-D's model."""
    cfg = TrustRegionConfig()
    assert cfg.model == nopg.model.bellman.keyword_config() and cfg.top_k is None
    assert cfg.model.dtype == "float64" and cfg.model.top_k is None
    assert cfg.replace(top_k=10) == cfg.replace(**{"model.top_k": 10}) == TrustRegionConfig(top_k=10)
    assert cfg.replace(top_k=10).model.top_k == 10
    saved = json.loads(json.dumps(cfg.replace(top_k=10).to_dict()))
    assert saved["model"]["top_k"] == 10 and "top_k" not in saved
    assert TrustRegionConfig(**saved) == cfg.replace(top_k=10)
    for bad in ({"model.stochastic": True}, {"model.n_mc_next": 2}):
        with pytest.raises(ValueError, match="NOPG-D"):
            cfg.replace(**bad)


def test_run_writes_all_files(tmp_path):
    cfg = TrustRegionConfig(n_episodes=3, steps_per_episode=50, n_theta3=5, heatmap_bins_w=6,
                            heatmap_bins_w_dot=5, gamma=0.9)
    summary = run_trust_region(cfg, out=tmp_path, progress=False, run_name="tiny")
    run = tmp_path / "tiny"
    assert summary["run_dir"] == str(run)
    for name in ("config.json", "run.log", "policies.csv", "contributions.csv", "heatmap.csv",
                 "trust_region.png", "summary.json"):
        assert (run / name).is_file() and (run / name).stat().st_size > 0, name
    assert (run / "trust_region.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert json.loads((run / "config.json").read_text())["n_theta3"] == 5
    with (run / "policies.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 5 and [float(r["theta3"]) for r in rows] == [-2.0, -1.0, 0.0, 1.0, 2.0]
    for r in rows:
        g = np.array([float(r[f"grad_{p}"]) for p in PARAM_NAMES])
        assert float(r["grad_norm"]) == pytest.approx(np.linalg.norm(g), rel=1e-12)
        assert float(r["log_grad_norm"]) == pytest.approx(math.log(float(r["grad_norm"])), rel=1e-12)
    contrib = np.genfromtxt(run / "contributions.csv", delimiter=",", names=True)
    assert contrib.shape == (150,)
    heat = np.genfromtxt(run / "heatmap.csv", delimiter=",", names=True)
    assert heat.shape == (30,) and heat["count"].sum() == 150
    assert heat["sum_g_norm"].sum() == pytest.approx(contrib["g_norm"].sum(), rel=1e-10)
    saved = json.loads((run / "summary.json").read_text())
    assert saved["n_samples"] == 150 and saved["max_split_residual"] < 1e-9
    assert -1.0 <= saved["spearman_loglik_vs_log_grad_norm"] <= 1.0
    assert 0.0 <= saved["heatmap"]["sq_norm_share_of_densest"] <= 1.0
    assert "trust region" in (run / "run.log").read_text()


def test_contributions_sum_to_the_gradient_on_the_sparse_path(small):
    data, bw, _, s0 = small
    model = nopg.NonparametricBellman(data, bw, GAMMA, top_k=10, dtype=torch.float64)
    policy = constant_policy(0.5)
    split = gradient_contributions(model, policy, s0)
    ref = nopg.policy_gradient(data, policy, bandwidths=bw, gamma=GAMMA, initial_states=s0, top_k=10)
    flat = torch.cat([g.reshape(-1) for g in ref.grads]).numpy()
    np.testing.assert_allclose(split.per_sample.sum(0) + split.initial.sum(0), flat, rtol=1e-10, atol=1e-10)
