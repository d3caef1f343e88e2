"""The ``solver_tol="auto"`` solve: both Bellman systems by BiCGSTAB, each stopped as soon as its
residual proves the error the policy gradient can tolerate (:func:`solve_bellman_auto`), in
float64 or by mixed-precision iterative refinement (:class:`LowPrecision`), and the checks of the
``solver_tol`` and ``solver_error`` settings."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch

from ..validation import warn_user
from .krylov import ACCEPT_FACTOR, NORMS, MatVec, SolveInfo, SolverWarning, bicgstab

__all__ = ["AUTO", "AUTO_ERROR", "AUTO_ERROR_DRAWN", "AUTO_TOL_FLOOR", "LOW_TOL_FLOOR",
           "SOLVER_PRECISIONS", "LowPrecision", "check_solver_error", "check_solver_tol",
           "solve_bellman_auto"]


AUTO = "auto"
AUTO_ERROR = 1e-3
"""Error target of ``solver_tol="auto"`` (see :func:`solve_bellman_auto`)."""
AUTO_ERROR_DRAWN = 1e-2
"""Error target of ``solver_tol="auto"`` when the next states are drawn afresh at every update
(``n_mc_next``). The draws make ``P`` itself a random estimate, new at every update, whose noise
in ``q``, ``mu`` and the gradient is orders of magnitude above a (still proven) solve error of
this size; ``benchmarks/bench_draw_noise.py`` measures both (``docs/scale.md``)."""
AUTO_TOL_FLOOR = 1e-10
"""``solver_tol="auto"`` never asks for a relative residual below this (the former default)."""
_AUTO_PASSES = 3
LOW_TOL_FLOOR = 1e-5
"""Mixed precision: no low-precision (float32) correction solve is asked for a relative residual
below this; float32 BiCGSTAB stalls near 1e-6, and further digits come from further passes."""
_MIXED_PASSES = 6
SOLVER_PRECISIONS = ("mixed", "double")
"""``solver_precision`` values: float32 iterations with float64 residuals (:class:`LowPrecision`),
or everything in float64."""


@dataclass(frozen=True)
class LowPrecision:
    """The operators of :func:`solve_bellman_auto` in a lower precision (mixed-precision solves).

    The Krylov iterations then run on these (``v -> P v``, ``v -> P^T v`` and the two
    preconditioners, all on tensors of ``dtype``), while every residual that proves the error
    bound is recomputed in the right-hand side's precision: iterative refinement, each pass
    solving ``(I - P) d = b - (I - P) x`` in ``dtype`` and adding ``d`` to ``x``.
    """

    matvec: MatVec
    rmatvec: MatVec
    precond: MatVec | None = None
    precond_transpose: MatVec | None = None
    dtype: torch.dtype = torch.float32


def _real(value: Any) -> bool:
    """Whether ``value`` is a real number (a Python or NumPy int or float, not a bool)."""
    return isinstance(value, (int, float, np.integer, np.floating)) and \
        not isinstance(value, (bool, np.bool_))


def check_solver_error(value: Any) -> bool:
    """Whether ``value`` is a valid ``solver_error``: ``None`` or a float in (0, 1)."""
    return value is None or (_real(value) and 0 < float(value) < 1)


def check_solver_tol(value: Any) -> bool:
    """Whether ``value`` is a valid ``solver_tol``: ``"auto"`` or a positive, finite float."""
    if isinstance(value, str):
        return value == AUTO
    return _real(value) and 0 < float(value) < float("inf")


def _spread(x: torch.Tensor, extra: float | None) -> float:
    hi, lo = float(x.max()), float(x.min())
    if extra is not None:
        hi, lo = max(hi, extra), min(lo, extra)
    return hi - lo


def solve_bellman_auto(
    matvec: MatVec,
    rmatvec: MatVec,
    r: torch.Tensor,
    eps0: torch.Tensor,
    gamma: float,
    warm_start: tuple[torch.Tensor, torch.Tensor] | None = None,
    *,
    error: float = AUTO_ERROR,
    max_iter: int = 1000,
    precond: MatVec | None = None,
    precond_transpose: MatVec | None = None,
    extra_value: float | None = None,
    warn: bool = True,
    low: LowPrecision | None = None,
) -> tuple[torch.Tensor, torch.Tensor, SolveInfo, SolveInfo]:
    """Solve ``(I - P) q = r`` and ``(I - P)^T mu = eps0`` as accurately as the gradient needs.

    ``P`` is non-negative with row sums at most ``gamma < 1`` and ``eps0 >= 0``, so
    ``||(I - P)^{-1}||_inf = ||(I - P)^{-T}||_1 <= 1 / (1 - gamma)``. A residual therefore
    bounds the solutions' errors in the norms the policy gradient sees:

    - ``q`` enters ``J_hat`` and the gradient only through differences ``q_j - q_i`` within a
      row (the rows of ``dP/dtheta`` and ``d eps0/dtheta`` sum to zero), so its error is measured
      in the max-norm against its spread ``osc(q) = max q - min q`` (taken with ``extra_value``,
      the absorbing value of the support-aware model, whose rows do not sum to a constant):
      ``||q - q*||_inf / osc(q) <= ||r - (I - P) q||_inf / ((1 - gamma) osc(q))``;
    - ``mu`` (a discounted visitation, a measure) in the l1-norm against its mass:
      ``||mu - mu*||_1 / ||mu||_1 <= ||eps0 - (I - P)^T mu||_1 / ((1 - gamma) ||mu||_1)``.

    Both right-hand sides are the ``error_bound`` of the returned infos; BiCGSTAB stops (in the
    max- and l1-norm respectively) as soon as they are at most ``error`` (default
    :data:`AUTO_ERROR`), never asking for a relative residual below :data:`AUTO_TOL_FLOOR`. The
    stopping thresholds are set from the warm start's spread and mass (or optimistic guesses
    without one) and re-checked against the solution's; a solve that misses its bound continues.

    What that buys: every term of the gradient ``d eps0/dtheta . q + mu^T (dP/dtheta) q`` is
    off by at most ``2 error`` times its size (``error`` for the ``mu`` factor), so each gradient
    component is off by at most ``3 error`` times the sum of the magnitudes of its terms, and
    ``|J_hat - J_hat*| <= error * osc(q)``; predicted values ``V(s) = eps_pi(s) . q`` are off by
    at most ``error * osc(q)``. The bounds hold whatever the cancellation; the errors measured on
    Pendulum-like data (``benchmarks/bench_solver.py``) are 30 to 100 times below them.

    With ``low`` (:class:`LowPrecision`) the iterations run in its precision and only the
    residuals are computed in that of ``r`` (iterative refinement); the bound is proven the same
    way, from the residual in ``r``'s precision, so it holds as before.

    Returns
    -------
    q, mu, info_q, info_mu
        ``info.iterations`` counts all passes; ``info.error_bound`` is the proven bound.
    """
    if not 0 < error < 1:
        raise ValueError(f"The 'error' parameter must be in (0, 1). Got {error!r} instead.")
    one_minus = 1.0 - float(gamma)
    q0, mu0 = warm_start if warm_start is not None else (None, None)

    # q: max-norm residual against (1 - gamma) osc(q).
    r_inf = float(r.abs().max()) if r.numel() else 0.0
    if q0 is not None:
        scale_q = _spread(q0, extra_value)
    else:  # optimistic guess; re-checked below
        scale_q = _spread(r, extra_value) / max(one_minus, 1e-300)
    inner_q = inner_mu = None
    if low is not None:
        inner_q = (lambda v: v - low.matvec(v), low.precond, low.dtype)
        inner_mu = (lambda v: v - low.rmatvec(v), low.precond_transpose, low.dtype)
    q, info_q, floor_q = _auto_pass(lambda v: v - matvec(v), r, q0, r_inf, "inf", scale_q, one_minus,
                                    error, max_iter, precond, lambda x: _spread(x, extra_value),
                                    inner_q)
    # mu: l1 residual against (1 - gamma) ||mu||_1.
    e_1 = float(eps0.abs().sum())
    scale_mu = float(mu0.abs().sum()) if mu0 is not None else e_1 / max(one_minus, 1e-300)
    mu, info_mu, floor_mu = _auto_pass(lambda v: v - rmatvec(v), eps0, mu0, e_1, "1", scale_mu,
                                       one_minus, error, max_iter, precond_transpose,
                                       lambda x: float(x.abs().sum()), inner_mu)
    if warn:
        for name, info, floor in (("q", info_q, floor_q), ("mu", info_mu, floor_mu)):
            # At the floor a (near-)constant q has an unbounded relative error, but then the
            # gradient does not depend on it: only a solve that stopped short is reported.
            if info.error_bound > error and not (floor and info.converged):
                warn_user(
                    f"BiCGSTAB ({name}) stopped after {info.iterations} iterations with an error "
                    f"bound of {info.error_bound:.2e} > {error:g} (solver_tol='auto'); raise "
                    "solver_max_iter", SolverWarning)
    return q, mu, info_q, info_mu


def _auto_pass(matvec: MatVec, b: torch.Tensor, x0: torch.Tensor | None, b_norm: float, norm: str,
               scale: float, one_minus: float, error: float, max_iter: int,
               precond: MatVec | None, measure: Callable[[torch.Tensor], float],
               inner: tuple[MatVec, MatVec | None, torch.dtype] | None = None
               ) -> tuple[torch.Tensor, SolveInfo, bool]:
    """BiCGSTAB passes until ``stop_residual * b_norm / (one_minus * measure(x)) <= error``;
    also returns whether the last pass ran at :data:`AUTO_TOL_FLOOR`. ``inner``: ``(matvec,
    precond, dtype)`` of the mixed-precision iterations (:func:`_refined_passes`)."""
    if b_norm == 0.0:
        return torch.zeros_like(b), SolveInfo("bicgstab", 0, 0.0, True, norm, 0.0, 0.0), False
    if inner is not None:
        return _refined_passes(matvec, b, x0, b_norm, norm, scale, one_minus, error, max_iter,
                               measure, inner)
    x, total, info, tol = x0, 0, None, 1.0
    for _ in range(_AUTO_PASSES):
        tol = max(error * one_minus * scale / b_norm, AUTO_TOL_FLOOR)
        x, info = bicgstab(matvec, b, x, tol=tol, max_iter=max(max_iter - total, 1), warn=False,
                           precond=precond, norm=norm)
        total += info.iterations
        scale = measure(x)
        bound = info.stop_residual * b_norm / (one_minus * scale) if scale > 0 else float("inf")
        if bound <= error or tol <= AUTO_TOL_FLOOR or total >= max_iter:
            break
    assert info is not None and x is not None
    return x, replace(info, iterations=total, error_bound=bound), tol <= AUTO_TOL_FLOOR


def _refined_passes(matvec: MatVec, b: torch.Tensor, x0: torch.Tensor | None, b_norm: float,
                    norm: str, scale: float, one_minus: float, error: float, max_iter: int,
                    measure: Callable[[torch.Tensor], float],
                    inner: tuple[MatVec, MatVec | None, torch.dtype]
                    ) -> tuple[torch.Tensor, SolveInfo, bool]:
    """:func:`_auto_pass` by iterative refinement: every pass solves for the correction of the
    current residual with low-precision BiCGSTAB (``inner``) and recomputes the residual, which
    proves the bound, with ``matvec`` in ``b``'s precision."""
    low_matvec, low_precond, low_dtype = inner
    order = NORMS[norm]
    x = torch.zeros_like(b) if x0 is None else x0.detach().clone().to(b)
    res = b - matvec(x)
    res_norm = float(torch.linalg.vector_norm(res, ord=order))
    total, tol, bound = 0, 1.0, float("inf")
    for _ in range(_MIXED_PASSES):
        tol = max(error * one_minus * scale / b_norm, AUTO_TOL_FLOOR)
        if res_norm > tol * b_norm:
            inner_tol = max(tol * b_norm / res_norm, LOW_TOL_FLOOR)
            d, info = bicgstab(low_matvec, res.to(low_dtype), None, tol=inner_tol,
                               max_iter=max(max_iter - total, 1), warn=False, precond=low_precond,
                               norm=norm)
            total += info.iterations
            x = x + d.to(b.dtype)
            res = b - matvec(x)
            res_norm = float(torch.linalg.vector_norm(res, ord=order))
        scale = measure(x)
        bound = res_norm / (one_minus * scale) if scale > 0 else float("inf")
        at_floor = tol <= AUTO_TOL_FLOOR and res_norm <= tol * b_norm
        if bound <= error or at_floor or total >= max_iter:
            break
    stop = res_norm / b_norm
    residual = float(torch.linalg.vector_norm(res)) / max(float(torch.linalg.vector_norm(b)), 1e-300)
    converged = stop <= ACCEPT_FACTOR * max(tol, float(torch.finfo(b.dtype).eps))
    info = SolveInfo("bicgstab", total, residual, converged, norm, stop, bound)
    return x, info, tol <= AUTO_TOL_FLOOR
