"""Exact top-k selection for moving actions from fixed pools of nearest data *states*.

The rows of ``P`` and ``eps0`` are queries ``(s'_i/h_s, pi(s'_i)/h_a)`` whose state part never
changes during a fit; only the policy's action moves. :class:`StatePools` exploits that in any
number of dimensions, without approximation:

- once per cached batch (its first selection), the ``pool`` nearest data *states* of every query
  state, any action (one k-NN query over the scaled states alone), with their squared state
  distances and ``R^2``, the squared state distance of the nearest state left out;
- at every selection, each pool is re-ranked at the policy's actions (a gather of the action
  columns: the state distances are fixed), and the ``top_k`` nearest pool entries are kept.

Every data pair ``j`` left out of a pool has a squared distance ``|ds_j|^2 + |da_j|^2 >= R^2``
to the query, whatever the action, so a pair whose ``top_k``-th pool entry lies within ``R^2`` has
its exact top-k (up to ties). A row with a pair that is not certified gets a pool
:data:`GROWTH` times larger (a *tier* up, found once for that row and kept), until its pool would
exceed :data:`MAX_POOL` (:meth:`StatePools.target_sizes`: it jumps straight to the size its pool's
local growth predicts); such a row leaves the pools, and its pairs get an exact k-NN query of the
scaled (state, action) pairs (:class:`nopg.model.neighbors.NeighborIndex`) at every selection. The
result therefore always equals the exact selection. It is the ``lambda = 0`` end of the shrunk
candidate index of :mod:`nopg.model.candidates`: the certificate holds for any action, so a pool
never needs re-centring however far the policy moves; what a row needs is a pool wide enough for
the actions the policy takes there (where the policy goes to actions the data rarely took, its
``top_k``-th neighbour lies further, and the row moves up a tier). The costs are the pool queries
(``pool + 1`` neighbours in ``d_s`` dimensions, once per row and tier) and ``pool x d_a``
operations per pair and selection, against an exact k-NN query of every pair at every selection,
which in 14 dimensions costs about 0.1 ms a pair (``docs/scale.md``). Promotions and exact
queries are counted (:attr:`StatePools.promoted`, :attr:`StatePools.uncertified`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .kernels import gathered_squared_distances
from .neighbors import NeighborIndex

DEFAULT_POOL = 64
"""First-tier pool size of ``neighbors="pool"`` where ``ModelConfig.n_candidates`` is ``None``:
on 10^5 Hopper-v5 transitions (11-D states, 3-D actions, ``auto`` bandwidths, an untrained
policy) the pool that certifies a row held a median 21 states, 85 at the 90th percentile
(``docs/scale.md``), so most rows stay in the first tier and the others move up."""
GROWTH = 4
"""A row that a pool cannot certify gets a pool this many times larger."""
MAX_POOL = 4096
"""No pool grows beyond this; beyond it, exact k-NN queries."""
MEAN_POOL_BUDGET = 512
"""The pools of a batch hold at most this many entries per row on average (16 bytes an entry:
820 MB for 10^5 rows); a row whose larger pool would exceed it goes to exact k-NN queries."""


@dataclass
class Tier:
    """The rows of a batch whose pools have one size, and those pools.

    Attributes
    ----------
    rows : long tensor of shape (r,)
        Rows of the batch in this tier.
    index : long tensor of shape (r, p)
        Their pools (data indices).
    sq_state : tensor of shape (r, p)
        The pool entries' squared scaled state distances to the row's state (fixed).
    radius : tensor of shape (r,)
        The state distance to the nearest data state left out (``inf``: none is).
    size : int
        The pool size ``p`` asked for (``p`` is smaller only where it exceeds the data).
    """

    rows: torch.Tensor
    index: torch.Tensor
    sq_state: torch.Tensor
    radius: torch.Tensor
    size: int

    def take(self, keep: torch.Tensor) -> Tier:
        """The tier restricted to the rows where ``keep`` (r,) is true."""
        return Tier(self.rows[keep], self.index[keep], self.sq_state[keep], self.radius[keep],
                    self.size)

    def join(self, other: Tier) -> Tier:
        """This tier's rows and ``other``'s (pools of the same size)."""
        return Tier(torch.cat([self.rows, other.rows]), torch.cat([self.index, other.index]),
                    torch.cat([self.sq_state, other.sq_state]),
                    torch.cat([self.radius, other.radius]), self.size)


class StatePools:
    """Pools of nearest data states and their certified re-ranking (module docstring).

    Parameters
    ----------
    states : tensor of shape (n, d_s)
        The data's states divided by their bandwidths.
    backend : {"auto", "kdtree", "torch"}
        Back end of the pool query (:class:`nopg.model.neighbors.NeighborIndex`).
    columns : tensor of shape (d_s, n), optional
        ``states.T``, contiguous (made here if not given).
    """

    def __init__(self, states: torch.Tensor, backend: str = "auto",
                 columns: torch.Tensor | None = None) -> None:
        self.states = states
        self.backend = backend
        self.columns = states.T.contiguous() if columns is None else columns
        self._index: NeighborIndex | None = None
        self.uncertified = 0
        """Pairs answered by an exact k-NN query since the counter was last reset."""
        self.promoted = 0
        """Rows moved up a tier since the counter was last reset."""

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
            radius = torch.full((m,), torch.inf, dtype=query_states.dtype,
                                device=query_states.device)
            return idx, gathered_squared_distances(query_states, self.columns, idx), radius
        sq, idx = self.index().query(query_states, pool + 1)
        return idx[:, :pool].contiguous(), sq[:, :pool].contiguous(), sq[:, pool].sqrt()

    def tier(self, query_states: torch.Tensor, rows: torch.Tensor, size: int) -> Tier:
        """A tier of pools of ``size`` for the ``rows`` of a batch of ``query_states``."""
        return Tier(rows, *self.start(query_states[rows], size), size)

    def target_sizes(self, tier: Tier, kth_sq: torch.Tensor) -> torch.Tensor:
        """The pool sizes (r,) that the rows of ``tier`` need to certify a ``top_k``-th squared
        distance ``kth_sq`` (r,), or 0 where that exceeds :data:`MAX_POOL` (exact queries).

        The number of data states within a radius grows locally like the radius to a power
        ``d``, estimated per row from its own pool: ``p/4`` states lie within the distance of its
        ``p/4``-th entry and ``p + 1`` within ``R``. A pool certifies a row once its ``R`` reaches
        the ``top_k``-th distance, so it needs about ``(p + 1) (sqrt(kth_sq) / R)^d`` states; the
        size is the tier (``size * GROWTH^j``, ``j >= 1``) that holds that many. Where the pool
        shows no growth (ties) the row moves up one tier. The estimate only decides how far a row
        jumps, never whether its answer is exact.
        """
        p = tier.index.shape[1]
        if tier.size >= self.n:                 # the pool holds every data point already
            return torch.zeros(tier.rows.numel(), dtype=torch.long, device=tier.rows.device)
        q = max(1, p // 4)
        inner = tier.sq_state[:, q - 1].sqrt()
        growth = torch.log(tier.radius / inner)
        power = math.log((p + 1) / q) / growth
        need = (p + 1) * (kth_sq.sqrt() / tier.radius) ** power
        steps = torch.ceil(torch.log(need / tier.size) / math.log(GROWTH))
        steps = torch.where(torch.isfinite(steps) & (growth > 0), steps.clamp_min(1.0),
                            torch.ones_like(steps))
        sizes = tier.size * GROWTH ** steps.clamp_max(64.0)
        return torch.where(sizes <= MAX_POOL, sizes, torch.zeros_like(sizes)).long()

    def promote(self, tiers: list[Tier], t: int, bad: torch.Tensor, kth_sq: torch.Tensor,
                query_states: torch.Tensor) -> torch.Tensor:
        """Move the rows of ``tiers[t]`` where ``bad`` (r,) is true up to the tiers
        :meth:`target_sizes` gives them for their ``top_k``-th squared distances ``kth_sq``
        (r,), with pools found for them now (tiers made or joined, ``tiers`` kept in increasing
        size), as far as :data:`MEAN_POOL_BUDGET` allows. Returns the rows that leave the pools for
        exact queries."""
        moved = tiers[t].take(bad)
        tiers[t] = tiers[t].take(~bad)
        sizes = self.target_sizes(moved, kth_sq[bad])
        held = sum(tier.index.numel() for tier in tiers)
        budget = MEAN_POOL_BUDGET * query_states.shape[0]
        for size in torch.unique(sizes[sizes > 0]).tolist():
            rows = moved.rows[sizes == size]
            fits = max(0, (budget - held) // min(int(size), self.n))
            if fits < rows.numel():              # over the memory budget: exact queries
                sizes[torch.nonzero(sizes == size).reshape(-1)[fits:]] = 0
                rows = rows[:fits]
            if not rows.numel():
                continue
            held += rows.numel() * min(int(size), self.n)
            up = self.tier(query_states, rows, int(size))
            self.promoted += int(up.rows.numel())
            at = next((j for j, other in enumerate(tiers) if other.size >= size), len(tiers))
            if at < len(tiers) and tiers[at].size == size:
                tiers[at] = tiers[at].join(up)
            else:
                tiers.insert(at, up)
        return moved.rows[sizes == 0]
