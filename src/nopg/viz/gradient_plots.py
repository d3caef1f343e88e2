"""Figures of the gradient analysis (paper §6.3, Fig. ``sample_analysis``).

One figure per sweep (``samples``, ``alpha``, ``bandwidth``): bias², variance and MSE of every
estimator with their bootstrap intervals as shaded bands, and the distribution of the angle
between the estimates and the true gradient as box plots.  The numbers come from
:func:`nopg.analysis.statistics.summary_rows`; the angles from the raw ``results``.
matplotlib is imported lazily with the Agg backend (see :mod:`nopg.viz.plots`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from nopg.analysis.statistics import angles_degrees
from nopg.viz.figures import pyplot, save_figure

__all__ = ["ESTIMATOR_ORDER", "estimator_colors", "plot_gradient_sweep"]

ESTIMATOR_ORDER: tuple[str, ...] = ("NOPG-D", "NOPG-S", "G(PO)MDP+N", "G(PO)MDP+BN", "DPG+Q")
"""Known estimators, in legend order; they always get the first five colours."""

_PALETTE = (  # matplotlib's tab10, fixed here so the colours do not depend on rcParams
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
    "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf",
)

_LOG_X_SWEEPS = frozenset({"samples", "bandwidth"})

_X_LABELS = {
    "samples": "number of samples",
    "alpha": r"off-policiness $\alpha$",
    "bandwidth": r"bandwidth $\kappa$",
}

_PANELS = (
    ("bias2", r"bias$^2$"),
    ("variance", "variance"),
    ("mse", "MSE"),
)


def _ordered(names: Iterable[str]) -> list[str]:
    """Known estimators in :data:`ESTIMATOR_ORDER`, then the others sorted by name."""
    unique = set(names)
    return [n for n in ESTIMATOR_ORDER if n in unique] + sorted(unique - set(ESTIMATOR_ORDER))


def estimator_colors(names: Iterable[str]) -> dict[str, str]:
    """Colour per estimator: fixed for :data:`ESTIMATOR_ORDER`, further colours for others.

    Unknown names get the remaining palette colours in sorted-name order (cycling after ten).
    """
    colors = {name: _PALETTE[i] for i, name in enumerate(ESTIMATOR_ORDER)}
    unknown = sorted(set(names) - set(ESTIMATOR_ORDER))
    for k, name in enumerate(unknown):
        colors[name] = _PALETTE[(len(ESTIMATOR_ORDER) + k) % len(_PALETTE)]
    return {name: colors[name] for name in _ordered(names)}


def _series(rows: Sequence[Mapping[str, Any]], estimator: str, key: str) -> tuple[np.ndarray, ...]:
    """``x, value, lo, hi`` of one statistic of one estimator, sorted by x."""
    mine = [r for r in rows if r["estimator"] == estimator]
    x = np.array([float(r["x"]) for r in mine])
    cols = [np.array([float(r[k]) for r in mine]) for k in (key, f"{key}_lo", f"{key}_hi")]
    order = np.argsort(x, kind="stable")
    return (x[order], *(c[order] for c in cols))


def _stat_panel(ax: Any, rows: Sequence[Mapping[str, Any]], key: str, label: str,
                colors: Mapping[str, str], log_x: bool) -> None:
    positive = False
    for name, color in colors.items():
        x, y, lo, hi = _series(rows, name, key)
        if x.size == 0:
            continue
        positive |= bool((y > 0).any())
        ax.plot(x, y, marker="o", ms=4, lw=1.6, color=color, label=name)
        ax.fill_between(x, lo, hi, color=color, alpha=0.18, lw=0)
    if positive:
        ax.set_yscale("log")
    if log_x:
        ax.set_xscale("log")
    ax.set_ylabel(label)
    ax.set_title(label)
    ax.grid(alpha=0.35, which="major")
    ax.grid(alpha=0.1, which="minor")


def _angle_panel(ax: Any, by_est: Mapping[str, Mapping[str, Any]], colors: Mapping[str, str]) -> list[Any]:
    """Box plots of the angles per x (categorical axis) and estimator, side by side."""
    xs = sorted({x for entry in by_est.values() for x in np.asarray(entry["values"]).ravel().tolist()})
    names = [n for n in colors if n in by_est]
    width = 0.8 / max(len(names), 1)
    for j, name in enumerate(names):
        entry = by_est[name]
        est = np.asarray(entry["estimates"], dtype=np.float64)
        data, positions = [], []
        for i, x in enumerate(np.asarray(entry["values"]).ravel().tolist()):
            angles = angles_degrees(est[i], entry["truth"])
            data.append(angles[np.isfinite(angles)])
            positions.append(xs.index(x) + (j - (len(names) - 1) / 2) * width)
        ax.boxplot(data, positions=positions, widths=0.9 * width, patch_artist=True, manage_ticks=False,
                   boxprops={"facecolor": colors[name], "alpha": 0.55, "edgecolor": colors[name]},
                   medianprops={"color": "k", "lw": 1.2}, whiskerprops={"color": colors[name]},
                   capprops={"color": colors[name]},
                   flierprops={"marker": ".", "ms": 3, "markeredgecolor": colors[name], "alpha": 0.5})
    ax.set_xticks(range(len(xs)), [f"{x:g}" for x in xs])
    ax.set_xlim(-0.6, len(xs) - 0.4)
    ax.set_ylim(0, 182)
    ax.set_yticks(range(0, 181, 30))
    ax.set_ylabel("angle to true gradient [deg]")
    ax.set_title("gradient direction")
    ax.grid(alpha=0.3, axis="y")
    return xs


def plot_gradient_sweep(
    rows: Sequence[Mapping[str, Any]],
    results: Mapping[str, Mapping[str, Mapping[str, Any]]],
    sweep: str,
    path: str | Path,
    title: str | None = None,
) -> Path:
    """Bias², variance, MSE (with bootstrap bands) and angle distributions over one sweep.

    Parameters
    ----------
    rows : sequence of mapping
        Rows of :func:`nopg.analysis.statistics.summary_rows` (or read back from its CSV);
        only those with ``row["sweep"] == sweep`` are used.
    results : mapping
        ``{sweep: {estimator: {"truth", "values", "estimates"}}}`` as passed to ``summary_rows``;
        ``results[sweep]`` supplies the angle distributions.
    sweep : str
        The sweep to draw (``"samples"`` and ``"bandwidth"`` get a log x-axis).
    path : str or pathlib.Path
        Output PNG file.
    title : str, optional
        Figure title (default names the sweep).

    Returns
    -------
    pathlib.Path
        The written file.

    Raises
    ------
    ValueError
        If ``sweep`` is not in ``results`` or no row belongs to it.
    """
    if sweep not in results:
        raise ValueError(f"Unknown sweep {sweep!r}; 'results' has sweeps {sorted(results)}.")
    mine = [r for r in rows if r.get("sweep") == sweep]
    if not mine:
        raise ValueError(f"No row belongs to sweep {sweep!r}.")
    by_est = results[sweep]
    colors = estimator_colors([r["estimator"] for r in mine] + list(by_est))
    log_x = sweep in _LOG_X_SWEEPS
    xlabel = _X_LABELS.get(sweep, sweep)

    plt = pyplot()
    fig, axes = plt.subplots(2, 2, figsize=(12, 8.5))
    for ax, (key, label) in zip(axes.flat[:3], _PANELS, strict=True):
        _stat_panel(ax, mine, key, label, colors, log_x)
        ax.set_xlabel(xlabel)
    _angle_panel(axes.flat[3], by_est, colors)
    axes.flat[3].set_xlabel(xlabel)
    axes.flat[0].legend(fontsize="small", loc="best")
    fig.suptitle(title or f"Gradient estimators over the {sweep!r} sweep (bands: bootstrap intervals)")
    return save_figure(fig, path)
