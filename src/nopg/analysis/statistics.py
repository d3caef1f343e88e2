"""Error statistics of gradient estimates with bootstrap percentile intervals (paper §6.3, App. C).

For ``m`` independent data sets an estimator yields estimates ``g_1..g_m`` (rows of an
``(m, p)`` array) of a gradient whose exact value ``truth`` is known.  This module computes

* ``bias2 = ||mean(g) - truth||^2``,
* ``variance = mean ||g - mean(g)||^2`` (the trace of the covariance with ``1/m``),
* ``mse = mean ||g - truth||^2 = bias2 + variance``, ``relative_mse = mse / ||truth||^2``,
* the mean and median of the angle (degrees) between each estimate and ``truth``,

each with a percentile bootstrap confidence interval: the ``m`` data sets are resampled with
replacement ``n_boot`` times (paper: 10000 bootstraps; chosen over t/chi^2 intervals because
importance-sampling estimates are heavy-tailed).  Resampling is done by a batched numpy
resampler whose memory is bounded independently of ``n_boot``.

Note that a percentile interval of ``bias2`` need not contain the point value when the bias is
small compared with the spread: resampled means scatter around the sample mean, so resampled
squared norms are biased upwards.  This is a property of the percentile method, not a bug.
"""

from __future__ import annotations

import csv
import logging
import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import ArrayLike
from tqdm.auto import tqdm

__all__ = [
    "CSV_COLUMNS",
    "STATISTICS",
    "ErrorStatistics",
    "angles_degrees",
    "error_statistics",
    "rank_correlation",
    "read_csv",
    "summary_rows",
    "write_csv",
]

logger = logging.getLogger(__name__)

STATISTICS: tuple[str, ...] = ("bias2", "variance", "mse", "relative_mse", "angle_mean", "angle_median")
"""Names of the statistics, in the order of the CSV columns."""

CSV_COLUMNS: tuple[str, ...] = ("sweep", "x", "estimator", "n", "n_dropped") + tuple(
    f"{name}{suffix}" for name in STATISTICS for suffix in ("", "_lo", "_hi")
)
"""Column order of :func:`summary_rows` rows and :func:`write_csv` files."""

_BATCH_ELEMENTS = 2_000_000  # resampled indices per batch: bounds memory to ~ 16 * p * this bytes


