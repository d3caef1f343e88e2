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
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse
import scipy.sparse.linalg
import torch

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
        Whether the solve is accurate enough: for BiCGSTAB ``residual <= 1000 * max(tol, eps)``
        (:data:`ACCEPT_FACTOR`, see :func:`bicgstab`); for the dense solver whether the solution
        is finite.
    """

    method: str
    iterations: int
    residual: float
    converged: bool


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
                         norm: Callable[[Any], float], tiny: float,
                         precond: Callable[[Any], Any] | None) -> tuple[Any, int]:
    """Right-preconditioned BiCGSTAB recurrences on NumPy arrays or torch tensors.

    Restarts from the current iterate with a fresh shadow residual on a breakdown.
    """
    apply = precond if precond is not None else (lambda u: u)
    r = b - matvec(x)
    rnorm = float(norm(r))
    tiny = tiny ** 0.5
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
            if abs(rho_new) < tiny * float(norm(r_hat)) * rnorm:
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


def bicgstab(
    matvec: MatVec,
    b: torch.Tensor,
    x0: torch.Tensor | None = None,
    *,
    tol: float = 1e-10,
    max_iter: int = 1000,
    warn: bool = True,
    precond: MatVec | None = None,
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
        Stop when ``||b - A x|| <= tol * ||b||``.
    max_iter : int
        Iteration cap.
    warn : bool
        Issue a :class:`SolverWarning` when the solve is not accepted (see Notes).
    precond : callable, optional
        ``v -> M^{-1} v`` for a preconditioner ``M ~ A`` (applied on the right, so the reported
        residual is the true one), e.g. :func:`ilu_preconditioner`.

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
    if tol <= 0:
        raise ValueError(f"The 'tol' parameter must be positive. Got {tol!r} instead.")
    if max_iter < 1:
        raise ValueError(f"The 'max_iter' parameter must be >= 1. Got {max_iter!r} instead.")
    x = torch.zeros_like(b) if x0 is None else x0.detach().clone().to(b)
    bnorm = torch.linalg.vector_norm(b).item()
    if bnorm == 0.0:
        return torch.zeros_like(b), SolveInfo("bicgstab", 0, 0.0, True)
    if b.device.type == "cpu":
        # The same recurrences on NumPy views of the tensors (no copies): NumPy's per-operation
        # overhead is several times below torch's, which dominates at n <= 10^5 on a CPU.
        def np_matvec(v: np.ndarray) -> np.ndarray:
            return matvec(torch.from_numpy(v)).numpy()

        np_precond = None
        if precond is not None:
            def np_precond(v: np.ndarray) -> np.ndarray:
                return precond(torch.from_numpy(v)).numpy()

        x_np, it = _bicgstab_iterations(np_matvec, b.numpy(), x.numpy(), tol * bnorm, max_iter,
                                        np.dot, np.linalg.norm, float(np.finfo(b.numpy().dtype).tiny),
                                        np_precond)
        x = torch.from_numpy(x_np)
    else:
        x, it = _bicgstab_iterations(
            matvec, b, x, tol * bnorm, max_iter, lambda u, v: torch.dot(u, v).item(),
            lambda u: torch.linalg.vector_norm(u).item(), torch.finfo(b.dtype).tiny, precond)
    # Report the true residual, not the recurrence's.
    residual = _relative_residual(matvec, x, b)
    eps = float(torch.finfo(b.dtype).eps)
    bound = ACCEPT_FACTOR * max(tol, eps)
    converged = residual <= bound
    if not converged and warn:
        why = (f"hit max_iter = {max_iter}" if it >= max_iter
               else "its recurrence met tol but the true residual did not (breakdown or drift)")
        base = "tol" if tol >= eps else f"eps of {b.dtype}"
        warnings.warn(
            f"BiCGSTAB stopped after {it} iterations ({why}) with relative residual "
            f"{residual:.3e} > {ACCEPT_FACTOR:g} x {base} = {bound:.1e} (tol {tol:.1e}; residuals "
            f"up to {ACCEPT_FACTOR:g} x {base} are accepted as rounding drift); raise max_iter or "
            "loosen tol",
            SolverWarning,
            stacklevel=2,
        )
    return x, SolveInfo("bicgstab", it, residual, converged)


def ilu_preconditioner(P: scipy.sparse.csr_matrix, drop_tol: float = 1e-4, fill_factor: float = 10.0
                       ) -> tuple[MatVec, MatVec] | None:
    """Incomplete-LU preconditioners of ``I - P`` and of its transpose (CPU, SciPy's SuperLU).

    On sparse NOPG systems (n = 10^4, k = 10, gamma = 0.99) this cut BiCGSTAB from about 100
    iterations to 3, for a factorisation costing about as much as 50 unpreconditioned iterations;
    a factorisation stays a good preconditioner for later, slightly different ``P`` (8 iterations
    after a clear policy change), so it is rebuilt only when the iteration count climbs.

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
