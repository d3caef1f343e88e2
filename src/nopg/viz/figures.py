"""Matplotlib plumbing shared by the plotting modules: the ``Agg`` pyplot, saving, path checks.

matplotlib is imported lazily, so the library imports without it being loaded, and always with
the non-interactive ``Agg`` backend (figures are files; no display is needed).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["DPI", "check_plot_path", "pyplot", "save_figure"]

DPI = 120
"""Resolution of every saved figure."""


def pyplot() -> Any:
    """``matplotlib.pyplot`` with the ``Agg`` backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig: Any, path: str | Path) -> Path:
    """Lay out ``fig`` (``tight_layout``, unless the figure has a layout engine of its own, e.g.
    ``layout="constrained"``), write it to ``path`` (creating its folder; format from the
    suffix), close it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if fig.get_layout_engine() is None:
        fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    pyplot().close(fig)
    return path


def check_plot_path(path: str | Path) -> Path:
    """``path`` as a Path; raises ValueError if its folder does not exist (it is not created)."""
    path = Path(path)
    if not path.parent.is_dir():
        raise ValueError(f"the folder {str(path.parent)!r} of the plot {str(path)!r} does not exist")
    return path
