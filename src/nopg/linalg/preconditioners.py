"""Preconditioners of BiCGSTAB on ``I - P`` (CPU): incomplete LU (:func:`ilu_preconditioner`,
SciPy's SuperLU) and two-level aggregation with Gauss-Seidel or Richardson smoothing
(:func:`aggregation_preconditioner`, PyAMG's relaxation). Each returns the preconditioners of the
system and of its transpose, or ``None`` where it cannot be built."""

from __future__ import annotations

import logging

import numpy as np
import scipy.sparse
import scipy.sparse.linalg
import torch
from pyamg.relaxation.relaxation import gauss_seidel

from ..validation import check_positive_int
from .krylov import MatVec

__all__ = ["SMOOTHERS", "aggregation_preconditioner", "ilu_preconditioner"]

logger = logging.getLogger("nopg.linalg.solvers")    # the records keep the name of the module they left


ILU_DROP_TOL = 3e-3
"""Drop tolerance of the incomplete LU (SuperLU's ``spilu``)."""


def ilu_preconditioner(P: scipy.sparse.csr_matrix, drop_tol: float = ILU_DROP_TOL,
                       fill_factor: float = 10.0) -> tuple[MatVec, MatVec] | None:
    """Incomplete-LU preconditioners of ``I - P`` and of its transpose (CPU, SciPy's SuperLU).

    On sparse NOPG systems (n = 10^4, k = 10, gamma = 0.99) this cut BiCGSTAB from about 100
    iterations to a few, for a factorisation costing about as much as 50 unpreconditioned
    iterations; a factorisation stays a good preconditioner for later, slightly different ``P``,
    so it is rebuilt only when the iteration count climbs. The drop tolerance
    (:data:`ILU_DROP_TOL`) trades the factor's size, hence the cost of every
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
