"""What :class:`nopg.AutoNOPG` did: every fit it made (:class:`Candidate`) and every decision,
with its reason and cost (:class:`FitReport`).

The report is the method's record for its user: which fits ``auto`` resolved to and why, each
fit's ``J_hat``, the judge's forecast and the snapshot kept, the seconds each took, and, where
the caller evaluated the policies (``AutoNOPG.fit(evaluate=..., evaluate_candidates=True)``),
how well the judge's forecasts ranked them (:meth:`FitReport.scored`, :meth:`FitReport.regret`).
``to_dict`` is JSON; the experiment runner writes it into each seed of ``summary.json``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .policy_selection import JudgeScore
from .snapshots import SnapshotChoice

if TYPE_CHECKING:
    from ..train.algorithm import NOPG
    from .method_config import MethodConfig

__all__ = ["Candidate", "FitReport", "format_return"]

logger = logging.getLogger("nopg.select.auto")


@dataclass
class Candidate:
    """One fit :class:`AutoNOPG` made: a recipe's, or a restart's.

    Attributes
    ----------
    name : str
        The recipe (``given``, ``stabilise``, ``anchored``) or ``restart<k>``.
    algo : NOPG
        The fit, holding the policy kept along it (the judge's snapshot choice).
    config : MethodConfig
        The settings it ran with (the recipe's, with the task's bounds).
    fit_time_s : float
        Seconds of the fit, its periodic evaluations and the snapshot choice.
    J_hat, support_gap : float
        Its ``J_hat`` and support gap under its own model when it was scored (a restart's at
        the choice among restarts).
    score : JudgeScore or None
        The kept policy's score under the judge (``None`` where no judge was asked).
    snapshot : SnapshotChoice or None
        The judge's choice among the fit's snapshots (``None`` without earlier snapshots).
    returns : list of float or None
        The caller's ``evaluate`` of the kept policy (for the report only).
    log_path : Path or None
        Its per-update CSV log.
    stopped_at : int or None
        The update at which the budget (``MethodConfig.budget``) stopped it; ``None`` where it
        ran all its updates.
    kept : bool
        Whether the method returned this fit.
    """

    name: str
    algo: NOPG
    config: MethodConfig
    fit_time_s: float
    J_hat: float
    support_gap: float
    score: JudgeScore | None = None
    snapshot: SnapshotChoice | None = None
    returns: list[float] | None = None
    log_path: Path | None = None
    stopped_at: int | None = None
    kept: bool = False

    @property
    def return_mean(self) -> float | None:
        """The mean of :attr:`returns`; ``None`` without an evaluation."""
        return float(np.mean(self.returns)) if self.returns else None

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "kept": self.kept, "return_mean": self.return_mean,
                "J_hat": self.J_hat, "support_gap": self.support_gap,
                "fit_time_s": self.fit_time_s, "stopped_at": self.stopped_at,
                "judge": None if self.score is None else self.score.to_dict(),
                "snapshot": None if self.snapshot is None else self.snapshot.to_dict()}


@dataclass
class FitReport:
    """Every decision :meth:`AutoNOPG.fit` took: which fits, why, at what cost.

    Attributes
    ----------
    recipes_asked, recipes : tuple of str
        ``config.recipes`` and the fits it resolved to (``auto`` by the data).
    decisions : list of str
        Why, in the words of the log.
    candidates : list of Candidate
        Every fit, the kept one first.
    escalation : dict or None
        With ``auto``'s escalation: the judge's two reward rates and whether it fired.
    plain_fit_s : float or None
        CPU seconds (this process's) of the first fit's updates: one plain fit of the data, the
        budget's unit.
    budget_s : float or None
        The CPU seconds everything after the plain fit could spend (the judge's choices and the
        later fits; the caller's record-only evaluations are not charged):
        ``MethodConfig.budget`` times :attr:`plain_fit_s`, at least
        :data:`nopg.select.recipes.BUDGET_FLOOR_S` (0 for a budget of 0); ``None`` with no limit.
    budget_spent_s : float or None
        The CPU seconds charged to the budget by the end of ``fit``.
    horizon : int
        The episode length the judge forecasts returns over.
    bandwidth_time_s, fit_time_s, total_time_s : float
        Seconds of the bandwidth selection, of the fits (with selection), and of ``fit``.
    dropped_state_dims : list of int
        State dimensions left out as carrying no information.
    """

    recipes_asked: tuple[str, ...]
    recipes: tuple[str, ...]
    decisions: list[str] = field(default_factory=list)
    candidates: list[Candidate] = field(default_factory=list)
    escalation: dict[str, Any] | None = None
    plain_fit_s: float | None = None
    budget_s: float | None = None
    budget_spent_s: float | None = None
    horizon: int = 0
    bandwidth_time_s: float = 0.0
    fit_time_s: float = 0.0
    total_time_s: float = 0.0
    dropped_state_dims: list[int] = field(default_factory=list)

    @property
    def kept(self) -> Candidate:
        """The fit the method returned."""
        return next(c for c in self.candidates if c.kept)

    def scored(self) -> list[dict[str, Any]]:
        """Every policy the judge scored whose true return is known: the fit, the update, the
        forecast, the return and whether it is the one kept. Every snapshot where
        ``fit(evaluate_candidates=True)``, else each fit's kept policy."""
        rows = []
        for c in self.candidates:
            snap = c.snapshot
            if snap is not None and snap.returns is not None:
                rows += [{"fit": c.name, "update": u, "forecast": sc.episode_return_mean,
                          "sampled": sc.sampled_mean, "sampled_se": sc.sampled_se,
                          "return": r, "kept": c.kept and u == snap.update}
                         for u, sc, r in zip(snap.updates, snap.scores, snap.returns)]
            elif c.score is not None and c.return_mean is not None:
                rows.append({"fit": c.name, "update": c.algo.update_ if snap is None else
                             snap.update, "forecast": c.score.episode_return_mean,
                             "sampled": c.score.sampled_mean, "sampled_se": c.score.sampled_se,
                             "return": c.return_mean, "kept": c.kept})
        return rows

    def regret(self) -> float | None:
        """The best true return among the scored policies less the kept one's (regret@1);
        ``None`` without true returns."""
        rows = self.scored()
        kept = [r["return"] for r in rows if r["kept"]]
        return max(r["return"] for r in rows) - kept[0] if kept else None

    def decide(self, message: str) -> None:
        """Record a decision and log it."""
        self.decisions.append(message)
        logger.info("%s", message)

    def to_dict(self) -> dict[str, Any]:
        return {"recipes_asked": list(self.recipes_asked), "recipes": list(self.recipes),
                "kept": self.kept.name, "decisions": list(self.decisions),
                "candidates": [c.to_dict() for c in self.candidates],
                "escalation": self.escalation, "plain_fit_s": self.plain_fit_s,
                "budget_s": self.budget_s, "budget_spent_s": self.budget_spent_s, "horizon": self.horizon,
                "bandwidth_time_s": self.bandwidth_time_s, "fit_time_s": self.fit_time_s,
                "total_time_s": self.total_time_s, "scored": self.scored(),
                "regret_at_1": self.regret(),
                "dropped_state_dims": list(self.dropped_state_dims)}


def format_return(value: float | None) -> str:
    """An evaluation return for the log: two decimals, or why there is none."""
    return "n/a (no evaluation)" if value is None else f"{value:.2f}"
