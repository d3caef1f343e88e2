"""Local-linear successors: a two-hop nonparametric model (``successors="local-linear"``).

NOPG's model (:mod:`nopg.model.bellman`) sends a query ``(s, a)`` to the data's own next states:
``Q(s, a) = sum_j eps_j(s, a) (r_j + gamma_j V(s'_j))``. Whatever ``s`` and ``a`` are, the
successors are the neighbours' recorded ``s'_j``, so the model only knows what a state is worth
where the data already went from there. This model moves every neighbour's successor and reward
with the query's offsets, by a local-linear fit of the dynamics around the neighbour:

    y_j(s, a) = s'_j + (I + A_j)(s - s_j) + B_j (a - a_j),
    r_j(s, a) = clip(r_j + c_j . (s - s_j) + b_j . (a - a_j), min r, max r),

with ``A_j, B_j, c_j, b_j`` the least-squares slopes of ``(s' - s, r)`` on ``(s - s_l, a - a_l)``
over the ``FIT_NEIGHBOURS`` data states ``s_l`` nearest to ``s_j`` (:func:`local_linear_slopes`),
the moved reward clipped to the data's reward range (unclipped, a linear reward extrapolates past
every reward in the data, and ``J_hat`` past ``max(r) / (1 - gamma)``) and the moved successor
clipped, per dimension, to the box of the data's states and next states widened by
``BOX_MARGIN`` (1) box widths on each side, and to the hard limits ``state_bounds`` where the
configuration gives them (a gymnasium observation space's bounds: the pendulum's speed limit).
Before the clip, the coordinates of an angle observed as ``(cos, sin)`` are put back on their
circle (``state_circles``, found in the data by default; :mod:`nopg.model.circles`): a linear step
leaves the circle along its tangent and keeps a query's distance from it, so a chain of steps
drifts inside it, where the fitted gravity of a pendulum is weaker.
Unclipped, a chain of linear steps (the anchored rollout of :mod:`nopg.model.anchored`) can grow
geometrically, to 1e18 on pendulum data past the speed limit. The data's box is widened, not
tight: a tight box holds a cart that drifts off the data at its edge, where the model then
balances it, while the widened box leaves room for the pole to fall in the extrapolated
dynamics as it does on the real rail. Which limits are physical the data do not tell; the
environment's observation space does.
On data from linear dynamics the successor is exact: ``y_j(s, a)`` is the true next state for
every neighbour ``j``. The value at a moved successor is interpolated from the values at its
``INTERP_NEIGHBOURS`` nearest data next states (the softmax of the state kernel, ``M(y)``), so
the unknowns are the values ``v_l = V(s'_l)`` at the data's next states:

    v = rho + T v,   T[x, l] = gamma sum_j eps_j(x, pi(x)) M_l(y_j(x, pi(x))) c_l,
    rho(x) = sum_j eps_j(x, pi(x)) r_j(x, pi(x)),
    J_hat = mean_z (rho(z) + T[z, :] . v)   over the initial states z,

where ``c_l = 0`` for a terminal data next state and 1 otherwise: whether the episode ends is
read at the moved successor, like its value, and not taken from the neighbour's own record (a
neighbour that fell may be moved to where the data go on, and one that went on to where they
end).

Where the episode ends at limits the data never reach (a cart's track limit, which random data
near the centre never meet), the configuration's ``terminal_bounds`` say so: a moved successor
outside them is terminal (its ``M(y_j)`` is dropped, ``c = 0`` for it), and the clipping box
reaches out to them so that a successor can cross them. Where the box ends on a bound (the data
lie well inside it), a successor that crossed it is clipped to one float past it, not onto it:
clipped onto the limit, which counts as inside, a cart pushed off the track would stay on it.
``state_bounds`` inside a terminal bound are hard limits: the successor stays within them.
The crossing is a piecewise constant input of ``T``, like the neighbour sets: it has no gradient
of its own.

Row ``l`` of ``T`` is the query at ``s'_l`` (the mean over ``n_mc_next`` states drawn around it
when those are on); ``eps`` is NOPG's sparsified responsibility (``top_k`` entries), averaged over
the Monte-Carlo actions of a stochastic policy. Every row of ``T`` is non-negative and sums to
``gamma sum_j eps_j sum_l M_l(y_j) c_l <= gamma``. Each row holds ``top_k x INTERP_NEIGHBOURS``
entries (columns may repeat), found by a k-d tree of the next states at every update.

With ``unsupported="penalty"`` every successor pays ``lambda (1 - w(y_j))`` in reward, times its
continuation ``sum_l M_l(y_j) c_l``, ``1 - w`` its thinness against the data's next states
(:func:`nopg.model.kernels.thinness`) and ``lambda = max(r) - (1 - gamma) absorbing_value`` (MOPO's
pessimism, as in the kernel model): the successors the policy steers off the data cost what
leaving the data may cost.
``unsupported="absorb"`` is refused: the one start state of a swing-up is often off the data
already, and ``J_hat`` then sits at the absorbing value with no gradient towards the data.

The gradient of ``J_hat`` is the autograd gradient of
``mean_z rho(z) + t0 . stop(v) + stop(mu) . (rho + T stop(v))`` with ``mu = (I - T)^{-T} t0``
(:meth:`nopg.model.bellman.BellmanSolution.surrogate`); the neighbour sets are piecewise constant.
The support diagnostics are the kernel model's: the thinness of the data at the policy's queries.
"""

