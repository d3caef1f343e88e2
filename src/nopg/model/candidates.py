"""Exact top-k selection of the kernel log-weights, with cached and certified candidates.

Sparsification keeps the ``top_k`` largest responsibilities of every row. With Gaussian kernels
the ``top_k`` largest log-weights at a query ``(s, a)`` are the ``top_k`` nearest neighbours of
``(s/h_s, a/h_a)`` among the scaled data pairs ``(s_j/h_s, a_j/h_a)`` (:mod:`nopg.model.kernels`), so
:class:`TopKSelector` finds them with the k-NN search of :mod:`nopg.model.neighbors`:

- one-off queries (values, thinness, ``neighbors="knn"``): an exact k-NN query per pair;
- the rows of ``P`` and ``eps0``, whose query states are fixed (``neighbors="candidates"``): the
  ``n_candidates`` nearest neighbours of the pair at a *centre* action are kept as candidates
  (:class:`CandidateSets`), with the distance ``R`` of the nearest point left out. Every update
  re-ranks only the candidates at the policy's new action ``a`` (a gather, ``O(n n_candidates)``).
  A row whose ``top_k``-th candidate is nearer than every point left out can be (:meth:`certified`) is
  exact; the others are re-centred at their current action by a k-NN query, so the result always
  equals the dense top-k (up to ties). The policy moves slowly, so few rows need it per update,
  and their number is counted in :attr:`TopKSelector.refined_rows`.

With ``n_candidates`` above ``4 top_k`` the candidates are found with the action axes shrunk by ``lambda``
(:func:`candidate_action_scale`): they reach ``1 / lambda`` times further along the actions, where
the policy moves, and :meth:`TopKSelector.certified` gives the bound that still holds.
``refine=False`` skips the certificate (candidates from the first update only): an approximation.
With ``graph=True`` (``neighbors="graph"``) the cached batches are answered instead by the
warm-started graph search of :mod:`nopg.model.graph_search` (approximate, for high-dimensional pairs),
and with ``pool`` set (``neighbors="pool"``) by certified pools of nearest data states,
:mod:`nopg.model.state_pools` (exact, for high-dimensional pairs).

Where the policy moves far in bandwidth units at every update (narrow action kernels on large
data), most rows leave their certificate and the candidates cost a re-centring query per row on
top of the re-ranking. With ``switch_share`` set (``neighbors="auto"``), an update that re-centres
more than that share of a batch's rows sends the batch's next ``probe_every - 1`` selections to
the exact k-NN query of every pair, after which the candidates are tried again; each further
such selection in a row doubles the length of the k-NN run (up to ``16 probe_every``). Such a
probe re-ranks the candidates and answers the pairs it cannot certify by exact k-NN queries,
without re-centring them (a re-centring query costs several times a k-NN query); it re-centres
only once the runs have reached their longest, so that sets left behind by a policy that has
since settled are renewed. Where the candidates never pay (high-dimensional data) the probes
therefore cost little. Both paths are exact, and the switch depends only on the counts, so a
fit stays deterministic.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .graph_search import DEFAULT_BEAM, DEFAULT_POOL, GraphSearch, WarmStart
from .kernels import gather_rows, gathered_squared_distances, squared_norm
from .neighbors import NeighborIndex
from .state_pools import StatePools, Tier

_BLOCK = 1 << 22               # elements per block of candidate scores (bounds peak memory)
_MAX_RUN = 16                  # longest k-NN run of switch_share, in probe_every
_SCALE_MARGIN = 4.0            # candidate_action_scale rule: lambda^d_a = margin * top_k / n_candidates


def smallest(values: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Positions (..., k) of the ``k`` smallest entries along the last axis, in no particular
    order, and the ``k``-th smallest value (...).

    On the CPU this is NumPy's ``argpartition`` (introselect), about twice as fast as
    ``torch.topk`` on the (rows, 1, 40) blocks of a re-ranking; elsewhere ``torch.topk``.
    """
    if values.device.type == "cpu" and k < values.shape[-1]:
        pos = torch.from_numpy(np.argpartition(values.detach().numpy(), k - 1, axis=-1)[..., :k])
        return pos, values.gather(-1, pos[..., k - 1:]).squeeze(-1)
    vals, pos = torch.topk(values, k, dim=-1, largest=False)
    return pos, vals[..., -1]


