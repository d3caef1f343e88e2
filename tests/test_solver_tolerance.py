"""``solver_tol="auto"``: the error bound it proves, the gradient it gives, and what stays as before."""

from __future__ import annotations

import dataclasses
import logging
import warnings

import numpy as np
import pytest
import torch
from conftest import make_arrays, sparse_chain

import nopg
from nopg.linalg.solvers import AUTO_ERROR, check_solver_tol, solve_bellman_auto

GAMMA = 0.99


@pytest.fixture
def data300() -> nopg.TransitionDataset:
    return nopg.TransitionDataset(**make_arrays(n=300, seed=3))


def _policy(seed: int = 0) -> nopg.DeterministicMLPPolicy:
    torch.manual_seed(seed)
    return nopg.DeterministicMLPPolicy(2, 1, action_max=1.0, hidden=(8,), activation="tanh").double()


def _flat(grads) -> torch.Tensor:
    return torch.cat([g.reshape(-1) for g in grads])


def _exact(sol, rewards: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    q, mu, _ = nopg.solve_dense(sol.P.detach().to(torch.float64).to_dense(), rewards,
                                sol.eps0.detach().to(torch.float64))
    return q, mu


def _gradients(sol, policy, q_exact, mu_exact) -> tuple[torch.Tensor, torch.Tensor]:
    params = list(policy.parameters())
    g = _flat(torch.autograd.grad(sol.surrogate(), params, retain_graph=True))
    exact = dataclasses.replace(sol, q=q_exact, mu=mu_exact)
    return g, _flat(torch.autograd.grad(exact.surrogate(), params, retain_graph=True))


@pytest.mark.parametrize("unsupported", ["extrapolate", "absorb"])
def test_auto_tolerance_proves_its_bound_and_keeps_the_gradient(data300, bandwidths, initial_states,
                                                                unsupported):
    """Along a short fit (warm starts, the ILU kept across updates): the errors of q (max-norm
    against its spread) and mu (l1) are within the reported bounds, the bounds within 1e-3, J_hat
    within 1e-3 osc(q), and the gradient within a cosine of 0.9999 of the exact one."""
    model = nopg.bellman_model(data300, bandwidths, GAMMA, top_k=8, solver="bicgstab",
                                 solver_tol="auto", unsupported=unsupported)
    policy = _policy()
    opt = torch.optim.Adam(policy.parameters(), lr=0.05)
    warm, loose = None, 0
    for _ in range(8):
        sol = model.solution(policy, initial_states, warm_start=warm)
        rewards = model.rewards
        extra = None
        if unsupported == "absorb":
            rewards = rewards + model.absorbing_value * sol.lost_next.detach().to(torch.float64)
            extra = model.absorbing_value
        q_x, mu_x = _exact(sol, rewards)
        hi, lo = float(q_x.max()), float(q_x.min())
        if extra is not None:
            hi, lo = max(hi, extra), min(lo, extra)
        err_q = float((sol.q - q_x).abs().max()) / (hi - lo)
        err_mu = float((sol.mu - mu_x).abs().sum() / mu_x.abs().sum())
        assert err_q <= sol.info_q.error_bound * (1 + 1e-6) + 1e-14
        assert err_mu <= sol.info_mu.error_bound * (1 + 1e-6) + 1e-14
        assert sol.info_q.error_bound <= AUTO_ERROR and sol.info_mu.error_bound <= AUTO_ERROR
        J_x = float(sol.eps0.detach().to(torch.float64) @ q_x)
        if extra is not None:
            J_x += extra * float(sol.thin_init.detach())
        assert abs(sol.J - J_x) <= AUTO_ERROR * (hi - lo)
        g, g_x = _gradients(sol, policy, q_x, mu_x)
        cos = float(g @ g_x / (g.norm() * g_x.norm()))
        assert cos >= 0.9999
        loose += sol.info_q.stop_residual > 1e-8 or sol.info_mu.stop_residual > 1e-8
        opt.zero_grad()
        for p, gi in zip(policy.parameters(), torch.autograd.grad(sol.surrogate(),
                                                                 list(policy.parameters()))):
            p.grad = -gi
        opt.step()
        warm = (sol.q, sol.mu)
    assert loose > 0   # the rule did stop short of the former 1e-10 somewhere


def test_auto_is_the_config_default_and_reaches_the_model(data300, bandwidths, initial_states):
    assert nopg.NOPGConfig().model.solver_tol == "auto"
    algo = nopg.NOPG(_policy(), nopg.NOPGConfig(model=nopg.ModelConfig(top_k=8, solver="bicgstab")))
    algo.setup(data300, bandwidths, initial_states)
    assert algo.model_.solver_tol == "auto" and algo.model_.linear_solver.refresh == "cost"
    metrics = algo.step()
    assert np.isfinite(metrics["J_hat"]) and metrics["residual_q"] < 1.0
    # The low-level model keeps the former default.
    assert nopg.bellman_model(data300, bandwidths, GAMMA).solver_tol == 1e-10


def test_explicit_tolerances_unchanged(data300, bandwidths, initial_states):
    """A float tolerance is the relative 2-norm residual of plain BiCGSTAB, as before: the model's
    solve returns bit for bit what bicgstab does with the same operator and preconditioner."""
    for tol in (1e-10, 1e-6):
        model = nopg.bellman_model(data300, bandwidths, GAMMA, top_k=8, solver="bicgstab",
                                     solver_tol=tol)
        assert model.solver_tol == tol and model.linear_solver.refresh == "iterations"
        sol = model.solution(_policy(), initial_states)
        P64 = sol.P.detach().to(torch.float64)
        matvec, rmatvec = P64.operators()
        pre_q, pre_mu = model.linear_solver.ilu
        q, info_q = nopg.bicgstab(lambda v, f=matvec: v - f(v), model.rewards, tol=tol, precond=pre_q)
        mu, info_mu = nopg.bicgstab(lambda v, f=rmatvec: v - f(v), sol.eps0.detach().to(torch.float64),
                                    tol=tol, precond=pre_mu)
        assert torch.equal(q, sol.q) and torch.equal(mu, sol.mu)
        assert sol.info_q == info_q and sol.info_mu == info_mu
        assert info_q.norm == "2" and info_q.stop_residual == info_q.residual <= tol
        assert np.isnan(info_q.error_bound)
    cfg = nopg.NOPGConfig(model=nopg.ModelConfig(solver_tol=1e-8))
    assert cfg.model.solver_tol == 1e-8 and nopg.NOPGConfig.from_dict(cfg.to_dict()) == cfg


@pytest.mark.parametrize("value", ["fast", "AUTO", 0.0, -1e-6, float("nan"), float("inf"), True, None,
                                   [1e-6]])
def test_invalid_solver_tol_rejected(data300, bandwidths, value):
    assert not check_solver_tol(value)
    with pytest.raises(ValueError, match="solver_tol.*positive float or 'auto'"):
        nopg.NOPGConfig(model=nopg.ModelConfig(solver_tol=value))
    with pytest.raises(ValueError, match="solver_tol.*positive float or 'auto'"):
        nopg.bellman_model(data300, bandwidths, GAMMA, solver_tol=value)


def test_invalid_solver_arguments_rejected():
    A = torch.eye(4, dtype=torch.float64) * 2
    b = torch.ones(4, dtype=torch.float64)
    with pytest.raises(ValueError, match="norm"):
        nopg.bicgstab(lambda v: A @ v, b, norm="3")
    with pytest.raises(ValueError, match="error"):
        solve_bellman_auto(lambda v: 0 * v, lambda v: 0 * v, b, b, GAMMA, error=0.0)


def _chain(n: int = 80, gamma: float = GAMMA, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """A sparse sub-stochastic matrix (slowly mixing: mostly a shift) and rewards."""
    P, r, _ = sparse_chain(n, gamma, seed)
    return P, r


@pytest.mark.parametrize("norm", ["2", "inf", "1"])
def test_bicgstab_norms_reach_the_exact_solution(norm):
    P, r = _chain()
    A = torch.tensor(np.eye(len(r)) - P)
    b = torch.tensor(r)
    exact = torch.linalg.solve(A, b)
    far = exact + 10.0 * torch.sin(torch.arange(len(r), dtype=torch.float64))
    x, info = nopg.bicgstab(lambda v: A @ v, b, far, tol=1e-12, norm=norm)
    torch.testing.assert_close(x, exact, rtol=0, atol=1e-9)
    assert info.converged and info.norm == norm
    order = {"2": 2, "inf": float("inf"), "1": 1}[norm]
    true = float(torch.linalg.vector_norm(b - A @ x, ord=order) / torch.linalg.vector_norm(b, ord=order))
    assert info.stop_residual == pytest.approx(true, rel=1e-6, abs=1e-18)
    assert info.residual == pytest.approx(float(torch.linalg.vector_norm(b - A @ x)
                                                / torch.linalg.vector_norm(b)), rel=1e-6, abs=1e-18)


def test_warm_started_auto_solves_track_and_converge_to_the_exact_solution():
    """Solves of a slowly changing system, each warm-started from the last, stay within the bound
    (the error does not build up); once the system stops changing, iterating warm-started solves
    with a shrinking target (or a float tolerance) converges to the exact solution."""
    n = 80
    P0, r = _chain(n)
    P1, _ = _chain(n, seed=1)
    rng = np.random.default_rng(5)
    eps0 = rng.random(n) ** 4
    eps0 /= eps0.sum()
    rt, et = torch.tensor(r), torch.tensor(eps0)
    warm = None
    for t in range(12):
        P = torch.tensor((1 - t / 40) * P0 + t / 40 * P1)
        q, mu, iq, im = solve_bellman_auto(lambda v, P=P: P @ v, lambda v, P=P: P.T @ v, rt, et, GAMMA,
                                           warm)
        A = torch.eye(n, dtype=torch.float64) - P
        q_x, mu_x = torch.linalg.solve(A, rt), torch.linalg.solve(A.T, et)
        assert float((q - q_x).abs().max() / (q_x.max() - q_x.min())) <= iq.error_bound <= AUTO_ERROR
        assert float((mu - mu_x).abs().sum() / mu_x.abs().sum()) <= im.error_bound <= AUTO_ERROR
        warm = (q, mu)
    errors = []
    for error in (1e-4, 1e-6, 1e-8, 1e-10):
        q, mu, iq, im = solve_bellman_auto(lambda v: P @ v, lambda v: P.T @ v, rt, et, GAMMA, warm,
                                           error=error)
        errors.append(float((q - q_x).abs().max()))
        warm = (q, mu)
    assert errors[-1] <= 1e-8 * float(q_x.max() - q_x.min()) and errors[-1] < errors[0]
    # Warm-started Neumann (Jacobi) sweeps q <- r + P q contract by gamma: they converge too.
    q = warm[0] + 1.0
    for _ in range(4000):
        q = rt + P @ q
    torch.testing.assert_close(q, q_x, rtol=0, atol=1e-9)


def test_auto_handles_a_constant_value_without_warning():
    """Constant rewards and no terminals: q is constant (zero spread), the gradient cannot depend
    on it; the rule solves to its floor and does not warn."""
    n = 50
    P, _ = _chain(n)
    r = torch.full((n,), -2.0, dtype=torch.float64)
    e = torch.full((n,), 1.0 / n, dtype=torch.float64)
    Pt = torch.tensor(P)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        q, mu, iq, im = solve_bellman_auto(lambda v: Pt @ v, lambda v: Pt.T @ v, r, e, GAMMA)
    torch.testing.assert_close(q, torch.full_like(q, -2.0 / (1 - GAMMA)), rtol=1e-8, atol=0)
    assert im.error_bound <= AUTO_ERROR


def test_auto_iteration_cap_warns():
    P, r = _chain()
    Pt, rt = torch.tensor(P), torch.tensor(r)
    e = torch.full_like(rt, 1.0 / len(r))
    with pytest.warns(nopg.SolverWarning, match="error bound"):
        _, _, iq, _ = solve_bellman_auto(lambda v: Pt @ v, lambda v: Pt.T @ v, rt, e, GAMMA, max_iter=1)
    assert iq.error_bound > AUTO_ERROR


def test_auto_solver_state_round_trip(data300, bandwidths, initial_states):
    """The cost-based ILU rebuild rule's state travels with the checkpointed solver state."""
    model = nopg.bellman_model(data300, bandwidths, GAMMA, top_k=8, solver="bicgstab",
                                 solver_tol="auto")
    policy = _policy()
    sol = model.solution(policy, initial_states)
    model.solution(policy, initial_states, warm_start=(sol.q, sol.mu))
    model.linear_solver.ilu_excess = 7
    state = model.solver_state()
    other = nopg.bellman_model(data300, bandwidths, GAMMA, top_k=8, solver="bicgstab",
                                 solver_tol="auto")
    other.load_solver_state(state)
    restored, saved = other.linear_solver, model.linear_solver
    assert restored.ilu_excess == 7 and restored.ilu_base == saved.ilu_base


def _halving_preconditioner(n: int) -> tuple:
    """A singular 'incomplete factorisation' that drops every other entry."""
    keep = (torch.arange(n) % 2 == 0).to(torch.float64)
    return (lambda v: keep * v, lambda v: keep * v)


@pytest.mark.parametrize("solver_tol", ["auto", 1e-10])
def test_a_failing_stale_preconditioner_is_rebuilt_from_this_P(data300, bandwidths,
                                                               initial_states, solver_tol,
                                                               caplog):
    """A preconditioner built from an earlier P that fails on this one (a far-away candidate
    of a search) is rebuilt from this P, and the solve reaches the solution."""
    model = nopg.bellman_model(data300, bandwidths, GAMMA, top_k=8, solver="bicgstab",
                                 solver_tol=solver_tol, solver_max_iter=200)
    policy = _policy()
    good = model.solution(policy, initial_states)
    solver = model.linear_solver
    bad = solver.ilu = _halving_preconditioner(data300.n)
    solver.ilu_excess, solver.last_iterations = 0, 0                   # not stale: it is used
    builds = solver.builds
    with warnings.catch_warnings(), caplog.at_level(logging.INFO, logger="nopg.model.bellman_solver"):
        warnings.simplefilter("ignore")                                # the failed attempt's
        sol = model.solution(policy, initial_states)
    assert "rebuilding the preconditioner from this P" in caplog.text
    assert "retrying without the preconditioner" not in caplog.text
    assert solver.builds == builds + 1 and solver.ilu is not None and solver.ilu is not bad
    assert sol.info_q.converged and sol.info_mu.converged
    rtol = 1e-3 if solver_tol == "auto" else 1e-6      # "auto" stops at its error bound
    torch.testing.assert_close(sol.q, good.q, rtol=rtol, atol=rtol)
    torch.testing.assert_close(sol.mu, good.mu, rtol=rtol, atol=rtol)


def test_a_stale_preconditioner_that_needs_every_iteration_is_rebuilt(data300, bandwidths,
                                                                      initial_states, caplog):
    """A preconditioner from another policy's P that makes the solve run to solver_max_iter is
    rebuilt from this P, and the solve is retried: no warning of the discarded attempt, and
    the same solution as a model that builds it for this policy in the first place."""
    kw = dict(top_k=8, solver="bicgstab", solver_tol="auto", solver_max_iter=15)
    model = nopg.bellman_model(data300, bandwidths, GAMMA, **kw)
    other = _policy(1)
    with torch.no_grad():
        for p in other.parameters():
            p.mul_(8.0)                                    # a policy far from the first one
        model.solution(_policy(0), initial_states)
        model.linear_solver.ilu_excess = 0                 # not stale by the cost rule
        builds = model.linear_solver.builds
        with warnings.catch_warnings(record=True) as caught, \
                caplog.at_level(logging.INFO, logger="nopg.model.bellman_solver"):
            warnings.simplefilter("always")
            sol = model.solution(other, initial_states)
        fresh = nopg.bellman_model(data300, bandwidths, GAMMA, **kw).solution(other,
                                                                               initial_states)
    assert "reached solver_max_iter" in caplog.text
    assert model.linear_solver.builds == builds + 1
    assert not caught
    torch.testing.assert_close(sol.q, fresh.q, rtol=1e-2, atol=1e-2)
    torch.testing.assert_close(sol.mu, fresh.mu, rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("solver_tol", ["auto", 1e-10])
def test_a_failing_preconditioner_is_dropped_and_the_solve_retried(data300, bandwidths,
                                                                   initial_states, solver_tol,
                                                                   caplog, monkeypatch):
    """An unstable incomplete factorisation (here: a singular one that drops half the entries,
    also when rebuilt from this P) must not leave the solves unconverged: the solver retries
    without it, reaches the same solution as with a good one, and builds a fresh one at the next
    solve."""
    model = nopg.bellman_model(data300, bandwidths, GAMMA, top_k=8, solver="bicgstab",
                                 solver_tol=solver_tol, solver_max_iter=200)
    policy = _policy()
    good = model.solution(policy, initial_states)
    solver = model.linear_solver
    monkeypatch.setattr("nopg.model.bellman_solver.ilu_preconditioner",
                        lambda P, **kw: _halving_preconditioner(P.shape[0]))
    solver.ilu = _halving_preconditioner(data300.n)
    solver.ilu_excess, solver.last_iterations = 0, 0                   # not stale: it is used
    with warnings.catch_warnings(), caplog.at_level(logging.INFO, logger="nopg.model.bellman_solver"):
        warnings.simplefilter("ignore")                                # the failed attempts'
        sol = model.solution(policy, initial_states)
    assert "rebuilding the preconditioner from this P" in caplog.text
    assert "retrying without the preconditioner" in caplog.text
    assert sol.info_q.converged and sol.info_mu.converged
    rtol = 1e-3 if solver_tol == "auto" else 1e-6      # "auto" stops at its error bound
    torch.testing.assert_close(sol.q, good.q, rtol=rtol, atol=rtol)
    torch.testing.assert_close(sol.mu, good.mu, rtol=rtol, atol=rtol)
    assert solver.ilu is None                                          # the bad one was dropped
    monkeypatch.undo()                                                 # factorisations work again
    builds = solver.builds
    model.solution(policy, initial_states)
    assert solver.builds == builds + 1 and solver.ilu is not None      # and rebuilt


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_sparsified_keeps_the_largest_entries_and_the_row_sums(dtype):
    """The dense P's preconditioner source: per row the k largest entries, rescaled to the row's
    sum (so ``I - P_k`` stays diagonally dominant); an all-zero row stays zero (not NaN, also
    in float32)."""
    from nopg.model.row_matrices import DenseRows

    gen = torch.Generator().manual_seed(0)
    M = torch.rand(6, 9, generator=gen, dtype=dtype)
    M = 0.99 * M / M.sum(1, keepdim=True)
    M[3] = 0.0
    sketch = DenseRows(M).sparsified(4)
    dense = sketch.to_dense()
    torch.testing.assert_close(dense.sum(1), M.sum(1))
    for i in (0, 1, 2, 4, 5):
        top = set(torch.topk(M[i], 4).indices.tolist())
        assert set(torch.nonzero(dense[i]).reshape(-1).tolist()) == top
        ratio = dense[i, list(top)] / M[i, list(top)]
        torch.testing.assert_close(ratio, ratio[0].expand_as(ratio))   # one scale per row
    assert bool((dense[3] == 0).all())


@pytest.mark.parametrize("solver_tol", ["auto", 1e-10])
def test_dense_P_solved_by_bicgstab_is_preconditioned_and_exact(data300, bandwidths,
                                                              initial_states, solver_tol):
    """A dense P above the dense-LU limit is solved by BiCGSTAB with an ILU of its sparsified
    rows: far fewer iterations than without, and the same solution as the dense LU (within
    the tolerance's bound). Narrow kernels make the chain mix slowly, as on demonstrations."""
    narrow = nopg.Bandwidths(state=0.3 * bandwidths.state, action=0.3 * bandwidths.action)
    kw = dict(top_k=None, solver="bicgstab", solver_tol=solver_tol, solver_max_iter=2000)
    policy = _policy()
    model = nopg.bellman_model(data300, narrow, GAMMA, **kw)
    with_ilu = model.solution(policy, initial_states)
    assert model.preconditioner_builds_ == 1
    without = nopg.bellman_model(data300, narrow, GAMMA, preconditioner="none",
                                   **kw).solution(policy, initial_states)
    q, mu = _exact(with_ilu, with_ilu.q.new_tensor(data300.rewards))
    rtol = 1e-3 if solver_tol == "auto" else 1e-7
    torch.testing.assert_close(with_ilu.q, q, rtol=rtol, atol=rtol * float(q.abs().max()))
    torch.testing.assert_close(with_ilu.mu, mu, rtol=rtol, atol=rtol * float(mu.abs().max()))
    assert with_ilu.info_q.iterations + with_ilu.info_mu.iterations < \
        (without.info_q.iterations + without.info_mu.iterations) / 2


def test_auto_tolerance_with_drawn_next_states_aims_at_the_draws_noise(data300, bandwidths,
                                                                       initial_states):
    """Drawn next states: ``auto`` aims at AUTO_ERROR_DRAWN (kernel mean: AUTO_ERROR), proves
    its bound, and the gradient's error from the solve is far below the gap between the
    gradients of two sets of draws at the same policy."""
    from nopg.linalg.solvers import AUTO_ERROR_DRAWN

    kernel_mean = nopg.bellman_model(data300, bandwidths, GAMMA, top_k=8, solver="bicgstab",
                                       solver_tol="auto")
    assert kernel_mean.linear_solver.auto_error == AUTO_ERROR
    model = nopg.bellman_model(data300, bandwidths, GAMMA, top_k=8, solver="bicgstab",
                                 solver_tol="auto", n_mc_next=3)
    assert model.linear_solver.auto_error == AUTO_ERROR_DRAWN > AUTO_ERROR
    policy = _policy()
    sols = [model.solution(policy, initial_states, torch.Generator().manual_seed(seed))
            for seed in (0, 1)]
    exact = [_exact(sol, model.rewards) for sol in sols]
    (g0, g0_x), (g1, _) = [_gradients(sol, policy, *ex) for sol, ex in zip(sols, exact)]
    for sol, (q_x, _) in zip(sols, exact):
        assert max(sol.info_q.error_bound, sol.info_mu.error_bound) <= AUTO_ERROR_DRAWN
        err_q = float((sol.q - q_x).abs().max() / (q_x.max() - q_x.min()))
        assert err_q <= sol.info_q.error_bound * (1 + 1e-6) + 1e-14
    solve_gap = float((g0 - g0_x).norm())
    draws_gap = float((g1 - g0_x).norm())
    assert draws_gap > 0 and solve_gap <= 0.01 * draws_gap


@pytest.mark.parametrize("error", [1e-2, 1e-5])
def test_solver_error_sets_the_proven_bound(data300, bandwidths, initial_states, error):
    """``solver_error`` replaces the ``auto`` target: the solves prove it, the solutions are
    within it against exact ones, and a looser target takes fewer iterations."""
    model = nopg.bellman_model(data300, bandwidths, GAMMA, top_k=8, solver="bicgstab",
                                 solver_tol="auto", solver_error=error)
    assert model.linear_solver.auto_error == error
    sol = model.solution(_policy(), initial_states)
    q_x, mu_x = _exact(sol, model.rewards)
    assert max(sol.info_q.error_bound, sol.info_mu.error_bound) <= error
    assert float((sol.q - q_x).abs().max() / (q_x.max() - q_x.min())) <= sol.info_q.error_bound
    assert float((sol.mu - mu_x).abs().sum() / mu_x.abs().sum()) <= sol.info_mu.error_bound
    default = nopg.bellman_model(data300, bandwidths, GAMMA, top_k=8, solver="bicgstab",
                                   solver_tol="auto").solution(_policy(), initial_states)
    its = sol.info_q.iterations + sol.info_mu.iterations
    its_default = default.info_q.iterations + default.info_mu.iterations
    assert its < its_default if error > AUTO_ERROR else its > its_default


def test_auto_error_rule():
    """``solver_error=None``: 1e-3 for kernel-mean next states below 10^5 samples, 1e-2 with
    drawn next states or from 10^5 samples on; an explicit target wins; bad ones are refused."""
    from nopg.linalg.solvers import AUTO_ERROR_DRAWN
    from nopg.model.bellman_solver import auto_error
    from nopg.model.defaults import MC_NEXT_MAX_N

    assert auto_error(None, MC_NEXT_MAX_N - 1, drawn=False) == AUTO_ERROR == 1e-3
    assert auto_error(None, MC_NEXT_MAX_N, drawn=False) == AUTO_ERROR_DRAWN == 1e-2
    assert auto_error(None, 300, drawn=True) == AUTO_ERROR_DRAWN
    assert auto_error(3e-4, MC_NEXT_MAX_N, drawn=True) == 3e-4
    with pytest.raises(ValueError, match="error must be in"):
        auto_error(0.0, 300, drawn=False)
