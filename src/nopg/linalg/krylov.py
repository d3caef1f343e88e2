"""The two solves of the nonparametric Bellman system ``(I - P) x = b`` (and its transpose):
dense LU (:func:`solve_dense`) and BiCGSTAB (:func:`bicgstab`), with their outcome
(:class:`SolveInfo`) and warning (:class:`SolverWarning`).

``P`` is row-sub-stochastic (every row sums to ``gamma_i <= gamma < 1``), so ``Lambda = I - P`` is
strictly diagonally dominant and invertible (paper, Theorem 1).

- :func:`solve_dense`: LU factorisation of the dense ``Lambda`` (one factorisation serves both the
  system and its transpose); exact to round-off, ``O(n^3)``, for small ``n``.
- :func:`bicgstab`: the stabilised bi-conjugate gradient method (van der Vorst, 1992) on a
  matrix-vector closure, with a warm start, a relative tolerance and an iteration cap. It is written
  here in torch because neither torch nor a maintained torch library offers a non-symmetric Krylov
  solver that runs on the same device as the data (``scipy.sparse.linalg.bicgstab`` is CPU/NumPy
  only).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ..validation import warn_user

MatVec = Callable[[torch.Tensor], torch.Tensor]
"""A linear operator as a function ``v -> A v`` on tensors of shape (n,)."""

__all__ = ["ACCEPT_FACTOR", "NORMS", "MatVec", "SolveInfo", "SolverWarning", "bicgstab",
           "solve_dense"]


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
    if norm not in NORMS:
        raise ValueError(f"The 'norm' parameter must be one of {tuple(NORMS)}. Got {norm!r} instead.")
    order = NORMS[norm]
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


NORMS = {"2": 2, "inf": float("inf"), "1": 1}
"""The norms of BiCGSTAB's stopping test (``norm``) and their ``ord`` in ``torch.linalg``."""
