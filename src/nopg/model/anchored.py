"""Anchored local-linear successors: the value interpolated along the policy's own rollout
(``successors="anchored"``).

The local-linear model (:mod:`nopg.model.local_linear`) moves every neighbour's successor with the
query's offsets, but interpolates the value there from the data's next states only. Where the
policy keeps the system in a small region the data crossed once (a balanced pole, a goal the data
reach rarely), the nearest data next states lie a bandwidth or more away, so every step of the
model's chain jumps by about a bandwidth: the model's trajectories spread over the data while the
real ones stay put, and ``J_hat`` rates a controller by where random data went, not by where it
goes.

This model adds *anchors* where the policy goes. Before each solve, the model's mean rollout

    x_0 = z,   x_{t+1} = sum_j eps_j(x_t, pi(x_t)) y_j(x_t, pi(x_t))   (t < H)

from every initial state ``z`` (``y_j`` the moved successors of :mod:`nopg.model.local_linear`; a
stochastic policy's Monte-Carlo actions averaged) gives ``H x m`` points, appended to the data's
next states as points the value is interpolated from and as query states of their own. The
unknowns are the values at the ``n + H m`` points:

    v = rho + T v,   rows n..n+Hm-1 of T and rho: the queries at the anchors themselves,

and whether the episode goes on at an anchor is interpolated from the data's next states (the
same weights as the value's, :meth:`AnchoredBellman.anchor_continuation`); past the
configuration's ``terminal_bounds`` (a track limit) it ends. The thinness, the
support gap and the penalty (``unsupported="penalty"``) stay measured against the data's next
states: an anchor is a point of the model's rollout, not a datum.

The anchors are drawn afresh at every :meth:`~AnchoredBellman.solution`, without gradient: the
gradient is the model's exact gradient with the anchors held fixed (like the neighbour sets,
they are piecewise constant inputs of ``T``). Where a fit follows ``J_hat`` by derivative-free
search (``NOPGConfig(optimizer="cma-es")``) only ``J_hat`` matters.

On data from linear dynamics the moved successors are exact, so the rollout is the true
trajectory of a deterministic linear controller, and its values are interpolated from points on
that trajectory: ``J_hat`` tends to the controller's true discounted return as ``H`` grows
(``tests/test_anchored.py``), where the local-linear model without anchors stays a bandwidth's
jump away from it.

``anchor_horizon="auto"`` is ``ceil(4 / (1 - gamma))`` steps, after which the discount has
fallen below ``e^-4`` (2%): 400 steps for ``gamma = 0.99``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import torch
from scipy.spatial import cKDTree
from torch import nn

from ..bandwidth.selection import Bandwidths
from ..data.dataset import TransitionDataset
from .bellman import BellmanSolution, as_states
from .circles import project_to_circles
from .config import ModelConfig
from .defaults import AGGREGATE_SIZE
from .kernels import gather_rows
from .local_linear import LocalLinearBellman
from .row_matrices import SparseRows

if TYPE_CHECKING:
    from ..policies.candidates import CandidatePolicies

__all__ = ["AnchoredBellman", "resolve_anchor_horizon", "AUTO_HORIZON_DISCOUNT_E_FOLDS"]

AUTO_HORIZON_DISCOUNT_E_FOLDS = 4.0
"""``anchor_horizon="auto"``: the rollout runs until ``gamma^H <= e^-4``."""


def resolve_anchor_horizon(anchor_horizon: int | str, gamma: float) -> int:
    """The rollout length: ``anchor_horizon`` (as :class:`~nopg.model.config.ModelConfig`
    validates it), or for ``"auto"`` ``ceil(4 / (1 - gamma))``."""
    if anchor_horizon == "auto":
        return int(math.ceil(AUTO_HORIZON_DISCOUNT_E_FOLDS / (1.0 - float(gamma)) - 1e-9))
    return int(anchor_horizon)


class AnchoredBellman(LocalLinearBellman):
    """The anchored model of the module docstring, with :class:`NonparametricBellman`'s interface.

    Built by ``nopg.bellman_model(..., successors="anchored")`` (or a
    :class:`~nopg.model.config.ModelConfig` with that setting). The solution's ``q`` and ``mu``
    have ``n + H m`` entries: the data's next states, then the anchors (step by step, the ``m``
    initial states within a step). ``value``, ``q_value``, ``visitation`` and
    ``logged_q_value`` interpolate from the anchors of the latest :meth:`solution`.

    Attributes
    ----------
    horizon : int
        ``H``, the rollout's steps (``anchor_horizon`` resolved).
    anchors : tensor of shape (H m, d_s)
        The anchors of the latest solution (empty before the first).
    """

    SUCCESSORS: ClassVar[str] = "anchored"
    ROLLS_OUT: ClassVar[bool] = True

    def __init__(self, data: TransitionDataset, bandwidths: Bandwidths, gamma: float,
                 config: ModelConfig | None = None, **settings: Any) -> None:
        super().__init__(data, bandwidths, gamma, config, **settings)
        self.horizon = resolve_anchor_horizon(self.config.anchor_horizon, self.gamma)
        self.anchors = self.next_states[:0]
        self._points = self.next_states              # where the value is interpolated from
        self._points_continuing = self.continuing
        self._points_tree = self.next_tree
        self._anchor_groups: np.ndarray | None = None

    # ------------------------------------------------------------------ the anchors
    @torch.no_grad()
    def rollout(self, policy: nn.Module, initial_states: np.ndarray | torch.Tensor,
                generator: torch.Generator | None = None) -> torch.Tensor:
        """The model's mean rollout of ``horizon`` steps from the initial states (m, d_s).

        Returns
        -------
        tensor of shape (horizon, m, d_s)
            ``x_1, ..., x_H`` (module docstring), detached.
        """
        s = self._tensor(as_states(initial_states, self.data.state_dim, "initial_states"))
        out = []
        for _ in range(self.horizon):
            s = self._mean_step(policy, s, generator)
            out.append(s)
        return torch.stack(out)

    def _mean_step(self, policy: nn.Module, s: torch.Tensor, generator: torch.Generator | None
                   ) -> torch.Tensor:
        """One step of the mean rollout from states (m, d_s)."""
        return self._mean_transition(policy, s, generator)[0]

    def _mean_transition(self, policy: nn.Module, s: torch.Tensor,
                         generator: torch.Generator | None, continuation: bool = False
                         ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """The mean next states (m, d_s) and rewards (m,) of the model from states (m, d_s),
        and with ``continuation`` the probability (m,) that the step does not end the episode:
        its successors' continuations (:meth:`anchor_continuation`) weighted as its rows weight
        them, the share the model's Bellman rows carry the value on."""
        rows, _, succ, reward = self._neighbour_successors(
            s, self.policy_actions(policy, s, generator))
        going = self._going_weights(rows.values, succ).sum(1) if continuation else None
        # the mean of points on a circle lies inside it
        return (project_to_circles((rows.values[..., None] * succ).sum(1), self.circles),
                (rows.values * reward).sum(1), going)

    def _going_weights(self, weights: torch.Tensor, succ: torch.Tensor) -> torch.Tensor:
        """Each entry's row weight (M, c) times the continuation at its moved successor
        (M, c, d_s): the part of the weight that carries the episode on (a row's sum is the
        probability that the step does not end it)."""
        return weights * self.anchor_continuation(succ)

    def _never_ends(self) -> bool:
        """No datum ends its episode and no bound ends it: every continuation is a convex
        combination of ones, so no episode of the model ends."""
        return self.terminal_box is None and bool((self.continuing == 1).all())

    @torch.no_grad()
    def episode_lengths(self, policy: nn.Module, initial_states: np.ndarray | torch.Tensor,
                        steps: int, generator: torch.Generator | None = None,
                        from_anchors: bool = False) -> np.ndarray:
        """Steps the model's mean rollout lasts from each initial state, up to ``steps``.

        The episode ends on the step whose state has a continuation below 1/2 (interpolated
        from the data's terminals, 0 past ``terminal_bounds``: :meth:`anchor_continuation`), as
        a gymnasium episode ends on the step whose next state is terminal; ``steps`` where it
        lasts. Unlike ``J_hat`` this is not discounted: it sees an end after ``1 / (1 - gamma)``
        steps. With ``from_anchors`` the latest solution's anchors, which must be this policy's
        rollout from these initial states, give the first ``horizon`` steps and their
        continuations instead of rolling them out again.

        Returns
        -------
        ndarray of shape (m,), int
        """
        steps = int(steps)
        if steps < 1:
            raise ValueError(f"steps must be a positive int. Got {steps!r}.")
        s = self._tensor(as_states(initial_states, self.data.state_dim, "initial_states"))
        if from_anchors and self.anchors.shape[0] != self.horizon * len(s):
            raise ValueError(f"the latest anchors ({self.anchors.shape[0]}) are not a "
                             f"{self.horizon}-step rollout of {len(s)} initial states")
        if self._never_ends():            # and no rollout is needed to see it
            return np.full(len(s), steps)
        if not from_anchors:
            return self._episode_ends(policy, np.ones((0, len(s)), bool), s, steps, generator)
        done = min(steps, self.horizon)
        going = (self._points_continuing[self.n:].reshape(self.horizon, len(s))[:done]
                 >= 0.5).cpu().numpy()
        last = self.anchors.reshape(self.horizon, len(s), -1)[done - 1]
        return self._episode_ends(policy, going, last, steps, generator)

    def _episode_ends(self, policy: nn.Module, going: np.ndarray, last: torch.Tensor,
                      steps: int, generator: torch.Generator | None,
                      keep: Callable[[torch.Tensor], None] | None = None) -> np.ndarray:
        """The lengths, up to ``steps``, of episodes whose first ``len(going)`` steps went on
        where ``going`` (done, k) says and whose states after them are ``last`` (k, d_s): an
        episode ends on its first step with a continuation below 1/2, the steps after
        ``done`` rolled out for the episodes still going (``keep(rows)`` is told which rows
        go on at each drop)."""
        done, k = going.shape
        lengths = np.full(k, steps)
        ended = ~going.all(0)
        if done:
            lengths[ended] = np.argmin(going, 0)[ended] + 1
        alive = np.flatnonzero(~ended)
        rows = torch.as_tensor(~ended, device=last.device)
        s = last[rows]
        if keep is not None:
            keep(rows)
        for t in range(done + 1, steps + 1):
            if len(alive) == 0:
                break
            s = self._mean_step(policy, s, generator)
            stop = (self.anchor_continuation(s) < 0.5).cpu().numpy()
            lengths[alive[stop]] = t
            rows = torch.as_tensor(~stop, device=s.device)
            alive, s = alive[~stop], s[rows]
            if keep is not None:
                keep(rows)
        return lengths

    @torch.no_grad()
    def candidate_rollouts(self, policies: CandidatePolicies,
                           initial_states: np.ndarray | torch.Tensor, steps: int
                           ) -> tuple[list[torch.Tensor], list[np.ndarray]]:
        """For each candidate of ``policies`` (deterministic) at once: its :meth:`rollout` from
        the initial states (m, d_s), the anchors of its :meth:`solution`, and its
        :meth:`episode_lengths` up to ``steps``, as ``episode_lengths(from_anchors=True)``
        computes them after that solution. One batch carries every candidate's states, so a
        step of the model costs one call, not one per candidate; each row is computed as the
        candidate's own rollout computes it.

        Returns
        -------
        anchors : list of tensors of shape (horizon, m, d_s)
        lengths : list of ndarray of shape (m,), int
        """
        if self.stochastic:
            raise ValueError("candidate_rollouts rolls deterministic policies out; a stochastic "
                             "policy draws its actions from the generator, one candidate at a "
                             "time")
        steps = int(steps)
        if steps < 1:
            raise ValueError(f"steps must be a positive int. Got {steps!r}.")
        z = self._tensor(as_states(initial_states, self.data.state_dim, "initial_states"))
        n_cand, m = len(policies), len(z)
        if policies.owner.shape[0] != n_cand * m:
            raise ValueError(f"policies carry {policies.owner.shape[0]} rows, not {n_cand} "
                             f"candidates x {m} initial states")
        s = z.repeat(n_cand, 1)
        path = []
        for _ in range(self.horizon):
            s = self._mean_step(policies, s, None)
            path.append(s)
        rolled = torch.stack(path).reshape(self.horizon, n_cand, m, -1)
        anchors = [rolled[:, p] for p in range(n_cand)]
        if self._never_ends():
            return anchors, list(np.full((n_cand, m), steps))
        done = min(steps, self.horizon)
        flat = rolled[:done].reshape(done, n_cand * m, -1)
        going = (self.anchor_continuation(flat.reshape(done * n_cand * m, -1))
                 .reshape(done, n_cand * m) >= 0.5).cpu().numpy()
        lengths = self._episode_ends(policies, going, flat[done - 1], steps, None, policies.keep)
        return anchors, list(lengths.reshape(n_cand, m))

    @torch.no_grad()
    def episode_returns(self, policy: nn.Module, initial_states: np.ndarray | torch.Tensor,
                        steps: int, generator: torch.Generator | None = None
                        ) -> tuple[np.ndarray, np.ndarray]:
        """The undiscounted return and the length of the model's mean rollout from each initial
        state, up to ``steps``.

        Step ``t`` earns the model's mean reward there (its rows' weights on the moved rewards)
        times the probability that the episode is still going: the product over the steps
        before it of each step's continuation, its moved successors' continuations
        (:meth:`anchor_continuation`, 0 past ``terminal_bounds``) weighted as its rows weight
        them, as the model's Bellman rows carry the value on. A rollout whose steps send part of
        their mass to terminal data next states (a goal: their reward counts, then that share
        ends) collects each such reward once, not at every step. The episode's length is the
        first step whose continuation is below 1/2. The return over an evaluation's length is
        the model's forecast of the evaluation's return; unlike ``J_hat`` it sees what happens
        after ``1 / (1 - gamma)`` steps, and unlike the length it sees whether an end is a
        failure or a goal.

        Returns
        -------
        returns : ndarray of shape (m,)
        lengths : ndarray of shape (m,), int
        """
        steps = int(steps)
        if steps < 1:
            raise ValueError(f"steps must be a positive int. Got {steps!r}.")
        s = self._tensor(as_states(initial_states, self.data.state_dim, "initial_states"))
        returns, lengths = np.zeros(len(s)), np.full(len(s), steps)
        survival = np.ones(len(s))
        alive = np.arange(len(s))            # still going (survival above 0, within ``steps``)
        never_ends = self._never_ends()
        for t in range(1, steps + 1):
            if len(alive) == 0:
                break
            s, reward, step_going = self._mean_transition(policy, s, generator,
                                                          continuation=not never_ends)
            returns[alive] += survival[alive] * reward.cpu().numpy()
            if step_going is None:
                continue
            going = step_going.cpu().numpy()
            ended = (going < 0.5) & (lengths[alive] == steps)
            lengths[alive[ended]] = t
            survival[alive] *= going
            keep = survival[alive] > 0.0
            alive, s = alive[keep], s[torch.as_tensor(keep, device=s.device)]
        return returns, lengths

    @torch.no_grad()
    def sampled_returns(self, policy: nn.Module, initial_states: np.ndarray | torch.Tensor,
                        steps: int, particles: int, generator: torch.Generator | None = None
                        ) -> tuple[np.ndarray, np.ndarray]:
        """Undiscounted returns over ``steps`` of ``particles`` paths drawn through the model
        from each initial state: the model's distribution of the return, where
        :meth:`episode_returns` follows its mean.

        A path at ``x`` takes the policy's action and earns the model's mean reward there (its
        rows' weights on the moved rewards); it goes on with the probability
        ``c(x) = sum_j eps_j cont(y_j)`` that the model's Bellman rows carry the value on
        (:meth:`anchor_continuation` of each moved successor ``y_j``), which multiplies its
        weight, and moves to one moved successor drawn with probability
        ``eps_j cont(y_j) / c(x)``: the next state given that the episode goes on. A path's
        return is thus the expectation over where its episode ends, given the states it
        visits (lower variance than drawing the end). The mean over the paths estimates the
        model's expected return; its spread shows how far the rollouts part. A path's length is
        its first step whose weight (the probability that its episode still goes on) falls below
        1/2, as :meth:`episode_lengths` ends the mean rollout; ``steps`` where none does.

        Returns
        -------
        returns : ndarray of shape (particles, m)
        lengths : ndarray of shape (particles, m), int
        """
        steps, particles = int(steps), int(particles)
        if steps < 1:
            raise ValueError(f"steps must be a positive int. Got {steps!r}.")
        if particles < 1:
            raise ValueError(f"particles must be a positive int. Got {particles!r}.")
        z = self._tensor(as_states(initial_states, self.data.state_dim, "initial_states"))
        m = len(z)
        s = z.repeat(particles, 1)                   # particle p of start i is row p m + i
        returns, weight = np.zeros(particles * m), np.ones(particles * m)
        lengths = np.full(particles * m, steps)
        alive = np.arange(particles * m)
        never_ends = self._never_ends()
        for t in range(1, steps + 1):
            rows, _, succ, reward = self._neighbour_successors(
                s, self.policy_actions(policy, s, generator))
            w = rows.values
            returns[alive] += weight[alive] * (w * reward).sum(1).cpu().numpy()
            if not never_ends:
                w = self._going_weights(w, succ)
                going = w.sum(1)
                weight[alive] *= going.cpu().numpy()
                ended = alive[(weight[alive] < 0.5) & (lengths[alive] == steps)]
                lengths[ended] = t
                keep = going > 0
                alive, s, w, succ = alive[keep.cpu().numpy()], s[keep], w[keep], succ[keep]
                if len(alive) == 0:
                    break
            # inverse-CDF draw of one entry per row (uniforms from a CPU generator on any device)
            cdf = w.cumsum(1)
            u = torch.rand(len(w), 1, generator=generator, dtype=cdf.dtype).to(cdf.device)
            pick = (cdf < u * cdf[:, -1:]).sum(1, keepdim=True).clamp_(max=w.shape[1] - 1)
            s = succ.gather(1, pick[..., None].expand(-1, -1, succ.shape[-1]))[:, 0]
        return returns.reshape(particles, m), lengths.reshape(particles, m)

    def anchor_continuation(self, states: torch.Tensor) -> torch.Tensor:
        """Whether the episode goes on at ``states`` (k, d_s), interpolated from the data's next
        states (in [0, 1]); 0 past ``terminal_bounds``."""
        cols, interp, _ = self.data_interpolation(states)
        return ((interp * gather_rows(self.continuing, cols)).sum(-1)
                * self.within_terminal_bounds(states))

    def set_anchors(self, anchors: torch.Tensor) -> None:
        """Use ``anchors`` (k, d_s) as the anchors of the next solve and of the queries."""
        anchors = anchors.detach().to(device=self.device, dtype=self.dtype).reshape(
            -1, self.data.state_dim)
        if not torch.isfinite(anchors).all():
            raise FloatingPointError("the model's rollout left the finite numbers; the policy "
                                     "or the local-linear fits diverge")
        if anchors.shape[0] != self.anchors.shape[0]:      # the systems change size
            self._anchor_groups = None
        moved = not torch.equal(anchors, self.anchors)    # False for another shape too
        self.anchors = anchors
        if moved:
            # The anchors' rows and columns are new states: a preconditioner built for the old
            # ones needed 100-800 iterations where a fresh one needs 2 (pendulum-uniform, 8
            # starts), and a build costs about what 10 iterations do.
            self.linear_solver.reset(self.n_columns)
        self._points = torch.cat([self.next_states, anchors])
        self._points_continuing = torch.cat([self.continuing, self.anchor_continuation(anchors)])
        self._points_tree = cKDTree((self._points / self.h_s).cpu().numpy())
        self._logged = None

    # ------------------------------------------------------------------ the interpolation
    @property
    def n_columns(self) -> int:
        """Columns of ``T``: the data's next states and the anchors."""
        return self.n + self.anchors.shape[0]

    def _continuation(self, cols: torch.Tensor) -> torch.Tensor:
        return gather_rows(self._points_continuing, cols)

    def interpolation(self, succ: torch.Tensor
                      ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """As :meth:`LocalLinearBellman.interpolation`, from the data's next states and the
        anchors; the thinness stays measured against the data's next states (only the penalty
        reads it: without one it is returned as zeros, which saves a neighbour search)."""
        if self.penalty_scale:
            thin = self.data_interpolation(succ)[2]
        else:
            thin = succ.new_zeros(succ.shape[:-1])
        cols, weights, _ = self._interpolate_from(self._points, self._points_tree, succ)
        return cols, weights, thin

    def _next_queries_rows(self, policy: nn.Module, generator: torch.Generator | None
                           ) -> tuple[SparseRows, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Rows at the data's next states (drawn around them when ``n_mc_next`` is on), then
        at the anchors themselves (a draw around an anchor would add back the jump it removes;
        each anchor is queried once, with the policy's ``n_mc_policy`` actions for NOPG-S).
        ``next_actions`` holds the ``n n_mc_next`` drawn states' actions, then the anchors'."""
        k = self.n_mc_next or 1
        ds = self.data.state_dim
        drawn = self.next_states[:, None, :].expand(-1, k, -1)
        if self.n_mc_next is not None:
            drawn = drawn + self.h_next * self._noise((self.n, k, ds), generator)
        T, rho, thin, actions = self._policy_successors(policy, drawn.reshape(-1, ds), k,
                                                        generator)
        if self.anchors.shape[0] == 0:
            return T, rho, thin, actions
        # Each anchor's row is built once and stored as k copies of weight 1/k, the width of
        # the drawn rows (a row's repeated columns add up): the same row as k identical queries.
        Ta, rho_a, thin_a, actions_a = self._policy_successors(policy, self.anchors, 1, generator)
        T = SparseRows(torch.cat([T.index, Ta.index.repeat(1, k)]),
                       torch.cat([T.values, Ta.values.repeat(1, k) / k]), self.n_columns)
        return (T, torch.cat([rho, rho_a]), torch.cat([thin, thin_a]),
                torch.cat([actions, actions_a]))

    def aggregates(self) -> np.ndarray:
        """The data's aggregates, then each initial state's anchors in runs of consecutive steps."""
        data_groups = super().aggregates()
        if self._anchor_groups is None:
            m = self.anchors.shape[0] // self.horizon
            step, start = np.divmod(np.arange(self.anchors.shape[0]), max(m, 1))
            runs = -(-self.horizon // AGGREGATE_SIZE)
            self._anchor_groups = data_groups.max() + 1 + start * runs + step // AGGREGATE_SIZE
        return np.concatenate([data_groups, self._anchor_groups])

    # ------------------------------------------------------------------ the solve
    def solution(self, policy: nn.Module, initial_states: np.ndarray | torch.Tensor,
                 generator: torch.Generator | None = None,
                 warm_start: tuple[torch.Tensor, torch.Tensor] | None = None,
                 anchors: torch.Tensor | None = None) -> BellmanSolution:
        """Roll the policy out in the model, anchor there, and solve (module docstring).

        ``anchors`` (k, d_s), when given, are used instead of the rollout (e.g. to hold them
        fixed while the policy changes). The rollout draws no random numbers for a deterministic
        policy; a warm start of another size (another number of anchors) is ignored.
        """
        self.check_policy(policy)
        if anchors is None:
            anchors = self.rollout(policy, initial_states, generator)
        self.set_anchors(anchors)
        if warm_start is not None and warm_start[0].shape[0] != self.n_columns:
            warm_start = None
        return super().solution(policy, initial_states, generator, warm_start)