def candidate_action_scale(top_k: int, n_candidates: int, action_dim: int) -> float:
    """Default ``lambda`` of the candidate index: ``min(1, 4 top_k / n_candidates) ** (1 / d_a)``.

    Shrinking the action axes by ``lambda`` puts about ``lambda^d_a`` times fewer points in a
    ball, so ``n_candidates`` candidates found that way span about as much of the state space as
    ``4 top_k`` would unshrunk (a margin over the ``top_k`` kept), while they reach
    ``1 / lambda`` times further along the actions, where the policy moves.
    """
    return min(1.0, _SCALE_MARGIN * top_k / max(n_candidates, 1)) ** (1.0 / max(action_dim, 1))


def default_candidates(top_k: int) -> int:
    """Default ``n_candidates`` for ``top_k`` kept entries per row: ``max(4 top_k, 32)``."""
    return max(4 * top_k, 32)


@dataclass
class CandidateSets:
    """Cached candidates of a fixed batch of query states (filled by :meth:`TopKSelector.recentre`).

    Attributes
    ----------
    states : tensor of shape (m, d_s)
        The query states divided by ``h_s``.
    index : long tensor of shape (m, n_candidates), or None before the first selection
        The ``n_candidates`` nearest data points of ``(s, lambda centre)`` with the action axes shrunk by
        ``scale``.
    sq_state : tensor of shape (m, n_candidates)
        Their squared scaled state distances.
    centre : tensor of shape (m, d_a)
        The scaled action each set was found at.
    radius : tensor of shape (m,)
        Distance in the shrunk space from the centre to the nearest point left out (``inf`` if
        none is).
    scale : tensor of shape (m,)
        ``lambda`` of each set (1 for rows that fell back to the joint neighbours).
    knn_left : int
        Selections left that skip the candidates for an exact k-NN query of every pair
        (``switch_share`` of :class:`TopKSelector`).
    knn_run : int
        Length of the next such run (0: ``probe_every``); doubles after each costly selection.
    warm : WarmStart or None
        ``neighbors="graph"``: the pools of the warm-started graph search
        (:class:`nopg.model.graph_search.GraphSearch`), made at the first selection.
    tiers : list of Tier or None
        ``neighbors="pool"``: the rows' pools of nearest data states by size
        (:mod:`nopg.model.state_pools`), made at the first selection and grown where needed.
    exact_rows : long tensor or None
        ``neighbors="pool"``: rows no pool of at most ``MAX_POOL`` states can certify, answered
        by exact k-NN queries.
    """

    states: torch.Tensor
    index: torch.Tensor | None = None
    sq_state: torch.Tensor | None = None
    centre: torch.Tensor | None = None
    radius: torch.Tensor | None = None
    scale: torch.Tensor | None = None
    knn_left: int = 0
    knn_run: int = 0
    warm: WarmStart | None = None
    tiers: list[Tier] | None = None
    exact_rows: torch.Tensor | None = None

    def allocate(self, n_candidates: int, action_dim: int) -> None:
        """Empty buffers for every row (called before the first :meth:`TopKSelector.recentre`)."""
        m, like = self.states.shape[0], self.states
        self.index = torch.zeros(m, n_candidates, dtype=torch.long, device=like.device)
        self.sq_state = like.new_zeros(m, n_candidates)
        self.centre = like.new_zeros(m, action_dim)
        self.radius = like.new_zeros(m)
        self.scale = like.new_ones(m)


