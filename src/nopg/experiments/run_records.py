"""What a run of the runner gives back: one :class:`SeedResult` per seed and a :class:`RunSummary`.

Both are frozen dataclasses. Their ``to_dict`` is the form ``summary.json`` holds (the seed's
values, then the method's record of :func:`~nopg.experiments.run_reports.method_record` and the
anchored model's episode lengths, side by side as earlier results had them), and the statistics
over the seeds are computed from the records, not stored twice.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..io.run_evaluation import bootstrap_mean_ci

__all__ = ["SeedResult", "RunSummary"]


@dataclass(frozen=True)
class SeedResult:
    """One seed of a run: its data size, the kept policy's evaluation returns and estimates,
    timings, bandwidths and figures, and the method's record.

    Attributes
    ----------
    returns : list of float
        The final evaluation's episode returns (empty for a task without an environment).
    method : dict
        :func:`~nopg.experiments.run_reports.method_record`: the fit report, and the recipes,
        escalation, snapshot choice and restarts in the form of earlier results.
    model_episodes : dict
        The anchored model's own episode lengths of the final policy (empty for other models).
    """

    seed: int
    n_samples: int
    returns: list[float]
    J_hat: float
    support_gap: float
    initial_gap: float
    bandwidth_time_s: float
    wall_time_s: float
    fit_time_s: float
    behaviour_weight: float
    action_predictability: float | None
    time_per_update_s: float | None
    bandwidths: dict[str, Any]
    plots: list[str]
    method: dict[str, Any] = field(default_factory=dict)
    model_episodes: dict[str, Any] = field(default_factory=dict)

    @property
    def return_mean(self) -> float | None:
        """The mean evaluation return, or ``None`` for a task without an evaluation environment."""
        return float(np.mean(self.returns)) if self.returns else None

    def to_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
               if f.name not in ("method", "model_episodes")}
        out = {"seed": out.pop("seed"), "n_samples": out.pop("n_samples"),
               "return_mean": self.return_mean, **out}
        return {**out, **self.method, **self.model_episodes}


@dataclass(frozen=True)
class RunSummary:
    """A run over seeds: the task, NOPG-D or NOPG-S, its folder, the seeds' results and what the
    runner reported over them (``recipes``, ``selection``: ``None`` where they do not apply)."""

    task: str
    algorithm: str
    run_dir: str
    seeds: list[SeedResult]
    wall_time_s: float
    recipes: dict[str, Any] | None = None
    selection: dict[str, Any] | None = None

    def _means(self) -> np.ndarray:
        return np.array([s.return_mean for s in self.seeds if s.return_mean is not None])

    @property
    def return_mean(self) -> float | None:
        """The mean over the seeds of each seed's mean return (``None`` without evaluations)."""
        means = self._means()
        return float(means.mean()) if means.size else None

    @property
    def return_std(self) -> float | None:
        means = self._means()
        return float(means.std()) if means.size else None

    @property
    def return_ci(self) -> list[float] | None:
        """The 95% bootstrap interval of :attr:`return_mean` over the seeds."""
        means = self._means()
        return list(bootstrap_mean_ci(means)) if means.size else None

    @property
    def J_hat_mean(self) -> float:
        return float(np.mean([s.J_hat for s in self.seeds]))

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "task": self.task, "algorithm": self.algorithm, "run_dir": self.run_dir,
            "return_mean": self.return_mean, "return_std": self.return_std,
            "return_ci": self.return_ci, "J_hat_mean": self.J_hat_mean,
            "wall_time_s": self.wall_time_s, "seeds": [s.to_dict() for s in self.seeds],
        }
        if self.recipes is not None:
            out["recipes"] = self.recipes
        if self.selection is not None:
            out["selection"] = self.selection
        return out
