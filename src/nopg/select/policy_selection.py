"""Choosing among policies fitted by different recipes, by one anchored model of the data.

Fits that differ in their model (the kernel model, the anchored one), their policy class or their
optimiser each ascend their own ``J_hat``; those numbers are not comparable (the kernel model's
``J_hat`` is over-optimistic where its policy leaves the data). A *judge*, one anchored model of
the data (:mod:`nopg.model.anchored`, the same bandwidths), scores every candidate policy the same way.

The score is the undiscounted return of the judge's mean rollout of the policy over ``steps``
(an evaluation's length), each reward weighted by the model's probability that the episode is
still going, the mean over the initial states
(:meth:`~nopg.model.anchored.AnchoredBellman.episode_returns`): the model's forecast of the
evaluation's return. An end the discount hides (a pole dropped after 300 steps) costs the
rewards after it; an end at a goal (mountain car) keeps the goal's reward.

The candidates come in order of preference (the experiment's own configuration first), and a
later one replaces the one kept where its forecast is higher by more than :data:`FORECAST_RTOL`
of the larger magnitude of the two (:func:`best_score`). Forecasts within that margin tie:
where two balancing policies both last the whole evaluation in the mean rollout, the forecasts
differ in the last digits. A tie goes to the higher ``J_hat`` under the judge (the judge's draws
seeded): the Bellman solution weighs the whole spread of the model's next states, where the
mean rollout follows one path, so a policy whose mean path balances while much of the
distribution falls has the lower ``J_hat``. Equal ones keep the earlier candidate.

With ``particles`` the judge also draws that many paths through the model from every initial
state (:meth:`~nopg.model.anchored.AnchoredBellman.sampled_returns`): the model's distribution of
the return, where the mean rollout follows one path. A policy that balances along the mean path
while the model's own spread of next states makes it fall (an unstable closed loop the data
pass near once) forecasts the whole return on the mean path and less on the drawn ones. With
``rule="sampled"`` (:func:`best_score`) the candidates are compared by the drawn paths' mean
return, with common random numbers (every candidate's paths draw from the same seed): a later
candidate replaces the kept one where the paths' mean difference exceeds
:data:`SAMPLED_Z` times its Monte-Carlo standard error. The margin is the estimate's own
noise, not a share of the return.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from ..bandwidth.selection import Bandwidths
from ..data.dataset import TransitionDataset
from ..model.anchored import AnchoredBellman
from ..model.bellman import as_states
from ..train.config import NOPGConfig
from ..validation import fail, is_int

__all__ = ["FORECAST_RTOL", "SAMPLED_Z", "RULES", "JudgeScore", "anchored_config", "judge_model",
           "score_policy", "best_score"]

FORECAST_RTOL = 0.01
"""A later candidate must beat the kept one's forecast by more than this share of the larger
magnitude of the two."""

SAMPLED_Z = 2.0
"""``rule="sampled"``: a later candidate must beat the kept one by this many Monte-Carlo standard
errors of the paired difference of their drawn paths' returns (a one-sided test at about 2%)."""

RULES = ("mean", "sampled")
"""How :func:`best_score` compares forecasts: the mean rollout's, or the drawn paths'."""


@dataclass(frozen=True)
class JudgeScore:
    """A policy's score under the judge (module docstring).

    Attributes
    ----------
    episode_return_mean : float
        The judge's forecast: the undiscounted return of its mean rollout over ``steps`` (mean
        over the initial states), or of its drawn paths where the mean rollout was not run.
    episode_steps_mean, episode_steps_min : float, int
        The judge's episode lengths of the policy (mean, shortest), of the same rollouts.
    steps : int
        The length they are counted up to.
    J_hat : float
        The policy's ``J_hat`` under the judge.
    support_gap : float
        The share of its discounted visitation where the data are thin (the judge's).
    sampled_mean, sampled_se : float or None
        With ``particles``: the drawn paths' mean return (mean over the initial states) and its
        Monte-Carlo standard error.
    paths : ndarray of shape (particles, m) or None
        The drawn paths' returns (serialised as nested lists, so that a report's choice can be
        replayed from its JSON).
    """

    episode_return_mean: float
    episode_steps_mean: float
    episode_steps_min: int
    steps: int
    J_hat: float
    support_gap: float
    sampled_mean: float | None = None
    sampled_se: float | None = None
    paths: np.ndarray | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.paths is not None:
            object.__setattr__(self, "paths", np.asarray(self.paths, dtype=float))

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["paths"] = None if self.paths is None else self.paths.tolist()
        return out


def anchored_config(config: NOPGConfig) -> NOPGConfig:
    """``config`` with the anchored successors (``top_k="auto"`` where ``config`` keeps every
    neighbour, as the paper's experiments do, which the moved successors refuse): the judge's
    settings, and the anchored recipes'."""
    top_k = "auto" if config.model.top_k is None else config.model.top_k
    return config.replace(**{"model.successors": "anchored", "model.top_k": top_k})