class TopKSelector:
    """Indices of the ``top_k`` largest log-weights of query pairs (module docstring).

    Parameters
    ----------
    states, actions : tensors of shape (n, d_s) and (n, d_a)
        The data's states and actions divided by their bandwidths.
    top_k : int or None
        The entries kept per row (``None``: the model keeps every entry and never selects).
    n_candidates : int
        The candidates kept per query (at most ``n``).
    refine : bool
        Re-centre the rows the certificate cannot vouch for (exact). ``False`` approximates.
    backend : {"auto", "kdtree", "torch"}
        Back end of the k-NN searches (:class:`nopg.model.neighbors.NeighborIndex`).
    switch_share : float or None
        Share of a batch's rows re-centred in one selection above which its next
        ``probe_every - 1`` selections use the exact k-NN query instead (module docstring);
        ``None``: always the candidates.
    probe_every : int
        Length of such a k-NN run, the selection that tries the candidates again included.
    graph : bool
        Answer cached batches by the warm-started graph search of :mod:`nopg.model.graph_search`
        (``neighbors="graph"``: approximate) instead of the candidates.
    pool : int or None
        Answer cached batches from pools of this many nearest data states, certified for any
        action (:mod:`nopg.model.state_pools`, ``neighbors="pool"``: exact) instead of the
        candidates; raised to ``top_k``. ``None``: off.
    """

    def __init__(self, states: torch.Tensor, actions: torch.Tensor, top_k: int | None,
                 n_candidates: int, refine: bool = True, backend: str = "auto",
                 switch_share: float | None = None, probe_every: int = 10,
                 graph: bool = False, pool: int | None = None) -> None:
        self.states, self.actions = states, actions
        self.top_k, self.n_candidates = top_k, int(n_candidates)
        self.refine, self.backend = bool(refine), backend
        self.switch_share = None if switch_share is None else float(switch_share)
        self.probe_every = int(probe_every)
        self.knn_selections = 0
        """Candidate-batch selections answered by the exact k-NN query (``switch_share``)."""
        self.action_scale = candidate_action_scale(top_k or 1, self.n_candidates, actions.shape[1])
        """``lambda`` in (0, 1] of the candidate index (exact for any; the speed depends on it)."""
        self.action_columns = actions.T.contiguous()
        """The scaled data actions by axis (d_a, n), for the re-ranking."""
        self.state_columns = states.T.contiguous()
        """The scaled data states by axis (d_s, n), for the candidates' state distances."""
        self.refined_rows = 0
        """Rows re-centred since the counter was last reset (by the model's ``solution``)."""
        self._joint: NeighborIndex | None = None
        self._shrunk: NeighborIndex | None = None
        self._shrunk_scale = 1.0
        self.graph = bool(graph)
        self._graph_search: GraphSearch | None = None
        self.graph_expanded_rows = 0
        """``graph``: query-rounds of graph expansion since the counter was last reset."""
        self.pool = None if pool is None else max(int(pool), top_k or 1)
        self.state_pools: StatePools | None = (
            None if pool is None else StatePools(states, backend, self.state_columns))
        """``pool``: the pools' state index and their counts of promoted rows and exact pairs."""

    @property
    def n(self) -> int:
        return self.states.shape[0]

    def _top_k(self) -> int:
        if self.top_k is None:
            raise ValueError("top-k selection needs top_k (the entries kept per row)")
        return self.top_k

    def joint_index(self) -> NeighborIndex:
        """k-NN index over scaled (state, action) pairs (built on first use)."""
        if self._joint is None:
            self._joint = NeighborIndex(torch.cat([self.states, self.actions], dim=1), self.backend)
        return self._joint

    def candidate_index(self) -> NeighborIndex:
        """k-NN index over ``(s_j/h_s, lambda a_j/h_a)`` (``lambda = action_scale``), in which
        candidate sets are found: shrinking the action axes makes a candidate set reach
        ``1/lambda`` times further along the actions than across the states, so it stays
        certified while the policy's action moves (see :meth:`certified`)."""
        lam = float(self.action_scale)
        if not 0.0 < lam <= 1.0:
            raise ValueError(f"candidate_action_scale must be in (0, 1]. Got {lam!r} instead.")
        if lam == 1.0:
            return self.joint_index()
        if self._shrunk is None or self._shrunk_scale != lam:
            self._shrunk = NeighborIndex(torch.cat([self.states, lam * self.actions], dim=1),
                                         self.backend)
            self._shrunk_scale = lam
        return self._shrunk

    def graph_search(self) -> GraphSearch:
        """The warm-started graph search over the scaled pairs (built on first use; it shares
        the joint k-NN index)."""
        if self._graph_search is None:
            top_k = self._top_k()
            self._graph_search = GraphSearch(
                self.states, self.actions, pool=max(DEFAULT_POOL, 2 * top_k),
                beam=max(DEFAULT_BEAM, top_k), index=self.joint_index())
        return self._graph_search

    def _graph_select(self, states: torch.Tensor, actions: torch.Tensor, sets: CandidateSets
                      ) -> torch.Tensor:
        """``graph``: the top-k found by the warm-started graph search for every pair, from the
        exact pools made at the batch's first selection (approximate)."""
        M, G, _ = actions.shape
        top_k = self._top_k()
        search = self.graph_search()
        points = states[:, None, :].expand(M, G, -1).reshape(M * G, -1)
        flat = actions.reshape(M * G, -1)
        if sets.warm is None or sets.warm.index.shape[0] != M * G:
            sets.warm = search.start(points, flat)
        idx = search.search(sets.warm, points, flat, top_k)
        self.graph_expanded_rows += sets.warm.expanded_rows
        return idx.reshape(M, G, top_k)

    def _pool_select(self, actions: torch.Tensor, sets: CandidateSets) -> torch.Tensor:
        """``pool``: the top-k of every pair from its row's pool of nearest data states (made at
        the batch's first selection), re-ranked at ``actions``. A row with a pair whose
        ``top_k``-th pool entry lies beyond the nearest state left out moves up to a larger pool,
        or, where that would exceed ``MAX_POOL``, to exact k-NN queries (exact)."""
        pools = self.state_pools
        assert pools is not None and self.pool is not None
        top_k = self._top_k()
        M, G, d_a = actions.shape
        if sets.tiers is None:
            sets.tiers = [pools.tier(sets.states, torch.arange(M, device=actions.device),
                                     self.pool)]
            sets.exact_rows = torch.zeros(0, dtype=torch.long, device=actions.device)
        assert sets.exact_rows is not None
        idx = torch.empty(M, G, top_k, dtype=torch.long, device=actions.device)
        t = 0
        while t < len(sets.tiers):           # promoted rows are re-ranked in their new tier
            tier = sets.tiers[t]
            if tier.rows.numel():
                found, kth = self.rerank(tier, None, actions[tier.rows])   # type: ignore[arg-type]
                idx[tier.rows] = found
                kth_row = kth.amax(1)
                bad = kth_row > tier.radius * tier.radius
                if bool(bad.any()):
                    gone = pools.promote(sets.tiers, t, bad, kth_row, sets.states)
                    sets.exact_rows = torch.cat([sets.exact_rows, gone])
            t += 1
        rows = sets.exact_rows
        if rows.numel():
            pools.uncertified += int(rows.numel()) * G
            points = sets.states[rows][:, None, :].expand(-1, G, -1).reshape(-1, sets.states.shape[1])
            _, exact = self.exact_knn(points, actions[rows].reshape(-1, d_a), top_k)
            idx[rows] = exact.reshape(-1, G, top_k)
        return idx

    def exact_knn(self, states: torch.Tensor, actions: torch.Tensor, k: int
                  ) -> tuple[torch.Tensor, torch.Tensor]:
        """Exact k-NN of the scaled pairs ``(states[i], actions[i])``: (sqdist, index)."""
        return self.joint_index().query(torch.cat([states, actions], dim=-1), k)

    def _sq_state(self, states: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        """Squared scaled state distances (r, c) from ``states`` (r, d_s) to the points ``idx``."""
        return gathered_squared_distances(states, self.state_columns, idx)

    def _shrunk_sets(self, states: torch.Tensor, centre: torch.Tensor
                     ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(index, radius, sq_state, lambda)`` of new candidate sets in the shrunk space; rows
        whose shrunk set cannot certify its own centre take the joint neighbours (``lambda = 1``)."""
        n_candidates = self.n_candidates
        lam = torch.full((states.shape[0],), float(self.action_scale), dtype=states.dtype,
                         device=states.device)
        d2, idx = self.candidate_index().query(torch.cat([states, lam[:, None] * centre], dim=-1),
                                               n_candidates + 1)
        radius, idx = d2[:, n_candidates].sqrt(), idx[:, :n_candidates]
        sq_state = self._sq_state(states, idx)
        if float(self.action_scale) < 1.0:
            sq_action = gathered_squared_distances(centre, self.action_columns, idx)
            kth = torch.kthvalue(sq_state + sq_action, self._top_k(), dim=1).values
            bad = torch.nonzero(kth > radius * radius).reshape(-1)
            if bad.numel():  # rare: fall back to the joint neighbours of these rows
                d2b, idxb = self.exact_knn(states[bad], centre[bad], n_candidates + 1)
                idx[bad], radius[bad], lam[bad] = (idxb[:, :n_candidates],
                                                   d2b[:, n_candidates].sqrt(), 1.0)
                sq_state[bad] = self._sq_state(states[bad], idx[bad])
        return idx, radius, sq_state, lam

    def recentre(self, sets: CandidateSets, rows: torch.Tensor, centre: torch.Tensor) -> None:
        """New candidate sets for ``rows``: the ``n_candidates`` neighbours of ``(s, lambda centre)``
        in the space of :meth:`candidate_index`, and ``radius``, the distance there to the next one.

        A row whose shrunk set cannot certify its own centre (its ``top_k``-th candidate lies
        beyond ``radius``) takes the ``n_candidates`` joint neighbours instead (``lambda = 1``),
        which always can.
        """
        if sets.index is None:
            sets.allocate(self.n_candidates, centre.shape[1])
        assert sets.index is not None and sets.sq_state is not None and sets.centre is not None
        assert sets.radius is not None and sets.scale is not None
        states = sets.states[rows]
        if self.n_candidates >= self.n:  # every point is a candidate: nothing is left out
            idx = torch.arange(self.n, device=states.device).expand(rows.numel(), self.n)
            radius = torch.full((rows.numel(),), torch.inf, dtype=states.dtype, device=states.device)
            sq_state = self._sq_state(states, idx)
            lam = torch.ones(rows.numel(), dtype=states.dtype, device=states.device)
        else:
            idx, radius, sq_state, lam = self._shrunk_sets(states, centre)
        sets.index[rows] = idx
        sets.sq_state[rows] = sq_state
        sets.centre[rows] = centre
        sets.radius[rows] = radius
        sets.scale[rows] = lam

    def rerank(self, sets: CandidateSets, rows: torch.Tensor | None, actions: torch.Tensor
               ) -> tuple[torch.Tensor, torch.Tensor]:
        """Top-k of the candidates of ``rows`` (``None``: every row) at ``actions`` (r, G, d_a):
        (index, the ``top_k``-th sqdist). The ``top_k`` indices of a pair come in no particular
        order."""
        assert sets.index is not None and sets.sq_state is not None
        top_k = self._top_k()
        G, d_a = actions.shape[1:]
        n_candidates = sets.index.shape[1]
        block = max(1, _BLOCK // (G * n_candidates * d_a))
        idx_parts, kth_parts = [], []
        n_rows = sets.index.shape[0] if rows is None else rows.numel()
        for s0 in range(0, n_rows, block):
            r = slice(s0, s0 + block) if rows is None else rows[s0:s0 + block]
            c = sets.index[r]                                           # (b, n_candidates)
            d2 = sets.sq_state[r][:, None, :]                           # (b, 1, n_candidates)
            for j in range(d_a):                                        # contiguous per axis
                da = actions[s0:s0 + block, :, j, None] - gather_rows(self.action_columns[j], c)[:, None, :]
                d2 = d2 + da * da                                       # (b, G, n_candidates)
            pos, kth = smallest(d2, top_k)
            idx_parts.append(c[:, None, :].expand(-1, G, -1).gather(2, pos))
            kth_parts.append(kth)
        return torch.cat(idx_parts), torch.cat(kth_parts)

    def certified(self, sets: CandidateSets, rows: torch.Tensor | None, actions: torch.Tensor,
                  kth_sq: torch.Tensor) -> torch.Tensor:
        """(r, G) mask: the candidates of ``rows`` (``None``: every row) provably hold the exact
        top-k.

        Every data point ``j`` outside a candidate set has ``|ds_j|^2 + lambda^2 u_j^2 >= R^2``
        (``ds_j`` its scaled state offset, ``u_j = |a_j - centre|``, ``R = radius``). At an action
        ``a`` with ``t = |a - centre|`` its distance satisfies ``D_j^2 >= |ds_j|^2 + (u_j - t)_+^2
        >= (R^2 - lambda^2 u_j^2)_+ + (u_j - t)_+^2``, whose minimum over ``u_j >= 0`` is

            R^2 - lambda^2 t^2 / (1 - lambda^2)   for lambda t <= R (1 - lambda^2),
            (R / lambda - t)_+^2                  otherwise

        (for ``lambda = 1``: ``(R - t)_+^2``, the triangle inequality). The row is exact when its
        ``top_k``-th candidate lies no further than that bound.
        """
        assert sets.centre is not None and sets.radius is not None and sets.scale is not None
        r = slice(None) if rows is None else rows
        t = squared_norm(actions - sets.centre[r][:, None, :]).sqrt()
        radius, lam = sets.radius[r][:, None], sets.scale[r][:, None]
        far = (radius / lam - t).clamp_min(0.0) ** 2
        shrunk = lam < 1.0
        if not bool(shrunk.any()):
            return kth_sq <= far
        one_minus = torch.where(shrunk, 1.0 - lam * lam, torch.ones_like(lam))
        near = radius * radius - (lam * lam / one_minus) * t * t
        bound = torch.where(shrunk & (lam * t <= radius * one_minus), near, far)
        return kth_sq <= bound

    @torch.no_grad()
    def select(self, states: torch.Tensor, actions: torch.Tensor,
               sets: CandidateSets | None = None) -> torch.Tensor:
        """Indices (M, G, top_k) of the ``top_k`` largest log-weights for query states and actions.

        ``states`` (M, d_s) and ``actions`` (M, G, d_a) are scaled by their bandwidths. Without
        ``sets`` every pair gets an exact k-NN query; with them (cached candidates of ``states``),
        rows the certificate cannot vouch for are re-centred at their current action (counted in
        :attr:`refined_rows`) and pairs still uncertified get an exact k-NN query.
        """
        M, G, _ = actions.shape
        top_k = self._top_k()
        if sets is not None and self.graph:
            return self._graph_select(states, actions, sets)
        if sets is not None and self.state_pools is not None:
            return self._pool_select(actions, sets)
        if sets is not None and sets.knn_left > 0:     # switch_share: k-NN for this selection
            sets.knn_left -= 1
            self.knn_selections += 1
            sets = None
        if sets is None:
            points = states[:, None, :].expand(M, G, -1).reshape(M * G, -1)
            joint = torch.cat([points, actions.reshape(M * G, -1)], dim=-1)
            return self.joint_index().query_index(joint, top_k).reshape(M, G, top_k)
        centre = actions.mean(1)                                               # (M, d_a)
        if sets.index is None:
            self.recentre(sets, torch.arange(M, device=actions.device), centre)
        idx, kth = self.rerank(sets, None, actions)
        if not self.refine:
            return idx
        ok_pairs = self.certified(sets, None, actions, kth)
        rows = torch.nonzero(~ok_pairs.all(1)).reshape(-1)
        if self.switch_share is not None:
            if rows.numel() > self.switch_share * M:
                run = sets.knn_run or self.probe_every
                # Re-centre at the first costly probe of a series and when the runs reach their
                # longest; a probe in between answers its uncertified pairs by exact k-NN
                # queries and leaves the sets as they are.
                recentre = run == self.probe_every or run == _MAX_RUN * self.probe_every
                sets.knn_left, sets.knn_run = run - 1, min(2 * run, _MAX_RUN * self.probe_every)
                if not recentre:
                    r_bad, g_bad = torch.nonzero(~ok_pairs, as_tuple=True)
                    _, idx[r_bad, g_bad] = self.exact_knn(sets.states[r_bad], actions[r_bad, g_bad],
                                                          top_k)
                    return idx
            else:
                sets.knn_run = 0
        if rows.numel():
            self.refined_rows += int(rows.numel())
            self.recentre(sets, rows, centre[rows])
            sub_idx, sub_kth = self.rerank(sets, rows, actions[rows])
            ok = self.certified(sets, rows, actions[rows], sub_kth)
            idx[rows] = sub_idx
            r_bad, g_bad = torch.nonzero(~ok, as_tuple=True)                  # stochastic outliers
            if r_bad.numel():
                r = rows[r_bad]
                _, exact = self.exact_knn(sets.states[r], actions[r, g_bad], top_k)
                idx[r, g_bad] = exact
        return idx
