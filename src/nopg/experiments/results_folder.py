"""The results folder of a run: what the runner writes, and where (the layout is in
:mod:`nopg.experiments.runner`'s docstring).

:class:`RunFolder` holds the run's own files (``config.json``, ``summary.json``, ``run.log``,
``learning_curves.png``) and gives one :class:`SeedFolder` per seed, which writes a fitted
method's files: the bandwidth report, the kept fit's log, the checkpoints (the kept fit's and,
with several recipes, the others') and the learning curve. The runner composes; these classes
only write.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..select.auto import AutoNOPG
from ..viz.bandwidth_plots import plot_bandwidth_report
from ..viz.plots import plot_learning_curve, plot_learning_curves
from .run_records import RunSummary

__all__ = ["RunFolder", "SeedFolder"]


@dataclass(frozen=True)
class SeedFolder:
    """``seed_<k>/`` of a run."""

    path: Path

    def write_method(self, method: AutoNOPG, title: str) -> None:
        """The files of a fitted :class:`~nopg.AutoNOPG`: ``bandwidths.json`` and
        ``bandwidths.png``, ``log.csv`` (the kept fit's), ``checkpoint/`` (the kept fit),
        ``checkpoint_<recipe>/`` for the other recipes' fits, and ``learning_curve.png``."""
        report = method.bandwidth_report_
        (self.path / "bandwidths.json").write_text(json.dumps(report.to_dict(), indent=2))
        plot_bandwidth_report(report, self.path / "bandwidths.png")
        fits = method.report_
        kept = fits.kept
        if kept.log_path is not None and kept.log_path.name != "log.csv":
            shutil.copyfile(kept.log_path, self.path / "log.csv")
        if len(fits.recipes) > 1:    # the other recipes' fits stay inspectable
            for cand in fits.candidates[1:]:
                cand.algo.save(self.path / f"checkpoint_{cand.name}")
        method.algo_.save(self.path / "checkpoint")
        plot_learning_curve(self.path / "log.csv", self.path / "learning_curve.png", title=title)


@dataclass(frozen=True)
class RunFolder:
    """A run's folder: ``created`` says whether this run made it (and so may remove it when
    nothing finished)."""

    path: Path
    created: bool

    @classmethod
    def create(cls, path: str | Path) -> RunFolder:
        """Make the folder (and its parents), or refuse with the reason in one line."""
        path = Path(path)
        created = not path.exists()
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise ValueError(f"cannot create the results folder {path}: "
                             f"{err.strerror or err}") from None
        return cls(path, created)

    def seed(self, seed: int) -> SeedFolder:
        """``seed_<seed>/``, made if needed."""
        folder = self.path / f"seed_{seed}"
        folder.mkdir(parents=True, exist_ok=True)
        return SeedFolder(folder)

    def write_config(self, config: dict[str, Any]) -> None:
        (self.path / "config.json").write_text(json.dumps(config, indent=2))

    def write_summary(self, summary: RunSummary, seeds: list[int], title: str) -> None:
        """``summary.json`` and ``learning_curves.png`` (one curve per seed)."""
        (self.path / "summary.json").write_text(json.dumps(summary.to_dict(), indent=2))
        plot_learning_curves([self.path / f"seed_{s}" / "log.csv" for s in seeds],
                             self.path / "learning_curves.png",
                             labels=[f"seed {s}" for s in seeds], title=title)

    def remove_if_empty_run(self, finished: int) -> None:
        """Remove a folder this run created when no seed finished (no half-written folder is
        left behind)."""
        if self.created and not finished:
            shutil.rmtree(self.path, ignore_errors=True)
