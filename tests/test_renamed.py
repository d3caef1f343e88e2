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
