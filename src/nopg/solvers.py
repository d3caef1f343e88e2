"""Linear solvers for the nonparametric Bellman system ``(I - P) x = b`` and its transpose.

``P`` is row-sub-stochastic (every row sums to ``gamma_i <= gamma < 1``), so ``Lambda = I - P`` is
strictly diagonally dominant and invertible (paper, Theorem 1). Two solvers are offered:

- :func:`solve_dense`: LU factorisation of the dense ``Lambda`` (one factorisation serves both the
  system and its transpose); exact to round-off, ``O(n^3)``, for small ``n``.
- :func:`bicgstab`: the stabilised bi-conjugate gradient method (van der Vorst, 1992) on a
  matrix-vector closure, with a warm start, a relative tolerance and an iteration cap. It is written
  here in torch because neither torch nor a maintained torch library offers a non-symmetric Krylov
  solver that runs on the same device as the data (``scipy.sparse.linalg.bicgstab`` is CPU/NumPy
  only).
- :func:`solve_bellman_auto`: both Bellman systems by BiCGSTAB, each stopped as soon as its
  residual proves the error the policy gradient can tolerate (``solver_tol="auto"``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import scipy.sparse
import scipy.sparse.linalg
import torch
from pyamg.relaxation.relaxation import gauss_seidel

from .defaults import ILU_DROP_TOL
from .validation import check_positive_int, warn_user

logger = logging.getLogger(__name__)

MatVec = Callable[[torch.Tensor], torch.Tensor]


ACCEPT_FACTOR = 1e3
"""A BiCGSTAB solve counts as converged (and does not warn) while its true relative residual is
at most ``ACCEPT_FACTOR * max(tol, eps)`` (``eps``: machine epsilon of the dtype); see
:func:`bicgstab`."""


class SolverWarning(RuntimeWarning):
    """The iterative solver stopped well short of its tolerance (see :func:`bicgstab`)."""


@dataclass(frozen=True)
class SolveInfo:
    """Outcome of one linear solve.

    Attributes
    ----------
    method : str
        ``"dense"`` or ``"bicgstab"``.
    iterations : int
        Krylov iterations (0 for the dense solver).
    residual : float
        Relative residual ``||b - A x|| / ||b||`` of the returned solution.
    converged : bool
        Whether the solve is accurate enough: for BiCGSTAB ``stop_residual <= 1000 * max(tol,
        eps)`` (:data:`ACCEPT_FACTOR`, see :func:`bicgstab`); for the dense solver whether the
        solution is finite.
    norm : {"2", "inf", "1"}
        The norm of BiCGSTAB's stopping test.
    stop_residual : float
        Relative residual ``||b - A x||_norm / ||b||_norm`` in that norm (``residual`` for
        ``norm="2"``; NaN for the dense solver).
    error_bound : float
        Set under ``solver_tol="auto"``: the bound on the solution's relative error that the
        residual proves (NaN otherwise); see :func:`solve_bellman_auto`.
    """

    method: str
    iterations: int
    residual: float
    converged: bool
    norm: str = "2"
    stop_residual: float = float("nan")
    error_bound: float = float("nan")


def _relative_residual(matvec: MatVec, x: torch.Tensor, b: torch.Tensor) -> float:
    bnorm = torch.linalg.vector_norm(b).item()
    rnorm = torch.linalg.vector_norm(b - matvec(x)).item()
    return rnorm / bnorm if bnorm > 0 else rnorm


def solve_dense(
    P: torch.Tensor, b: torch.Tensor, c: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor | None, SolveInfo]:
    """Solve ``(I - P) x = b`` and, optionally, ``(I - P)^T y = c`` with one LU factorisation.

    Parameters
    ----------
    P : tensor of shape (n, n)
        Sub-stochastic matrix.
    b : tensor of shape (n,)
        Right-hand side of the forward system.
    c : tensor of shape (n,), optional
        Right-hand side of the transposed system.

    Returns
    -------
    x, y, info
        ``y`` is ``None`` when ``c`` is ``None``; ``info.residual`` is the larger of both.
    """
    n = P.shape[0]
    lam = torch.eye(n, dtype=P.dtype, device=P.device) - P
    lu, piv = torch.linalg.lu_factor(lam)
    x = torch.linalg.lu_solve(lu, piv, b.unsqueeze(-1)).squeeze(-1)
    residual = _relative_residual(lambda v: lam @ v, x, b)
    y = None
    if c is not None:
        y = torch.linalg.lu_solve(lu, piv, c.unsqueeze(-1), adjoint=True).squeeze(-1)
        residual = max(residual, _relative_residual(lambda v: lam.T @ v, y, c))
    ok = bool(torch.isfinite(x).all()) and (y is None or bool(torch.isfinite(y).all()))
    return x, y, SolveInfo("dense", 0, residual, ok)


def _bicgstab_iterations(matvec: Callable[[Any], Any], b: Any, x: Any, threshold: float,
                         max_iter: int, dot: Callable[[Any, Any], float],
                         norm: Callable[[Any], float], breakdown: float,
                         precond: Callable[[Any], Any] | None,
                         stop_norm: Callable[[Any], float] | None = None) -> tuple[Any, int]:
    """Right-preconditioned BiCGSTAB recurrences on NumPy arrays or torch tensors.

    Stops when ``stop_norm(r) <= threshold`` (``stop_norm`` defaults to the 2-norm ``norm``).
    Restarts from the current iterate with a fresh shadow residual on a breakdown: when
    ``|(r_hat, r)| < breakdown ||r_hat|| ||r||`` (``breakdown``: the dtype's machine epsilon), e.g.
    when the right-hand side is a left eigenvector of ``A`` (``mu``'s system with a uniform
    ``eps0``: ``P`` has constant row sums), which leaves the shadow residual orthogonal to every
    later residual.
    """
    apply = precond if precond is not None else (lambda u: u)
    two_norm = norm
    same = stop_norm is None or stop_norm is norm
    if not same:
        def norm(u: Any) -> float:  # the stopping tests below use the requested norm
            return float(stop_norm(u))
    r = b - matvec(x)
    rnorm = float(norm(r))
    it = 0
    while rnorm > threshold and it < max_iter:
        # (Re)start: shadow residual, search directions.
        r_hat = r.copy() if isinstance(r, np.ndarray) else r.clone()
        rho = alpha = omega = 1.0
        v = b * 0.0
        p = b * 0.0
        while rnorm > threshold and it < max_iter:
            it += 1
            rho_new = float(dot(r_hat, r))
            if abs(rho_new) < breakdown * float(two_norm(r_hat)) * (rnorm if same else float(two_norm(r))):
                break  # breakdown: restart
            beta = (rho_new / rho) * (alpha / omega)
            rho = rho_new
            p = r + beta * (p - omega * v)
            p_hat = apply(p)
            v = matvec(p_hat)
            denom = float(dot(r_hat, v))
            if denom == 0.0:
                break
            alpha = rho / denom
            s = r - alpha * v
            snorm = float(norm(s))
            if snorm <= threshold:
                x = x + alpha * p_hat
                r = s
                rnorm = snorm
                break
            s_hat = apply(s)
            t = matvec(s_hat)
            tt = float(dot(t, t))
            if tt == 0.0:
                x = x + alpha * p_hat
                r = s
                rnorm = snorm
                break
            omega = float(dot(t, s)) / tt
            x = x + alpha * p_hat + omega * s_hat
            r = s - omega * t
            rnorm = float(norm(r))
            if omega == 0.0:
                break
        if not (rnorm == rnorm):  # NaN guard
            raise FloatingPointError("BiCGSTAB produced NaN; the system or its inputs are invalid")
    return x, it


def _numpy_iterations(matvec: MatVec, b: torch.Tensor, x: torch.Tensor, threshold: float,
                      max_iter: int, precond: MatVec | None, order: float) -> tuple[torch.Tensor, int]:
    """:func:`_bicgstab_iterations` on NumPy views of CPU tensors (no copies): NumPy's
    per-operation overhead is several times below torch's, which dominates at n <= 10^5."""
    def np_matvec(v: np.ndarray) -> np.ndarray:
        return matvec(torch.from_numpy(v)).numpy()

    np_precond = None
    if precond is not None:
        def np_precond(v: np.ndarray) -> np.ndarray:
            return precond(torch.from_numpy(v)).numpy()

    np_stop = None if order == 2 else (
        (lambda u: np.abs(u).max()) if order == float("inf") else (lambda u: np.abs(u).sum()))
    x_np, it = _bicgstab_iterations(np_matvec, b.numpy(), x.numpy(), threshold, max_iter,
                                    np.dot, np.linalg.norm, float(np.finfo(b.numpy().dtype).eps),
                                    np_precond, np_stop)
    return torch.from_numpy(x_np), it


def bicgstab(
    matvec: MatVec,
    b: torch.Tensor,
    x0: torch.Tensor | None = None,
    *,
    tol: float = 1e-10,
    max_iter: int = 1000,
    warn: bool = True,
    precond: MatVec | None = None,
    norm: str = "2",
) -> tuple[torch.Tensor, SolveInfo]:
    """Solve ``A x = b`` for a non-symmetric ``A`` given only ``matvec(v) = A v``.

    Parameters
    ----------
    matvec : callable
        ``v -> A v`` on tensors of shape (n,).
    b : tensor of shape (n,)
        Right-hand side; its dtype and device are used throughout.
    x0 : tensor of shape (n,), optional
        Warm start (e.g. the solution of the previous policy update). Zero when omitted.
    tol : float
        Stop when ``||b - A x|| <= tol * ||b||`` (in the norm ``norm``).
    max_iter : int
        Iteration cap.
    warn : bool
        Issue a :class:`SolverWarning` when the solve is not accepted (see Notes).
    precond : callable, optional
        ``v -> M^{-1} v`` for a preconditioner ``M ~ A`` (applied on the right, so the reported
        residual is the true one), e.g. :func:`ilu_preconditioner`.
    norm : {"2", "inf", "1"}
        Norm of the stopping test (``info.stop_residual``); ``info.residual`` is always the
        2-norm one.

    Returns
    -------
    x : tensor of shape (n,)
    info : SolveInfo

    Notes
    -----
    On a breakdown (``rho`` or ``omega`` numerically zero) the method restarts from the current
    iterate with a fresh shadow residual instead of returning NaN.

    When to warn: the iteration stops on its *recurrence* residual, while ``info.residual`` is the
    *true* one, recomputed as ``||b - A x|| / ||b||``. In floating point the two drift apart (and a
    matrix-vector product with rounding noise, e.g. from GPU atomics, adds to the gap), so a solve
    that met ``tol`` by its own test can report a true residual a few times above ``tol``. Such a
    solve is converged for any practical purpose. The rule: the solve is accepted
    (``info.converged``) when the true residual is at most ``ACCEPT_FACTOR * max(tol, eps)`` =
    ``1000 * max(tol, eps)`` (at most three of the requested digits lost; ``eps`` is the dtype's
    machine epsilon, below which no solve can go), whether it stopped on ``tol``, on a breakdown
    or on ``max_iter``; otherwise it is not converged and a :class:`SolverWarning` says why it
    stopped.
    """
    if not tol > 0:
        raise ValueError(f"The 'tol' parameter must be positive. Got {tol!r} instead.")
    if max_iter < 1:
        raise ValueError(f"The 'max_iter' parameter must be >= 1. Got {max_iter!r} instead.")
    if norm not in _NORMS:
        raise ValueError(f"The 'norm' parameter must be one of {tuple(_NORMS)}. Got {norm!r} instead.")
    order = _NORMS[norm]
    x = torch.zeros_like(b) if x0 is None else x0.detach().clone().to(b)
    bnorm = torch.linalg.vector_norm(b).item()
    if bnorm == 0.0:
        return torch.zeros_like(b), SolveInfo("bicgstab", 0, 0.0, True, norm, 0.0)
    b_stop = bnorm if order == 2 else torch.linalg.vector_norm(b, ord=order).item()
    if b.device.type == "cpu":
        x, it = _numpy_iterations(matvec, b, x, tol * b_stop, max_iter, precond, order)
    else:
        torch_stop = None if order == 2 else (lambda u: torch.linalg.vector_norm(u, ord=order).item())
        x, it = _bicgstab_iterations(
            matvec, b, x, tol * b_stop, max_iter, lambda u, v: torch.dot(u, v).item(),
            lambda u: torch.linalg.vector_norm(u).item(), torch.finfo(b.dtype).eps, precond,
            torch_stop)
    # Report the true residual, not the recurrence's.
    true_r = b - matvec(x)
    residual = torch.linalg.vector_norm(true_r).item() / bnorm
    stop_residual = residual if order == 2 else torch.linalg.vector_norm(true_r, ord=order).item() / b_stop
    eps = float(torch.finfo(b.dtype).eps)
    bound = ACCEPT_FACTOR * max(tol, eps)
    converged = stop_residual <= bound
    if not converged and warn:
        why = (f"hit max_iter = {max_iter}" if it >= max_iter
               else "its recurrence met tol but the true residual did not (breakdown or drift)")
        base = "tol" if tol >= eps else f"eps of {b.dtype}"
        where = "" if order == 2 else f" ({norm}-norm)"
        warn_user(
            f"BiCGSTAB stopped after {it} iterations ({why}) with relative residual{where} "
            f"{stop_residual:.3e} > {ACCEPT_FACTOR:g} x {base} = {bound:.1e} (tol {tol:.1e}; residuals "
            f"up to {ACCEPT_FACTOR:g} x {base} are accepted as rounding drift); raise max_iter or "
            "loosen tol",
            SolverWarning,
        )
    return x, SolveInfo("bicgstab", it, residual, converged, norm, stop_residual)


_NORMS = {"2": 2, "inf": float("inf"), "1": 1}


def ilu_preconditioner(P: scipy.sparse.csr_matrix, drop_tol: float = ILU_DROP_TOL,
                       fill_factor: float = 10.0) -> tuple[MatVec, MatVec] | None:
    """Incomplete-LU preconditioners of ``I - P`` and of its transpose (CPU, SciPy's SuperLU).

    On sparse NOPG systems (n = 10^4, k = 10, gamma = 0.99) this cut BiCGSTAB from about 100
    iterations to a few, for a factorisation costing about as much as 50 unpreconditioned
    iterations; a factorisation stays a good preconditioner for later, slightly different ``P``,
    so it is rebuilt only when the iteration count climbs. The drop tolerance
    (:data:`nopg.defaults.ILU_DROP_TOL`) trades the factor's size, hence the cost of every
    application, against iterations: SuperLU's triangular solves cost several products with
    ``P`` each, so a sparser factor with a few more iterations is faster overall.

    Returns
    -------
    (apply, apply_transpose) or None
        ``v -> (LU)^{-1} v`` and ``v -> (LU)^{-T} v`` on CPU tensors; ``None`` (with a log
        message) if SuperLU fails, in which case the solve runs unpreconditioned.
    """
    n = P.shape[0]
    lam = (scipy.sparse.identity(n, dtype=P.dtype, format="csr") - P).tocsc()
    try:
        ilu = scipy.sparse.linalg.spilu(lam, drop_tol=drop_tol, fill_factor=fill_factor)
    except RuntimeError as err:  # e.g. a singular factor
        logger.warning("ILU factorisation failed (%s); solving without a preconditioner", err)
        return None

    def apply(v: torch.Tensor) -> torch.Tensor:
        return torch.from_numpy(ilu.solve(v.numpy()))

    def apply_transpose(v: torch.Tensor) -> torch.Tensor:
        return torch.from_numpy(ilu.solve(v.numpy(), "T"))

    return apply, apply_transpose


SMOOTHERS = ("gauss-seidel", "forward-gauss-seidel", "richardson")
"""Smoothers of :func:`aggregation_preconditioner`."""


def aggregation_preconditioner(P: scipy.sparse.csr_matrix, aggregates: np.ndarray,
                               smoothing_steps: int = 1, smoother: str = "gauss-seidel"
                               ) -> tuple[MatVec, MatVec] | None:
    """Two-level aggregation preconditioners of ``A = I - P`` and of its transpose (CPU).

    The samples are grouped into aggregates (``aggregates[i]`` is sample ``i``'s group, from
    ``0`` to ``m - 1``); ``R`` sums over a group and ``R^T`` copies a group's value to its
    members, so ``A_c = R A R^T`` (m, m) is the chain seen at the groups' scale. One application
    is a coarse solve followed by ``smoothing_steps`` smoothing steps:

        x = R^T A_c^{-1} R v,   then per step
        x <- x + (v - A x)                                   (``"richardson"``),
        x <- x + L^{-1} (v - A x)                            (``"forward-gauss-seidel"``), or
        x <- x + L^{-1} (v - A x),  x <- x + U^{-1} (v - A x)  (``"gauss-seidel"``),

    where ``L`` and ``U`` are the lower and upper triangles of ``A`` (diagonal included) with the
    samples ordered by aggregate: a Gauss-Seidel sweep forward, then (symmetric, the default)
    backward. The sweeps are PyAMG's compiled Gauss-Seidel relaxation, one pass over the rows of
    ``A`` in CSR form each (``docs/scale.md`` compares it with sweeps written as triangular
    solves). The transpose uses ``A^T`` (kept in CSR form) and ``A_c^T``: the same
    forward-then-backward sweeps on ``A^T``, and one sparse LU of ``A_c`` serves both.

    The coarse solve removes the slowly mixing error modes, which carry the ``1 / (1 - gamma)``
    conditioning of ``A`` and are smooth over groups of nearby samples; the smoothing damps those
    that ``P`` mixes quickly. A Richardson step is one value-iteration sweep ``x <- v + P x``
    (one product with ``A``); a Gauss-Seidel sweep uses each updated value at once, which
    carries values along the chain's transitions much further per sweep, for one pass over
    ``A``. With every sample its own group it is ``A^{-1}`` exactly,
    whatever the smoother.

    Returns
    -------
    (apply, apply_transpose) or None
        ``v -> M^{-1} v`` and ``v -> M^{-T} v`` on CPU tensors; ``None`` (with a log message)
        if a factorisation fails, in which case the solve runs unpreconditioned.
    """
    n = P.shape[0]
    check_positive_int("smoothing_steps", smoothing_steps)
    if smoother not in SMOOTHERS:
        raise ValueError(f"smoother must be one of {SMOOTHERS}. Got {smoother!r}.")
    groups = np.asarray(aggregates, dtype=np.int64)
    if groups.shape != (n,) or n == 0 or groups.min() < 0:
        raise ValueError(f"aggregates must be {n} non-negative group indices. Got shape {groups.shape}.")
    m = int(groups.max()) + 1
    # Work in the aggregates' order: groups become contiguous slices (restriction by reduceat,
    # prolongation by repeat) and the triangles of A are those of the sweep order.
    order = np.argsort(groups, kind="stable")
    inverse = np.empty(n, dtype=np.int64)
    inverse[order] = np.arange(n)
    in_order = bool((order == np.arange(n)).all())        # sorted already (BellmanSolver)
    sizes = np.bincount(groups, minlength=m)
    if (sizes == 0).any():
        raise ValueError("aggregates must use every group index from 0 to their maximum")
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    A = (scipy.sparse.identity(n, dtype=P.dtype, format="csr") - P).tocsr()
    if not in_order:
        A = A[order][:, order].tocsr()
    coarse_groups = np.repeat(np.arange(m), sizes)
    R = scipy.sparse.csr_matrix((np.ones(n, dtype=A.dtype), (coarse_groups, np.arange(n))),
                                shape=(m, n))
    try:
        lu = scipy.sparse.linalg.splu((R @ A @ R.T).tocsc())
    except RuntimeError as err:  # e.g. a singular coarse matrix
        logger.warning("aggregation preconditioner failed (%s); solving without one", err)
        return None
    A.sort_indices()
    AT = A.T.tocsr()
    AT.sort_indices()
    sweep = "forward" if smoother == "forward-gauss-seidel" else "symmetric"

    def cycle(trans: str) -> MatVec:
        op = A if trans == "N" else AT

        def apply(v: torch.Tensor) -> torch.Tensor:
            b = np.ascontiguousarray(v.numpy() if in_order else v.numpy()[order])
            x = np.repeat(lu.solve(np.add.reduceat(b, starts), trans), sizes)
            for _ in range(smoothing_steps):
                if smoother == "richardson":
                    x += b - op @ x
                else:
                    gauss_seidel(op, x, b, iterations=1, sweep=sweep)
            return torch.from_numpy(x if in_order else x[inverse])
        return apply

    return cycle("N"), cycle("T")


# ---------------------------------------------------------------------------- solver_tol="auto"
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
    order = _NORMS[norm]
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
