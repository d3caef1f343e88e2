"""Figures of a fit: learning curves (``J_hat``, evaluation returns, support gap).

The pendulum's figures (phase portraits, the trust region) are in :mod:`nopg.viz.pendulum_plots`.

matplotlib is imported lazily inside the functions with the non-interactive ``Agg`` backend,
so importing :mod:`nopg` never needs a display (or matplotlib at all).
"""

from __future__ import annotations

import csv
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from nopg.viz.figures import pyplot, save_figure

if TYPE_CHECKING:  # pragma: no cover - typing only
    from matplotlib.figure import Figure

__all__ = [
    "EVAL_LABEL",
    "learning_curve_figure",
    "load_log",
    "plot_learning_curve",
    "plot_learning_curves",
]

EVAL_LABEL = "evaluation return (undiscounted)"
"""Default axis label of evaluation returns: the summed rewards of an episode, not discounted
(the task decides the episode length; pass ``eval_label`` to say more, e.g. the step count)."""

LogLike = Mapping[str, Sequence[float]] | str | Path
"""A dict of columns or the path of a CSV training log."""


def _to_float(value: Any) -> float:
    if value is None:
        return math.nan
    if isinstance(value, str):
        value = value.strip()
        return float(value) if value else math.nan
    return float(value)


def load_log(log: LogLike) -> dict[str, np.ndarray]:
    """Read a training log into float64 columns.

    Parameters
    ----------
    log : mapping or str or pathlib.Path
        Either a mapping of column name to values, or the path of a CSV file whose header
        names the columns.  Empty strings and ``None`` become NaN.  Non-numeric columns of a
        CSV are dropped.

    Returns
    -------
    dict of str to numpy.ndarray
        One 1-D float64 array per column.

    Raises
    ------
    ValueError
        If the file does not exist, has no header, the columns have different lengths, or
        the ``update`` or ``J_hat`` column is missing.
    """
    columns: dict[str, np.ndarray] = {}
    if isinstance(log, (str, Path)):
        path = Path(log)
        if not path.is_file():
            raise ValueError(f"Log file {str(path)!r} does not exist.")
        with path.open(newline="") as handle:
            reader = csv.DictReader(handle)
            if not reader.fieldnames:
                raise ValueError(f"Log file {str(path)!r} has no CSV header.")
            rows = list(reader)
        for name in reader.fieldnames:
            try:
                columns[name] = np.array([_to_float(row.get(name)) for row in rows])
            except ValueError:
                continue  # a non-numeric column (e.g. a timestamp string)
    elif isinstance(log, Mapping):
        for name, values in log.items():
            arr = np.array([_to_float(v) for v in np.asarray(values, dtype=object).ravel()])
            columns[str(name)] = arr
        lengths = {len(v) for v in columns.values()}
        if len(lengths) > 1:
            raise ValueError(f"Log columns must have equal lengths. Got lengths {sorted(lengths)}.")
    else:
        raise ValueError(
            f"The 'log' must be a mapping of columns or a CSV path. Got {type(log).__name__}."
        )
    for required in ("update", "J_hat"):
        if required not in columns:
            raise ValueError(
                f"The log needs an {required!r} column. Got columns {sorted(columns)}."
            )
    return columns


def _eval_points(
    columns: Mapping[str, np.ndarray],
    eval_updates: Sequence[float] | None,
    eval_returns: Sequence[float] | None,
) -> tuple[np.ndarray, np.ndarray]:
    """Evaluation (update, return) pairs, from the arguments or the ``eval_return`` column."""
    if (eval_updates is None) != (eval_returns is None):
        raise ValueError("Pass both 'eval_updates' and 'eval_returns', or neither.")
    if eval_updates is not None and eval_returns is not None:
        xs = np.asarray(eval_updates, dtype=np.float64).ravel()
        ys = np.asarray(eval_returns, dtype=np.float64).ravel()
        if xs.shape != ys.shape:
            raise ValueError(
                f"'eval_updates' and 'eval_returns' must have equal lengths. "
                f"Got {xs.size} and {ys.size}."
            )
    elif "eval_return" in columns:
        xs, ys = columns["update"], columns["eval_return"]
    else:
        return np.empty(0), np.empty(0)
    keep = np.isfinite(xs) & np.isfinite(ys)
    return xs[keep], ys[keep]