from __future__ import annotations

import logging
from typing import Any, ClassVar

import numpy as np
import torch
from scipy.spatial import cKDTree
from torch import nn

from ..bandwidth.selection import Bandwidths
from ..data.dataset import TransitionDataset
from .bellman import BellmanSolution, NonparametricBellman, as_states
from .circles import project_to_circles, resolve_circles
from .config import ModelConfig
from .kernels import gather_rows, softmax_log_mass, squared_norm, thinness
from .responsibilities import KernelRows
from .row_matrices import SparseRows

__all__ = ["LocalLinearBellman", "local_linear_slopes", "FIT_NEIGHBOURS", "INTERP_NEIGHBOURS"]

logger = logging.getLogger(__name__)

FIT_NEIGHBOURS = 32      # data states in each local-linear fit
INTERP_NEIGHBOURS = 8    # data next states interpolating the value at a moved successor
_RIDGE = 1e-6            # ridge of the fits' normal equations (inputs in bandwidth units)


BOX_MARGIN = 1.0
"""The moved successors are clipped to the data's state box widened by this many box widths on
each side (module docstring)."""


def local_linear_slopes(states: np.ndarray, actions: np.ndarray, next_states: np.ndarray,
                        rewards: np.ndarray, h_s: np.ndarray, h_a: np.ndarray,
                        k: int = FIT_NEIGHBOURS) -> np.ndarray:
    """Slopes of ``(s' - s, r)`` in ``(s - s_j, a - a_j)`` around every data pair ``j``.

    Least squares with an intercept over the ``k`` data states nearest to ``s_j`` (in state
    bandwidths), inputs scaled by the bandwidths ``h_s``, ``h_a`` for the conditioning.

    Returns
    -------
    ndarray of shape (n, d_s + d_a, d_s + 1)
        ``out[j] . [s - s_j, a - a_j]`` predicts the change of ``(s' - s, r)`` from pair ``j``.
    """
    n, ds = states.shape
    k = min(int(k), n)
    scale = np.concatenate([h_s, h_a])
    _, nb = cKDTree(states / h_s).query(states / h_s, k)
    nb = nb.reshape(n, k)
    offsets = np.concatenate([states[nb] - states[:, None], actions[nb] - actions[:, None]], -1)
    X = np.concatenate([np.ones((n, k, 1)), offsets / scale], -1)            # (n, k, 1 + d)
    Y = np.concatenate([next_states - states, rewards[:, None]], 1)[nb]       # (n, k, d_s + 1)
    gram = np.einsum("nkf,nkg->nfg", X, X) + _RIDGE * np.eye(X.shape[-1])
    coef = np.linalg.solve(gram, np.einsum("nkf,nko->nfo", X, Y))[:, 1:]
    return coef / scale[None, :, None]


