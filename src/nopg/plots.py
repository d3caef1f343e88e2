"""Figures: learning curves and pendulum phase portraits.

matplotlib is imported lazily inside the functions with the non-interactive ``Agg`` backend,
so importing :mod:`nopg` never needs a display (or matplotlib at all).
"""

from __future__ import annotations

import csv
import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from nopg.envs.pendulum import angle_to_obs, obs_to_angle

if TYPE_CHECKING:  # pragma: no cover - typing only
    from matplotlib.figure import Figure

__all__ = [
    "EVAL_LABEL",
    "learning_curve_figure",
    "load_log",
    "phase_portraits_figure",
    "plot_learning_curve",
    "plot_learning_curves",
    "plot_phase_portraits",
    "plot_trust_region",
    "trust_region_figure",
]

EVAL_LABEL = "evaluation return (undiscounted)"
"""Default axis label of evaluation returns: the summed rewards of an episode, not discounted
(the task decides the episode length; pass ``eval_label`` to say more, e.g. the step count)."""

LogLike = Mapping[str, Sequence[float]] | str | Path
"""A dict of columns or the path of a CSV training log."""

_DPI = 120


def _pyplot() -> Any:
    """Import ``matplotlib.pyplot`` with the Agg backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


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


def _save(fig: Figure, path: str | Path) -> Path:
    plt = _pyplot()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=_DPI)
    plt.close(fig)
    return path


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
    the evaluation returns (when there are any) and the support gap (when the log has one).
    """
    columns = load_log(log)
    xs_eval, ys_eval = _eval_points(columns, eval_updates, eval_returns)
    gap = columns.get("support_gap")
    has_gap = gap is not None and bool(np.isfinite(gap).any())
    panels = ["J_hat"] + (["eval"] if xs_eval.size else []) + (["gap"] if has_gap else [])
    ratios = {"J_hat": 3.0, "eval": 2.0, "gap": 1.0}
    plt = _pyplot()
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
        by_name["gap"].plot(columns["update"][ok_gap], gap[ok_gap], color="C3")
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
    return _save(learning_curve_figure(log, eval_updates, eval_returns, title, eval_label), path)


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

    plt = _pyplot()
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
    return _save(fig, path)


def _check_range(name: str, value: tuple[float, float]) -> tuple[float, float]:
    low, high = (float(v) for v in value)
    if not (math.isfinite(low) and math.isfinite(high) and low < high):
        raise ValueError(f"The '{name}' parameter must be finite with low < high. Got {value!r}.")
    return low, high


