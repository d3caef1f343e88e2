"""Former public names keep working, with a DeprecationWarning, and give what the new names give."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import nopg


def test_model_evaluate_is_solution(dataset, bandwidths, det_policy, initial_states):
    model = nopg.NonparametricBellman(dataset, bandwidths, 0.9)
    new = model.solution(det_policy, initial_states)
    with pytest.warns(DeprecationWarning, match=r"NonparametricBellman.evaluate is deprecated; "
                                                r"use NonparametricBellman.solution"):
        old = model.evaluate(det_policy, initial_states)
    assert old.J == new.J and torch.equal(old.q, new.q) and torch.equal(old.mu, new.mu)


def test_model_dataset_is_data(dataset, bandwidths):
    model = nopg.NonparametricBellman(dataset, bandwidths, 0.9)
    assert model.data is dataset
    with pytest.warns(DeprecationWarning, match=r"NonparametricBellman.dataset is deprecated; "
                                                r"use NonparametricBellman.data"):
        assert model.dataset is dataset


def test_nopg_J_is_J_hat(dataset, bandwidths, det_policy, initial_states):
    algo = nopg.NOPG(det_policy, nopg.NOPGConfig(gamma=0.9))
    algo.fit(dataset, bandwidths, initial_states, n_updates=2, progress=False)
    with pytest.warns(DeprecationWarning, match=r"NOPG.J_ is deprecated; use NOPG.J_hat\(\)"):
        old = algo.J_
    assert old == algo.J_hat() == algo.solution().J
    assert np.isfinite(old)


def test_rows_module_is_row_matrices():
    import nopg.row_matrices
    import nopg.rows

    with pytest.warns(DeprecationWarning, match="nopg.rows is now nopg.row_matrices"):
        from nopg.rows import SparseRows
    assert SparseRows is nopg.row_matrices.SparseRows
    with pytest.warns(DeprecationWarning):
        assert nopg.rows.DenseRows is nopg.row_matrices.DenseRows
    with pytest.raises(AttributeError):
        nopg.rows.no_such_name  # noqa: B018


def test_neighbor_report_keywords_ks_and_candidates(dataset, bandwidths, det_policy, initial_states):
    from nopg.tuning import neighbor_report

    kw = dict(gamma=0.9, top_k=5, mass_rows=20)
    new = neighbor_report(dataset, bandwidths, det_policy, initial_states, top_k_values=(3, 8),
                          n_candidates_values=(12,), **kw)
    with pytest.warns(DeprecationWarning, match="'ks' keyword is now called 'top_k_values'"):
        with pytest.warns(DeprecationWarning, match="'candidates' keyword is now called "
                                                    "'n_candidates_values'"):
            old = neighbor_report(dataset, bandwidths, det_policy, initial_states, ks=(3, 8),
                                  candidates=(12,), **kw)
    assert old.to_dict() == new.to_dict()


def test_bandwidth_keyword_rng_is_seed(dataset):
    from nopg.bandwidth import cross_validated_bandwidth, knn_bandwidths
    from nopg.bandwidth_report import bandwidth_report

    with pytest.warns(DeprecationWarning, match="'rng' keyword is now called 'seed'"):
        assert nopg.select_bandwidths(dataset, "cv", rng=4) == \
            nopg.select_bandwidths(dataset, "cv", seed=4)
    with pytest.warns(DeprecationWarning, match="'rng' keyword is now called 'seed'"):
        assert knn_bandwidths(dataset, max_queries=10, rng=2) == \
            knn_bandwidths(dataset, max_queries=10, seed=2)
    with pytest.warns(DeprecationWarning, match="'rng' keyword is now called 'seed'"):
        old = cross_validated_bandwidth(dataset.states, rng=np.random.default_rng(1))
    np.testing.assert_array_equal(old, cross_validated_bandwidth(dataset.states, seed=1))

    def untimed(report: object) -> dict:
        return {k: v for k, v in report.to_dict().items() if k != "seconds"}

    with pytest.warns(DeprecationWarning, match="'rng' keyword is now called 'seed'"):
        old = untimed(bandwidth_report(dataset, "silverman", rng=3))
    assert old == untimed(bandwidth_report(dataset, "silverman", seed=3))
    with pytest.warns(DeprecationWarning, match="'dataset' keyword is now called 'data'"):
        assert untimed(bandwidth_report(dataset=dataset, method="silverman", seed=3)) == old
    with pytest.warns(DeprecationWarning), pytest.raises(ValueError, match="seed must be"):
        cross_validated_bandwidth(dataset.states, rng="x")


def test_env_keyword_rng_is_seed():
    from nopg.envs.cartpole import sample_initial_states
    from nopg.envs.lqg import PAPER_HORIZON, PAPER_THETA, paper_lqg
    from nopg.envs.maze import WaypointController

    lqg = paper_lqg()
    with pytest.warns(DeprecationWarning, match="'rng' keyword is now called 'seed'"):
        old = lqg.rollout_returns(PAPER_THETA, 1.0, PAPER_HORIZON, 5, rng=3)
    np.testing.assert_array_equal(old, lqg.rollout_returns(PAPER_THETA, 1.0, PAPER_HORIZON, 5,
                                                           seed=3))
    with pytest.warns(DeprecationWarning, match="'rng' keyword is now called 'seed'"):
        old = sample_initial_states(rng=np.random.default_rng(2), size=3)
    np.testing.assert_array_equal(old, sample_initial_states(np.random.default_rng(2), 3))
    np.testing.assert_array_equal(old, sample_initial_states(2, 3))
    with pytest.warns(DeprecationWarning, match="'rng' keyword is now called 'seed'"):
        controller = WaypointController(rng=np.random.default_rng(7))
    assert controller.rng.random() == np.random.default_rng(7).random()
