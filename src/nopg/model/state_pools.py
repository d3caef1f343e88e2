"""Exact top-k selection for moving actions from fixed pools of nearest data *states*.

The rows of ``P`` and ``eps0`` are queries ``(s'_i/h_s, pi(s'_i)/h_a)`` whose state part never
changes during a fit; only the policy's action moves. :class:`StatePools` exploits that in any
number of dimensions, without approximation:

- once per cached batch (its first selection), the ``pool`` nearest data *states* of every query
  state, any action (one k-NN query over the scaled states alone), with their squared state
  distances and ``R^2``, the squared state distance of the nearest state left out;
- at every selection, the pool is re-ranked at the policy's actions (a gather of the action
  columns: the state distances are fixed), and the ``top_k`` nearest pool entries are kept.

Every data pair ``j`` left out of a pool has a squared distance ``|ds_j|^2 + |da_j|^2 >= R^2``
to the query, whatever the action, so a pair whose ``top_k``-th pool entry lies within ``R^2`` has
its exact top-k (up to ties). The pairs that are not certified get an exact k-NN query of the
scaled (state, action) pairs (:class:`nopg.model.neighbors.NeighborIndex`), so the result always
equals the exact selection. It is the ``lambda = 0`` end of the shrunk candidate index of
:mod:`nopg.model.candidates`: the certificate holds for any action, so a pool never needs
re-centring however far the policy moves. Its cost is the one-off pool query (``pool + 1``
neighbours in ``d_s`` dimensions) and ``pool x d_a`` operations per pair and selection, against an
exact k-NN query of every pair at every selection, which in 14 dimensions costs about 0.1 ms a
pair (``docs/scale.md``). How many pairs a pool certifies depends on the data; it is counted
(:attr:`StatePools.uncertified`), and the ``pool`` size trades the one-off query and the
re-ranking against the exact queries of uncertified pairs.
"""

from __future__ import annotations

import torch

from .neighbors import NeighborIndex

DEFAULT_POOL = 256
"""Pool size of ``neighbors="pool"`` where ``ModelConfig.n_candidates`` is ``None``: on 10^5
Hopper-v5 transitions (11-D states, 3-D actions, ``auto`` bandwidths, an untrained policy) a
pool of 256 states certified 99.85% of the rows (``docs/scale.md``)."""


class StatePools:
    """Pools of nearest data states and their certified re-ranking (module docstring).

    Parameters
    ----------
    states : tensor of shape (n, d_s)
        The data's states divided by their bandwidths.
    backend : {"auto", "kdtree", "torch"}
        Back end of the pool query (:class:`nopg.model.neighbors.NeighborIndex`).
    """

    def __init__(self, states: torch.Tensor, backend: str = "auto") -> None:
        self.states = states
        self.backend = backend
        self._index: NeighborIndex | None = None
        self.uncertified = 0
        """Pairs answered by an exact k-NN query since the counter was last reset."""

    @property
    def n(self) -> int:
        return self.states.shape[0]

    def index(self) -> NeighborIndex:
        """k-NN index over the scaled data states (built on first use)."""
        if self._index is None:
            self._index = NeighborIndex(self.states, self.backend)
        return self._index

    def start(self, query_states: torch.Tensor, pool: int
              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The pools of ``query_states`` (m, d_s): data indices (m, p), their squared state
        distances (m, p) and the distance ``R`` (m,) to the nearest state left out (``inf``
        where the pool holds every data point), with ``p = min(pool, n)``."""
        if pool < 1:
            raise ValueError(f"pool must be a positive int. Got {pool!r} instead.")
        m = query_states.shape[0]
        if pool >= self.n:
            idx = torch.arange(self.n, device=query_states.device).expand(m, self.n).contiguous()
            diff = query_states[:, None, :] - self.states[idx]
            radius = torch.full((m,), torch.inf, dtype=query_states.dtype,
                                device=query_states.device)
            return idx, (diff * diff).sum(-1), radius
        sq, idx = self.index().query(query_states, pool + 1)
        return idx[:, :pool].contiguous(), sq[:, :pool].contiguous(), sq[:, pool].sqrt()
