"""The mountain car's figure: ``V`` and the visitation over position x velocity, with the data
and an evaluation episode (the mountain-car tasks of :mod:`nopg.experiments`).

matplotlib is imported lazily with the ``Agg`` backend (:mod:`nopg.viz.figures`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from nopg.envs.evaluation import rollout
from nopg.envs.mountaincar import (
    GOAL_POSITION,
    MAX_POSITION,
    MAX_SPEED,
    MIN_POSITION,
    make_mountaincar_env,
)
from nopg.viz.figures import pyplot, save_figure

if TYPE_CHECKING:
    from nopg.data.dataset import TransitionDataset
    from nopg.train.algorithm import NOPG

__all__ = ["plot_mountaincar_portraits", "plot_mountaincar_run"]


def plot_mountaincar_run(algo: NOPG, data: TransitionDataset, path: Path, what: str,
                         resolution: int = 80, data_style: str = "episodes") -> Path:
    """:func:`plot_mountaincar_portraits` with an episode of the policy from ``reset(seed=10_000)``,
    titled "Mountain car, ``what``, J_hat = ..., evaluation return ..."."""
    env = make_mountaincar_env()
    try:
        traj = rollout(env, algo.policy, seed=10_000)
    finally:
        env.close()
    return plot_mountaincar_portraits(
        algo, data, traj["states"], path, resolution=resolution,
        title=f"Mountain car, {what}, J_hat = {algo.J_hat():.1f}, "
              f"evaluation return {traj['return']:.1f}", data_style=data_style)


def plot_mountaincar_portraits(algo: NOPG, data: TransitionDataset, trajectory: np.ndarray,
                               path: Path, resolution: int = 80, title: str | None = None,
                               data_style: str = "episodes") -> Path:
    """V and the visitation over position x velocity, with the data and a trajectory.

    ``data_style="episodes"`` draws each episode as a line (demonstrations), ``"points"`` the
    data states as dots (e.g. one-step transitions at random states).
    ``nopg.viz.pendulum_plots.plot_phase_portraits`` is specific to the pendulum's angle axes, hence this
    small plot for the mountain car's ``(x, v)`` state.
    """
    if data_style not in ("episodes", "points"):
        raise ValueError(f"The 'data_style' parameter must be 'episodes' or 'points'. "
                         f"Got {data_style!r} instead.")
    xs = np.linspace(MIN_POSITION, MAX_POSITION, resolution)
    vs = np.linspace(-MAX_SPEED, MAX_SPEED, resolution)
    gx, gv = np.meshgrid(xs, vs)
    grid = np.stack([gx.ravel(), gv.ravel()], axis=1)
    panels = [np.asarray(algo.value(grid), float).reshape(gx.shape),
              np.asarray(algo.visitation(grid), float).reshape(gx.shape)]
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    names = ("V(s)", r"visitation $\varepsilon_\pi(s)\cdot\mu$")
    for ax, values, name, cmap in zip(axes, panels, names, ("viridis", "magma"), strict=True):
        mesh = ax.pcolormesh(gx, gv, values, shading="auto", cmap=cmap)
        fig.colorbar(mesh, ax=ax, label=name)
        if data_style == "points":
            ax.scatter(data.states[:, 0], data.states[:, 1], s=1, color="w", alpha=0.4,
                       label="data")
        else:
            for j, idx in enumerate(data.episodes()):
                ep = np.vstack([data.states[idx], data.next_states[idx[-1]]])
                ax.plot(ep[:, 0], ep[:, 1], color="w", lw=0.8, alpha=0.8,
                        label="demonstrations" if j == 0 else None)
        ax.plot(trajectory[:, 0], trajectory[:, 1], color="C3", lw=1.5, label="evaluation")
        ax.axvline(GOAL_POSITION, color="C2", ls="--", lw=1, label="goal")
        ax.set_xlim(MIN_POSITION, MAX_POSITION)
        ax.set_ylim(-MAX_SPEED, MAX_SPEED)
        ax.set_xlabel("position x")
        ax.set_ylabel("velocity v")
        ax.set_title(name)
        ax.legend(loc="lower left", fontsize="small")
    if title:
        fig.suptitle(title)
    return save_figure(fig, path)
