"""Bandwidth rules of thumb and cross-validation, per data column.

:func:`silverman_bandwidth` and :func:`scott_bandwidth` scale each column's standard deviation;
:func:`cross_validated_bandwidth` maximises the held-out likelihood of a one-dimensional kernel
density estimate per column (it collapses on grids, which :func:`is_grid_like` detects and
:class:`DuplicatedDataWarning` reports). :func:`seed_generator` turns a ``seed`` into the NumPy
generator every bandwidth rule draws from.
"""

from __future__ import annotations

import logging

import numpy as np
from numpy.typing import ArrayLike

from ..validation import warn_user

__all__ = [
    "DuplicatedDataWarning",
    "checked_std",
    "cross_validated_bandwidth",
    "data_columns",
    "is_grid_like",
    "scott_bandwidth",
    "seed_generator",
    "silverman_bandwidth",
]

logger = logging.getLogger("nopg.bandwidth.selection")    # the records keep the name of the module they left

_DEFAULT_GRID = np.geomspace(0.05, 5.0, 30)
_CHUNK_ELEMENTS = 1 << 21  # max held-out x train entries held at once (16 MiB)


class DuplicatedDataWarning(UserWarning):
    """Data lie on a grid or contain many repeated values (bad for cross-validation)."""


def data_columns(x: ArrayLike, name: str = "x") -> np.ndarray:
    """Return ``x`` as a finite float64 array of shape (n, d) with n >= 2."""
    try:
        arr = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a numeric array-like") from None
    if arr.ndim == 1:
        arr = arr.reshape(-1, 1)
    if arr.ndim != 2 or arr.shape[1] == 0:
        raise ValueError(f"{name} must have shape (n,) or (n, d). Got shape {arr.shape} instead.")
    if arr.shape[0] < 2:
        raise ValueError(
            f"at least 2 samples are needed to select a bandwidth; {name} has {arr.shape[0]}"
        )
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} contains NaN or inf values")
    return arr


def checked_std(cols: np.ndarray) -> np.ndarray:
    """The standard deviation (``ddof=1``) of each column of ``cols`` (n, d); a constant column
    is refused (no bandwidth can be selected for it)."""
    std = cols.std(axis=0, ddof=1)
    for j in range(cols.shape[1]):
        col = cols[:, j]
        if col.max() == col.min() or not np.isfinite(std[j]) or std[j] <= 0:
            raise ValueError(
                f"dimension {j} is constant (all values {col[0]:g}); a kernel bandwidth "
                "cannot be selected for it: drop the dimension or pass an explicit bandwidth"
            )
    return std


def silverman_bandwidth(x: ArrayLike) -> np.ndarray:
    """Silverman's rule ``std(x, ddof=1) * (4 / (3 n)) ** (1/5)`` per column, shape (d,)."""
    cols = data_columns(x)
    return checked_std(cols) * (4.0 / (3.0 * cols.shape[0])) ** 0.2


def scott_bandwidth(x: ArrayLike) -> np.ndarray:
    """Scott's rule ``std(x, ddof=1) * n ** (-1/5)`` per column, shape (d,)."""
    cols = data_columns(x)
    return checked_std(cols) * cols.shape[0] ** -0.2


def is_grid_like(x: ArrayLike, max_unique_fraction: float = 0.5) -> np.ndarray:
    """Per-column flag: values lie on a grid or repeat heavily.

    A column of length n is grid-like when its number of distinct values is at
    most ``max_unique_fraction * n`` (default: values occur on average at least
    twice). Continuous data have (almost) all values distinct; discrete actions,
    clipped values or coarse rounding produce exact repeats, for which held-out
    points coincide with training points and cross-validation favours
    vanishing bandwidths.
    """
    cols = data_columns(x)
    n = cols.shape[0]
    n_unique = np.array([np.unique(cols[:, j]).shape[0] for j in range(cols.shape[1])])
    return n_unique <= max_unique_fraction * n


def seed_generator(seed: np.random.Generator | int | None) -> np.random.Generator:
    """The NumPy generator of a ``seed``: an int, a Generator (returned as it is, so its stream
    continues) or ``None`` (seed 0)."""
    if seed is None:
        return np.random.default_rng(0)
    if isinstance(seed, np.random.Generator):
        return seed
    if isinstance(seed, (int, np.integer)) and not isinstance(seed, bool):
        return np.random.default_rng(int(seed))
    raise ValueError(f"seed must be a numpy Generator, an int or None. Got {seed!r} instead.")