def _trajectory_angles(trajectory: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(theta, theta_dot)`` of a trajectory with NaN breaks where ``theta`` wraps."""
    theta, theta_dot = obs_to_angle(trajectory)
    theta, theta_dot = theta.ravel(), theta_dot.ravel()
    jumps = np.nonzero(np.abs(np.diff(theta)) > np.pi)[0] + 1
    return np.insert(theta, jumps, np.nan), np.insert(theta_dot, jumps, np.nan)


def plot_phase_portraits(
    value_fn: Callable[[np.ndarray], np.ndarray],
    visitation_fn: Callable[[np.ndarray], np.ndarray],
    path: str | Path,
    theta_range: tuple[float, float] = (-np.pi, np.pi),
    theta_dot_range: tuple[float, float] = (-8.0, 8.0),
    resolution: int = 100,
    data_states: np.ndarray | None = None,
    trajectory: np.ndarray | None = None,
    title: str | None = None,
) -> Path:
    """Pendulum phase portraits of the value function and the state visitation, saved to ``path``.

    See :func:`phase_portraits_figure` for the parameters; returns the written file.
    """
    return _save(phase_portraits_figure(value_fn, visitation_fn, theta_range, theta_dot_range,
                                        resolution, data_states, trajectory, title), path)


def phase_portraits_figure(
    value_fn: Callable[[np.ndarray], np.ndarray],
    visitation_fn: Callable[[np.ndarray], np.ndarray],
    theta_range: tuple[float, float] = (-np.pi, np.pi),
    theta_dot_range: tuple[float, float] = (-8.0, 8.0),
    resolution: int = 100,
    data_states: np.ndarray | None = None,
    trajectory: np.ndarray | None = None,
    title: str | None = None,
) -> Figure:
    """Pendulum phase portraits of the value function and the state visitation (paper figure).

    Both functions are evaluated on a ``resolution x resolution`` grid over ``theta`` x
    ``theta_dot`` (converted to observations ``[cos th, sin th, thdot]`` with
    :func:`nopg.envs.pendulum.angle_to_obs`; ``th = 0`` is upright) and drawn as two
    side-by-side ``pcolormesh`` panels.

    Parameters
    ----------
    value_fn : callable
        ``value_fn(obs)`` with ``obs`` of shape (m, 3) returns ``V(s)`` of shape (m,).
    visitation_fn : callable
        ``visitation_fn(obs)`` returns the (discounted) state visitation ``ε_π(s)·μ``, (m,).
    path : str or pathlib.Path
        Output PNG file.
    theta_range, theta_dot_range : tuple of float
        Axis ranges in rad and rad/s.
    resolution : int, default=100
        Grid points per axis (at least 2).
    data_states : array of shape (n, 3), optional
        Observations of the data set, drawn as a scatter on both panels.
    trajectory : array of shape (T, 3), optional
        Observations of an episode, drawn as a line (broken where ``theta`` wraps) with its first
        state marked "start".
    title : str, optional
        Figure title.

    Returns
    -------
    matplotlib.figure.Figure

    Raises
    ------
    ValueError
        If ``resolution < 2``, a range is invalid, or a function returns the wrong number
        of values.
    """
    if isinstance(resolution, bool) or not isinstance(resolution, (int, np.integer)):
        raise ValueError(f"The 'resolution' parameter must be an int >= 2. Got {resolution!r}.")
    if resolution < 2:
        raise ValueError(f"The 'resolution' parameter must be an int >= 2. Got {resolution}.")
    thetas = np.linspace(*_check_range("theta_range", theta_range), resolution)
    theta_dots = np.linspace(*_check_range("theta_dot_range", theta_dot_range), resolution)
    grid_th, grid_thd = np.meshgrid(thetas, theta_dots)  # (res_thd, res_th)
    obs = angle_to_obs(grid_th.ravel(), grid_thd.ravel())  # (m, 3)

    panels = []
    for name, fn in (("value_fn", value_fn), ("visitation_fn", visitation_fn)):
        vals = np.asarray(fn(obs), dtype=np.float64).reshape(-1)
        if vals.size != obs.shape[0]:
            raise ValueError(
                f"'{name}' must return one value per observation: expected {obs.shape[0]}, "
                f"got {vals.size}."
            )
        panels.append(vals.reshape(grid_th.shape))

    data_angles = None
    if data_states is not None:
        data_angles = obs_to_angle(np.asarray(data_states, dtype=np.float64).reshape(-1, 3))
    traj_angles = None
    if trajectory is not None:
        traj_angles = _trajectory_angles(np.asarray(trajectory, dtype=np.float64).reshape(-1, 3))

    plt = _pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    names = ("V(s)", r"visitation $\varepsilon_\pi(s)\cdot\mu$")
    cmaps = ("viridis", "magma")
    for ax, values, name, cmap in zip(axes, panels, names, cmaps, strict=True):
        mesh = ax.pcolormesh(grid_th, grid_thd, values, shading="auto", cmap=cmap)
        fig.colorbar(mesh, ax=ax, label=name)
        if data_angles is not None:
            ax.scatter(*data_angles, s=6, c="w", edgecolors="k", linewidths=0.3, label="data")
        if traj_angles is not None:
            ax.plot(*traj_angles, color="C3", lw=1.5, label="trajectory")
            ax.plot(traj_angles[0][:1], traj_angles[1][:1], ls="none", marker="o", ms=8,
                    mfc="C3", mec="w", mew=1.5, zorder=5, clip_on=False, label="start")
        ax.set_xlim(thetas[0], thetas[-1])
        ax.set_ylim(theta_dots[0], theta_dots[-1])
        ax.set_xlabel(r"$\theta$ [rad]")
        ax.set_ylabel(r"$\dot\theta$ [rad/s]")
        ax.set_title(name)
        if data_angles is not None or traj_angles is not None:
            ax.legend(loc="upper right", fontsize="small")
    if title:
        fig.suptitle(title)
    return fig


def plot_trust_region(
    data_states: np.ndarray,
    data_actions: np.ndarray,
    log_likelihood: np.ndarray,
    log_grad_norm: np.ndarray,
    theta3: np.ndarray,
    w_edges: np.ndarray,
    w_dot_edges: np.ndarray,
    heat: np.ndarray,
    path: str | Path,
    heat_label: str = r"$\|g_i\|$ per bin",
    title: str | None = None,
) -> Path:
    """The trust-region figure, saved to ``path``; see :func:`trust_region_figure`."""
    return _save(trust_region_figure(data_states, data_actions, log_likelihood, log_grad_norm,
                                     theta3, w_edges, w_dot_edges, heat, heat_label, title), path)


def trust_region_figure(
    data_states: np.ndarray,
    data_actions: np.ndarray,
    log_likelihood: np.ndarray,
    log_grad_norm: np.ndarray,
    theta3: np.ndarray,
    w_edges: np.ndarray,
    w_dot_edges: np.ndarray,
    heat: np.ndarray,
    heat_label: str = r"$\|g_i\|$ per bin",
    title: str | None = None,
) -> Figure:
    """The trust-region figure: (a) data, (b) log-likelihood vs log gradient norm, (c) heat map.

    The pendulum angle is called ``theta`` as in the other figures (:func:`plot_phase_portraits`);
    ``theta_3`` and ``nabla_theta`` refer to the policy's parameters and are labelled as such.

    Parameters
    ----------
    data_states : array of shape (n, 3)
        Observations ``[cos theta, sin theta, theta_dot]``; drawn in the ``(theta, theta_dot)``
        plane.
    data_actions : array of shape (n,)
        Colour of each data point.
    log_likelihood, log_grad_norm, theta3 : arrays of shape (p,)
        One point per policy, coloured by ``theta3``.
    w_edges, w_dot_edges : arrays of shape (bx + 1,) and (by + 1,)
        Bin edges of the heat map in ``theta`` and ``theta_dot``.
    heat : array of shape (bx, by)
        Per-bin values (NaN bins are left blank); drawn on a log colour scale when positive.
    heat_label, title : str, optional
        Colour-bar label of the heat map and figure title.

    Returns
    -------
    matplotlib.figure.Figure
    """
    states = np.asarray(data_states, dtype=np.float64).reshape(-1, 3)
    actions = np.asarray(data_actions, dtype=np.float64).reshape(-1)
    if actions.shape[0] != states.shape[0]:
        raise ValueError(f"data_actions has {actions.shape[0]} entries but data_states has "
                         f"{states.shape[0]} rows.")
    x, y, c = (np.asarray(v, dtype=np.float64).reshape(-1) for v in (log_likelihood, log_grad_norm, theta3))
    if not x.shape == y.shape == c.shape:
        raise ValueError(f"log_likelihood, log_grad_norm and theta3 must have equal lengths. "
                         f"Got {x.size}, {y.size} and {c.size}.")
    heat = np.asarray(heat, dtype=np.float64)
    if heat.shape != (len(w_edges) - 1, len(w_dot_edges) - 1):
        raise ValueError(f"heat must have shape ({len(w_edges) - 1}, {len(w_dot_edges) - 1}). "
                         f"Got {heat.shape}.")
    from matplotlib.colors import LogNorm

    plt = _pyplot()
    theta, theta_dot = obs_to_angle(states)
    fig, axes = plt.subplots(1, 3, figsize=(17, 4.8))
    bound = float(np.max(np.abs(actions))) or 1.0
    sc = axes[0].scatter(theta, theta_dot, c=actions, s=5, cmap="coolwarm", vmin=-bound, vmax=bound)
    fig.colorbar(sc, ax=axes[0], label="action")
    axes[0].set_title(f"(a) data ({states.shape[0]} samples)")

    axes[1].plot(x, y, color="0.6", lw=1, zorder=1)
    sc = axes[1].scatter(x, y, c=c, cmap="viridis", s=22, zorder=2)
    fig.colorbar(sc, ax=axes[1], label=r"policy parameter $\theta_3$")
    axes[1].set_xlabel("log-likelihood of the policy (mean per sample)")
    axes[1].set_ylabel(r"$\log\|\nabla_\theta \hat J\|$")
    axes[1].set_title("(b) gradient norm vs log-likelihood")
    axes[1].grid(alpha=0.3)

    finite = heat[np.isfinite(heat) & (heat > 0)]
    norm = None
    if finite.size:  # log scale over the upper 95% of the bins (a few near-zero bins would flatten it)
        low = min(float(np.percentile(finite, 5)), float(finite.max()) / 10)
        norm = LogNorm(vmin=low, vmax=float(finite.max()), clip=True)
    mesh = axes[2].pcolormesh(w_edges, w_dot_edges, np.ma.masked_invalid(heat).T, cmap="magma",
                              norm=norm, shading="flat")
    fig.colorbar(mesh, ax=axes[2], label=heat_label, extend="min" if finite.size else "neither")
    axes[2].set_facecolor("0.85")
    axes[2].set_title("(c) per-sample gradient contributions (grey: no data)")
    for ax in (axes[0], axes[2]):
        ax.set_xlim(-np.pi, np.pi)
        ax.set_ylim(float(w_dot_edges[0]), float(w_dot_edges[-1]))
        ax.set_xlabel(r"$\theta$ [rad] (0 upright)")
        ax.set_ylabel(r"$\dot\theta$ [rad/s]")
    if title:
        fig.suptitle(title)
    return fig
