"""The pendulum's figures: value and visitation phase portraits, and the trust-region figure.

Both draw over the pendulum's angle and angular velocity ``(theta, theta_dot)``, with states in
gymnasium's observation ``[cos theta, sin theta, theta_dot]`` (:mod:`nopg.envs.pendulum`).
matplotlib is imported lazily with the ``Agg`` backend (:mod:`nopg.viz.figures`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from nopg.envs.pendulum import angle_to_obs, obs_to_angle
from nopg.viz.figures import pyplot, save_figure

if TYPE_CHECKING:  # pragma: no cover - typing only
    from matplotlib.figure import Figure

__all__ = ["phase_portraits_figure", "plot_phase_portraits", "plot_trust_region",
           "trust_region_figure"]


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
    fig = phase_portraits_figure(value_fn, visitation_fn, theta_range, theta_dot_range,
                                 resolution, data_states, trajectory, title)
    return save_figure(fig, path)


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

    plt = pyplot()
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
    fig = trust_region_figure(data_states, data_actions, log_likelihood, log_grad_norm, theta3,
                              w_edges, w_dot_edges, heat, heat_label, title)
    return save_figure(fig, path)


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

    plt = pyplot()
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
