"""The functional core: ``J_hat`` and its full policy gradient for any torch policy (paper Eq. 6)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from ..bandwidth.selection import Bandwidths
from ..data.dataset import TransitionDataset
from ..linalg.solvers import SolveInfo
from ..model.config import ModelConfig
from ..model.factory import bellman_model


@dataclass
class PolicyGradientResult:
    """Value estimate and full gradient at the current policy.

    Attributes
    ----------
    J : float
        ``J_hat = eps0 . q``, the estimated expected discounted return.
    q, mu : ndarray of shape (n,)
        ``(I - P)^{-1} r`` and ``(I - P)^{-T} eps0``.
    grads : list of tensors
        ``d J_hat / d theta`` for each of ``policy.parameters()`` (ascent direction), in the
        parameters' dtype; ``None`` entries are replaced by zeros.
    info_q, info_mu : SolveInfo
        Solver reports for both systems.
    support_gap : float
        Share of the policy's discounted visitation where the data are thin (0 to 1).
    """

    J: float
    q: np.ndarray
    mu: np.ndarray
    grads: list[torch.Tensor]
    info_q: SolveInfo
    info_mu: SolveInfo
    support_gap: float = float("nan")


def surrogate_gradient(solution_surrogate: torch.Tensor, params: list[torch.Tensor]
                       ) -> list[torch.Tensor]:
    """Gradient of a scalar (e.g. :meth:`nopg.BellmanSolution.surrogate`) w.r.t. ``params``.

    ``params`` may be any tensors of the graph (parameters or intermediate values such as
    :attr:`nopg.BellmanSolution.next_actions`); the gradient of one the scalar does not depend on is
    zeros of its shape.
    """
    if not solution_surrogate.requires_grad:       # no parameter reaches the actions
        return [torch.zeros_like(p) for p in params]
    grads = torch.autograd.grad(solution_surrogate, params, allow_unused=True)
    return [torch.zeros_like(p) if g is None else g for p, g in zip(params, grads)]


def policy_gradient(
    data: TransitionDataset,
    policy: nn.Module,
    *,
    bandwidths: Bandwidths,
    gamma: float,
    initial_states: np.ndarray | torch.Tensor,
    config: ModelConfig | None = None,
    seed: int = 0,
    **settings: Any,
) -> PolicyGradientResult:
    """Estimate ``J_hat`` and its full gradient from a fixed data set.

    Parameters
    ----------
    data : TransitionDataset
    policy : torch.nn.Module
        Maps states ``(batch, d_s)`` to actions ``(batch, d_a)``; for ``stochastic=True`` it must
        also provide ``mean_std(states)`` (e.g. :class:`nopg.GaussianMLPPolicy`). A policy
        without parameters (a fixed controller) gets ``J_hat`` and an empty ``grads``.
    bandwidths : Bandwidths
        Per-dimension kernel standard deviations.
    gamma : float in [0, 1)
    initial_states : array of shape (m, d_s)
        ``J_hat`` is the mean of ``V`` over these states.
    config : ModelConfig, optional
        The model's settings; the kernel computations always run in the dtype and on the device
        of the policy's parameters.
    seed : int
        Seed of the Monte-Carlo noise; equal seeds give identical estimates.
    **settings
        Model settings replacing those of ``config`` (:class:`nopg.NonparametricBellman`, whose
        keyword defaults apply without ``config``), e.g. ``top_k=10`` (``None``, the default:
        the dense ``P``), ``stochastic=True`` (NOPG-S), ``n_mc_policy``, ``n_mc_next``,
        ``solver``, ``neighbors``, ``n_candidates``, ``unsupported``, ``absorbing_value``,
        ``support_radius``.

    Returns
    -------
    PolicyGradientResult

    Examples
    --------
    >>> res = policy_gradient(data, policy, bandwidths=bw, gamma=0.97, initial_states=S0)
    >>> res.J, [g.shape for g in res.grads]
    """
    params = list(policy.parameters())
    # A policy without parameters (a fixed controller) is evaluated, with no gradient, in the
    # configuration's dtype and device.
    placement = {"dtype": params[0].dtype, "device": params[0].device} if params else {}
    model = bellman_model(data, bandwidths, gamma, config, **{**settings, **placement})
    generator = torch.Generator().manual_seed(int(seed))  # CPU noise, moved to the device
    sol = model.solution(policy, initial_states, generator)
    grads = surrogate_gradient(sol.surrogate(), params) if params else []
    return PolicyGradientResult(
        J=sol.J, q=sol.q.cpu().numpy(), mu=sol.mu.cpu().numpy(), grads=grads,
        info_q=sol.info_q, info_mu=sol.info_mu, support_gap=sol.support_gap,
    )
