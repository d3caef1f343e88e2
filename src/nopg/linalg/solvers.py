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

The code lives in :mod:`nopg.linalg.krylov` (the dense and BiCGSTAB solves),
:mod:`nopg.linalg.preconditioners` (ILU and aggregation) and :mod:`nopg.linalg.auto_solve`
(``solver_tol="auto"``); this module imports their public names, so that
``from nopg.linalg.solvers import ...`` reaches them all.
"""

from .auto_solve import (
    AUTO,
    AUTO_ERROR,
    AUTO_ERROR_DRAWN,
    AUTO_TOL_FLOOR,
    LOW_TOL_FLOOR,
    SOLVER_PRECISIONS,
    LowPrecision,
    check_solver_error,
    check_solver_tol,
    solve_bellman_auto,
)
from .krylov import ACCEPT_FACTOR, NORMS, MatVec, SolveInfo, SolverWarning, bicgstab, solve_dense
from .preconditioners import SMOOTHERS, aggregation_preconditioner, ilu_preconditioner

__all__ = [
    "ACCEPT_FACTOR", "AUTO", "AUTO_ERROR", "AUTO_ERROR_DRAWN", "AUTO_TOL_FLOOR", "LOW_TOL_FLOOR",
    "NORMS", "SMOOTHERS", "SOLVER_PRECISIONS", "LowPrecision", "MatVec", "SolveInfo",
    "SolverWarning", "aggregation_preconditioner", "bicgstab", "check_solver_error",
    "check_solver_tol", "ilu_preconditioner", "solve_bellman_auto", "solve_dense",
]
