"""Figure of a :class:`nopg.select.bandwidth_report.BandwidthReport` (``nopg bandwidth --plot``).

Three panels: the chosen and Silverman bandwidths per dimension (log scale), the distances of the
next states to their nearest and k-th nearest data states in bandwidth units, and the thinness of
the data at the next states with the data's own next actions and with uniform actions.
matplotlib is imported lazily with the non-interactive ``Agg`` backend (as in :mod:`nopg.viz.plots`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..select.bandwidth_report import BandwidthReport, ordinal
from .figures import check_plot_path, pyplot, save_figure

__all__ = ["plot_bandwidth_report"]

def plot_bandwidth_report(report: BandwidthReport, path: str | Path) -> Path:
    """Draw ``report`` to ``path`` (format from the suffix, e.g. ``.png``) and return the path.

    Raises
    ------
    ValueError
        If the folder of ``path`` does not exist (it is not created).
    """
    path = check_plot_path(path)
    plt = pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))

    ax = axes[0]
    labels = [f"s{j}" for j in range(report.state_dim)] + [f"a{j}" for j in range(report.action_dim)]
    chosen = np.concatenate([report.bandwidths.state, report.bandwidths.action])
    silver = np.concatenate([report.state_silverman, report.action_silverman])
    x = np.arange(len(labels))
    ax.bar(x - 0.2, chosen, width=0.4, label=f"chosen ({report.method_used})")
    ax.bar(x + 0.2, silver, width=0.4, label="Silverman")
    ax.set_yscale("log")
    ax.set_xticks(x, labels)
    ax.set_ylabel("bandwidth")
    ax.set_title("bandwidth per dimension")
    ax.legend()

    ax = axes[1]
    near, kth = report.nearest_distance, report.kth_distance
    top = float(np.quantile(kth, 0.99)) if kth.size else 1.0
    bins = np.linspace(0.0, max(top, 1e-12), 40)
    ax.hist(np.clip(near, 0, bins[-1]), bins=bins, alpha=0.6, label="nearest")
    ax.hist(np.clip(kth, 0, bins[-1]), bins=bins, alpha=0.6, label=f"{ordinal(report.neighbor_k)} nearest")
    ax.set_xlabel("distance s'_i to data states [state bandwidths]")
    ax.set_ylabel("next states")
    ax.set_title("next state to data (values above the 99% quantile clipped)")
    ax.legend()

    ax = axes[2]
    bins = np.linspace(0.0, 1.0, 41)
    for name, thin in (("(a) data's next actions", report.thinness_own),
                       ("(b) uniform actions", report.thinness_uniform)):
        if thin.size:
            ax.hist(thin, bins=bins, alpha=0.6, weights=np.full(thin.size, 1.0 / thin.size),
                    label=f"{name} (n={thin.size})")
    ax.axvline(0.5, color="k", lw=0.8, ls="--")
    ax.set_xlabel("thinness 1 - w (0 supported, 1 extrapolated)")
    ax.set_yscale("log")
    ax.set_ylabel("share of queries")
    ax.set_title(f"support of the data (model {report.support_model})")
    ax.legend()

    return save_figure(fig, path)
