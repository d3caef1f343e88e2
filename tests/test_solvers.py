"""Dense LU and BiCGSTAB solvers, standalone and inside the Bellman model / policy gradient."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import nopg

GAMMA = 0.9


def diag_dominant_system(n: int = 60, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """A random strictly diagonally dominant, non-symmetric matrix and a right-hand side."""
    gen = torch.Generator().manual_seed(seed)
    R = torch.randn(n, n, generator=gen, dtype=torch.float64)
    R.fill_diagonal_(0.0)
    A = R + torch.diag(R.abs().sum(1) * 1.05 + 0.1)
    b = torch.randn(n, generator=gen, dtype=torch.float64)
    assert not torch.allclose(A, A.T)
    return A, b


def substochastic(n: int = 30, gamma: float = 0.95, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    P = rng.random((n, n)) ** 3
    P = gamma * P / P.sum(1, keepdims=True)
    P[3] = 0.0  # a terminal row
    return P


# ---------------------------------------------------------------------------- bicgstab
def test_bicgstab_matches_direct_solve():
    A, b = diag_dominant_system()
    x, info = nopg.bicgstab(lambda v: A @ v, b, tol=1e-12)
    expected = torch.linalg.solve(A, b)
    torch.testing.assert_close(x, expected, rtol=1e-9, atol=1e-10)
    assert info.method == "bicgstab" and info.converged
    assert 0 < info.iterations < 1000
    assert info.residual <= 1e-11
    # The reported residual is the true one.
    true_res = float(torch.linalg.vector_norm(b - A @ x) / torch.linalg.vector_norm(b))
    assert info.residual == pytest.approx(true_res, rel=1e-6, abs=1e-18)


def test_bicgstab_bellman_like_system_with_high_gamma():
    P = torch.tensor(substochastic(gamma=0.99, seed=2))
    r = torch.randn(P.shape[0], generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    lam = torch.eye(P.shape[0], dtype=torch.float64) - P
    for A, name in ((lam, "forward"), (lam.T, "transpose")):
        x, info = nopg.bicgstab(lambda v, A=A: A @ v, r, tol=1e-12)
        torch.testing.assert_close(x, torch.linalg.solve(A, r), rtol=1e-8, atol=1e-9, msg=name)
        assert info.converged, name


def test_bicgstab_warm_start_from_solution_takes_zero_iterations():
    A, b = diag_dominant_system(seed=1)
    exact = torch.linalg.solve(A, b)
    x, info = nopg.bicgstab(lambda v: A @ v, b, exact, tol=1e-10)
    assert info.iterations == 0 and info.converged
    torch.testing.assert_close(x, exact, rtol=0, atol=1e-14)
    # The warm start is not modified in place.
    assert torch.equal(exact, torch.linalg.solve(A, b))


def test_bicgstab_warm_start_near_solution_needs_fewer_iterations():
    A, b = diag_dominant_system(seed=4)
    exact = torch.linalg.solve(A, b)
    _, cold = nopg.bicgstab(lambda v: A @ v, b, tol=1e-12)
    _, warm = nopg.bicgstab(lambda v: A @ v, b, exact + 1e-8, tol=1e-12)
    assert warm.converged and warm.iterations < cold.iterations


def test_bicgstab_iteration_cap_warns():
    A, b = diag_dominant_system(seed=2)
    with pytest.warns(nopg.SolverWarning, match="max_iter"):
        x, info = nopg.bicgstab(lambda v: A @ v, b, tol=1e-14, max_iter=1)
    assert info.iterations == 1 and not info.converged
    assert np.isfinite(info.residual) and info.residual > 1e-13
    assert torch.all(torch.isfinite(x))
    # warn=False silences it.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _, info = nopg.bicgstab(lambda v: A @ v, b, tol=1e-14, max_iter=1, warn=False)
    assert not info.converged


def test_bicgstab_zero_rhs_returns_zeros():
    A, _ = diag_dominant_system(n=10)
    b = torch.zeros(10, dtype=torch.float64)
    x, info = nopg.bicgstab(lambda v: A @ v, b, torch.ones(10, dtype=torch.float64))
    assert torch.equal(x, torch.zeros(10, dtype=torch.float64))
    assert info.converged and info.iterations == 0 and info.residual == 0.0


@pytest.mark.parametrize("kw, match", [(dict(tol=0.0), "tol"), (dict(tol=-1.0), "tol"),
                                       (dict(max_iter=0), "max_iter")])
def test_bicgstab_bad_arguments(kw, match):
    A, b = diag_dominant_system(n=5)
    with pytest.raises(ValueError, match=match):
        nopg.bicgstab(lambda v: A @ v, b, **kw)


# ---------------------------------------------------------------------------- solve_dense
def test_solve_dense_against_numpy_forward_and_transposed():
    P = substochastic()
    rng = np.random.default_rng(1)
    b, c = rng.normal(size=P.shape[0]), rng.random(P.shape[0])
    lam = np.eye(P.shape[0]) - P
    x, y, info = nopg.solve_dense(torch.tensor(P), torch.tensor(b), torch.tensor(c))
    np.testing.assert_allclose(x.numpy(), np.linalg.solve(lam, b), rtol=1e-11, atol=1e-12)
    np.testing.assert_allclose(y.numpy(), np.linalg.solve(lam.T, c), rtol=1e-11, atol=1e-12)
    # The transposed solve is not the forward one (P is not symmetric).
    assert not np.allclose(y.numpy(), np.linalg.solve(lam, c))
    assert info.method == "dense" and info.iterations == 0 and info.converged
    assert info.residual < 1e-13


def test_solve_dense_without_transposed_rhs():
    P = substochastic(n=8)
    b = np.arange(8.0)
    x, y, info = nopg.solve_dense(torch.tensor(P), torch.tensor(b))
    assert y is None
    np.testing.assert_allclose(x.numpy(), np.linalg.solve(np.eye(8) - P, b), rtol=1e-12)


# ---------------------------------------------------------------------------- inside the model
@pytest.mark.parametrize("top_k", [None, 8])
@pytest.mark.parametrize("n_mc_next", [None, 2])
def test_model_bicgstab_matches_dense(dataset, bandwidths, initial_states, det_policy, top_k,
                                      n_mc_next):
    sols = {}
    for solver in ("dense", "bicgstab"):
        m = nopg.bellman_model(dataset, bandwidths, 0.97, top_k=top_k, n_mc_next=n_mc_next,
                                 solver=solver)
        sols[solver] = m.solution(det_policy, initial_states, torch.Generator().manual_seed(0))
    d, it = sols["dense"], sols["bicgstab"]
    assert d.info_q.method == "dense"
    assert it.info_q.method == "bicgstab" and it.info_mu.method == "bicgstab"
    assert it.info_q.converged and it.info_mu.converged and it.info_q.iterations > 0
    np.testing.assert_allclose(it.q.numpy(), d.q.numpy(), rtol=0, atol=1e-8)
    np.testing.assert_allclose(it.mu.numpy(), d.mu.numpy(), rtol=0, atol=1e-8)
    assert it.J == pytest.approx(d.J, abs=1e-8)


def test_model_bicgstab_warm_start(dataset, bandwidths, initial_states, det_policy):
    m = nopg.bellman_model(dataset, bandwidths, 0.97, solver="bicgstab")
    cold = m.solution(det_policy, initial_states)
    warm = m.solution(det_policy, initial_states, warm_start=(cold.q, cold.mu))
    assert warm.info_q.iterations == 0 and warm.info_mu.iterations == 0
    np.testing.assert_allclose(warm.q.numpy(), cold.q.numpy(), atol=1e-12)


def test_model_auto_solver_switches_on_size(dataset, bandwidths, initial_states, det_policy):
    small = nopg.bellman_model(dataset, bandwidths, GAMMA, solver="auto")
    assert small.solution(det_policy, initial_states).info_q.method == "dense"
    big = nopg.bellman_model(dataset, bandwidths, GAMMA, solver="auto", dense_max_n=10)
    assert big.solution(det_policy, initial_states).info_q.method == "bicgstab"


def test_model_solver_iteration_cap_warns(dataset, bandwidths, initial_states, det_policy):
    m = nopg.bellman_model(dataset, bandwidths, 0.99, solver="bicgstab", solver_max_iter=1,
                             solver_tol=1e-14)
    with pytest.warns(nopg.SolverWarning):
        sol = m.solution(det_policy, initial_states)
    assert not sol.info_q.converged


@pytest.mark.parametrize("top_k", [None, 8])
def test_policy_gradient_bicgstab_matches_dense(dataset, bandwidths, initial_states, gauss_policy,
                                                top_k):
    kw = dict(bandwidths=bandwidths, gamma=0.95, initial_states=initial_states, top_k=top_k,
              stochastic=True, n_mc_policy=3, seed=2)
    d = nopg.policy_gradient(dataset, gauss_policy, solver="dense", **kw)
    it = nopg.policy_gradient(dataset, gauss_policy, solver="bicgstab", **kw)
    assert d.info_q.method == "dense" and it.info_q.method == "bicgstab"
    assert it.J == pytest.approx(d.J, abs=1e-8)
    np.testing.assert_allclose(it.q, d.q, rtol=0, atol=1e-8)
    np.testing.assert_allclose(it.mu, d.mu, rtol=0, atol=1e-8)
    for gi, gd in zip(it.grads, d.grads):
        np.testing.assert_allclose(gi.numpy(), gd.numpy(), rtol=0, atol=1e-7)


# ---------------------------------------------------------------------------- aggregation
def test_aggregation_preconditioner_with_singleton_groups_is_the_exact_inverse():
    import scipy.sparse

    from nopg.linalg.solvers import aggregation_preconditioner

    P = substochastic(40, 0.99)
    A = np.eye(40) - P
    v = torch.from_numpy(np.random.default_rng(1).normal(size=40))
    for smoother in ("gauss-seidel", "forward-gauss-seidel", "richardson"):
        apply, apply_t = aggregation_preconditioner(scipy.sparse.csr_matrix(P), np.arange(40),
                                                    smoother=smoother)
        np.testing.assert_allclose(apply(v).numpy(), np.linalg.solve(A, v.numpy()), rtol=1e-10,
                                   atol=1e-12)
        np.testing.assert_allclose(apply_t(v).numpy(), np.linalg.solve(A.T, v.numpy()),
                                   rtol=1e-10, atol=1e-12)
    with pytest.raises(ValueError, match="aggregates must be 40"):
        aggregation_preconditioner(scipy.sparse.csr_matrix(P), np.arange(39))


def test_aggregation_cycle_matches_its_formula_for_both_systems():
    """One application equals the docstring's cycle written densely: the coarse correction,
    then a forward and (symmetric) a backward Gauss-Seidel sweep; the transpose sweeps ``A^T``
    in the same order."""
    import scipy.sparse

    from nopg.linalg.solvers import aggregation_preconditioner

    rng = np.random.default_rng(3)
    n = 30
    P = substochastic(n, 0.95)
    A = np.eye(n) - P
    groups = rng.permutation(np.repeat(np.arange(6), 5))        # unsorted groups of 5
    R = np.zeros((6, n))
    R[groups, np.arange(n)] = 1.0
    v = rng.normal(size=n)

    def cycle(M: np.ndarray, smoother: str) -> np.ndarray:
        Mc = R @ M @ R.T
        x = R.T @ np.linalg.solve(Mc, R @ v)
        if smoother == "richardson":
            return x + (v - M @ x)
        order = np.argsort(groups, kind="stable")              # sweeps in the aggregates' order
        Mo, vo, xo = M[np.ix_(order, order)], v[order], x[order]
        lower, upper = np.tril(Mo), np.triu(Mo)
        xo = np.linalg.solve(lower, vo - (Mo - lower) @ xo)
        if smoother == "gauss-seidel":
            xo = np.linalg.solve(upper, vo - (Mo - upper) @ xo)
        out = np.empty(n)
        out[order] = xo
        return out

    for smoother in ("gauss-seidel", "forward-gauss-seidel", "richardson"):
        apply, apply_t = aggregation_preconditioner(scipy.sparse.csr_matrix(P), groups,
                                                    smoother=smoother)
        np.testing.assert_allclose(apply(torch.from_numpy(v)).numpy(), cycle(A, smoother),
                                   rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(apply_t(torch.from_numpy(v)).numpy(), cycle(A.T, smoother),
                                   rtol=1e-12, atol=1e-12)


def _local_chain(n: int, gamma: float = 0.99, seed: int = 0):
    """A slowly mixing chain: every state moves to its 6 nearest neighbours on a 2-D cloud."""
    import scipy.sparse
    from scipy.spatial import cKDTree

    rng = np.random.default_rng(seed)
    pts = rng.uniform(0, 1, (n, 2))
    _, idx = cKDTree(pts).query(pts + 0.01, k=6)
    w = rng.uniform(0.5, 1.5, (n, 6))
    w = gamma * w / w.sum(1, keepdims=True)
    P = scipy.sparse.csr_matrix((w.ravel(), idx.ravel(), np.arange(0, 6 * n + 1, 6)), shape=(n, n))
    return pts, P


def test_aggregation_preconditioned_bicgstab_solves_both_systems_in_fewer_iterations():
    from nopg.linalg.solvers import aggregation_preconditioner
    from nopg.model.neighbors import z_order_groups

    pts, P = _local_chain(2000)
    groups = z_order_groups(pts, 8)
    assert np.bincount(groups).max() == 8 and groups.max() == 2000 // 8 - 1
    A = np.eye(2000) - P.toarray()
    b = torch.from_numpy(np.random.default_rng(2).normal(size=2000))
    iterations: dict[tuple[str, int], list[int]] = {}
    for smoother, steps in (("richardson", 1), ("richardson", 3), ("gauss-seidel", 1)):
        apply, apply_t = aggregation_preconditioner(P, groups, smoothing_steps=steps,
                                                    smoother=smoother)
        for op, pre, dense in ((lambda v: v - torch.from_numpy(P @ v.numpy()), apply, A),
                               (lambda v: v - torch.from_numpy(P.T @ v.numpy()), apply_t, A.T)):
            plain, info0 = nopg.bicgstab(op, b, tol=1e-10, max_iter=2000)
            x, info = nopg.bicgstab(op, b, tol=1e-10, max_iter=2000, precond=pre)
            np.testing.assert_allclose(x.numpy(), np.linalg.solve(dense, b.numpy()), rtol=0,
                                       atol=1e-7)
            assert info.converged and info.iterations < info0.iterations / 2
            iterations.setdefault((smoother, steps), []).append(info.iterations)
    # more smoothing steps: a preconditioner closer to A^{-1}, fewer iterations for both systems;
    # a Gauss-Seidel sweep does more than a Richardson step
    rich1, rich3 = iterations["richardson", 1], iterations["richardson", 3]
    assert all(i3 < i1 for i1, i3 in zip(rich1, rich3))
    assert all(gs < i1 for i1, gs in zip(rich1, iterations["gauss-seidel", 1]))
    with pytest.raises(ValueError, match="smoothing_steps"):
        aggregation_preconditioner(P, groups, smoothing_steps=0)
    with pytest.raises(ValueError, match="smoother must be one of"):
        aggregation_preconditioner(P, groups, smoother="jacobi")


@pytest.mark.parametrize("smoother", ["gauss-seidel", "forward-gauss-seidel", "richardson"])
def test_aggregation_preconditioner_matches_its_formula(smoother):
    """One application against dense linear algebra: with the samples sorted by group, the
    coarse correction ``R^T A_c^{-1} R v`` followed by one smoothing step, a symmetric
    Gauss-Seidel sweep (lower triangle of ``A``, then upper), a forward sweep only, or a
    Richardson step; the transpose the same with ``A^T``."""
    import scipy.sparse

    from nopg.linalg.solvers import aggregation_preconditioner

    rng = np.random.default_rng(3)
    n, m = 60, 12
    P = substochastic(n, 0.95)
    groups = rng.permutation(np.repeat(np.arange(m), n // m))
    order = np.argsort(groups, kind="stable")
    R = np.zeros((m, n))
    R[groups[order], np.arange(n)] = 1.0

    def reference(M: np.ndarray, b: np.ndarray) -> np.ndarray:  # in the sorted order
        x = R.T @ np.linalg.solve(R @ M @ R.T, R @ b)
        if smoother == "richardson":
            return x + (b - M @ x)
        x = x + np.linalg.solve(np.tril(M), b - M @ x)
        if smoother == "forward-gauss-seidel":
            return x
        return x + np.linalg.solve(np.triu(M), b - M @ x)

    A = (np.eye(n) - P)[np.ix_(order, order)]
    v = rng.normal(size=n)
    apply, apply_t = aggregation_preconditioner(scipy.sparse.csr_matrix(P), groups,
                                                smoother=smoother)
    for pre, M in ((apply, A), (apply_t, A.T)):
        got = pre(torch.from_numpy(v)).numpy()[order]
        np.testing.assert_allclose(got, reference(M, v[order]), rtol=1e-11, atol=1e-13)


def test_isotropic_z_order_groups_stay_compact_when_the_axes_differ_in_extent():
    # Bandwidth-scaled data can span hundreds of units along a state axis and a few along the
    # action: per-axis cells then give the short axis as many cuts as the long one, and groups
    # stretch along the long axis; cells of one width keep them compact in the common metric.
    from nopg.model.neighbors import z_order_groups

    pts = np.random.default_rng(0).uniform(0, 1, (4000, 2)) * [100.0, 1.0]
    spread = {}
    for iso in (True, False):
        groups = z_order_groups(pts, 8, isotropic=iso)
        assert np.bincount(groups).max() == 8
        spread[iso] = np.mean([np.ptp(pts[groups == g], axis=0).max() for g in range(500)])
    # 8 of 40 points per unit square: about sqrt(8 / 40) = 0.45 across when compact
    assert spread[True] < 1.0 < 4.0 < spread[False]


def test_model_with_aggregation_preconditioner_matches_ilu(dataset, bandwidths, initial_states,
                                                            det_policy, monkeypatch):
    monkeypatch.setattr("nopg.model.bellman.AGGREGATE_SIZE", 4)    # many groups on the small data
    sols = {}
    for pre in ("ilu", "aggregation"):
        m = nopg.bellman_model(dataset, bandwidths, 0.97, top_k=8, solver="bicgstab",
                                 solver_tol=1e-11, preconditioner=pre)
        sols[pre] = m.solution(det_policy, initial_states)
        assert m.preconditioner == pre and m.linear_solver.builds == 1
    np.testing.assert_allclose(sols["aggregation"].q.numpy(), sols["ilu"].q.numpy(), atol=1e-8)
    np.testing.assert_allclose(sols["aggregation"].mu.numpy(), sols["ilu"].mu.numpy(), atol=1e-8)
    assert sols["aggregation"].J == pytest.approx(sols["ilu"].J, abs=1e-8)
    # The aggregation solves in the aggregates' order: a warm start at the solution (given in
    # the data's order) is taken over in that order and needs no iteration.
    sol = sols["aggregation"]
    forward, _ = m.linear_solver._order
    assert not torch.equal(forward, torch.arange(dataset.n))      # a real reordering
    q, mu, info_q, info_mu = m.solve(sol.P, sol.eps0, warm_start=(sol.q, sol.mu))
    assert info_q.iterations == 0 and info_mu.iterations == 0
    np.testing.assert_allclose(q.numpy(), sol.q.numpy(), rtol=0, atol=1e-12)


@pytest.mark.parametrize("top_k", [None, 8])
def test_aggregation_groups_follow_the_order_of_the_matrix_they_precondition(
        dataset, bandwidths, initial_states, det_policy, monkeypatch, top_k):
    """A sparse ``P`` is solved (and preconditioned) in the aggregates' order, a dense ``P``'s
    sketch in the data's: the built preconditioner equals one built directly from its source
    with the groups in that source's order, also after a checkpoint round trip."""
    from nopg.linalg.solvers import aggregation_preconditioner

    monkeypatch.setattr("nopg.model.bellman.AGGREGATE_SIZE", 4)
    m = nopg.bellman_model(dataset, bandwidths, 0.97, top_k=top_k, solver="bicgstab",
                             solver_tol=1e-11, preconditioner="aggregation")
    m.solution(det_policy, initial_states)
    solver = m.linear_solver
    assert solver.ilu_ordered == (top_k is not None)
    groups = solver._groups()
    if solver.ilu_ordered:
        groups = groups[solver._sample_order()[0].numpy()]
    direct, _ = aggregation_preconditioner(solver.ilu_source.to_scipy(), groups)
    v = torch.from_numpy(np.random.default_rng(4).normal(size=dataset.n))
    torch.testing.assert_close(solver.ilu[0](v), direct(v), rtol=1e-12, atol=1e-14)
    state = m.solver_state()
    fresh = nopg.bellman_model(dataset, bandwidths, 0.97, top_k=top_k, solver="bicgstab",
                                 solver_tol=1e-11, preconditioner="aggregation")
    fresh.load_solver_state(state)
    assert fresh.linear_solver.ilu_ordered == solver.ilu_ordered
    torch.testing.assert_close(fresh.linear_solver.ilu[0](v), direct(v), rtol=1e-12, atol=1e-14)


def test_sparse_rows_permuted_reorders_rows_and_columns():
    from nopg.model.row_matrices import SparseRows

    gen = torch.Generator().manual_seed(0)
    rows = SparseRows(torch.randint(0, 12, (12, 4), generator=gen),
                      torch.rand(12, 4, dtype=torch.float64, generator=gen), 12)
    order = torch.randperm(12, generator=gen)
    inverse = torch.empty_like(order)
    inverse[order] = torch.arange(12)
    dense = rows.to_dense()
    torch.testing.assert_close(rows.permuted(order, inverse).to_dense(), dense[order][:, order],
                               rtol=0, atol=0)
    # values that carry a gradient take torch's indexing (the detached CPU matrix NumPy's)
    tracked = SparseRows(rows.index, rows.values.clone().requires_grad_(True), 12)
    moved = tracked.permuted(order, inverse)
    assert moved.values.requires_grad
    torch.testing.assert_close(moved.to_dense().detach(), dense[order][:, order], rtol=0, atol=0)