def judge_model(data: TransitionDataset, bandwidths: Bandwidths, config: NOPGConfig,
                stochastic: bool = False) -> AnchoredBellman:
    """The judge: an anchored model of ``data`` with ``config``'s other model settings (its
    bounds, circles, draws), resolved for the data's size."""
    c = anchored_config(config).resolved(data.n)
    return AnchoredBellman(data, bandwidths, c.gamma, c.model_config(stochastic=stochastic))


@torch.no_grad()
def score_policy(judge: AnchoredBellman, policy: nn.Module,
                 initial_states: np.ndarray | torch.Tensor, steps: int, seed: int,
                 particles: int = 0, mean_rollout: bool = True) -> JudgeScore:
    """Score ``policy`` under ``judge`` from ``initial_states`` (m, d_s), episodes counted up
    to ``steps``; the judge's random draws (next states, NOPG-S actions) come from ``seed``.
    With ``particles`` > 0 also that many drawn paths from each initial state (seeded by
    ``seed`` alone, so that candidates scored with one seed share their random numbers).
    Without ``mean_rollout`` (``particles`` needed) the mean rollout is not run: the forecast
    (``episode_return_mean``) and the episode lengths are the drawn paths'."""
    if not is_int(particles) or particles < 0:
        fail("particles", "an int >= 0", particles)
    if not mean_rollout and not particles:
        raise ValueError("without the mean rollout the forecast is the drawn paths': "
                         "'particles' must be >= 1")
    z = as_states(initial_states, judge.data.state_dim, "initial_states")
    sol = judge.solution(policy, z, torch.Generator().manual_seed(int(seed)))
    sampled_mean = sampled_se = paths = None
    if particles:
        paths, path_lengths = judge.sampled_returns(policy, z, int(steps), int(particles),
                                                    torch.Generator().manual_seed(int(seed)))
        sampled_mean, sampled_se = float(paths.mean()), _mean_se(paths)
    if mean_rollout:
        returns, lengths = judge.episode_returns(policy, z, int(steps),
                                                 torch.Generator().manual_seed(int(seed)))
    else:
        returns, lengths = paths, path_lengths
    return JudgeScore(float(np.mean(returns)), float(np.mean(lengths)), int(np.min(lengths)),
                      int(steps), float(sol.J), float(sol.support_gap), sampled_mean,
                      sampled_se, paths)


def _mean_se(paths: np.ndarray) -> float:
    """The Monte-Carlo standard error of the mean over the initial states of the particle means
    of ``paths`` (particles, m): the starts are fixed, the draws within each are independent."""
    p, m = paths.shape
    if p < 2:
        return float("inf")
    return float(np.sqrt(paths.var(0, ddof=1).sum() / p) / m)


def best_score(scores: Sequence[JudgeScore], rtol: float = FORECAST_RTOL,
               tie_break: bool = True, rule: str = "mean", z: float = SAMPLED_Z) -> int:
    """The index of the score kept from ``scores``, in order of preference: the first, replaced
    by each later one whose forecast (``episode_return_mean``) is higher than the kept one's by
    more than ``rtol`` times the larger of their magnitudes, or, within that margin and with
    ``tie_break``, whose ``J_hat`` under the judge is higher (module docstring). With
    ``rule="sampled"`` a later one replaces the kept one where its drawn paths' mean return is
    higher by more than ``z`` standard errors of the paired difference (``rtol`` and
    ``tie_break`` unused); every score needs the same number of paths."""
    if not scores:
        raise ValueError("no scores to choose from")
    if not (math.isfinite(rtol) and rtol >= 0):
        raise ValueError(f"The 'rtol' parameter must be a finite number >= 0. Got {rtol!r} instead.")
    if rule not in RULES:
        raise ValueError(f"The 'rule' parameter must be one of {RULES}. Got {rule!r} instead.")
    if rule == "sampled":
        return _best_sampled(scores, z)
    kept = 0
    for i in range(1, len(scores)):
        old, new = scores[kept], scores[i]
        margin = rtol * max(abs(old.episode_return_mean), abs(new.episode_return_mean))
        gain = new.episode_return_mean - old.episode_return_mean
        if gain > margin or (tie_break and abs(gain) <= margin and new.J_hat > old.J_hat):
            kept = i
    return kept


def _best_sampled(scores: Sequence[JudgeScore], z: float) -> int:
    """:func:`best_score` with ``rule="sampled"``."""
    if not (math.isfinite(z) and z >= 0):
        fail("z", "a finite number >= 0", z)
    shapes = {None if s.paths is None else s.paths.shape for s in scores}
    if None in shapes or len(shapes) != 1:
        raise ValueError("rule='sampled' needs every score's drawn paths, of one shape "
                         "(score_policy(..., particles=P) with one P)")
    kept = 0
    for i in range(1, len(scores)):
        diff = scores[i].paths - scores[kept].paths
        gain, se = float(diff.mean()), _mean_se(diff)
        if gain > z * se:
            kept = i
    return kept
