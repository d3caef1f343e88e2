"""Policy snapshots along a fit, and the judge's choice among them.

Gradient ascent on the kernel model's ``J_hat`` can lose a good policy late in a fit while
``J_hat`` barely moves: the model cannot tell the policy that swings the pendulum over the top
from one that, a few parameter steps further, falls back, because the difference lies where the
data are thin. The judge of :mod:`nopg.select.policy_selection` (an anchored model of the same data,
scoring a policy by its forecast of the evaluation's undiscounted return) does see it.

:class:`PolicySnapshots` is a :meth:`nopg.NOPG.fit` callback that keeps a copy of the policy's
parameters every ``every`` updates from update ``start`` on. :func:`choose_snapshot` scores the
final policy and the snapshots under the judge and keeps one by :func:`~nopg.select.policy_selection.
best_score` with the final policy first, then the snapshots from the latest back: an earlier
policy replaces the kept one only where its forecast is higher by more than ``rtol`` of the
larger magnitude of the two. With ``over_budget`` (the method's time budget) the scoring stops
once it says the budget is spent, and the choice is among those scored (the final policy always
is). Unlike the choice among recipes, forecasts within that margin keep
the later policy (no tie-break by the judge's ``J_hat``): along one fit the policies differ
little, and a tie-break would trade the end of the fit for noise. The kept policy's parameters
are loaded into the fit (:meth:`nopg.NOPG.load_policy_state`).

A snapshot holds the parameters and buffers of the policy only: the optimiser's state, the
update count and, for NOPG-S with a decaying ``sigma``, the decay stay those of the end of the
fit.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from ..model.anchored import AnchoredBellman
from .policy_selection import FORECAST_RTOL, JudgeScore, best_score, score_policy

if TYPE_CHECKING:
    from ..train.algorithm import NOPG

__all__ = ["PolicySnapshots", "Snapshot", "SnapshotChoice", "choose_snapshot", "policy_state"]


def policy_state(policy: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Copies (not views) of ``policy``'s parameters and buffers, its ``state_dict``."""
    return {k: v.detach().clone() for k, v in policy.state_dict().items()}


@dataclass(frozen=True)
class Snapshot:
    """The policy's parameters and buffers (copies) after update ``update``."""

    update: int
    state: dict[str, torch.Tensor]


class PolicySnapshots:
    """A :meth:`nopg.NOPG.fit` callback keeping the policy every ``every`` updates from update
    ``start`` on (counted as the fit's metrics count them, after the update).

    Parameters
    ----------
    every : int
        Updates between snapshots (>= 1).
    start : int
        The first update that may be kept (>= 0).
    """

    def __init__(self, every: int, start: int = 0) -> None:
        for name, value, low in (("every", every, 1), ("start", start, 0)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"The '{name}' parameter must be an int >= {low}. "
                                 f"Got {value!r} instead.")
        self.every, self.start = every, start
        self.snapshots: list[Snapshot] = []

    def __call__(self, algo: NOPG, metrics: dict[str, Any]) -> None:
        update = int(metrics["update"])
        if update >= self.start and update % self.every == 0:
            self.snapshots.append(Snapshot(update, policy_state(algo.policy)))


@dataclass(frozen=True)
class SnapshotChoice:
    """The judge's choice among a fit's final policy and its snapshots.

    Attributes
    ----------
    update : int
        The kept policy's update (the fit's last update where the final policy is kept).
    updates : list of int
        The candidates' updates, in order of preference (the final policy first).
    scores : list of JudgeScore
        Their scores under the judge, in the same order.
    returns : list of float or None
        Their true returns where the caller asked for them (``evaluate``; for the record of the
        judge's quality only), in the same order.
    unscored : int
        Snapshots left unscored when the budget was spent (the earliest ones).
    """

    update: int
    updates: list[int]
    scores: list[JudgeScore]
    returns: list[float] | None = None
    unscored: int = 0

    @property
    def kept_final(self) -> bool:
        return self.update == self.updates[0]

    @property
    def kept_score(self) -> JudgeScore:
        """The kept policy's score."""
        return self.scores[self.updates.index(self.update)]

    def to_dict(self) -> dict[str, Any]:
        return {"update": self.update, "kept_final": self.kept_final, "updates": list(self.updates),
                "forecasts": [s.episode_return_mean for s in self.scores],
                "sampled_forecasts": [s.sampled_mean for s in self.scores],
                "judge_J_hat": [s.J_hat for s in self.scores],
                "support_gaps": [s.support_gap for s in self.scores],
                "returns": self.returns, "unscored": self.unscored}


def choose_snapshot(judge: AnchoredBellman, algo: NOPG, snapshots: Sequence[Snapshot],
                    initial_states: np.ndarray | torch.Tensor, steps: int, seed: int,
                    rtol: float = FORECAST_RTOL,
                    evaluate: Callable[[torch.nn.Module], float] | None = None,
                    over_budget: Callable[[], bool] | None = None, particles: int = 0,
                    rule: str = "mean") -> SnapshotChoice:
    """Score ``algo``'s final policy and ``snapshots`` under ``judge`` (episodes of ``steps``
    steps from ``initial_states``, draws seeded by ``seed``), keep one (module docstring) and
    load it into ``algo``. A snapshot of the final update itself is not scored twice. With
    ``evaluate`` (a policy's true return) every candidate is also evaluated, for the record;
    the choice does not see it. With ``over_budget`` no candidate is scored once it returns true,
    the final policy excepted. ``particles`` and ``rule`` are :func:`score_policy`'s and
    :func:`best_score`'s (drawn paths, and whether they decide; with ``rule="sampled"`` the
    mean rollout is not run)."""
    candidates = [Snapshot(algo.update_, policy_state(algo.policy))]
    candidates += [s for s in sorted(snapshots, key=lambda s: -s.update) if s.update != algo.update_]
    total = len(candidates)
    scores, returns = [], []
    for i, snap in enumerate(candidates):
        if i and over_budget is not None and over_budget():
            candidates = candidates[:i]
            break
        algo.load_policy_state(snap.state)
        scores.append(score_policy(judge, algo.policy, initial_states, steps, seed, particles,
                                   mean_rollout=rule == "mean"))
        if evaluate is not None:
            returns.append(float(evaluate(algo.policy)))
    kept = candidates[best_score(scores, rtol, tie_break=False, rule=rule)]
    algo.load_policy_state(kept.state)
    return SnapshotChoice(kept.update, [c.update for c in candidates], scores,
                          returns if evaluate is not None else None, total - len(candidates))
