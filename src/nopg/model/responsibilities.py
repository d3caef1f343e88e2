"""Rows of responsibilities ``eps(s, a)`` for batches of query states and actions.

For every query pair the row holds ``eps_j(s, a) = softmax_j l_j(s, a)`` (:mod:`nopg.model.kernels`),
averaged over the ``G`` actions drawn per state (Monte-Carlo actions of a stochastic policy) and
over groups of consecutive query states (Monte-Carlo next states). How the entries are found is
the ``neighbors`` mode:

- ``"dense"``: the full ``(m, n)`` log-weights, from the policy-free part computed once per query
  state (:meth:`KernelRows.prepare`) plus a matrix product per update; with ``top_k`` a
  ``topk`` over them (the paper's method). ``O(n^2)`` time and memory per update.
- ``"candidates"`` and ``"knn"``: the ``top_k`` largest entries selected by
  :class:`nopg.model.candidates.TopKSelector` (cached candidates for the fixed rows of ``P`` and
  ``eps0`` in candidate mode, exact k-NN otherwise). The kept log-weights are then recomputed
  from the coordinates of the kept points, so gradients flow through them (the selection itself
  is piecewise constant), and no ``(n, n)`` array is ever allocated.

Every row also carries its thinness ``1 - w`` (:func:`nopg.model.kernels.thinness`). With
``absorb=True`` (the support-aware model) the row keeps the share ``w`` of its mass that the data
support; the rest goes to an absorbing state outside this module. With ``attach_thinness=True``
(the penalty model) the rows are the paper's and the thinness stays on the policy's graph.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .candidates import CandidateSets, TopKSelector
from .kernels import (
    expanded_log_weights,
    gather_rows,
    gathered_squared_distances,
    log_weights,
    policy_free_log_weights,
    softmax_log_mass,
    squared_norm,
    thinness,
)
from .row_matrices import DenseRows, Rows, SparseRows


@dataclass
class QueryStates:
    """Query states prepared for one neighbour mode (:meth:`KernelRows.prepare`).

    Attributes
    ----------
    scaled : tensor of shape (m, d_s)
        The states divided by ``h_s``.
    fixed : tensor of shape (m, n), optional
        Dense mode: the policy-free log-weights (:func:`nopg.model.kernels.policy_free_log_weights`).
    candidates : CandidateSets, optional
        Candidate mode, cached queries: the candidate sets kept across updates.
    """

    scaled: torch.Tensor
    fixed: torch.Tensor | None = None
    candidates: CandidateSets | None = None


class KernelRows:
    """Responsibility rows over a fixed data set (module docstring).

    Parameters
    ----------
    selector : TopKSelector
        The scaled data points, ``top_k`` and the top-k search of the sparse modes.
    neighbors : {"dense", "candidates", "knn", "graph", "pool"}
        The (resolved) neighbour mode (``graph``: cached queries by the warm-started graph
        search of :mod:`nopg.model.graph_search`, one-off queries by exact k-NN).
    support_radius : float
        Distance, in bandwidths, at which one data pair leaves the thinness at ``1/e``.
    absorb : bool
        Scale every row by its support ``w`` (the support-aware model).
    attach_thinness : bool
        Keep the thinness on the policy's graph (implied by ``absorb``; the penalty model).
    """

    def __init__(self, selector: TopKSelector, neighbors: str, support_radius: float,
                 absorb: bool, attach_thinness: bool = False) -> None:
        self.selector = selector
        self.neighbors = neighbors
        self.support_radius = float(support_radius)
        self.absorb = bool(absorb)
        self.attach_thinness = bool(absorb or attach_thinness)
        self.action_sq = (selector.actions ** 2).sum(-1)                       # (n,)

    @property
    def n(self) -> int:
        return self.selector.n

    def prepare(self, scaled: torch.Tensor, cache: bool = False) -> QueryStates:
        """Per-query data that does not depend on the policy, for scaled states (m, d_s).

        ``cache=True`` (the rows of ``P`` and ``eps0``) keeps candidate sets across updates in
        candidate mode; one-off queries are answered by exact k-NN.
        """
        if self.neighbors == "dense":
            return QueryStates(scaled, fixed=policy_free_log_weights(
                scaled, self.selector.states, self.action_sq))
        sets = (CandidateSets(scaled)
                if cache and self.neighbors in ("candidates", "graph", "pool")
                else None)
        return QueryStates(scaled, candidates=sets)

    def rows(self, queries: QueryStates, actions: torch.Tensor, group: int = 1
             ) -> tuple[Rows, torch.Tensor]:
        """Rows at query states and scaled actions (M, G, d_a), averaged over the ``G`` actions
        and over consecutive groups of ``group`` states, and their thinness (M / group,)."""
        if self.neighbors != "dense":
            return self._sparse_rows(queries, actions, group)
        assert queries.fixed is not None
        logits, shift = expanded_log_weights(queries.fixed, actions, self.selector.actions)
        M, g, n = logits.shape
        return self._dense_rows(logits.reshape(M // group, group * g, n),
                                shift.reshape(M // group, group * g))

    def _normalised(self, logits: torch.Tensor, shift: torch.Tensor | None
                    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Responsibilities (..., c) of log-weights (..., c) and their thinness (...).

        ``shift`` adds the term dropped from ``logits`` to the log kernel mass. In the
        support-aware model the responsibilities are scaled by ``w = 1 - thinness``; otherwise
        the thinness is a detached diagnostic, unless ``attach_thinness`` (the penalty model).
        """
        weights, log_mass = softmax_log_mass(logits)
        thin = thinness(log_mass if shift is None else log_mass + shift, self.support_radius)
        if self.absorb:
            return weights * (1.0 - thin)[..., None], thin
        return weights, thin if self.attach_thinness else thin.detach()

    def _dense_rows(self, logits: torch.Tensor, shift: torch.Tensor) -> tuple[Rows, torch.Tensor]:
        """Rows from log-weights (m, G, n) up to ``shift`` (m, G), averaged over the G samples."""
        m, g, n = logits.shape
        top_k = self.selector.top_k
        if top_k is None:
            weights, thin = self._normalised(logits, shift)
            return DenseRows(weights.mean(1)), thin.mean(1)
        vals, idx = torch.topk(logits, top_k, dim=-1)                          # (m, G, top_k)
        weights, thin = self._normalised(vals, shift)
        return SparseRows(idx.reshape(m, -1), (weights / g).reshape(m, -1), n), thin.mean(1)

    def _sparse_rows(self, queries: QueryStates, actions: torch.Tensor, group: int
                     ) -> tuple[SparseRows, torch.Tensor]:
        """Rows over the selected entries, log-weights recomputed so gradients reach ``actions``."""
        M, G, _ = actions.shape
        sel = self.selector
        idx = sel.select(queries.scaled, actions.detach(), queries.candidates)  # (M, G, top_k)
        if queries.scaled.requires_grad:
            logits = log_weights(queries.scaled[:, None, None, :], actions[:, :, None, :],
                                 gather_rows(sel.states, idx), gather_rows(sel.actions, idx))
        else:   # the state part needs no gradient: summed per coordinate (no (M, G, k, d_s) array)
            sq_state = gathered_squared_distances(queries.scaled, sel.state_columns,
                                                  idx.reshape(M, -1)).reshape(idx.shape)
            da = actions[:, :, None, :] - gather_rows(sel.actions, idx)
            logits = -0.5 * (sq_state + squared_norm(da))
        weights, thin = self._normalised(logits, None)
        m = M // group
        return (SparseRows(idx.reshape(m, -1), (weights / (G * group)).reshape(m, -1), self.n),
                thin.reshape(m, -1).mean(1))
