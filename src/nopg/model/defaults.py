"""The rule behind the ``auto`` model settings of NOPG (shared by :class:`NOPGConfig` and
:class:`~nopg.model.bellman.NonparametricBellman`).

``top_k="auto"`` keeps the dense transition matrix ``P`` below ``sparse_min_n`` samples and
``AUTO_TOP_K`` entries per row from there on. ``solver="auto"`` uses the dense LU up to
``dense_max_n`` samples and BiCGSTAB above; ``dense_max_n=None`` takes the limit from the kind
of ``P``: ``DENSE_P_SOLVE_MAX_N`` for a dense ``P``, ``SPARSE_P_SOLVE_MAX_N`` for a sparse one.
``n_mc_next="auto"`` draws ``AUTO_MC_NEXT`` next states per transition below ``MC_NEXT_MAX_N``
samples (:func:`resolve_n_mc_next`). The other thresholds are measured crossovers of the time
per policy update (one CPU thread, float64, NOPG-D on Pendulum-like data;
``benchmarks/bench_defaults.py``); an explicit int always wins.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

AUTO = "auto"
AUTO_TOP_K = 10                # entries kept per row of P when top_k="auto" goes sparse
SPARSE_MIN_N = 400             # top_k="auto": dense P below this many samples, sparse from it on
DENSE_P_SOLVE_MAX_N = 5000     # solver="auto", dense_max_n=None: dense LU up to here (dense P)
SPARSE_P_SOLVE_MAX_N = 350     # the same for a sparse P (top_k set)
SPARSE_NEIGHBORS = ("candidates", "knn", "graph", "pool")   # neighbour modes that only exist with top_k
POOL_MIN_DIMS = 11             # neighbors="auto": state pools for pairs of this many dimensions on (CPU)
RECENTRE_SWITCH_SHARE = 0.3    # neighbors="auto": k-NN for a while after re-centring more rows than this
RECENTRE_SWITCH_MIN_N = 50_000 # ...from this many samples on (below, re-centring costs less than k-NN runs)
KNN_PROBE_EVERY = 10           # ...selections per such k-NN run (the probe of the candidates included)
AGGREGATION_MIN_N = 15_000     # preconditioner="auto" on the CPU: ILU below, aggregation from here on
AGGREGATION_MIN_N_DRAWN = 10_000   # ...from here on when P's rows are drawn afresh every update (n_mc_next)
AGGREGATE_SIZE = 64            # samples per group of the aggregation preconditioner
AGGREGATION_SMOOTHING = 1      # smoothing steps per application of the aggregation preconditioner
AGGREGATION_SMOOTHER = "gauss-seidel"   # ...each a symmetric Gauss-Seidel sweep (or "richardson")
CPU_PRECONDITIONERS = ("ilu", "aggregation")   # built with SciPy: CPU only
AUTO_MC_NEXT = 3               # n_mc_next="auto": Monte-Carlo next states per transition...
MC_NEXT_MAX_N = 100_000        # ...below this many samples; the kernel mean from there on


def _is_positive_int(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)) \
        and value >= 1


def check_auto_count(value: Any) -> bool:
    """Whether ``value`` is ``"auto"``, ``None`` or a positive int (``top_k``, ``n_mc_next``)."""
    if value is None or isinstance(value, str):
        return value is None or value == AUTO
    return _is_positive_int(value)


def check_dense_max_n(value: Any) -> bool:
    """Whether ``value`` is a valid ``dense_max_n``: ``None`` or a positive int."""
    return value is None or _is_positive_int(value)


@dataclass(frozen=True)
class ResolvedSettings:
    """Concrete model settings for one data set size.

    Attributes
    ----------
    top_k : int or None
        Entries kept per row of ``P``; ``None`` is the dense matrix.
    solver : {"dense", "bicgstab"}
    dense_max_n : int
        The dense-solver limit that ``solver="auto"`` applied (or would apply).
    """

    top_k: int | None
    solver: str
    dense_max_n: int


def resolve_top_k(top_k: int | str | None, n: int, sparse_min_n: int = SPARSE_MIN_N,
                  neighbors: str = "auto") -> int | None:
    """Concrete ``top_k`` for ``n`` samples.

    ``"auto"`` is ``None`` (dense ``P``) for ``n < sparse_min_n`` and ``min(AUTO_TOP_K, n)``
    from there on, or at any ``n`` when ``neighbors`` asks for a sparse search
    (``"candidates"``, ``"knn"``, ``"graph"``). ``None`` and ints are returned unchanged.
    """
    if top_k != AUTO:
        return top_k  # type: ignore[return-value]
    if n >= sparse_min_n or neighbors in SPARSE_NEIGHBORS:
        return min(AUTO_TOP_K, n)
    return None


def resolve_n_mc_next(n_mc_next: int | str | None, n: int, max_n: int = MC_NEXT_MAX_N
                      ) -> int | None:
    """Concrete ``n_mc_next`` (``N_phi``) for ``n`` samples.

    ``"auto"`` is ``AUTO_MC_NEXT`` next states drawn afresh around every data next state at every
    update for ``n < max_n``, and ``None`` (the kernel mean, the paper's ``N_phi = 1``) from there
    on. The fresh draws make the policy act well on a cloud around the data instead of at the
    data's next states only, which is what the measured returns with small data sets depend on
    (``docs/bandwidths.md``); above ``max_n`` the kernel mean is kept for its cost (its queries
    are cached, while a fresh cloud costs a neighbour search of ``AUTO_MC_NEXT * n`` points per
    update) and because the smoothing was not measured there. ``None`` and ints are returned
    unchanged.
    """
    if n_mc_next != AUTO:
        return n_mc_next  # type: ignore[return-value]
    return AUTO_MC_NEXT if n < max_n else None


def resolve_neighbors(neighbors: str, top_k: int | None, pair_dims: int = 0,
                      device_type: str = "cpu") -> str:
    """Concrete neighbour mode: ``"auto"`` is ``"dense"`` without ``top_k``, with it ``"pool"``
    on the CPU for (state, action) pairs of at least :data:`POOL_MIN_DIMS` dimensions and
    ``"candidates"`` otherwise (``top_k`` already resolved).

    Every mode but ``graph`` is exact, so this only chooses the faster computation. The pools of
    nearest states (:mod:`nopg.model.state_pools`) were measured against the exact k-NN query of
    every row (one thread, ``benchmarks/bench_highdim_knn.py --path pool``, 2026-11-29): 0.112
    of its time per update over 100 updates on 10^5 Hopper-v5 transitions (14-D pairs), where
    the candidates lose their certificates at almost every row, and 1.06 on 2 x 10^4 Walker2d-v5
    transitions (23-D pairs), where no pool of up to 4096 states certifies a row and every row
    goes to exact queries after the first update (``docs/scale.md``). Below 11 dimensions the
    candidates were measured (4- and 5-D data) and the pools were not; on a GPU neither.

    From :data:`RECENTRE_SWITCH_MIN_N` samples on the
    model also switches a batch of rows to exact k-NN queries for :data:`KNN_PROBE_EVERY`
    selections after one that re-centred more than :data:`RECENTRE_SWITCH_SHARE` of them
    (:func:`resolve_switch_share`, :class:`nopg.model.candidates.TopKSelector`).

    Both sparse modes are exact; which is faster depends on how far the policy's actions move
    in bandwidth units per update, not on ``n`` alone (one thread, Pendulum-like data, top_k =
    10, Adam 1e-2, ``benchmarks/bench_scale.py``): with Silverman's bandwidths the candidates
    took 19 against 23 ms at 10^4 and 572 against 295 ms at 10^5, where ~40 % of the rows leave
    their certificate every update; with the ``auto`` bandwidths (an action kernel as wide as
    the actions' spread) almost none do, and at 10^5 the candidates' selection took 100 ms per
    update against 165 ms for the k-NN queries (2026-11-25). Below 50 000 samples a re-centring
    query is cheap enough that the switch did not pay with Silverman's bandwidths (10^4: 43.8
    ms per update without it, 46.6 and 47.8 ms with it).
    """
    if neighbors != AUTO:
        return neighbors
    if top_k is None:
        return "dense"
    return "pool" if pair_dims >= POOL_MIN_DIMS and device_type == "cpu" else "candidates"


def resolve_switch_share(neighbors: str, resolved: str, n: int) -> float | None:
    """``switch_share`` of :class:`nopg.model.candidates.TopKSelector`: :data:`RECENTRE_SWITCH_SHARE`
    where ``neighbors="auto"`` resolved to the candidates for at least
    :data:`RECENTRE_SWITCH_MIN_N` samples, else ``None`` (the candidates alone)."""
    if neighbors == AUTO and resolved == "candidates" and n >= RECENTRE_SWITCH_MIN_N:
        return RECENTRE_SWITCH_SHARE
    return None


def resolve_preconditioner(preconditioner: str, device_type: str, n: int, drawn: bool = False,
                           aggregation_min_n: int | None = None) -> str:
    """Concrete BiCGSTAB preconditioner: ``"auto"`` is on the CPU an incomplete LU below
    ``aggregation_min_n`` samples and the two-level aggregation
    (:func:`nopg.linalg.solvers.aggregation_preconditioner`) from there on, and none on a GPU;
    ``"ilu"`` and ``"aggregation"`` run on the CPU only. ``aggregation_min_n=None`` is
    ``AGGREGATION_MIN_N``, or ``AGGREGATION_MIN_N_DRAWN`` when ``drawn`` (Monte-Carlo next states
    drawn afresh at every update, so ``P`` changes much more per update and the preconditioner is
    rebuilt more often: the ILU's builds are what the aggregation saves).

    The crossover is measured (one thread, Pendulum-like data with the ``auto`` bandwidths,
    top_k = 10, Adam 1e-2, mean time per update over the first 100 updates of a fit, 2026-11-25;
    the aggregation with its default symmetric Gauss-Seidel smoothing and groups of 64): ILU
    41 against aggregation 59 ms at 10^4, 130 against 96 ms at 2 x 10^4, 227 against 149 ms at
    3 x 10^4. At 10^5 the ILU's first build fails (a zero pivot) and a fit's update took 3.2 s
    with it against 0.63 s with the aggregation; at 10^6 one ILU build took 44 s. With 3 next
    states drawn per transition (the default below 10^5 samples), a pendulum-random fit (seed 0,
    the experiment's defaults, two runs side by side) took 70.1 ms per update with the ILU and
    73.4 ms with the aggregation at 5000 transitions (1500 updates), 191 against 141 ms at 10^4
    (300 updates; the same return to 0.01): the ILU was rebuilt about every other update.
    """
    if preconditioner in CPU_PRECONDITIONERS and device_type != "cpu":
        raise ValueError(f"preconditioner={preconditioner!r} runs on the CPU only; use 'auto' or 'none' "
                         f"on {device_type}")
    if preconditioner == AUTO:
        if device_type != "cpu":
            return "none"
        if aggregation_min_n is None:
            aggregation_min_n = AGGREGATION_MIN_N_DRAWN if drawn else AGGREGATION_MIN_N
        return "ilu" if n < aggregation_min_n else "aggregation"
    return preconditioner


def resolve_dense_max_n(dense_max_n: int | None, top_k: int | None) -> int:
    """The dense-solver limit: ``dense_max_n``, or for ``None`` the measured one for the kind
    of ``P`` (``top_k`` already resolved)."""
    if dense_max_n is not None:
        return int(dense_max_n)
    return DENSE_P_SOLVE_MAX_N if top_k is None else SPARSE_P_SOLVE_MAX_N


def resolve_settings(n: int, top_k: int | str | None = AUTO, solver: str = AUTO,
                     dense_max_n: int | None = None, sparse_min_n: int = SPARSE_MIN_N,
                     neighbors: str = "auto") -> ResolvedSettings:
    """Concrete ``top_k``, solver and dense-solver limit for ``n`` samples.

    ``solver="auto"`` is ``"dense"`` for ``n <= dense_max_n`` (see :func:`resolve_dense_max_n`)
    and ``"bicgstab"`` above; ``"dense"`` and ``"bicgstab"`` are kept.
    """
    resolved_top_k = resolve_top_k(top_k, n, sparse_min_n, neighbors)
    limit = resolve_dense_max_n(dense_max_n, resolved_top_k)
    if solver == AUTO:
        solver = "dense" if n <= limit else "bicgstab"
    return ResolvedSettings(resolved_top_k, solver, limit)
