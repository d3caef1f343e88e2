"""The five gradient estimators set up on an LQG, each with its exact ground truth.

:func:`lqg_cases` returns, for a linear-Gaussian system, a target gain ``theta`` and a behaviour
gain, every estimator together with the policy it differentiates and the exact gradient it
estimates: the deterministic policy ``a = diag(theta) s`` for NOPG-D and DPG+Q, the Gaussian
policy ``N(diag(theta) s, sigma^2 I)`` for NOPG-S and the G(PO)MDP variants (paper §6.3: "in the
deterministic experiment the behavioral policy remains stochastic"). The truth is
:meth:`nopg.envs.lqg.LQG.return_gradient` over the episode horizon of the data.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike
from torch import nn

from ..bandwidth.selection import Bandwidths
from ..data.dataset import TransitionDataset
from ..envs.lqg import LQG
from ..model.config import ModelConfig, keyword_config
from ..policies.networks import DiagonalLinearPolicy
from .estimators import DPGEstimator, GPOMDPEstimator, GradientEstimator, NOPGEstimator, QGradient

__all__ = ["ESTIMATOR_NAMES", "EstimatorCase", "lqg_cases", "lqg_q_gradient"]

ESTIMATOR_NAMES: tuple[str, ...] = ("NOPG-D", "NOPG-S", "G(PO)MDP+N", "G(PO)MDP+BN", "DPG+Q")
"""The estimators of the paper's gradient analysis, in plotting order."""


@dataclass
class EstimatorCase:
    """An estimator, the policy it differentiates and the exact gradient of that policy."""

    estimator: GradientEstimator
    policy: nn.Module
    truth: np.ndarray

    def estimate(self, data: TransitionDataset) -> np.ndarray:
        """The estimator's gradient on ``data`` (flat, float64)."""
        return self.estimator.estimate(data, self.policy)


def lqg_q_gradient(problem: LQG, theta: ArrayLike, horizon: int | None) -> QGradient:
    """The oracle ``dQ_t/da`` of the deterministic policy ``theta`` (time-indexed if finite)."""

    def q_gradient(states: np.ndarray, actions: np.ndarray, steps: np.ndarray) -> np.ndarray:
        if horizon is None:
            return problem.q_action_gradient(states, actions, theta, 0.0, None)
        out = np.empty_like(actions, dtype=np.float64)
        for t in np.unique(steps):
            rows = steps == t
            out[rows] = problem.q_action_gradient(states[rows], actions[rows], theta, 0.0, horizon,
                                                  int(t))
        return out

    return q_gradient


def lqg_cases(problem: LQG, theta: ArrayLike, behaviour_theta: ArrayLike, *, sigma: float = 1.0,
              horizon: int | None = 50, bandwidth: float | Bandwidths = 0.3,
              names: Sequence[str] = ESTIMATOR_NAMES, config: ModelConfig | None = None,
              dpg_discounting: str = "improper", seed: int = 0,
              **settings: Any) -> dict[str, EstimatorCase]:
    """Estimators of ``dJ/dtheta`` for data collected by ``behaviour_theta``, with their truths.

    Parameters
    ----------
    problem : LQG
    theta : array-like of shape (d,)
        The diagonal gain whose gradient is estimated.
    behaviour_theta : array-like of shape (d,)
        The diagonal gain of the Gaussian behaviour policy that collected the data (for the
        paper's off-policy mix, ``(1 - alpha) theta + alpha theta'``).
    sigma : float
        Standard deviation of the behaviour and of the stochastic target policy.
    horizon : int or None
        Episode length of the data, the horizon of the exact gradient and of DPG's oracle Q.
    bandwidth : float or Bandwidths
        NOPG's kernel bandwidths (a float sets every state, action and next-state bandwidth to
        that value, as in the paper's bandwidth analysis).
    names : sequence of str
        Which of :data:`ESTIMATOR_NAMES` to set up.
    config : ModelConfig, optional
        NOPG's model settings (default: :data:`nopg.model.config.KEYWORD_DEFAULTS`, the dense model
        with ``n_mc_policy=10``); ``stochastic`` is set per estimator (NOPG-D, NOPG-S).
    dpg_discounting : {"improper", "proper"}
    seed : int
        Seed of NOPG-S's Monte-Carlo noise.
    **settings
        Model settings replacing those of ``config`` (``n_mc_policy``, ``top_k``, ...).
    """
    unknown = sorted(set(names) - set(ESTIMATOR_NAMES))
    if unknown:
        raise ValueError(f"unknown estimators {unknown}; available: {list(ESTIMATOR_NAMES)}")
    theta = np.asarray(theta, dtype=np.float64)
    if not float(sigma) > 0:
        raise ValueError(f"sigma must be positive (the behaviour policy is Gaussian). Got {sigma!r}.")
    model = keyword_config(config, **settings)
    bw = bandwidth if isinstance(bandwidth, Bandwidths) else Bandwidths(
        state=float(bandwidth), action=float(bandwidth), next_state=float(bandwidth))
    truth_det = problem.return_gradient(theta, 0.0, horizon)
    truth_sto = problem.return_gradient(theta, sigma, horizon)
    s0 = problem.s0[None, :]
    behaviour = DiagonalLinearPolicy(behaviour_theta, sigma=sigma)

    def deterministic() -> nn.Module:
        return DiagonalLinearPolicy(theta)

    def stochastic() -> nn.Module:
        return DiagonalLinearPolicy(theta, sigma=sigma)

    makers = {
        "NOPG-D": lambda: EstimatorCase(
            NOPGEstimator(bw, problem.gamma, s0, config=model, stochastic=False),
            deterministic(), truth_det),
        "NOPG-S": lambda: EstimatorCase(
            NOPGEstimator(bw, problem.gamma, s0, config=model, stochastic=True, seed=seed),
            stochastic(), truth_sto),
        "G(PO)MDP+N": lambda: EstimatorCase(GPOMDPEstimator(behaviour, problem.gamma), stochastic(),
                                            truth_sto),
        "G(PO)MDP+BN": lambda: EstimatorCase(GPOMDPEstimator(behaviour, problem.gamma, baseline=True),
                                             stochastic(), truth_sto),
        "DPG+Q": lambda: EstimatorCase(
            DPGEstimator(lqg_q_gradient(problem, theta, horizon), problem.gamma,
                         discounting=dpg_discounting), deterministic(), truth_det),
    }
    return {name: makers[name]() for name in names}
