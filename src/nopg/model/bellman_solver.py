"""The two linear solves of every update, ``(I - P) q = r`` and ``(I - P)^T mu = eps0``.

:class:`BellmanSolver` picks the method (dense LU up to ``dense_max_n`` samples under
``solver="auto"``, BiCGSTAB above; :mod:`nopg.linalg.solvers`) and keeps what carries over between
updates: the preconditioner of ``I - P`` (an incomplete LU, or the two-level aggregation of
:func:`nopg.linalg.solvers.aggregation_preconditioner` for large data), which is reused while the
policy (and so ``P``) moves slowly. A dense ``P`` solved by BiCGSTAB (above ``dense_max_n``) is
preconditioned from its ``DENSE_SKETCH_K`` largest entries per row, rescaled to the rows' sums
(:meth:`nopg.model.row_matrices.DenseRows.sparsified`). It is rebuilt

- ``"iterations"`` (an explicit ``solver_tol``): when the last solve needed more than 15
  iterations;
- ``"cost"`` (``solver_tol="auto"``): when the iterations beyond those of the first solve after
  the build add up to 60, about the cost of a build, which keeps the total within twice that of
  the best rebuild schedule in hindsight;
- ``"once"`` / ``"always"``: never again / before every solve (for benchmarks);

and also at once, with the solve retried, when a preconditioner built from an earlier ``P``
fails on this one or needs every iteration ``solver_max_iter`` allows (a policy that jumped, a
far-away candidate of a derivative-free search); a fresh one that fails is dropped and the
solve retried without it. Only the kept attempt's warnings are shown.

With the aggregation preconditioner and a sparse ``P`` on the CPU the systems are solved with the
samples sorted by aggregate (``P``'s rows and columns, the right-hand sides and the warm starts
reordered, the solutions put back): nearby samples then sit in nearby memory, which made a
product with ``P`` 2.5 times faster at 10^6 samples, and the preconditioner needs no gathers.

:meth:`BellmanSolver.state` and :meth:`BellmanSolver.load_state` carry that state through
checkpoints, so a resumed fit solves exactly as an uninterrupted one.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable

import numpy as np
import torch

from ..linalg.solvers import (
    AUTO_ERROR,
    AUTO_ERROR_DRAWN,
    SOLVER_PRECISIONS,
    LowPrecision,
    SolveInfo,
    aggregation_preconditioner,
    bicgstab,
    check_solver_error,
    ilu_preconditioner,
    solve_bellman_auto,
    solve_dense,
)
from ..validation import warn_user
from . import defaults
from .defaults import CPU_PRECONDITIONERS
from .row_matrices import DenseRows, Rows, SparseRows

logger = logging.getLogger(__name__)

REFRESH_RULES = ("iterations", "cost", "once", "always")
_ILU_REFRESH_ITERS = 15        # "iterations": rebuild the ILU when a solve needs more iterations
_BUILD_ITERATIONS = {"ilu": 60, "aggregation": 15}   # "cost": a build costs about this many iterations
DENSE_SKETCH_K = 20            # a dense P's preconditioner is built from its 20 largest entries per row


def auto_error(error: float | None, n: int, drawn: bool) -> float:
    """The error target of ``solver_tol="auto"``: ``error`` if given, else
    :data:`nopg.linalg.solvers.AUTO_ERROR_DRAWN` (1e-2) with drawn next states or from
    :data:`nopg.model.defaults.MC_NEXT_MAX_N` samples on, and :data:`nopg.linalg.solvers.AUTO_ERROR` (1e-3)
    for kernel-mean next states below that.

    Drawn next states make ``P`` a random estimate whose noise in the gradient dwarfs a 1e-2
    solve error. From ``MC_NEXT_MAX_N`` samples on the defaults are chosen for their cost (the
    kernel mean replaces the draws there), and the looser target cuts the iterations per update
    while the gradient stays within ``1 - cos`` of about 1e-6 of the exact one (measured at
    10^5 samples, ``docs/scale.md``). Below it, kernel-mean fits keep the tighter target.
    """
    if not check_solver_error(error):
        raise ValueError(f"error must be in (0, 1) or None. Got {error!r} instead.")
    if error is not None:
        return float(error)
    return AUTO_ERROR_DRAWN if drawn or n >= defaults.MC_NEXT_MAX_N else AUTO_ERROR


class BellmanSolver:
    """Solves the model's linear systems in float64, with the preconditioner kept across updates.

    Parameters
    ----------
    n : int
        Number of samples (the size of both systems).
    solver : {"dense", "bicgstab", "auto"}
        ``auto``: dense LU up to ``dense_max_n`` samples, BiCGSTAB above.
    solver_tol : float or "auto"
        BiCGSTAB relative tolerance, or ``"auto"`` (:func:`nopg.linalg.solvers.solve_bellman_auto`).
    max_iter : int
    dense_max_n : int
    preconditioner : {"ilu", "aggregation", "none"}
        The resolved preconditioner (``ilu`` and ``aggregation`` only on the CPU).
    gamma : float
    extra_value : float, optional
        Value of the absorbing state of the support-aware model (enters the ``"auto"`` bound).
    aggregates : callable, optional
        Returns the samples' groups (n,) for ``preconditioner="aggregation"`` (called once, at
        the first build).
    drawn : bool
        The next states are drawn afresh at every update (enters :func:`auto_error`).
    precision : {"mixed", "double"}
        ``"mixed"`` (with ``solver_tol="auto"`` on the CPU): the BiCGSTAB iterations and the
        preconditioner run in float32 and every residual that proves the error bound in float64
        (:class:`nopg.linalg.solvers.LowPrecision`); ``"double"``: all in float64.
    error : float, optional
        The error target of ``solver_tol="auto"`` in (0, 1) (``ModelConfig.solver_error``;
        ``None``: :func:`auto_error`'s rule).

    Attributes
    ----------
    auto_error : float
        The error target of ``solver_tol="auto"``.
    mixed : bool
        Whether CPU solves run in mixed precision (``precision="mixed"`` and ``solver_tol="auto"``).
    refresh : {"iterations", "cost", "once", "always"}
        When the preconditioner is rebuilt (module docstring).
    ilu : tuple of two operators or None
        The preconditioner of ``(I - P)`` and of its transpose (ILU or aggregation; the name is
        kept from when the ILU was the only one).
    ilu_options : dict
        Keyword arguments of :func:`nopg.linalg.solvers.ilu_preconditioner`.
    builds : int
        Preconditioner builds so far.
    """

    def __init__(self, n: int, solver: str, solver_tol: float | str, max_iter: int,
                 dense_max_n: int, preconditioner: str, gamma: float,
                 extra_value: float | None = None,
                 aggregates: Callable[[], np.ndarray] | None = None, drawn: bool = False,
                 precision: str = "mixed", error: float | None = None) -> None:
        if precision not in SOLVER_PRECISIONS:
            raise ValueError(f"precision must be one of {SOLVER_PRECISIONS}. Got {precision!r}.")
        self.n = int(n)
        self.mixed = precision == "mixed" and solver_tol == "auto"
        self.auto_error = auto_error(error, self.n, drawn)
        self.solver, self.solver_tol, self.max_iter = solver, solver_tol, int(max_iter)
        self.dense_max_n, self.preconditioner = dense_max_n, preconditioner
        self.gamma, self.extra_value = float(gamma), extra_value
        if preconditioner == "aggregation" and aggregates is None:
            raise ValueError("preconditioner='aggregation' needs the samples' aggregates")
        self._aggregates_fn, self._aggregates = aggregates, None
        self._order: tuple[torch.Tensor, torch.Tensor] | None = None
        self.refresh = "cost" if solver_tol == "auto" else "iterations"
        self.ilu: tuple | None = None
        self.ilu_source: SparseRows | None = None        # the P the ILU was built from
        self.ilu_ordered = False                         # ...given in the aggregates' order
        self.ilu_options: dict[str, float] = {}
        self.ilu_excess = 0            # iterations above ilu_base since the build ("cost")
        self.ilu_base: int | None = None   # iterations of the first solve after the build
        self.last_iterations = 0
        self.builds = 0

    @property
    def dense(self) -> bool:
        """Whether the systems are solved by the dense LU."""
        return self.solver == "dense" or (self.solver == "auto" and self.n <= self.dense_max_n)

    def solve(self, P: Rows, eps0: torch.Tensor, rewards: torch.Tensor,
              warm_start: tuple[torch.Tensor, torch.Tensor] | None = None
              ) -> tuple[torch.Tensor, torch.Tensor, SolveInfo, SolveInfo]:
        """``q``, ``mu`` and both solver reports (float64, detached)."""
        P64 = P.detach().to(torch.float64)
        e64 = eps0.detach().to(torch.float64)
        r64 = rewards.detach().to(torch.float64)
        if self.dense:
            q, mu, info = solve_dense(P64.to_dense(), r64, e64)
            return q, mu, info, info
        order = self._aggregate_order(P64)
        if order is not None:
            # Solve in the aggregates' order: products with P touch nearby memory, and the
            # preconditioner needs no gathers (nopg.linalg.solvers.aggregation_preconditioner).
            forward, inverse = order
            P64 = P64.permuted(forward, inverse)
            r64, e64 = r64[forward], e64[forward]
            if warm_start is not None:
                warm_start = (warm_start[0][forward], warm_start[1][forward])
        matvec, rmatvec = P64.operators()
        P_low = P64.to(torch.float32) if self.mixed and P64.device.type == "cpu" else None
        builds = self.builds
        pre_q, pre_mu = self._preconditioner(P64, ordered=order is not None)
        fresh = self.builds > builds              # the preconditioner was built from this P
        low = None if P_low is None else LowPrecision(*P_low.operators())
        q, mu, info_q, info_mu, why, caught = self._preconditioned(
            matvec, rmatvec, r64, e64, warm_start, pre_q, pre_mu, low)
        capped = why is None and pre_q is not None and \
            max(info_q.iterations, info_mu.iterations) >= self.max_iter
        if (why is not None or capped) and not fresh and isinstance(P64, SparseRows):
            # Built from an earlier P (a far-away candidate of a search, a jump of the policy),
            # it failed or needed every iteration allowed: rebuild it from this P and retry.
            logger.info("the preconditioned solve %s; rebuilding the preconditioner from this P",
                        f"failed ({why})" if why is not None else
                        f"reached solver_max_iter ({info_q.iterations}/{info_mu.iterations} "
                        "iterations)")
            pre_q, pre_mu = self._preconditioner(P64, ordered=order is not None, rebuild=True)
            if pre_q is not None:
                q, mu, info_q, info_mu, why, caught = self._preconditioned(
                    matvec, rmatvec, r64, e64, warm_start, pre_q, pre_mu, low)
        if why is not None:
            # An incomplete factorisation can be unstable for some P: drop it, solve without it,
            # and build a new one at the next update.
            logger.warning("the preconditioned solve failed (%s); retrying without the "
                           "preconditioner", why)
            self.ilu, self.ilu_source = None, None
            q, mu, info_q, info_mu = self._krylov(matvec, rmatvec, r64, e64, warm_start, None, None,
                                                  low)
            caught = []
        for w in caught:                  # the warnings of the attempt whose result is kept
            warn_user(w.message)
        self._count(info_q.iterations, info_mu.iterations)
        if order is not None:
            q, mu = q[order[1]], mu[order[1]]
        return q, mu, info_q, info_mu

    def _preconditioned(self, matvec: Callable, rmatvec: Callable, r64: torch.Tensor,
                        e64: torch.Tensor, warm_start: tuple[torch.Tensor, torch.Tensor] | None,
                        pre_q: Callable | None, pre_mu: Callable | None,
                        low: LowPrecision | None) -> tuple:
        """:meth:`_krylov`, why a preconditioned solve failed (``None``: it did not, or it had no
        preconditioner), and the warnings it raised (held back: a retry may replace it)."""
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                q, mu, info_q, info_mu = self._krylov(matvec, rmatvec, r64, e64, warm_start,
                                                      pre_q, pre_mu, low)
            except FloatingPointError as err:
                if pre_q is None:
                    raise
                return None, None, None, None, str(err), []
        why = None
        if pre_q is not None and not (info_q.converged and info_mu.converged):
            why = (f"residuals q {info_q.residual:.1e}, mu {info_mu.residual:.1e} after "
                   f"{info_q.iterations}/{info_mu.iterations} iterations")
        return q, mu, info_q, info_mu, why, list(caught)

    def _aggregate_order(self, P: Rows) -> tuple[torch.Tensor, torch.Tensor] | None:
        """``(order, inverse)`` that sort the samples by aggregate, where the systems are solved
        in that order (``preconditioner="aggregation"`` with a sparse ``P``); else ``None``."""
        if self.preconditioner != "aggregation" or not isinstance(P, SparseRows) or \
                P.values.device.type != "cpu":
            return None
        return self._sample_order()

    def _sample_order(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(order, inverse)`` that sort the samples by aggregate (computed at the first call)."""
        if self._order is None:
            forward = np.argsort(self._groups(), kind="stable")
            inverse = np.empty_like(forward)
            inverse[forward] = np.arange(forward.size)
            self._order = (torch.from_numpy(forward), torch.from_numpy(inverse))
        return self._order

    def _groups(self) -> np.ndarray:
        """The samples' aggregates (computed at the first call)."""
        if self._aggregates is None:
            assert self._aggregates_fn is not None
            self._aggregates = np.asarray(self._aggregates_fn(), dtype=np.int64)
        return self._aggregates

    def _krylov(self, matvec: Callable, rmatvec: Callable, r64: torch.Tensor, e64: torch.Tensor,
                warm_start: tuple[torch.Tensor, torch.Tensor] | None, pre_q: Callable | None,
                pre_mu: Callable | None, low: LowPrecision | None = None
                ) -> tuple[torch.Tensor, torch.Tensor, SolveInfo, SolveInfo]:
        """BiCGSTAB for both systems with the given preconditioners (``None``: none); ``low``:
        ``matvec`` and ``rmatvec`` in float32, for mixed precision (the preconditioners are then
        float32 ones)."""
        if self.solver_tol == "auto":
            if low is not None:
                low = LowPrecision(low.matvec, low.rmatvec, pre_q, pre_mu)
                pre_q = pre_mu = None
            q, mu, info_q, info_mu = solve_bellman_auto(
                matvec, rmatvec, r64, e64, self.gamma, warm_start, error=self.auto_error,
                max_iter=self.max_iter, precond=pre_q, precond_transpose=pre_mu,
                extra_value=self.extra_value, low=low)
            logger.debug("solve: %d/%d iterations, error bound q %.1e mu %.1e (solver_tol='auto')",
                         info_q.iterations, info_mu.iterations, info_q.error_bound, info_mu.error_bound)
        else:
            q0, mu0 = warm_start if warm_start is not None else (None, None)
            tol = float(self.solver_tol)
            q, info_q = bicgstab(lambda v: v - matvec(v), r64, q0,
                                 tol=tol, max_iter=self.max_iter, precond=pre_q)
            mu, info_mu = bicgstab(lambda v: v - rmatvec(v), e64, mu0,
                                   tol=tol, max_iter=self.max_iter, precond=pre_mu)
        return q, mu, info_q, info_mu

    def _preconditioner(self, P: Rows, ordered: bool = False, rebuild: bool = False) -> tuple:
        """The preconditioner pair for this solve (rebuilt when stale, or when ``rebuild``), or
        ``(None, None)``; ``ordered``: ``P`` is given in the aggregates' order (:meth:`build_ilu`)."""
        if self.preconditioner in CPU_PRECONDITIONERS and isinstance(P, (SparseRows, DenseRows)):
            if rebuild or self.ilu is None or self.stale():
                self.build_ilu(P if isinstance(P, SparseRows) else P.sparsified(DENSE_SKETCH_K),
                               ordered)
            if self.ilu is not None:
                return self.ilu
        return None, None

    def reset(self, n: int | None = None) -> None:
        """Forget the preconditioner and the aggregates (the systems change size next); ``n``:
        the new size, which ``solver="auto"`` compares with ``dense_max_n``."""
        if n is not None:
            self.n = int(n)
        self.ilu, self.ilu_source, self.ilu_base = None, None, None
        self.ilu_excess = 0
        self._aggregates, self._order = None, None

    def _count(self, iterations_q: int, iterations_mu: int) -> None:
        self.last_iterations = max(iterations_q, iterations_mu)
        if self.ilu is not None:
            its = iterations_q + iterations_mu
            if self.ilu_base is None:
                self.ilu_base = its
            self.ilu_excess += max(its - self.ilu_base, 0)

    def stale(self) -> bool:
        """Whether to rebuild the ILU before this solve (the :attr:`refresh` rule)."""
        if self.refresh == "cost":
            return self.ilu_excess >= _BUILD_ITERATIONS[self.preconditioner]
        if self.refresh == "always":
            return True
        if self.refresh == "once":
            return False
        return self.last_iterations > _ILU_REFRESH_ITERS

    def build_ilu(self, P: SparseRows, ordered: bool = False) -> None:
        """Build the preconditioner of ``I - P`` (the ILU, or the aggregation one with
        ``preconditioner="aggregation"``) and reset the rebuild counters. ``ordered``: ``P`` is
        given in the aggregates' order (the solve of a sparse ``P``); a dense ``P``'s sketch is
        not, and the aggregation then takes the groups as they are.

        In mixed precision the aggregation preconditioner is built in float32; the ILU is built
        in float64 (SuperLU's float32 ILU of some sketched dense ``P`` is singular where the
        float64 one is not) and applied to float32 vectors through casts."""
        aggregation = self.preconditioner == "aggregation"
        P = P.to(torch.float32 if self.mixed and aggregation else torch.float64)
        self.ilu_source, self.ilu_ordered = P, bool(ordered)
        if aggregation:
            groups = self._groups()
            if ordered:
                groups = groups[self._sample_order()[0].numpy()]
            self.ilu = aggregation_preconditioner(P.to_scipy(), groups,
                                                  defaults.AGGREGATION_SMOOTHING,
                                                  defaults.AGGREGATION_SMOOTHER)
        else:
            self.ilu = ilu_preconditioner(P.to_scipy(), **self.ilu_options)
            if self.mixed and self.ilu is not None:
                self.ilu = tuple(_cast(apply) for apply in self.ilu)
        self.ilu_excess, self.ilu_base = 0, None
        self.builds += 1

    def state(self) -> dict[str, torch.Tensor]:
        """What the solver carries across updates besides warm starts: the matrix its ILU
        preconditioner was built from and the iteration counts (for exact checkpoints)."""
        if self.ilu_source is None:
            return {}
        return {"ilu_index": self.ilu_source.index.cpu(), "ilu_values": self.ilu_source.values.cpu(),
                "ilu_ordered": torch.tensor(self.ilu_ordered),
                "last_iterations": torch.tensor(self.last_iterations),
                "ilu_excess": torch.tensor(self.ilu_excess),
                "ilu_base": torch.tensor(-1 if self.ilu_base is None else self.ilu_base)}

    def load_state(self, state: dict[str, torch.Tensor]) -> None:
        """Restore :meth:`state` (ignored when it belongs to another data set size)."""
        n = self.n
        if "ilu_index" in state and state["ilu_index"].shape[0] == n and \
                self.preconditioner in CPU_PRECONDITIONERS:
            self.build_ilu(SparseRows(state["ilu_index"], state["ilu_values"].to(torch.float64), n),
                           bool(state.get("ilu_ordered", False)))
            self.last_iterations = int(state["last_iterations"])
            if "ilu_excess" in state:
                self.ilu_excess = int(state["ilu_excess"])
                base = int(state["ilu_base"])
                self.ilu_base = None if base < 0 else base


def _cast(apply: Callable[[torch.Tensor], torch.Tensor]) -> Callable[[torch.Tensor], torch.Tensor]:
    """A float64 preconditioner applied to vectors of any dtype (the result in that dtype)."""
    def cast(v: torch.Tensor) -> torch.Tensor:
        return apply(v.to(torch.float64)).to(v.dtype)
    return cast
