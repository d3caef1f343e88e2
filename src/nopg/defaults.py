"""The rule behind the ``auto`` model settings of NOPG (shared by :class:`NOPGConfig` and
:class:`~nopg.bellman.NonparametricBellman`).

``top_k="auto"`` keeps the dense transition matrix ``P`` below ``sparse_min_n`` samples and
``AUTO_TOP_K`` entries per row from there on. ``solver="auto"`` uses the dense LU up to
``dense_max_n`` samples and BiCGSTAB above; ``dense_max_n=None`` takes the limit from the kind
of ``P``: ``DENSE_P_SOLVE_MAX_N`` for a dense ``P``, ``SPARSE_P_SOLVE_MAX_N`` for a sparse one.
The thresholds are measured crossovers of the time per policy update (one CPU thread, float64,
NOPG-D on Pendulum-like data; ``benchmarks/bench_defaults.py``); an explicit int always wins.
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
SPARSE_NEIGHBORS = ("candidates", "knn")   # neighbour modes that only exist with top_k
CANDIDATES_MAX_N = 50_000      # neighbors="auto" with top_k: candidate sets below, k-NN from here on
ILU_MAX_N = 300_000            # preconditioner="auto" on the CPU: ILU up to here, none above


def _is_positive_int(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)) \
        and value >= 1


def check_top_k(value: Any) -> bool:
    """Whether ``value`` is a valid ``top_k``: ``"auto"``, ``None`` or a positive int."""
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
    (``"candidates"``, ``"knn"``). ``None`` and ints are returned unchanged.
    """
    if top_k != AUTO:
        return top_k  # type: ignore[return-value]
    if n >= sparse_min_n or neighbors in SPARSE_NEIGHBORS:
        return min(AUTO_TOP_K, n)
    return None


def resolve_neighbors(neighbors: str, top_k: int | None, n: int,
                      candidates_max_n: int = CANDIDATES_MAX_N) -> str:
    """Concrete neighbour mode: ``"auto"`` is ``"dense"`` without ``top_k``, ``"candidates"``
    below ``candidates_max_n`` samples and ``"knn"`` from there on (``top_k`` already resolved).

    Both sparse modes are exact. The crossover is measured (one thread, Pendulum-like data, top_k = 10,
    Adam 1e-2, mean top-k selection time over the first 100 updates, ``benchmarks/bench_scale.py``):
    candidates 19 vs k-NN 23 ms at 10^4, 43 vs 52 ms at 2 x 10^4, 108 vs 108 ms at 4 x 10^4,
    572 vs 295 ms at 10^5, where Silverman's bandwidths have shrunk so far that the policy's
    moves take ~40 % of the rows out of their certificate every update.
    """
    if neighbors != AUTO:
        return neighbors
    if top_k is None:
        return "dense"
    return "candidates" if n < candidates_max_n else "knn"


def resolve_preconditioner(preconditioner: str, device_type: str, n: int,
                           ilu_max_n: int = ILU_MAX_N) -> str:
    """Concrete BiCGSTAB preconditioner: ``"auto"`` is an incomplete LU on the CPU for up to
    ``ilu_max_n`` samples and none above it or on a GPU; ``"ilu"`` runs on the CPU only.

    The limit is measured (one thread, Pendulum-like data, top_k = 10, Adam 1e-2, mean time per
    update of a fit, ``benchmarks/bench_scale.py``): with the ILU 0.80 s against 1.13 s without
    at 10^5, 4.7 s against 5.5 s at 3 x 10^5; at 10^6 one ILU build took 44 s (the
    factorisation's cost grows faster than ``n``), against 22 s for a whole update without it.
    """
    if preconditioner == "ilu" and device_type != "cpu":
        raise ValueError(f"preconditioner='ilu' runs on the CPU only; use 'auto' or 'none' on {device_type}")
    if preconditioner == AUTO:
        return "ilu" if device_type == "cpu" and n <= ilu_max_n else "none"
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
