"""PWIS baseline: gradient ascent on the path-wise importance-sampling G(PO)MDP+N gradient.

The paper's PWIS baseline (appendix, "Pendulum with Random Agent"): a Gaussian MLP policy
(``mu = a_max tanh f``, ``sigma = sigmoid g``) improved by Adam at ``1e-2`` for 2000 updates on
the G(PO)MDP gradient with self-normalised per-step importance weights
(:class:`nopg.analysis.estimators.GPOMDPEstimator`, Eq. (pwis)). It needs whole episodes and the
behaviour policy's density, so it applies to the random-agent data sets only. This module
imports numpy and torch only.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from ..analysis.estimators import GPOMDPEstimator
from ..data.dataset import TransitionDataset

__all__ = ["PWISResult", "gaussian_mixture_log_prob", "train_pwis", "uniform_log_prob"]

logger = logging.getLogger(__name__)

LogProb = Callable[[np.ndarray, np.ndarray], np.ndarray]


def gaussian_mixture_log_prob(means: tuple[float, ...], std: float) -> LogProb:
    """Log-density of a state-independent, equal-weight mixture of ``N(m, std^2)`` (1-D actions)."""
    centres = np.asarray(means, dtype=np.float64)

    def log_prob(states: np.ndarray, actions: np.ndarray) -> np.ndarray:
        a = np.asarray(actions, dtype=np.float64).reshape(-1, 1)
        z = (a - centres[None, :]) / std
        comp = -0.5 * z * z - math.log(std) - 0.5 * math.log(2 * math.pi)
        top = comp.max(axis=1, keepdims=True)
        return (top + np.log(np.exp(comp - top).mean(axis=1, keepdims=True))).reshape(-1)

    return log_prob


def uniform_log_prob(low: np.ndarray | float, high: np.ndarray | float) -> LogProb:
    """Log-density of a uniform behaviour policy on the box ``[low, high]``."""
    width = np.asarray(high, dtype=np.float64) - np.asarray(low, dtype=np.float64)
    if np.any(width <= 0):
        raise ValueError(f"the uniform box needs high > low. Got low={low!r}, high={high!r}.")

    def log_prob(states: np.ndarray, actions: np.ndarray) -> np.ndarray:
        d_a = np.asarray(actions).reshape(len(actions), -1).shape[1]
        return np.full(len(actions), -float(np.sum(np.log(np.broadcast_to(width, (d_a,))))))

    return log_prob


@dataclass
class PWISResult:
    """The trained policy, the final importance-sampling return estimate and diagnostics."""

    policy: nn.Module
    J_hat: float              # self-normalised IS estimate of the discounted return
    ess: float                # effective sample size of the last step's weights
    updates: int


def is_return(estimator: GPOMDPEstimator, data: TransitionDataset, policy: nn.Module) -> float:
    """``sum_t sum_e w_{e,t} gamma^t r_{e,t}``: the weighted IS estimate of the return."""
    w, index, mask = estimator.weights(data, policy)
    steps = np.arange(index.shape[1])
    reward = np.where(mask, data.rewards[index], 0.0) * estimator.gamma ** steps[None, :]
    return float((w * reward).sum())


def train_pwis(policy: nn.Module, data: TransitionDataset, behaviour_log_prob: LogProb,
               gamma: float, n_updates: int, learning_rate: float = 1e-2) -> PWISResult:
    """Adam ascent on G(PO)MDP+N for ``n_updates`` steps (``policy`` is updated in place).

    Parameters
    ----------
    policy : torch.nn.Module
        A Gaussian policy (with ``mean_std``); float64 parameters are used (it is converted).
    data : TransitionDataset
        Whole episodes, each from its first step.
    behaviour_log_prob : callable
        ``(states, actions) -> log pi_beta(a | s)`` of the data's behaviour policy.
    gamma : float
    n_updates : int
    learning_rate : float
    """
    if isinstance(n_updates, bool) or not isinstance(n_updates, int) or n_updates < 1:
        raise ValueError(f"n_updates must be a positive int. Got {n_updates!r} instead.")
    policy = policy.double()
    estimator = GPOMDPEstimator(None, gamma, normalize=True, behaviour_log_prob=behaviour_log_prob,
                                name="PWIS")
    params = list(policy.parameters())
    optim = torch.optim.Adam(params, lr=learning_rate)
    for update in range(n_updates):
        grad = estimator.estimate(data, policy)
        if not np.all(np.isfinite(grad)):
            logger.warning("PWIS: non-finite gradient at update %d; stopping", update)
            break
        offset = 0
        for p in params:
            p.grad = -torch.as_tensor(grad[offset: offset + p.numel()], dtype=p.dtype).view_as(p)
            offset += p.numel()
        optim.step()
        if (update + 1) % 500 == 0:
            logger.info("PWIS update %d: ESS %.1f", update + 1, estimator.last_ess or float("nan"))
    return PWISResult(policy, is_return(estimator, data, policy),
                      float(estimator.last_ess or float("nan")), n_updates)
