"""One solve of the nonparametric Bellman model (:class:`BellmanSolution`: ``J_hat``, ``q``,
``mu``, the support diagnostics and the gradient surrogate), the checks of query states
(:func:`as_states`) and the value of the worst reward held forever (:func:`pessimistic_value`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..data.dataset import TransitionDataset
from ..linalg.solvers import SolveInfo
from .row_matrices import Rows

__all__ = ["BellmanSolution", "as_states", "pessimistic_value"]


def pessimistic_value(data: TransitionDataset, gamma: float) -> float:
    """``min(r) / (1 - gamma)``, capped at 0 when the data hold a terminal transition."""
    value = float(data.rewards.min()) / (1.0 - gamma)
    return min(value, 0.0) if bool(np.any(data.terminals)) else value


def as_states(x: np.ndarray | torch.Tensor, state_dim: int, name: str) -> np.ndarray:
    """Validate query points: float64 array of shape (m, state_dim), finite, m >= 1."""
    if callable(x) and not isinstance(x, torch.Tensor):
        raise ValueError(f"{name} must be an array of states, not the {type(x).__name__} "
                         f"{getattr(x, '__name__', repr(x))!r}: call it, e.g. "
                         "data.episode_start_states()")
    arr = x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x, dtype=float)
    arr = np.asarray(arr, dtype=np.float64)
    if arr.ndim == 1 and arr.shape[0] == state_dim:
        arr = arr[None, :]
    if arr.ndim != 2 or arr.shape[1] != state_dim:
        raise ValueError(
            f"{name} must have shape (m, {state_dim}) (one point per row). "
            f"Got shape {arr.shape} instead."
        )
    if arr.shape[0] == 0:
        raise ValueError(f"{name} is empty: pass at least one state")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} contains NaN or inf values")
    return arr


@dataclass
class BellmanSolution:
    """One solve of the nonparametric Bellman equation at the current policy.

    Attributes
    ----------
    J : float
        ``J_hat = eps0 . q`` (plus ``reward_init`` where the rewards depend on the policy).
    q, mu : tensor of shape (n,)
        Solutions of ``(I - P) q = r`` and ``(I - P)^T mu = eps0`` (float64, detached): ``q``
        holds the values at the data's pairs, or at the data's next states for
        ``successors="local-linear"`` (:mod:`nopg.model.local_linear`).
    eps0 : tensor of shape (n,)
        Initial responsibilities, attached to the policy's graph.
    P : DenseRows or SparseRows
        Transition matrix, attached to the policy's graph.
    info_q, info_mu : SolveInfo
    refined_rows : int
        Rows (query-action pairs) of ``P`` and ``eps0`` whose candidates could not certify the
        exact top-k and were recomputed by an exact k-NN query (candidate mode only).
    initial_actions, next_actions : tensors of shape (m, N_pi, d_a) and (n N_phi, N_pi, d_a)
        The actions the policy returned at the initial states (the queries of ``eps0``) and at
        the next states (those of ``P``), attached to the policy's graph: the gradient of
        :meth:`surrogate` with respect to them splits ``grad J_hat`` into per-query terms.
    lost_next : tensor of shape (n,)
        ``gamma_i (1 - w_i)``: the thinness ``1 - w_i`` of the data at the policy's query
        ``(s'_i, pi(s'_i))`` of row ``i`` of ``P``, discounted; the mass the support-aware model
        moves to the absorbing state (attached to the policy's graph when that model is on).
    thin_init : tensor of shape ()
        Mean thinness at the initial states' queries.
    support_gap : float
        The share of the policy's discounted queries (weights 1 for the initial states and
        ``gamma_i mu_i`` for the rows of ``P``) that lie where the data are thin: 0 when the
        policy stays on the data, close to 1 when ``J_hat`` rests on extrapolation.
    initial_gap : float
        The mean thinness at the initial states' queries alone. The support gap weighs them
        ``1`` against a discounted visitation of about ``1 / (1 - gamma)``, but every model
        trajectory starts there: near 1, ``J_hat`` starts from an extrapolation (the first
        step jumps to the nearest data, however far) whatever the support gap says.
    absorbing_value : float or None
        Value per unit of thinness: the absorbing state's value (support-aware model), minus
        the penalty's scale (penalty model), or ``None`` for the paper's model.
    rewards_next, reward_init : tensors of shapes (n,) and (), optional
        Rewards that depend on the policy, attached to its graph (``successors="local-linear"``):
        those of the rows of ``P`` (the ``r`` solved with) and the mean at the initial states.
    """

    J: float
    q: torch.Tensor
    mu: torch.Tensor
    eps0: torch.Tensor
    P: Rows
    info_q: SolveInfo
    info_mu: SolveInfo
    refined_rows: int = 0
    lost_next: torch.Tensor | None = None
    thin_init: torch.Tensor | None = None
    support_gap: float = float("nan")
    absorbing_value: float | None = None
    initial_gap: float = float("nan")
    initial_actions: torch.Tensor | None = None
    next_actions: torch.Tensor | None = None
    rewards_next: torch.Tensor | None = None
    reward_init: torch.Tensor | None = None

    def surrogate(self) -> torch.Tensor:
        """A scalar whose gradient is ``grad J_hat``.

        ``eps0(theta) . stop(q) + stop(mu)^T P(theta) stop(q)``; with the support-aware model
        the absorbed mass adds ``v_abs (thin_init(theta) + stop(mu)^T lost_next(theta))``, and
        the penalty model the same with ``-lambda`` for ``v_abs``; rewards that depend on the
        policy add ``reward_init(theta) + stop(mu) . rewards_next(theta)``.
        """
        dtype = self.eps0.dtype
        q, mu = self.q.to(dtype), self.mu.to(dtype)
        out = self.eps0 @ q + mu @ self.P.matvec(q)
        if self.absorbing_value is not None:
            assert self.thin_init is not None and self.lost_next is not None
            out = out + self.absorbing_value * (self.thin_init + mu @ self.lost_next)
        if self.rewards_next is not None:
            assert self.reward_init is not None
            out = out + self.reward_init.to(dtype) + mu @ self.rewards_next.to(dtype)
        return out