def _bound_arrays(bounds: list, name: str, state_dim: int) -> tuple[np.ndarray, np.ndarray]:
    """``state_bounds``-form limits (checked by :mod:`nopg.model.config`) as two float arrays,
    NaN where a dimension has none."""
    low, high = (np.array([np.nan if b is None else b for b in side], float) for side in bounds)
    if len(low) != state_dim:
        raise ValueError(f"{name} has {len(low)} entries per side but the data's states have "
                         f"{state_dim} dimensions")
    return low, high


class LocalLinearBellman(NonparametricBellman):
    """The two-hop model of the module docstring, with :class:`NonparametricBellman`'s interface.

    Built by ``nopg.bellman_model(..., successors="local-linear")`` (or a
    :class:`~nopg.model.config.ModelConfig` with that setting). The solution's ``q`` holds the
    values ``v`` at the data's next states, and ``value``, ``q_value``, ``visitation``,
    ``logged_q_value`` and ``data_value`` read it as such.

    Attributes
    ----------
    slopes : tensor of shape (n, d_s + d_a, d_s + 1)
        :func:`local_linear_slopes` of the data.
    circles : list of (i, k, r)
        The state coordinates on a circle of radius ``r`` (``state_circles``,
        :mod:`nopg.model.circles`), onto which every moved successor is put back.
    penalty_scale : float
        ``lambda`` of the penalty (0 without ``unsupported="penalty"``).
    """

    SUCCESSORS: ClassVar[str] = "local-linear"

    def __init__(self, data: TransitionDataset, bandwidths: Bandwidths, gamma: float,
                 config: ModelConfig | None = None, **settings: Any) -> None:
        super().__init__(data, bandwidths, gamma, config, **settings)
        if self.top_k is None:
            raise ValueError(f"successors={self.config.successors!r} needs top_k (the neighbours whose "
                             "successors move); top_k=None keeps all n of them per row. Set top_k "
                             "(10, or 'auto') (the paper's experiments set None: --set "
                             "nopg.model.top_k=10)")
        if self.unsupported == "absorb":
            raise ValueError(f"successors={self.config.successors!r} supports unsupported='extrapolate' or "
                             "'penalty', not 'absorb' (see nopg.model.local_linear)")
        self._build_successors()

    def _build_successors(self) -> None:
        """The local fits, the next states' k-d tree and the penalty's scale."""
        # The query's thinness is a diagnostic here; the penalty falls on the successors.
        self.kernel_rows = KernelRows(self.selector, self.neighbors, self.support_radius, False)
        d = self.data
        h_s = np.asarray(self.bandwidths.state, float)
        self.slopes = self._tensor(local_linear_slopes(
            np.asarray(d.states, float), np.asarray(d.actions, float),
            np.asarray(d.next_states, float), np.asarray(d.rewards, float), h_s,
            np.asarray(self.bandwidths.action, float)))
        self.actions = self._tensor(d.actions)
        self.data_rewards = self._tensor(d.rewards)
        self.reward_range = (float(np.min(d.rewards)), float(np.max(d.rewards)))
        seen = np.concatenate([np.asarray(d.states, float), np.asarray(d.next_states, float)])
        lo, hi = seen.min(0), seen.max(0)
        lo, hi = lo - BOX_MARGIN * (hi - lo), hi + BOX_MARGIN * (hi - lo)
        self.terminal_box: tuple[torch.Tensor, torch.Tensor] | None = None
        if self.config.terminal_bounds is not None:
            low, high = _bound_arrays(self.config.terminal_bounds, "terminal_bounds", d.state_dim)
            # the successors must be able to reach the limits to cross them
            lo, hi = np.fmin(lo, low), np.fmax(hi, high)     # NaN (no bound) keeps the box's
            self.terminal_box = (self._tensor(np.nan_to_num(low, nan=-np.inf)),
                                 self._tensor(np.nan_to_num(high, nan=np.inf)))
            self._past_low = torch.nextafter(self.terminal_box[0],
                                             torch.full_like(self.terminal_box[0], -np.inf))
            self._past_high = torch.nextafter(self.terminal_box[1],
                                              torch.full_like(self.terminal_box[1], np.inf))
        if self.config.state_bounds is not None:
            low, high = _bound_arrays(self.config.state_bounds, "state_bounds", d.state_dim)
            lo, hi = np.fmax(lo, low), np.fmin(hi, high)     # NaN (no bound) keeps the box's
        self.state_box = (self._tensor(lo), self._tensor(hi))
        self.circles = resolve_circles(self.config.state_circles, seen)
        if self.circles:
            logger.info("moved successors are kept on the data's circles (state_circles=%r): %s",
                        self.config.state_circles,
                        ", ".join(f"dims ({i}, {k}) radius {r:.4g}" for i, k, r in self.circles))
        self.continuing = self._tensor(1.0 - np.asarray(d.terminals, float))
        self.next_tree = cKDTree(np.asarray(d.next_states, float) / h_s)
        self.n_interp = min(INTERP_NEIGHBOURS, self.n)
        self.penalty_scale = self.penalty_lambda if self.unsupported == "penalty" else 0.0
        self._logged: tuple[SparseRows, torch.Tensor] | None = None

    @property
    def unsupported_value(self) -> float | None:
        """``None``: the penalty is part of the successors' rewards (module docstring)."""
        return None

    # ------------------------------------------------------------------ the two hops
    def _moved(self, states: torch.Tensor, actions: torch.Tensor, idx: torch.Tensor
               ) -> tuple[torch.Tensor, torch.Tensor]:
        """Moved successors (m, c, d_s) and rewards (m, c) of the neighbours ``idx`` (m, c) of
        query states (m, d_s) taking actions (m, c, d_a)."""
        ds = self.data.state_dim
        dx = states[:, None, :] - gather_rows(self.states, idx)
        du = actions - gather_rows(self.actions, idx)
        slopes = gather_rows(self.slopes, idx)                          # (m, c, d, d_s + 1)
        pred = (torch.cat([dx, du], -1)[..., None] * slopes).sum(-2)    # (m, c, d_s + 1)
        # A linear step leaves the data's circles (an angle's cos and sin) along the tangent
        # and keeps a query's offset from them: put the successor back (nopg.model.circles).
        succ = project_to_circles(gather_rows(self.next_states, idx) + dx + pred[..., :ds],
                                  self.circles)
        # Likewise a linear successor: the data's state box, widened, bounds it.
        clipped = torch.clamp(succ, *self.state_box)
        if self.terminal_box is not None:
            # The box reaches the terminal bounds but may end on them (where the data lie well
            # inside): a successor clipped back onto a bound it crossed stays past it, by one
            # float, so that the episode ends there (limits count as inside). A state bound
            # inside the terminal one is a hard limit and keeps the successor within it.
            low, high = self.terminal_box
            clipped = torch.where((succ < low) & (clipped <= low),
                                  torch.minimum(clipped, self._past_low), clipped)
            clipped = torch.where((succ > high) & (clipped >= high),
                                  torch.maximum(clipped, self._past_high), clipped)
        succ = clipped
        # A linear reward extrapolates without bound; the data's range bounds it (and J_hat).
        reward = (gather_rows(self.data_rewards, idx) + pred[..., ds]).clamp(*self.reward_range)
        return succ, reward

    def _neighbour_successors(self, states: torch.Tensor, actions: torch.Tensor
                              ) -> tuple[SparseRows, torch.Tensor, torch.Tensor, torch.Tensor]:
        """The rows of ``eps`` at query states (M, d_s) and actions (M, G, d_a), the thinness at
        the queries, and every entry's moved successor (M, G k, d_s) and reward (M, G k)."""
        rows, thin = self.kernel_rows.rows(self._prepare(states), actions / self.h_a, 1)
        assert isinstance(rows, SparseRows)
        per_entry = actions.repeat_interleave(rows.index.shape[1] // actions.shape[1], dim=1)
        return (rows, thin, *self._moved(states, per_entry, rows.index))

    def successor_rows(self, states: torch.Tensor, actions: torch.Tensor, group: int = 1
                       ) -> tuple[SparseRows, torch.Tensor, torch.Tensor]:
        """Rows of ``T`` and ``rho`` at query states (M, d_s) and actions (M, G, d_a).

        Averaged over the ``G`` actions and over consecutive groups of ``group`` states, as the
        kernel model's rows. Returns ``(T, rho, thin)``: ``T`` (M / group, n) with
        ``G top_k INTERP_NEIGHBOURS group`` entries per row, ``rho`` (M / group,) and the thinness
        of the data at the queries (M / group,), a detached diagnostic.
        """
        M = actions.shape[0]
        rows, thin, succ, reward = self._neighbour_successors(states, actions)
        w = rows.values                                                  # (M, G k), includes 1 / G
        cols, interp, succ_thin = self.interpolation(succ)
        # The episode ends where the moved successor lands: a terminal data next state carries
        # no value onwards, so its interpolation weight is dropped; so does a successor past
        # the terminal bounds.
        interp = interp * self._continuation(cols)
        if self.terminal_box is not None:
            interp = interp * self.within_terminal_bounds(succ)[..., None]
        if self.penalty_scale:
            reward = reward - self.penalty_scale * interp.sum(-1) * succ_thin
        rho = (w * reward).sum(1)
        vals = ((self.gamma * w)[..., None] * interp).reshape(M, -1)
        m = M // group
        T = SparseRows(cols.reshape(m, -1), vals.reshape(m, -1) / group, self.n_columns)
        return T, rho.reshape(m, group).mean(1), thin.detach().reshape(m, group).mean(1)

    @property
    def n_columns(self) -> int:
        """Columns of ``T``: the points the value is interpolated from (the data's next states)."""
        return self.n

    def _continuation(self, cols: torch.Tensor) -> torch.Tensor:
        """1 where the interpolation's point ``cols`` goes on, 0 where its episode ended."""
        return gather_rows(self.continuing, cols)

    def within_terminal_bounds(self, states: torch.Tensor) -> torch.Tensor:
        """1 where ``states`` (..., d_s) lie within ``terminal_bounds`` (limits included), 0
        past them; all ones without them. Detached (a piecewise constant input of ``T``)."""
        if self.terminal_box is None:
            return states.new_ones(states.shape[:-1])
        low, high = self.terminal_box
        inside = ((states >= low) & (states <= high)).all(-1)
        return inside.to(states.dtype).detach()

    def interpolation(self, succ: torch.Tensor
                      ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Columns (..., L), weights (..., L) and thinness (...) of the value interpolation at
        successors (..., d_s): :meth:`data_interpolation` here."""
        return self.data_interpolation(succ)

    def data_interpolation(self, succ: torch.Tensor
                           ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Columns (..., L), weights (..., L) and thinness (...) of the interpolation at
        successors (..., d_s) from the nearest data next states."""
        cols, weights, log_mass = self._interpolate_from(self.next_states, self.next_tree, succ)
        return cols, weights, thinness(log_mass, self.support_radius)

    def _interpolate_from(self, points: torch.Tensor, tree: cKDTree, succ: torch.Tensor
                          ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Columns (..., L), softmax weights (..., L) and log-mass (...) of the state kernel at
        successors (..., d_s) over their ``L = INTERP_NEIGHBOURS`` nearest ``points`` (``tree``:
        the points in state bandwidths)."""
        flat = succ.reshape(-1, succ.shape[-1])
        scaled = (flat.detach() / self.h_s).cpu().numpy()
        _, near = tree.query(scaled, self.n_interp)
        near = torch.as_tensor(near.reshape(len(flat), self.n_interp), device=self.device)
        diff = (flat[:, None, :] - gather_rows(points, near)) / self.h_s
        weights, log_mass = softmax_log_mass(-0.5 * squared_norm(diff))
        shape = succ.shape[:-1]
        return near.reshape(*shape, -1), weights.reshape(*shape, -1), log_mass.reshape(shape)

    # ------------------------------------------------------------------ T, t0 and the solve
    def _policy_successors(self, policy: nn.Module, states: torch.Tensor, group: int,
                           generator: torch.Generator | None
                           ) -> tuple[SparseRows, torch.Tensor, torch.Tensor, torch.Tensor]:
        actions = self.policy_actions(policy, states, generator)
        return (*self.successor_rows(states, actions, group), actions)

    def _next_queries_rows(self, policy: nn.Module, generator: torch.Generator | None
                           ) -> tuple[SparseRows, torch.Tensor, torch.Tensor, torch.Tensor]:
        """``T`` and ``rho`` at the next states (or the states drawn around them)."""
        if self.n_mc_next is None:
            return self._policy_successors(policy, self.next_states, 1, generator)
        xi = self._noise((self.n, self.n_mc_next, self.data.state_dim), generator)
        states = (self.next_states[:, None, :] + self.h_next * xi).reshape(-1, self.data.state_dim)
        return self._policy_successors(policy, states, self.n_mc_next, generator)

    def _initial_rows(self, policy: nn.Module, initial_states: np.ndarray | torch.Tensor,
                      generator: torch.Generator | None
                      ) -> tuple[SparseRows, torch.Tensor, torch.Tensor, torch.Tensor]:
        """``T`` and ``rho`` at the initial states."""
        z = self._tensor(as_states(initial_states, self.data.state_dim, "initial_states"))
        return self._policy_successors(policy, z, 1, generator)

    def _transition(self, policy: nn.Module, generator: torch.Generator | None
                    ) -> tuple[SparseRows, torch.Tensor, torch.Tensor]:
        T, _, thin, actions = self._next_queries_rows(policy, generator)
        return T, thin, actions

    def _initial(self, policy: nn.Module, initial_states: np.ndarray | torch.Tensor,
                 generator: torch.Generator | None
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``t0`` (n,), the mean thinness at the initial queries and the policy's actions."""
        T0, _, thin, actions = self._initial_rows(policy, initial_states, generator)
        return T0.column_mean(), thin.mean(), actions

    def solution(self, policy: nn.Module, initial_states: np.ndarray | torch.Tensor,
                 generator: torch.Generator | None = None,
                 warm_start: tuple[torch.Tensor, torch.Tensor] | None = None) -> BellmanSolution:
        """``T``, ``t0`` and ``rho`` at the policy, ``v`` and ``mu`` solved (module docstring)."""
        self.check_policy(policy)
        self.refined_rows_ = 0
        T0, rho0, thin0, actions0 = self._initial_rows(policy, initial_states, generator)
        T, rho, thin, actions_next = self._next_queries_rows(policy, generator)
        t0, reward0 = T0.column_mean(), rho0.mean()
        v, mu, info_v, info_mu = self.solve(T, t0, warm_start, rho.detach().to(torch.float64))
        J = float(reward0.detach()) + float(torch.dot(t0.detach().to(torch.float64), v))
        thin064, visits = float(thin0.mean()), mu.clamp_min(0)
        gap = (thin064 + float(visits @ thin.to(torch.float64))) / (1.0 + float(visits.sum()))
        return BellmanSolution(J, v, mu, t0, T, info_v, info_mu, self.refined_rows_,
                               lost_next=thin, thin_init=thin0.mean(), support_gap=gap,
                               initial_actions=actions0, next_actions=actions_next,
                               initial_gap=thin064, rewards_next=rho, reward_init=reward0)

    # ------------------------------------------------------------------ queries
    @torch.no_grad()
    def _successor_values(self, policy: nn.Module | None, states: np.ndarray | torch.Tensor,
                          v: torch.Tensor, actions: np.ndarray | torch.Tensor | None = None,
                          chunk: int = 4096, seed: int = 0) -> np.ndarray:
        """``rho + T . v`` at query states, with the policy's actions or the given ones."""
        s_all = as_states(states, self.data.state_dim, "states")
        a_all = None if actions is None else as_states(actions, self.data.action_dim, "actions")
        if a_all is not None and a_all.shape[0] != s_all.shape[0]:
            raise ValueError(f"actions has {a_all.shape[0]} rows but states has {s_all.shape[0]}")
        generator = torch.Generator().manual_seed(seed)
        vec = v.to(device=self.device, dtype=torch.float64)
        out = []
        for start in range(0, s_all.shape[0], chunk):
            s = self._tensor(s_all[start:start + chunk])
            a = (self.policy_actions(policy, s, generator) if a_all is None else
                 self._tensor(a_all[start:start + chunk])[:, None, :])
            T, rho, _ = self.successor_rows(s, a)
            out.append(rho.to(torch.float64) + T.to(torch.float64).matvec(vec))
        return torch.cat(out).cpu().numpy()

    def value(self, policy: nn.Module, states: np.ndarray | torch.Tensor, q: torch.Tensor,
              seed: int = 0) -> np.ndarray:
        """``V(s) = rho(s) + T(s) . v`` at query states (m, d_s); ``q`` is the solution's ``v``."""
        return self._successor_values(policy, states, q, seed=seed)

    def q_value(self, states: np.ndarray | torch.Tensor, actions: np.ndarray | torch.Tensor,
                q: torch.Tensor) -> np.ndarray:
        """``Q(s, a)``: :meth:`value` with the given actions."""
        return self._successor_values(None, states, q, actions=actions)

    @torch.no_grad()
    def visitation(self, policy: nn.Module, states: np.ndarray | torch.Tensor, mu: torch.Tensor,
                   seed: int = 0) -> np.ndarray:
        """Discounted visitation ``mu`` interpolated at the states from the data's next states
        (the weights ``M(s)`` of the value interpolation; the policy does not enter)."""
        s = self._tensor(as_states(states, self.data.state_dim, "states"))
        cols, interp, _ = self.interpolation(s)
        vec = mu.to(device=self.device, dtype=torch.float64)
        return (interp.to(torch.float64) * vec[cols]).sum(1).cpu().numpy()

    @torch.no_grad()
    def logged_q_value(self, q: torch.Tensor) -> np.ndarray:
        """``Q(s_i, a_i)`` at the data's own pairs; their rows do not depend on the policy, so
        they are built once and kept."""
        if self._logged is None:
            T, rho, _ = self.successor_rows(self.states, self.actions[:, None, :])
            self._logged = (T.to(torch.float64), rho.to(torch.float64))
        T, rho = self._logged
        return (rho + T.matvec(q.to(device=self.device, dtype=torch.float64))).cpu().numpy()

    @torch.no_grad()
    def data_value(self, policy: nn.Module, q: torch.Tensor, seed: int = 0) -> np.ndarray:
        """:meth:`value` at the data's own states."""
        return self.value(policy, self.states, q, seed=seed)