def _heldout_loglik(train: np.ndarray, test: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """Summed log-density of ``test`` under a 1-D Gaussian KDE on ``train``, per bandwidth.

    Uses the log-sum-exp trick with the row maximum taken once per chunk (the
    nearest training point), which is shared by all bandwidths; this is several
    times faster than calling ``scipy.special.logsumexp`` once per bandwidth.
    Memory is bounded by processing held-out points in chunks.
    """
    n_train = train.shape[0]
    total = np.zeros(grid.shape[0])
    chunk = max(1, _CHUNK_ELEMENTS // n_train)
    neg_half_prec = -0.5 / grid**2
    buf = np.empty((min(chunk, test.shape[0]), n_train))
    for start in range(0, test.shape[0], chunk):
        sq = (test[start:start + chunk, None] - train[None, :]) ** 2
        nearest = sq.min(axis=1)
        sq -= nearest[:, None]  # >= 0 with a zero in every row, so each sum is >= 1
        out = buf[: sq.shape[0]]
        for k, c in enumerate(neg_half_prec):
            np.multiply(sq, c, out=out)
            np.exp(out, out=out)
            total[k] += np.log(out.sum(axis=1)).sum() + c * nearest.sum()
    log_norm = np.log(n_train) + np.log(grid) + 0.5 * np.log(2.0 * np.pi)
    return total - test.shape[0] * log_norm


def cross_validated_bandwidth(
    x: ArrayLike,
    n_folds: int = 5,
    grid: ArrayLike | None = None,
    max_samples: int = 5000,
    seed: np.random.Generator | int | None = None,
) -> np.ndarray:
    """Per-column bandwidth maximising the K-fold held-out log-likelihood of a 1-D KDE.

    Parameters
    ----------
    x : array-like, shape (n,) or (n, d)
    n_folds : int
        Number of cross-validation folds (2 <= n_folds <= n).
    grid : array-like, optional
        Candidate bandwidths as multiples of each column's Silverman bandwidth.
        Default: 30 log-spaced factors from 0.05 to 5.
    max_samples : int
        Columns are subsampled (without replacement) to this many points first.
    seed : numpy Generator or int, optional
        Randomness for subsampling and folds; default seed 0 (reproducible). Formerly ``rng``.

    Returns
    -------
    numpy.ndarray, shape (d,)

    Warns
    -----
    DuplicatedDataWarning
        If a column is grid-like (see :func:`is_grid_like`).
    """
    cols = data_columns(x)
    n, d = cols.shape
    if isinstance(n_folds, bool) or not isinstance(n_folds, (int, np.integer)) or n_folds < 2:
        raise ValueError(f"The 'n_folds' parameter must be an int >= 2. Got {n_folds!r} instead.")
    if isinstance(max_samples, bool) or not isinstance(max_samples, (int, np.integer)) \
            or max_samples < 2:
        raise ValueError(
            f"The 'max_samples' parameter must be an int >= 2. Got {max_samples!r} instead."
        )
    factors = _DEFAULT_GRID if grid is None else np.asarray(grid, dtype=np.float64).reshape(-1)
    if factors.size == 0 or not np.all(np.isfinite(factors) & (factors > 0)):
        raise ValueError("The 'grid' parameter must be a non-empty array of positive factors.")
    generator = seed_generator(seed)
    reference = silverman_bandwidth(cols)  # also rejects constant columns
    grid_like = is_grid_like(cols)
    if np.any(grid_like):
        warn_user(
            f"dimension(s) {np.flatnonzero(grid_like).tolist()} lie on a grid or contain many "
            "duplicated values; cross-validation then selects too-small bandwidths. "
            "Prefer the Silverman rule (method='silverman').",
            DuplicatedDataWarning,
        )
    if n > max_samples:
        cols = cols[generator.choice(n, size=max_samples, replace=False)]
        n = max_samples
    if n_folds > n:
        raise ValueError(f"n_folds={n_folds} is larger than the number of samples ({n})")
    folds = np.array_split(generator.permutation(n), n_folds)
    result = np.empty(d)
    for j in range(d):
        col = cols[:, j]
        candidates = reference[j] * factors
        score = np.zeros(candidates.shape[0])
        for fold in folds:
            mask = np.ones(n, dtype=bool)
            mask[fold] = False
            score += _heldout_loglik(col[mask], col[fold], candidates)
        best = int(np.argmax(score))
        if best in (0, candidates.shape[0] - 1):
            logger.debug("CV bandwidth for dimension %d is at the edge of the grid", j)
        result[j] = candidates[best]
    return result