def learning_curve_figure(
    log: LogLike,
    eval_updates: Sequence[float] | None = None,
    eval_returns: Sequence[float] | None = None,
    title: str | None = None,
    eval_label: str = EVAL_LABEL,
) -> Figure:
    """The figure of :func:`plot_learning_curve`, returned instead of saved.

    Stacked panels sharing the update axis, each with its own labelled y-axis: ``J_hat`` (top),
    the evaluation returns (when there are any) and the support gap (when the log has one; with
    the initial states' gap dashed when the log has that too).
    """
    columns = load_log(log)
    xs_eval, ys_eval = _eval_points(columns, eval_updates, eval_returns)
    gap = columns.get("support_gap")
    has_gap = gap is not None and bool(np.isfinite(gap).any())
    panels = ["J_hat"] + (["eval"] if xs_eval.size else []) + (["gap"] if has_gap else [])
    ratios = {"J_hat": 3.0, "eval": 2.0, "gap": 1.0}
    plt = pyplot()
    fig, axes = plt.subplots(
        len(panels), 1, figsize=(7, 2.2 + 1.0 * sum(ratios[p] for p in panels)), sharex=True,
        squeeze=False, gridspec_kw={"height_ratios": [ratios[p] for p in panels]})
    by_name = dict(zip(panels, axes[:, 0], strict=True))
    ax = by_name["J_hat"]
    ok = np.isfinite(columns["update"]) & np.isfinite(columns["J_hat"])
    ax.plot(columns["update"][ok], columns["J_hat"][ok], color="C0")
    ax.set_ylabel(r"surrogate return $\hat J$")
    ax.set_title(title or "Learning curve")
    if "eval" in by_name:
        by_name["eval"].plot(xs_eval, ys_eval, "o--", color="C1", markersize=4)
        by_name["eval"].set_ylabel(eval_label)
    if "gap" in by_name:
        ok_gap = np.isfinite(columns["update"]) & np.isfinite(gap)
        by_name["gap"].plot(columns["update"][ok_gap], gap[ok_gap], color="C3", label="visitation")
        start = columns.get("initial_gap")
        if start is not None and bool(np.isfinite(start).any()):
            ok_start = np.isfinite(columns["update"]) & np.isfinite(start)
            by_name["gap"].plot(columns["update"][ok_start], start[ok_start], "--", color="C4",
                                label="initial states")
            by_name["gap"].legend(loc="best", fontsize="small")
        by_name["gap"].set_ylim(-0.02, 1.02)
        by_name["gap"].set_ylabel("support gap")
    for panel in axes[:, 0]:
        panel.grid(alpha=0.3)
    axes[-1, 0].set_xlabel("update")
    fig.align_ylabels(axes[:, 0])
    return fig


def plot_learning_curve(
    log: LogLike,
    path: str | Path,
    eval_updates: Sequence[float] | None = None,
    eval_returns: Sequence[float] | None = None,
    title: str | None = None,
    eval_label: str = EVAL_LABEL,
) -> Path:
    """Plot the surrogate return ``J_hat`` and evaluation returns against the update index.

    ``J_hat`` and the evaluation returns have different scales (a discounted model estimate and
    an undiscounted episode return), so each gets its own panel and labelled y-axis; the panels
    share the update axis. A third panel shows the support gap when the log has one.

    Parameters
    ----------
    log : mapping or str or pathlib.Path
        Columns ``update`` and ``J_hat`` (optionally ``eval_return`` with blanks/NaN where no
        evaluation took place, and ``support_gap``), as a dict or a CSV path; see
        :func:`load_log`.
    path : str or pathlib.Path
        Output PNG file.
    eval_updates, eval_returns : sequence of float, optional
        Evaluation points; override the log's ``eval_return`` column.
    title : str, optional
        Figure title.
    eval_label : str, default :data:`EVAL_LABEL`
        Y-axis label of the evaluation panel, e.g. ``"return over 200 steps (undiscounted)"``.

    Returns
    -------
    pathlib.Path
        The written file.

    Raises
    ------
    ValueError
        If the log is malformed or only one of ``eval_updates``/``eval_returns`` is given.
    """
    return save_figure(learning_curve_figure(log, eval_updates, eval_returns, title, eval_label), path)


