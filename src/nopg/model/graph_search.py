"""Warm-started graph search for the top-k neighbours of moving queries (approximate).

In high dimensions (14-D Hopper pairs and up) an exact k-NN query of every row of ``P`` costs
about 0.1 ms per row on one core, 10 s per update at 10^5 transitions, and the cached
candidates of :mod:`nopg.model.candidates` lose their certificates at almost every row. The queries
``(s'_i/h_s, pi(s'_i)/h_a)`` of one batch, however, move little between consecutive updates: the
state part is fixed and only the policy's action moves. :class:`GraphSearch` exploits that:

- once, a k-NN graph over the data pairs (``degree`` exact neighbours of every data pair,
  one KD-tree query of the data);
- per batch of queries, once (:meth:`GraphSearch.start`): the exact ``pool`` nearest pairs of
  every query, kept as a *pool* with their (fixed) squared state distances; the nearest
  ``beam`` of them are marked as expanded;
- at every later update (:meth:`GraphSearch.search`): the pool is re-ranked at the new actions
  (a gather of the action columns only). Where a pool point that was never expanded entered the
  ``beam`` nearest, best-first search takes over for that query: the ``expand`` nearest
  unexpanded points of its beam are expanded (their graph neighbours join the pool, which keeps
  its ``pool`` nearest entries), until every point of the beam is expanded or ``max_rounds`` is
  reached. The ``top_k`` nearest pool entries are returned.

The result is approximate: a true neighbour that the graph does not reach from the pool is
missed. ``refresh_every`` bounds how stale the expansion marks get: at every search the marks
of every ``refresh_every``-th query (in turn) are cleared, so that its beam is expanded again.
Every distance is computed exactly from the coordinates, so the entries that are found rank
exactly; recall, gradient cosine and ``J_hat`` error against the exact path are measured by
``benchmarks/bench_highdim_knn.py`` (``docs/scale.md``, 2026-11-29): at 10^5 Hopper transitions
(14-D pairs) an update after the first cost 0.11-0.13 of the exact path's, with recall@10 about
0.95; the gradient's cosine to the exact one was 0.9996 after 20 updates but 0.856 after 100 (a
nearly converged fit), and on 5 x 10^4 Walker2d transitions (23-D) 0.68 after 20. Measure on the
data at hand before relying on it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..validation import check_positive_int
from .kernels import gather_rows, gathered_squared_distances
from .neighbors import NeighborIndex

DEFAULT_DEGREE = 12            # graph neighbours per data pair
DEFAULT_POOL = 32              # pool entries kept per query
DEFAULT_BEAM = 10              # nearest pool entries that must be expanded (at least top_k)
DEFAULT_EXPAND = 2             # pool entries expanded per query and round
DEFAULT_MAX_ROUNDS = 30        # expansion rounds per search
DEFAULT_REFRESH_EVERY = 4      # marks of every 4th query cleared per search (0: never)


def _smallest(values: torch.Tensor, k: int) -> torch.Tensor:
    """Positions (m, k) of the ``k`` smallest entries of every row, in no particular order."""
    if k >= values.shape[1]:
        return torch.arange(values.shape[1], device=values.device).expand(values.shape[0], -1)
    if values.device.type == "cpu":
        return torch.from_numpy(np.argpartition(values.numpy(), k - 1, axis=1)[:, :k])
    return torch.topk(values, k, dim=1, largest=False).indices


def _check_finite(name: str, values: torch.Tensor) -> None:
    if not bool(torch.isfinite(values).all()):
        raise ValueError(f"{name} must be finite (no NaN or inf).")


def _without_self(index: NeighborIndex, degree: int) -> torch.Tensor:
    """The ``degree`` nearest neighbours (n, degree) of every indexed point but itself."""
    n = index.n
    found = index.query_index(index.points, degree + 1)                     # (n, degree + 1)
    keep = found != torch.arange(n, device=found.device)[:, None]
    extra = keep.sum(1) > degree           # itself not among them (duplicates): drop the last
    keep[extra, degree] = False
    return found[keep].reshape(n, degree)


@dataclass
class WarmStart:
    """The pools of a fixed batch of query states, kept between searches.

    Attributes
    ----------
    index : long tensor of shape (m, pool)
        Pool entries of every query (data indices).
    sq_state : tensor of shape (m, pool)
        Their squared scaled state distances to the query's state (fixed).
    expanded : bool tensor of shape (m, pool)
        Whether an entry's graph neighbours were added to the pool.
    searches : int
        Searches made from this warm start (selects the queries whose marks are cleared).
    expanded_rows : int
        Query-rounds of expansion in the last search (a cost diagnostic).
    """

    index: torch.Tensor
    sq_state: torch.Tensor
    expanded: torch.Tensor
    searches: int = 0
    expanded_rows: int = 0


class GraphSearch:
    """Approximate top-k search of moving queries over fixed scaled pairs (module docstring).

    Parameters
    ----------
    states, actions : tensors of shape (n, d_s) and (n, d_a)
        The data's states and actions divided by their bandwidths.
    degree : int
        Graph neighbours per data pair.
    pool : int
        Entries kept per query (at least the ``k`` of every search).
    beam : int
        Nearest pool entries that must be expanded before a search stops (raised to ``k``).
    expand : int
        Unexpanded beam entries expanded per query and round (nearest first).
    max_rounds : int
        Expansion rounds per search.
    refresh_every : int
        At every search, clear the expansion marks of the queries ``i`` with
        ``i % refresh_every == searches % refresh_every`` (0: never).
    backend : {"auto", "kdtree", "torch"}
        Exact k-NN search of the graph and of :meth:`start` (:class:`nopg.model.neighbors.NeighborIndex`).
    state_degree : int
        Further graph neighbours per data pair by state alone (any action): they let the search
        move along the actions at a fixed state (0: none).
    restart_every : int
        At every search, first replace the pools of the queries ``i`` with
        ``i % restart_every == searches % restart_every`` by exact ones (:meth:`start` at the
        current actions): every pool is then at most ``restart_every`` searches old, for
        ``1 / restart_every`` of an exact query per search (0: never).
    index : NeighborIndex, optional
        An existing exact index over ``cat([states, actions], 1)`` to share (``backend`` is then
        unused).

    Examples
    --------
    >>> import torch
    >>> g = torch.Generator().manual_seed(0)
    >>> s = torch.randn(200, 2, dtype=torch.float64, generator=g)
    >>> a = torch.randn(200, 1, dtype=torch.float64, generator=g)
    >>> search = GraphSearch(s, a, degree=8, pool=16, beam=4)
    >>> warm = search.start(s[:5], a[:5])
    >>> search.search(warm, s[:5], a[:5] + 0.01, k=4).shape
    torch.Size([5, 4])
    """

    def __init__(self, states: torch.Tensor, actions: torch.Tensor, degree: int = DEFAULT_DEGREE,
                 pool: int = DEFAULT_POOL, beam: int = DEFAULT_BEAM, expand: int = DEFAULT_EXPAND,
                 max_rounds: int = DEFAULT_MAX_ROUNDS, refresh_every: int = DEFAULT_REFRESH_EVERY,
                 backend: str = "auto", index: NeighborIndex | None = None,
                 state_degree: int = 0, restart_every: int = 0) -> None:
        if states.ndim != 2 or actions.ndim != 2 or states.shape[0] != actions.shape[0] \
                or states.shape[0] < 2:
            raise ValueError(f"states and actions must have shapes (n, d_s) and (n, d_a) with the "
                             f"same n >= 2. Got {tuple(states.shape)} and {tuple(actions.shape)}.")
        _check_finite("states", states)
        _check_finite("actions", actions)
        for name, value in (("degree", degree), ("pool", pool), ("beam", beam),
                            ("expand", expand), ("max_rounds", max_rounds)):
            check_positive_int(name, value)
        if isinstance(state_degree, bool) or not isinstance(state_degree, (int, np.integer)) \
                or state_degree < 0:
            raise ValueError(f"state_degree must be a non-negative int. Got {state_degree!r}.")
        for name, value in (("refresh_every", refresh_every), ("restart_every", restart_every)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
                raise ValueError(f"{name} must be a non-negative int. Got {value!r}.")
        self.restart_every = int(restart_every)
        self.states, self.actions = states, actions
        self.degree = min(int(degree), self.n - 1)
        self.state_degree = min(int(state_degree), self.n - 1)
        self._backend = backend
        self.pool = min(int(pool), self.n)
        self.beam, self.expand = int(beam), int(expand)
        self.max_rounds, self.refresh_every = int(max_rounds), int(refresh_every)
        if index is not None and tuple(index.points.shape) != (self.n, states.shape[1] + actions.shape[1]):
            raise ValueError("index must be built over cat([states, actions], 1)")
        self.index = index or NeighborIndex(torch.cat([states, actions], dim=1), backend)
        self.state_columns = states.T.contiguous()
        self.action_columns = actions.T.contiguous()
        self._graph: torch.Tensor | None = None

    @property
    def n(self) -> int:
        return self.states.shape[0]

    def graph(self) -> torch.Tensor:
        """The k-NN graph (n, degree + state_degree) of the data pairs, each pair's own index left
        out: its ``degree`` nearest pairs, then its ``state_degree`` nearest states (built on
        first use by exact k-NN queries of the data)."""
        if self._graph is None:
            parts = [_without_self(self.index, self.degree)]
            if self.state_degree:
                states = NeighborIndex(self.states, self._backend)
                parts.append(_without_self(states, self.state_degree))
            self._graph = torch.cat(parts, dim=1)
        return self._graph

    def _check_queries(self, states: torch.Tensor, actions: torch.Tensor,
                       warm: WarmStart | None = None) -> None:
        d_s, d_a = self.states.shape[1], self.actions.shape[1]
        if states.ndim != 2 or actions.ndim != 2 or states.shape[1] != d_s \
                or actions.shape[1] != d_a or states.shape[0] != actions.shape[0]:
            raise ValueError(f"query states and actions must have shapes (m, {d_s}) and (m, {d_a}). "
                             f"Got {tuple(states.shape)} and {tuple(actions.shape)}.")
        if warm is not None and warm.index.shape[0] != states.shape[0]:
            raise ValueError(f"the warm start holds {warm.index.shape[0]} queries; got "
                             f"{states.shape[0]}.")
        _check_finite("query states", states)
        _check_finite("query actions", actions)

    @torch.no_grad()
    def start(self, states: torch.Tensor, actions: torch.Tensor) -> WarmStart:
        """Pools for query pairs ``(states[i], actions[i])``: their exact ``pool`` nearest data
        pairs, the nearest ``beam`` marked as expanded."""
        self._check_queries(states, actions)
        idx = self.index.query_index(torch.cat([states, actions], dim=1), self.pool)
        sq_state = gathered_squared_distances(states, self.state_columns, idx)
        d2 = sq_state + gathered_squared_distances(actions, self.action_columns, idx)
        order = torch.argsort(d2, dim=1, stable=True)
        expanded = torch.zeros(idx.shape, dtype=torch.bool, device=idx.device)
        expanded[:, :min(self.beam, self.pool)] = True
        return WarmStart(idx.gather(1, order), sq_state.gather(1, order), expanded)

    @torch.no_grad()
    def search(self, warm: WarmStart, states: torch.Tensor, actions: torch.Tensor, k: int
               ) -> torch.Tensor:
        """Indices (m, k) of the ``k`` nearest data pairs found for every query, in no particular
        order, starting from ``warm`` (updated in place). ``states`` must be those of
        :meth:`start`; ``actions`` may have moved."""
        self._check_queries(states, actions, warm)
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k <= self.pool:
            raise ValueError(f"k must be an int between 1 and the pool size ({self.pool}). "
                             f"Got {k!r} instead.")
        beam = min(max(self.beam, int(k)), self.pool)
        m = states.shape[0]
        if self.restart_every:
            turn = torch.nonzero(torch.arange(m, device=states.device) % self.restart_every
                                 == warm.searches % self.restart_every).reshape(-1)
            if turn.numel():
                fresh = self.start(states[turn], actions[turn])
                warm.index[turn], warm.sq_state[turn] = fresh.index, fresh.sq_state
                warm.expanded[turn] = fresh.expanded
        if self.refresh_every:
            turn = torch.arange(m, device=states.device) % self.refresh_every \
                == warm.searches % self.refresh_every
            warm.expanded[turn] = False
        warm.searches += 1
        d2 = warm.sq_state + gathered_squared_distances(actions, self.action_columns, warm.index)
        pos = _smallest(d2, beam)
        unexpanded = ~warm.expanded.gather(1, pos)
        rows = torch.nonzero(unexpanded.any(1)).reshape(-1)
        warm.expanded_rows = 0
        for _ in range(self.max_rounds):
            if not rows.numel():
                break
            warm.expanded_rows += int(rows.numel())
            new_d2, new_pos, new_unexpanded = self._expand(warm, rows, states[rows], actions[rows],
                                                           d2[rows], pos[rows], unexpanded[rows], beam)
            d2[rows], pos[rows], unexpanded[rows] = new_d2, new_pos, new_unexpanded
            rows = rows[new_unexpanded.any(1)]
        return warm.index.gather(1, _smallest(d2, int(k)))

    def _expand(self, warm: WarmStart, rows: torch.Tensor, states: torch.Tensor,
                actions: torch.Tensor, d2: torch.Tensor, pos: torch.Tensor,
                unexpanded: torch.Tensor, beam: int
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One round of best-first expansion of ``rows``: the ``expand`` nearest unexpanded beam
        entries add their graph neighbours; the pool keeps its ``pool`` nearest distinct entries.
        Returns the rows' new pool distances, beam positions and unexpanded marks."""
        r = rows.numel()
        e = min(self.expand, beam)
        beam_d2 = d2.gather(1, pos).masked_fill(~unexpanded, torch.inf)
        pick_d2, pick = torch.topk(beam_d2, e, dim=1, largest=False)
        valid = torch.isfinite(pick_d2)                                     # (r, e)
        picked = pos.gather(1, pick)                                        # pool positions
        index, expanded = warm.index[rows], warm.expanded[rows]
        expanded.scatter_(1, picked, valid | expanded.gather(1, picked))
        sources = index.gather(1, picked)                                   # (r, e)
        found = gather_rows(self.graph(), sources)                          # (r, e, degree)
        found = torch.where(valid[:, :, None], found, sources[:, :, None].expand_as(found))
        merged = torch.cat([index, found.reshape(r, -1)], dim=1)
        merged_expanded = torch.cat([expanded, expanded.new_zeros(r, found[0].numel())], dim=1)
        # Sort by (index, unexpanded): duplicates follow their first, expanded, copy.
        key, _ = torch.sort(merged * 2 + (~merged_expanded).long(), dim=1)
        merged, merged_expanded = key >> 1, (key & 1) == 0
        duplicate = torch.zeros_like(merged_expanded)
        duplicate[:, 1:] = merged[:, 1:] == merged[:, :-1]
        sq_state = gathered_squared_distances(states, self.state_columns, merged)
        dist = (sq_state + gathered_squared_distances(actions, self.action_columns, merged)
                ).masked_fill(duplicate, torch.inf)
        keep = _smallest(dist, self.pool)
        warm.index[rows] = merged.gather(1, keep)
        warm.sq_state[rows] = sq_state.gather(1, keep)
        warm.expanded[rows] = merged_expanded.gather(1, keep)
        new_d2 = dist.gather(1, keep)
        new_pos = _smallest(new_d2, beam)
        return new_d2, new_pos, ~warm.expanded[rows].gather(1, new_pos)