def _as_estimates(estimates: ArrayLike, truth: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """Validate shapes: ``estimates`` (m, p) and ``truth`` (p,), as float64."""
    est = np.asarray(estimates, dtype=np.float64)
    tru = np.asarray(truth, dtype=np.float64)
    if est.ndim != 2:
        raise ValueError(f"'estimates' must have shape (m, p). Got shape {est.shape}.")
    if tru.ndim != 1 or tru.shape[0] != est.shape[1]:
        raise ValueError(
            f"'truth' must have shape (p,) = ({est.shape[1]},) to match 'estimates' {est.shape}. "
            f"Got shape {tru.shape}."
        )
    if est.shape[1] == 0:
        raise ValueError("'estimates' must have at least one parameter column (p >= 1).")
    return est, tru


def angles_degrees(estimates: ArrayLike, truth: ArrayLike) -> np.ndarray:
    """Angle in degrees (0..180) between each estimate and the true gradient.

    Computed as ``2 atan2(||u - v||, ||u + v||)`` of the unit vectors ``u, v`` (Kahan), which
    equals ``arccos(clip(cos, -1, 1))`` but stays accurate near 0 and 180 degrees.

    Parameters
    ----------
    estimates : array of shape (m, p)
        Gradient estimates, one per row.
    truth : array of shape (p,)
        The exact gradient.

    Returns
    -------
    numpy.ndarray of shape (m,)
        Angles in degrees; NaN for a zero or non-finite estimate (and everywhere if ``truth``
        is zero).

    Raises
    ------
    ValueError
        If the shapes do not match.
    """
    est, tru = _as_estimates(estimates, truth)
    out = np.full(est.shape[0], np.nan)
    t_norm = np.linalg.norm(tru)
    if not (np.isfinite(t_norm) and t_norm > 0):
        return out
    with np.errstate(over="ignore", invalid="ignore"):
        norms = np.linalg.norm(est, axis=1)
    ok = np.isfinite(norms) & (norms > 0) & np.isfinite(est).all(axis=1)
    u = est[ok] / norms[ok, None]
    v = tru / t_norm
    out[ok] = np.degrees(2.0 * np.arctan2(np.linalg.norm(u - v, axis=1), np.linalg.norm(u + v, axis=1)))
    return out


@dataclass(frozen=True)
class ErrorStatistics:
    """Error statistics of ``n`` gradient estimates with bootstrap percentile intervals.

    Each statistic ``s`` has a point value ``s`` and an interval ``s_ci = (lo, hi)`` at level
    ``confidence``.  ``n`` counts the finite estimates used, ``n_dropped`` the non-finite rows
    that were removed.  Angles are in degrees.
    """

    n: int
    n_dropped: int
    bias2: float
    bias2_ci: tuple[float, float]
    variance: float
    variance_ci: tuple[float, float]
    mse: float
    mse_ci: tuple[float, float]
    relative_mse: float
    relative_mse_ci: tuple[float, float]
    angle_mean: float
    angle_mean_ci: tuple[float, float]
    angle_median: float
    angle_median_ci: tuple[float, float]
    confidence: float = 0.95
    n_boot: int = 10000

    def as_dict(self) -> dict[str, float | int]:
        """Flat dict: ``n``, ``n_dropped`` and ``<stat>``, ``<stat>_lo``, ``<stat>_hi`` per statistic."""
        out: dict[str, float | int] = {"n": self.n, "n_dropped": self.n_dropped}
        for name in STATISTICS:
            lo, hi = getattr(self, f"{name}_ci")
            out[name] = getattr(self, name)
            out[f"{name}_lo"] = lo
            out[f"{name}_hi"] = hi
        return out


def check_bootstrap_options(n_boot: int, confidence: float) -> None:
    """Raise a ValueError unless ``n_boot`` is a positive int and ``confidence`` in (0, 1)."""
    if isinstance(n_boot, bool) or not isinstance(n_boot, (int, np.integer)) or n_boot < 1:
        raise ValueError(f"'n_boot' must be an int >= 1. Got {n_boot!r}.")
    if not (isinstance(confidence, (int, float, np.floating)) and 0.0 < float(confidence) < 1.0):
        raise ValueError(f"'confidence' must lie in the open interval (0, 1). Got {confidence!r}.")


def _drop_nonfinite(est: np.ndarray) -> tuple[np.ndarray, int]:
    """Remove rows with a non-finite entry; log how many."""
    finite = np.isfinite(est).all(axis=1)
    n_dropped = int(est.shape[0] - finite.sum())
    if n_dropped:
        logger.warning(
            "Dropped %d of %d gradient estimates with non-finite entries (NaN/inf).", n_dropped, est.shape[0]
        )
    return est[finite], n_dropped


def _point_values(d: np.ndarray, angles: np.ndarray, t2: float) -> dict[str, float]:
    """Statistics of the deviations ``d = g - truth`` and the angles (no resampling)."""
    dbar = d.mean(axis=0)
    bias2 = float(dbar @ dbar)
    c = d - dbar
    variance = float(np.einsum("ij,ij->", c, c) / d.shape[0])
    mse = bias2 + variance
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN angles (zero estimates)
        angle_mean = float(np.nanmean(angles))
        angle_median = float(np.nanmedian(angles))
    return {
        "bias2": bias2,
        "variance": variance,
        "mse": mse,
        "relative_mse": mse / t2 if t2 > 0 else math.nan,
        "angle_mean": angle_mean,
        "angle_median": angle_median,
    }


def _resampled_values(
    dT: np.ndarray, cn: np.ndarray, dbar: np.ndarray, angles: np.ndarray, t2: float, idx: np.ndarray
) -> dict[str, np.ndarray]:
    """Statistics of a batch of resamples ``idx`` (B, m) of the rows; ``dT`` is ``(g - truth).T``."""
    dm = np.stack([col[idx].mean(axis=1) for col in dT], axis=1)  # (B, p) resampled mean deviation
    bias2 = np.einsum("bp,bp->b", dm, dm)
    cm = dm - dbar  # resampled mean of the centred rows
    variance = np.maximum(cn[idx].mean(axis=1) - np.einsum("bp,bp->b", cm, cm), 0.0)
    mse = bias2 + variance
    a_mean, a_median = _resampled_angles(angles, idx)
    return {
        "bias2": bias2,
        "variance": variance,
        "mse": mse,
        "relative_mse": mse / t2 if t2 > 0 else np.full_like(mse, np.nan),
        "angle_mean": a_mean,
        "angle_median": a_median,
    }


def _resampled_angles(angles: np.ndarray, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and median angle of each resample (NaN angles of zero estimates ignored)."""
    if np.isnan(angles).any():
        a = angles[idx]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # a resample of zero estimates only
            return np.nanmean(a, axis=1), np.nanmedian(a, axis=1)
    # median through the ranks: sorting small ints is about twice as fast as np.median
    m = angles.shape[0]
    order = np.argsort(angles, kind="stable")
    rank = np.empty(m, dtype=np.intp)
    rank[order] = np.arange(m)
    ranks = np.sort(rank[idx], axis=1)
    ordered = angles[order]
    median = 0.5 * (ordered[ranks[:, (m - 1) // 2]] + ordered[ranks[:, m // 2]])
    return angles[idx].mean(axis=1), median


def _bootstrap(
    d: np.ndarray, angles: np.ndarray, t2: float, n_boot: int, seed: int | None
) -> dict[str, np.ndarray]:
    """``n_boot`` percentile-bootstrap replicates of every statistic, in memory-bounded batches."""
    m = d.shape[0]
    rng = np.random.default_rng(seed)
    dbar = d.mean(axis=0)
    c = d - dbar
    cn = np.einsum("ij,ij->i", c, c)
    dT = np.ascontiguousarray(d.T)
    batch = max(1, min(n_boot, _BATCH_ELEMENTS // m))
    parts: dict[str, list[np.ndarray]] = {name: [] for name in STATISTICS}
    for start in range(0, n_boot, batch):
        idx = rng.integers(0, m, size=(min(batch, n_boot - start), m))
        for name, values in _resampled_values(dT, cn, dbar, angles, t2, idx).items():
            parts[name].append(values)
    return {name: np.concatenate(vals) for name, vals in parts.items()}


def rank_correlation(x: ArrayLike, y: ArrayLike) -> float | None:
    """Spearman's rank correlation of paired ``x`` and ``y`` (scipy); ``None`` for fewer than 3
    pairs or a side without spread, where it is undefined."""
    from scipy.stats import spearmanr

    a, b = np.asarray(x, dtype=np.float64).reshape(-1), np.asarray(y, dtype=np.float64).reshape(-1)
    if a.shape != b.shape:
        raise ValueError(f"rank_correlation needs paired values: {a.size} and {b.size} given")
    if a.size < 3 or np.ptp(a) == 0 or np.ptp(b) == 0:
        return None
    return float(spearmanr(a, b).statistic)


def percentile_ci(values: np.ndarray, confidence: float) -> tuple[float, float]:
    """Central percentile interval of the finite ``values`` at ``confidence``."""
    finite = values[np.isfinite(values)]
    if finite.size == 0:
        return math.nan, math.nan
    lo, hi = np.quantile(finite, [(1.0 - confidence) / 2.0, (1.0 + confidence) / 2.0])
    return float(lo), float(hi)


def error_statistics(
    estimates: ArrayLike,
    truth: ArrayLike,
    n_boot: int = 10000,
    confidence: float = 0.95,
    seed: int | None = 0,
) -> ErrorStatistics:
    """Bias², variance, MSE and angle statistics with percentile bootstrap intervals.

    Rows of ``estimates`` with a NaN/inf entry (e.g. an overflowed importance weight) are
    dropped, counted in ``n_dropped`` and logged.  The remaining ``n`` data sets are resampled
    with replacement ``n_boot`` times; each interval is the ``(1 -+ confidence) / 2`` quantile
    pair of the replicates.  Zero estimates have no angle and are ignored by the angle statistics.

    Parameters
    ----------
    estimates : array of shape (m, p)
        One gradient estimate per independent data set, ``m >= 2``.
    truth : array of shape (p,)
        The exact gradient (finite).
    n_boot : int, default=10000
        Bootstrap replicates.
    confidence : float, default=0.95
        Level of the intervals, in (0, 1).
    seed : int or None, default=0
        Seed of the resampling.

    Returns
    -------
    ErrorStatistics
        Point values, intervals, ``n`` and ``n_dropped``.

    Raises
    ------
    ValueError
        On wrong shapes, ``m < 2`` (or fewer than 2 finite rows), non-finite ``truth``,
        ``confidence`` outside (0, 1) or ``n_boot < 1``.
    """
    est, tru = _as_estimates(estimates, truth)
    check_bootstrap_options(n_boot, confidence)
    if est.shape[0] < 2:
        raise ValueError(f"Need at least m = 2 estimates (rows). Got m = {est.shape[0]}.")
    if not np.isfinite(tru).all():
        raise ValueError(f"'truth' must be finite. Got {tru}.")
    est, n_dropped = _drop_nonfinite(est)
    if est.shape[0] < 2:
        raise ValueError(
            f"Fewer than 2 finite estimates remain after dropping {n_dropped} non-finite rows."
        )
    t2 = float(tru @ tru)
    d = est - tru
    angles = angles_degrees(est, tru)
    point = _point_values(d, angles, t2)
    boot = _bootstrap(d, angles, t2, int(n_boot), seed)
    fields: dict[str, Any] = {}
    for name in STATISTICS:
        fields[name] = point[name]
        fields[f"{name}_ci"] = percentile_ci(boot[name], float(confidence))
    stats = ErrorStatistics(n=est.shape[0], n_dropped=n_dropped, confidence=float(confidence),
                            n_boot=int(n_boot), **fields)
    logger.debug(  # the experiment drivers log each cell with its sweep, point and estimator
        "n=%d dropped=%d bias2=%.4g variance=%.4g mse=%.4g [%.4g, %.4g] angle median=%.3g deg",
        stats.n, stats.n_dropped, stats.bias2, stats.variance, stats.mse, *stats.mse_ci, stats.angle_median,
    )
    return stats


def _check_entry(sweep: str, name: str, entry: Any) -> tuple[np.ndarray, list[Any], np.ndarray]:
    """Validate one ``results[sweep][estimator]`` entry; return (truth, values, estimates)."""
    where = f"results[{sweep!r}][{name!r}]"
    if not isinstance(entry, Mapping):
        raise ValueError(f"{where} must be a mapping with keys 'truth', 'values', 'estimates'.")
    missing = [key for key in ("truth", "values", "estimates") if key not in entry]
    if missing:
        raise ValueError(f"{where} lacks the key(s) {missing}.")
    values = np.asarray(entry["values"]).ravel().tolist()
    est = np.asarray(entry["estimates"], dtype=np.float64)
    truth = np.asarray(entry["truth"], dtype=np.float64)
    if est.ndim != 3 or est.shape[0] != len(values):
        raise ValueError(
            f"{where}['estimates'] must have shape (len(values), m, p) = ({len(values)}, m, p). "
            f"Got shape {est.shape}."
        )
    if truth.shape != (est.shape[2],):
        raise ValueError(f"{where}['truth'] must have shape ({est.shape[2]},). Got shape {truth.shape}.")
    return truth, values, est


def summary_rows(
    results: Mapping[str, Mapping[str, Mapping[str, Any]]],
    n_boot: int = 10000,
    confidence: float = 0.95,
    seed: int | None = 0,
    progress: bool = False,
) -> list[dict[str, Any]]:
    """One flat row of :func:`error_statistics` per (sweep, x, estimator).

    Parameters
    ----------
    results : mapping
        ``{sweep: {estimator: {"truth": (p,), "values": sequence of x,
        "estimates": (len(values), m, p)}}}``.
    n_boot, confidence, seed
        Passed to :func:`error_statistics` (the same seed for every cell).
    progress : bool, default=False
        Show a progress bar.

    Returns
    -------
    list of dict
        Keys :data:`CSV_COLUMNS`; rows ordered by sweep, then x (in order of appearance),
        then estimator (in order of appearance).

    Raises
    ------
    ValueError
        If ``results`` is malformed or a cell fails :func:`error_statistics`.
    """
    if not isinstance(results, Mapping) or not results:
        raise ValueError("'results' must be a non-empty mapping {sweep: {estimator: {...}}}.")
    check_bootstrap_options(n_boot, confidence)
    cells = []
    for sweep, by_est in results.items():
        if not isinstance(by_est, Mapping) or not by_est:
            raise ValueError(f"results[{sweep!r}] must be a non-empty mapping of estimators.")
        x_order: dict[Any, int] = {}
        for e_pos, (name, entry) in enumerate(by_est.items()):
            truth, values, est = _check_entry(str(sweep), str(name), entry)
            for i, x in enumerate(values):
                x_pos = x_order.setdefault(x, len(x_order))
                cells.append((sweep, x_pos, e_pos, x, name, est[i], truth))
    sweep_pos = {s: k for k, s in enumerate(results)}
    cells.sort(key=lambda c: (sweep_pos[c[0]], c[1], c[2]))
    rows = []
    for sweep, _, _, x, name, est, truth in tqdm(cells, desc="bootstrap", disable=not progress):
        try:
            stats = error_statistics(est, truth, n_boot=n_boot, confidence=confidence, seed=seed)
        except ValueError as err:
            raise ValueError(f"sweep {sweep!r}, x={x!r}, estimator {name!r}: {err}") from err
        rows.append({"sweep": sweep, "x": x, "estimator": name, **stats.as_dict()})
    return rows


def write_csv(rows: Sequence[Mapping[str, Any]], path: str | Path) -> Path:
    """Write rows to a CSV file: :data:`CSV_COLUMNS` first, any other keys after, in order of appearance.

    Raises
    ------
    ValueError
        If ``rows`` is empty.
    """
    if len(rows) == 0:
        raise ValueError("'rows' is empty; nothing to write.")
    columns = [c for c in CSV_COLUMNS if any(c in row for row in rows)]
    for row in rows:
        columns += [key for key in row if key not in columns]
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns, restval="")
        writer.writeheader()
        for row in rows:
            writer.writerow({key: row.get(key, "") for key in columns})
    return path


def read_csv(path: str | Path) -> list[dict[str, Any]]:
    """Read a :func:`write_csv` file; ``n``/``n_dropped`` become int, numbers float, the rest str."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"CSV file {str(path)!r} does not exist.")
    with path.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    out = []
    for row in rows:
        parsed: dict[str, Any] = {}
        for key, value in row.items():
            if key in ("sweep", "estimator"):
                parsed[key] = value
            elif key in ("n", "n_dropped"):
                parsed[key] = int(value)
            else:
                try:
                    parsed[key] = float(value)
                except ValueError:
                    parsed[key] = value
        out.append(parsed)
    return out
