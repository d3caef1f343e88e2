"""Where a trained policy acts compared with the data (``nopg fit``'s ``actions.png``).

One panel per action dimension: the histogram of the data's actions against the histogram of the
policy's actions at the data's states and its actions at the initial states. A policy whose
actions pile up where the data have none is acting where the kernel model extrapolates (compare
the run's support gap). matplotlib is imported lazily with the ``Agg`` backend.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from torch import nn

from ..envs.evaluation import policy_actions
from .figures import check_plot_path, pyplot, save_figure

__all__ = ["plot_policy_actions"]

def plot_policy_actions(policy: nn.Module, data_states: np.ndarray, data_actions: np.ndarray,
                        initial_states: np.ndarray, path: str | Path) -> Path:
    """Histograms of the data's actions and the policy's actions, one panel per dimension.

    Raises
    ------
    ValueError
        If the folder of ``path`` does not exist, or the actions' widths differ.
    """
    path = check_plot_path(path)
    at_data = policy_actions(policy, data_states)
    at_start = policy_actions(policy, initial_states)
    data_actions = np.asarray(data_actions, dtype=np.float64).reshape(len(data_actions), -1)
    if at_data.shape[1] != data_actions.shape[1]:
        raise ValueError(f"the policy gives {at_data.shape[1]}-D actions; the data have "
                         f"{data_actions.shape[1]}-D actions")
    d_a = data_actions.shape[1]
    plt = pyplot()
    fig, axes = plt.subplots(1, d_a, figsize=(4.5 * d_a, 3.6), squeeze=False)
    for j, ax in enumerate(axes[0]):
        values = np.concatenate([data_actions[:, j], at_data[:, j], at_start[:, j]])
        bins = np.linspace(values.min(), values.max() + 1e-12, 31)
        ax.hist(data_actions[:, j], bins=bins, density=True, alpha=0.5, label="data's actions")
        ax.hist(at_data[:, j], bins=bins, density=True, histtype="step", linewidth=2,
                label="policy at the data's states")
        ax.hist(at_start[:, j], bins=bins, density=True, histtype="step", linestyle="--",
                label="policy at the initial states")
        ax.set_xlabel(f"action a{j}")
        ax.set_ylabel("density")
    axes[0][0].legend(fontsize=8)
    fig.suptitle("Where the policy acts, against the data")
    return save_figure(fig, path)