def _stack_on_common_updates(
    logs: Sequence[dict[str, np.ndarray]], key: str
) -> tuple[np.ndarray, np.ndarray]:
    """Values of column ``key`` of every log at the updates where all logs have a value."""
    common: np.ndarray | None = None
    for cols in logs:
        ok = np.isfinite(cols["update"]) & np.isfinite(cols[key])
        upd = cols["update"][ok]
        common = upd if common is None else np.intersect1d(common, upd)
    if common is None or common.size == 0:
        return np.empty(0), np.empty((len(logs), 0))
    common = np.unique(common)
    stacked = []
    for cols in logs:
        ok = np.isfinite(cols["update"]) & np.isfinite(cols[key])
        upd, val = cols["update"][ok], cols[key][ok]
        # the last value logged at each update
        _, last = np.unique(upd[::-1], return_index=True)
        lookup = dict(zip(upd[::-1][last], val[::-1][last], strict=True))
        stacked.append([lookup[u] for u in common])
    return common, np.asarray(stacked, dtype=np.float64)


def plot_learning_curves(
    logs: Sequence[LogLike],
    path: str | Path,
    labels: Sequence[str] | None = None,
    title: str | None = None,
    eval_label: str = EVAL_LABEL,
) -> Path:
    """Plot several runs (e.g. seeds): individual curves, their mean and a min/max band.

    The left panel shows ``J_hat``; if every log has an ``eval_return`` column, a right
    panel shows the evaluation returns the same way.  Runs are compared at the updates that
    all of them logged.

    Parameters
    ----------
    logs : sequence of mapping or path
        The runs; see :func:`load_log`.
    path : str or pathlib.Path
        Output PNG file.
    labels : sequence of str, optional
        One label per run (default ``"run 0"``, ``"run 1"``, ...).
    title : str, optional
        Figure title.
    eval_label : str, default :data:`EVAL_LABEL`
        Y-axis label of the evaluation panel.

    Returns
    -------
    pathlib.Path
        The written file.

    Raises
    ------
    ValueError
        If ``logs`` is empty, the number of labels differs from the number of logs, or the
        runs share no update.
    """
    if isinstance(logs, (str, Path, Mapping)) or len(logs) == 0:
        raise ValueError("The 'logs' parameter must be a non-empty sequence of logs.")
    if labels is not None and len(labels) != len(logs):
        raise ValueError(
            f"Got {len(labels)} labels for {len(logs)} logs; pass one label per log."
        )
    labels = list(labels) if labels is not None else [f"run {i}" for i in range(len(logs))]
    columns = [load_log(log) for log in logs]
    keys = ["J_hat"]
    if all("eval_return" in c and np.isfinite(c["eval_return"]).any() for c in columns):
        keys.append("eval_return")
    if all("support_gap" in c and np.isfinite(c["support_gap"]).any() for c in columns):
        keys.append("support_gap")

    plt = pyplot()
    fig, axes = plt.subplots(1, len(keys), figsize=(6.5 * len(keys), 4), squeeze=False)
    for ax, key in zip(axes[0], keys, strict=True):
        updates, values = _stack_on_common_updates(columns, key)
        if updates.size == 0:
            plt.close(fig)
            raise ValueError(f"The logs share no update with a finite {key!r} value.")
        marker = "o" if key == "eval_return" else None
        for i, label in enumerate(labels):
            ax.plot(updates, values[i], lw=0.8, alpha=0.5, marker=marker, ms=3, label=label)
        ax.fill_between(updates, values.min(axis=0), values.max(axis=0), color="k", alpha=0.12,
                        label="min/max")
        ax.plot(updates, values.mean(axis=0), color="k", lw=2, label="mean")
        ax.set_xlabel("update")
        names = {"J_hat": (r"surrogate return $\hat J$", r"$\hat J$"),
                 "eval_return": (eval_label, "Evaluation return"),
                 "support_gap": ("share of visitation where data are thin", "Support gap")}
        ax.set_ylabel(names[key][0])
        ax.set_title(names[key][1])
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
    if title:
        fig.suptitle(title)
    return save_figure(fig, path)
