"""Mixed-precision Bellman solves: float32 iterations, float64 residuals that prove the bound."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import make_arrays, sparse_chain

import nopg
from nopg.linalg.solvers import LowPrecision, solve_bellman_auto
from nopg.model.bellman_solver import BellmanSolver

GAMMA = 0.99


def _chain(n: int = 300, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A slowly mixing sparse sub-stochastic chain, rewards far from zero (so ``q`` is large
    against its spread, where float32 residuals alone could not prove the bound) and a skewed
    start distribution."""
    P, r, rng = sparse_chain(n, GAMMA, seed, entries=5, reach=4, reward_shift=-8.0)
    eps0 = rng.random(n) ** 4
    return P, r, eps0 / eps0.sum()


class _Counted:
    """``v -> M v`` that records the dtype of every call."""

    def __init__(self, M: torch.Tensor) -> None:
        self.M, self.dtypes = M, []

    def __call__(self, v: torch.Tensor) -> torch.Tensor:
        self.dtypes.append(v.dtype)
        return self.M.to(v.dtype) @ v


@pytest.mark.parametrize("error", [1e-2, 1e-3, 1e-6, 1e-8])
def test_mixed_precision_meets_the_proven_bound_down_to_float64_accuracy(error):
    """The errors of q (max-norm against its spread) and mu (l1 against its mass) are within the
    reported bounds, the bounds within the target, also for targets far below float32's
    precision (iterative refinement); the iterations run in float32, and the float64 products
    are only the few residuals."""
    P, r, eps0 = _chain()
    Pt, rt, et = torch.tensor(P), torch.tensor(r), torch.tensor(eps0)
    mv64, rmv64 = _Counted(Pt), _Counted(Pt.T)
    mv32, rmv32 = _Counted(Pt), _Counted(Pt.T)
    q, mu, iq, im = solve_bellman_auto(mv64, rmv64, rt, et, GAMMA, error=error,
                                       low=LowPrecision(mv32, rmv32))
    A = torch.eye(len(r), dtype=torch.float64) - Pt
    q_x, mu_x = torch.linalg.solve(A, rt), torch.linalg.solve(A.T, et)
    assert q.dtype == mu.dtype == torch.float64
    spread = float(q_x.max() - q_x.min())
    err_q = float((q - q_x).abs().max()) / spread
    err_mu = float((mu - mu_x).abs().sum() / mu_x.abs().sum())
    # The dense reference is itself off by up to its residual / (1 - gamma) (rows of P sum to
    # gamma, so ||(I - P)^-1|| <= 1 / (1 - gamma) in the max-norm, and for P^T in the l1-norm):
    # at error=1e-8 the bound is met to about 1e-13, the reference's own size.
    ref_q = float((A @ q_x - rt).abs().max()) / (1 - GAMMA) / spread
    ref_mu = float((A.T @ mu_x - et).abs().sum() / mu_x.abs().sum()) / (1 - GAMMA)
    assert err_q <= iq.error_bound * (1 + 1e-6) + ref_q and iq.error_bound <= error
    assert err_mu <= im.error_bound * (1 + 1e-6) + ref_mu and im.error_bound <= error
    assert iq.converged and im.converged
    assert set(mv32.dtypes) == set(rmv32.dtypes) == {torch.float32}
    assert set(mv64.dtypes) == {torch.float64}
    assert len(mv32.dtypes) > len(mv64.dtypes) and len(rmv32.dtypes) > len(rmv64.dtypes)
    if error <= 1e-6:   # beyond float32: several refinement passes
        assert len(mv64.dtypes) >= 3


def test_mixed_precision_keeps_a_warm_start_and_stops_at_once_when_it_is_accurate():
    P, r, eps0 = _chain()
    Pt, rt, et = torch.tensor(P), torch.tensor(r), torch.tensor(eps0)
    low = LowPrecision(_Counted(Pt), _Counted(Pt.T))
    q, mu, _, _ = solve_bellman_auto(lambda v: Pt @ v, lambda v: Pt.T @ v, rt, et, GAMMA,
                                     error=1e-8, low=low)
    low = LowPrecision(_Counted(Pt), _Counted(Pt.T))
    q2, mu2, iq, im = solve_bellman_auto(lambda v: Pt @ v, lambda v: Pt.T @ v, rt, et, GAMMA,
                                         (q, mu), error=1e-3, low=low)
    assert iq.iterations == im.iterations == 0 and not low.matvec.dtypes
    assert torch.equal(q2, q) and torch.equal(mu2, mu)


@pytest.mark.parametrize("preconditioner", ["ilu", "aggregation"])
def test_mixed_and_double_models_agree_within_their_bounds(bandwidths, initial_states,
                                                           preconditioner):
    """The default (mixed) and float64 solves of the same model both meet their bounds, and
    J_hat agrees within the sum of the two bounds."""
    data = nopg.TransitionDataset(**make_arrays(n=400, seed=4))
    torch.manual_seed(0)
    policy = nopg.DeterministicMLPPolicy(2, 1, action_max=1.0, hidden=(8,)).double()
    sols, solvers = [], []
    for precision in ("mixed", "double"):
        model = nopg.bellman_model(data, bandwidths, GAMMA, top_k=8, solver="bicgstab",
                                     solver_tol="auto", preconditioner=preconditioner,
                                     solver_precision=precision)
        sols.append(model.solution(policy, initial_states))
        solvers.append(model.linear_solver)
    mixed, double = sols
    assert solvers[0].mixed and not solvers[1].mixed
    # The aggregation is built in float32 for mixed solves, the ILU in float64 (applied by casts).
    mixed_dtype = torch.float32 if preconditioner == "aggregation" else torch.float64
    assert solvers[0].ilu_source.values.dtype == mixed_dtype
    assert solvers[1].ilu_source.values.dtype == torch.float64
    q_x, mu_x, _ = nopg.solve_dense(double.P.detach().to_dense(), model.rewards,
                                    double.eps0.detach())
    osc = float(q_x.max() - q_x.min())
    for sol in sols:
        assert sol.q.dtype == torch.float64
        assert float((sol.q - q_x).abs().max()) / osc <= sol.info_q.error_bound * (1 + 1e-6)
        assert float((sol.mu - mu_x).abs().sum() / mu_x.sum()) <= sol.info_mu.error_bound * (1 + 1e-6)
    bound = mixed.info_q.error_bound + double.info_q.error_bound
    assert abs(mixed.J - double.J) <= bound * osc


def test_mixed_precision_applies_to_auto_tolerances_only():
    assert BellmanSolver(10, "bicgstab", "auto", 100, 0, "ilu", GAMMA).mixed
    assert not BellmanSolver(10, "bicgstab", 1e-10, 100, 0, "ilu", GAMMA).mixed
    assert not BellmanSolver(10, "bicgstab", "auto", 100, 0, "ilu", GAMMA, precision="double").mixed
    with pytest.raises(ValueError, match="precision"):
        BellmanSolver(10, "bicgstab", "auto", 100, 0, "ilu", GAMMA, precision="single")


@pytest.mark.parametrize("value", ["single", "float32", None, 1])
def test_invalid_solver_precision_rejected(value):
    with pytest.raises(ValueError, match="solver_precision"):
        nopg.NOPGConfig(model=nopg.ModelConfig(solver_precision=value))
