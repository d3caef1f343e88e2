"""The nonparametric Bellman model of NOPG (paper Section 3, Eq. 6).

For a policy ``pi`` the model's responsibilities at a state are ``eps_pi(s) = eps(s, pi(s))``
(NOPG-D) or the Monte-Carlo mean over reparameterised actions ``a_m = mu(s) + sigma(s) xi_m``
(NOPG-S), with ``eps(s, a)`` the softmax of Gaussian kernel log-weights (:mod:`nopg.model.kernels`,
rows built by :mod:`nopg.model.responsibilities`). Then

    P[i, :] = gamma_i * mean_m eps_pi(x_im),   x_im = s'_i (kernel mean) or s'_i + h_s' xi_im,
    eps0    = mean_m eps_pi(z_m),              z_m initial states,
    q  = (I - P)^{-1} r,   mu = (I - P)^{-T} eps0,   J_hat = eps0 . q,
    V(s) = eps_pi(s) . q,  Q(s, a) = eps(s, a) . q,  visitation(s) = eps_pi(s) . mu.

The two solves are :class:`nopg.model.bellman_solver.BellmanSolver`'s. The gradient of ``J_hat``
(paper Eq. 6) is the autograd gradient of the surrogate
``eps0(theta) . stop(q) + stop(mu)^T P(theta) stop(q)`` (:meth:`BellmanSolution.surrogate`).

Support. The unnormalised kernel mass gives the *thinness* ``1 - w`` of the data at every query
(:func:`nopg.model.kernels.thinness`). Its visitation-weighted mean is the ``support_gap`` reported
with ``J_hat``. With ``unsupported="absorb"`` every row of ``P`` and ``eps0`` is scaled by ``w``
and the missing mass enters an absorbing state of value ``v_abs``:
``q = (I - P_w)^{-1} (r + v_abs gamma (1 - w))``, ``J_hat = eps0_w . q + v_abs mean(1 - w_0)``,
still differentiable end to end. With ``unsupported="penalty"`` the rows stay the paper's and
every query pays its thinness in reward, ``lambda (1 - w)`` with
``lambda = max(r) - (1 - gamma) v_abs``: ``q = (I - P)^{-1} (r - lambda gamma (1 - w))``,
``J_hat = eps0 . q - lambda mean(1 - w_0)``. Both models share one form, a value ``c`` per unit
of thinness (``c = v_abs`` or ``-lambda``: :attr:`NonparametricBellman.unsupported_value`).

Sparsification keeps the ``top_k`` largest responsibilities of every row and
renormalises them; the ``neighbors`` option says how they are found (:mod:`nopg.model.responsibilities`,
:mod:`nopg.model.candidates`).

:class:`BellmanSolution` is in :mod:`nopg.model.solution`; the model's queries at any states
(``V``, ``Q``, the visitation) are inherited from :mod:`nopg.model.queries`.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

import numpy as np
import torch
from torch import nn

from ..bandwidth.selection import Bandwidths
from ..data.dataset import TransitionDataset, check_gamma
from ..linalg.solvers import SolveInfo
from ..policies.chunked import policy_outputs
from ..policies.networks import is_stochastic
from .bellman_solver import BellmanSolver
from .candidates import CandidateSets, TopKSelector, candidate_action_scale, default_candidates
from .config import (
    KEYWORD_DEFAULTS,
    NEIGHBOR_MODES,
    PRECONDITIONERS,
    SOLVERS,
    UNSUPPORTED,
    ModelConfig,
    keyword_config,
)
from .defaults import (
    AGGREGATE_SIZE,
    KNN_PROBE_EVERY,
    resolve_neighbors,
    resolve_preconditioner,
    resolve_switch_share,
)
from .neighbors import z_order_groups
from .queries import BellmanQueries
from .responsibilities import KernelRows, QueryStates
from .row_matrices import Rows
from .solution import BellmanSolution, as_states, pessimistic_value
from .state_pools import DEFAULT_POOL

__all__ = ["NonparametricBellman", "BellmanSolution", "ModelConfig", "KEYWORD_DEFAULTS", "keyword_config",
           "as_states", "pessimistic_value", "candidate_action_scale", "default_candidates",
           "CandidateSets", "NEIGHBOR_MODES", "UNSUPPORTED", "PRECONDITIONERS", "SOLVERS"]

_DENSE_LIMIT = 20_000          # top_k=None beyond this many samples is refused (n x n memory)


def _check_data(data: TransitionDataset, bandwidths: Bandwidths, gamma: float) -> None:
    if not isinstance(data, TransitionDataset):
        raise ValueError(
            f"data must be a nopg.TransitionDataset. Got {type(data).__name__} instead."
        )
    if not isinstance(bandwidths, Bandwidths):
        raise ValueError(
            f"bandwidths must be a nopg.Bandwidths. Got {type(bandwidths).__name__} instead."
        )
    check_gamma(gamma)


def _check_resolved(n: int, top_k: int | None, n_candidates: int | None) -> None:
    """The settings against the data set size, after the ``auto`` rules."""
    if top_k is not None and top_k > n:
        raise ValueError(f"top_k must be at most the number of samples ({n}). Got {top_k} instead.")
    if n_candidates is not None and top_k is not None and n_candidates < top_k:
        raise ValueError(f"n_candidates ({n_candidates}) must be at least top_k ({top_k})")
    if top_k is None and n > _DENSE_LIMIT:
        raise ValueError(
            f"top_k=None keeps all {n} x {n} entries of P ({8 * n * n / 2**30:.0f} GiB in "
            f"float64); set top_k (e.g. 10) for data sets above {_DENSE_LIMIT} samples")


class NonparametricBellman(BellmanQueries):
    """Nonparametric Bellman model over a fixed data set (module docstring).

    Parameters
    ----------
    data : TransitionDataset
    bandwidths : Bandwidths
        Kernel standard deviations (per dimension) for states, actions and next states.
    gamma : float in [0, 1)
    config : ModelConfig, optional
        The model's settings (:class:`nopg.model.config.ModelConfig`: sparsification, neighbour
        search, Monte-Carlo counts, solver, support model, successors, dtype, device). This class
        is the kernel model (``successors="kernel"``); :func:`nopg.model.factory.bellman_model` builds
        the class that a configuration's ``successors`` names.
    **settings
        Fields of :class:`~nopg.model.config.ModelConfig` (e.g. ``top_k=10``,
        ``stochastic=True``), replacing those of ``config``. Without ``config`` the fields not
        given take :data:`~nopg.model.config.KEYWORD_DEFAULTS` where it has them (the paper's
        dense model with tight solves: ``top_k=None``, ``n_mc_policy=10``, ``solver_tol=1e-10``,
        ``dense_max_n=2000``; why they differ from :class:`~nopg.model.config.ModelConfig`'s is
        written there) and ``ModelConfig``'s defaults otherwise; ``n_mc_policy=None`` means 10
        (:func:`~nopg.model.config.keyword_config`).

    Attributes
    ----------
    config : ModelConfig
        The settings as given; the attributes of the same names (``top_k``, ``neighbors``,
        ``dense_max_n``, ...) hold them resolved for this data set's size.
    selector : TopKSelector
        The top-k search (:mod:`nopg.model.candidates`).
    kernel_rows : KernelRows
        Builds the rows of ``eps`` (:mod:`nopg.model.responsibilities`).
    linear_solver : BellmanSolver
        Solves for ``q`` and ``mu`` and keeps the preconditioner (:mod:`nopg.model.bellman_solver`).
    """

    SUCCESSORS: ClassVar[str] = "kernel"
    """The ``successors`` this class models (a subclass models its own: the ``config``'s value
    is replaced by it; :func:`nopg.model.factory.bellman_model` builds the class a configuration
    names)."""
    ROLLS_OUT: ClassVar[bool] = False
    """Whether the model rolls the policy out itself (its anchors) and so also answers
    :class:`~nopg.model.factory.RolloutModel`'s ``episode_lengths`` and ``candidate_rollouts``
    (:func:`~nopg.model.factory.rollout_model`)."""

    def __init__(self, data: TransitionDataset, bandwidths: Bandwidths, gamma: float,
                 config: ModelConfig | None = None, **settings: Any) -> None:
        _check_data(data, bandwidths, gamma)
        config = keyword_config(config, **settings)
        if config.successors != self.SUCCESSORS:
            if type(self) is NonparametricBellman:
                raise ValueError(
                    f"NonparametricBellman is the kernel model; successors="
                    f"{config.successors!r} is built by nopg.bellman_model(data, bandwidths, "
                    f"gamma, config, **settings), which picks the model class the "
                    f"configuration names")
            config = dataclasses.replace(config, successors=self.SUCCESSORS)
        self.config = config
        n = data.n
        resolved = config.resolved(n)
        neighbors = resolve_neighbors(config.neighbors, resolved.top_k,
                                      data.state_dim + data.action_dim, config.torch_device.type)
        _check_resolved(n, resolved.top_k, config.n_candidates)
        self.data = data
        self.bandwidths = bandwidths.broadcast(data.state_dim, data.action_dim)
        self.gamma = float(gamma)
        self.top_k = resolved.top_k
        self.n_mc_next = resolved.n_mc_next
        self.stochastic = config.stochastic
        self.n_mc_policy = config.n_mc_policy if self.stochastic else 1
        self.dtype = config.torch_dtype
        self.device = config.torch_device
        self.solver = config.solver
        tol = config.solver_tol
        self.solver_tol: float | str = tol if isinstance(tol, str) else float(tol)
        self.solver_max_iter = config.solver_max_iter
        self.solver_error = None if config.solver_error is None else float(config.solver_error)
        self.dense_max_n = resolved.dense_max_n
        self.neighbors = neighbors
        self.switch_share = resolve_switch_share(config.neighbors, neighbors, n)
        default = DEFAULT_POOL if self.neighbors == "pool" else default_candidates(self.top_k or 1)
        self.n_candidates = min(config.n_candidates or default, n)
        self.refine = config.refine
        self.neighbor_backend = config.neighbor_backend
        self.preconditioner = resolve_preconditioner(config.preconditioner, self.device.type, n,
                                                     drawn=self.n_mc_next is not None)
        self.solver_precision = config.solver_precision
        self.unsupported = config.unsupported
        self.support_radius = float(config.support_radius)
        self.absorbing_value = (pessimistic_value(data, self.gamma)
                                if config.absorbing_value is None else float(config.absorbing_value))
        self._build()

    def _build(self) -> None:
        """The data as tensors and the three parts of the model: top-k search, rows, solver."""
        t, bw = self._tensor, self.bandwidths
        self.h_s = t(bw.state)
        self.h_a = t(bw.action)
        self.h_next = t(bw.next_state_or_state)
        self.states = t(self.data.states)
        self.next_states = t(self.data.next_states)
        self.states_scaled = self.states / self.h_s                              # (n, d_s)
        self.actions_scaled = t(self.data.actions) / self.h_a                 # (n, d_a)
        self.rewards = torch.tensor(self.data.rewards, dtype=torch.float64, device=self.device)
        self.discounts = t(self.data.discounts(self.gamma))                   # (n,)
        self.selector = TopKSelector(self.states_scaled, self.actions_scaled, self.top_k,
                                     self.n_candidates, self.refine, self.neighbor_backend,
                                     self.switch_share, KNN_PROBE_EVERY,
                                     graph=self.neighbors == "graph",
                                     pool=self.n_candidates if self.neighbors == "pool" else None)
        absorb = self.unsupported == "absorb"
        self.kernel_rows = KernelRows(self.selector, self.neighbors, self.support_radius, absorb,
                                      attach_thinness=self.unsupported == "penalty")
        self._logged_rows: tuple[Rows, torch.Tensor] | None = None   # logged_q_value cache
        self._data_queries: QueryStates | None = None      # data_value: prepared data states
        self.linear_solver = BellmanSolver(
            self.n, self.solver, self.solver_tol, self.solver_max_iter, self.dense_max_n,
            self.preconditioner, self.gamma, self.absorbing_value if absorb else None,
            aggregates=self.aggregates, drawn=self.n_mc_next is not None,
            precision=self.solver_precision, error=self.solver_error)
        self._next_queries: QueryStates | None = None      # cached preparation of P's rows
        self._init_cache: tuple[np.ndarray, QueryStates] | None = None

    # ------------------------------------------------------------------ helpers
    def aggregates(self) -> np.ndarray:
        """Groups of ``AGGREGATE_SIZE`` nearby scaled data pairs (Z-order) for the aggregation
        preconditioner."""
        pairs = torch.cat([self.states_scaled, self.actions_scaled], dim=1)
        return z_order_groups(pairs.detach().cpu().double().numpy(), AGGREGATE_SIZE)

    def _tensor(self, x: np.ndarray) -> torch.Tensor:
        return torch.tensor(np.asarray(x), dtype=self.dtype, device=self.device)

    @property
    def n(self) -> int:
        return self.data.n

    @property
    def unsupported_value(self) -> float | None:
        """What a unit of thinness adds to a query's value: ``v_abs`` (``unsupported="absorb"``),
        ``-(max(r) - (1 - gamma) v_abs)`` (``"penalty"``) or ``None`` (the paper's model)."""
        if self.unsupported == "absorb":
            return self.absorbing_value
        if self.unsupported == "penalty":
            return -self.penalty_lambda
        return None

    @property
    def penalty_lambda(self) -> float:
        """The penalty's scale ``lambda = max(r) - (1 - gamma) absorbing_value``: the gap between
        the best reward and the pessimistic reward per step."""
        return float(self.data.rewards.max()) - (1.0 - self.gamma) * self.absorbing_value

    @property
    def candidate_action_scale(self) -> float:
        """``lambda`` in (0, 1] of the candidate index
        (:func:`nopg.model.candidates.candidate_action_scale`)."""
        return self.selector.action_scale

    @candidate_action_scale.setter
    def candidate_action_scale(self, value: float) -> None:
        self.selector.action_scale = value

    @property
    def refined_rows_(self) -> int:
        """Rows re-centred by the candidate search since the last :meth:`solution`."""
        return self.selector.refined_rows

    @refined_rows_.setter
    def refined_rows_(self, value: int) -> None:
        self.selector.refined_rows = int(value)

    @property
    def preconditioner_builds_(self) -> int:
        """ILU preconditioner builds so far."""
        return self.linear_solver.builds

    def _noise(self, shape: tuple[int, ...], generator: torch.Generator | None) -> torch.Tensor:
        """Standard normal noise drawn on the CPU (so CPU and CUDA runs see the same numbers)."""
        return torch.randn(shape, generator=generator, dtype=torch.float64).to(
            device=self.device, dtype=self.dtype)

    def check_policy(self, policy: nn.Module) -> None:
        """A clear error when the model is stochastic (NOPG-S) and the policy has no
        ``mean_std``."""
        if self.stochastic and not is_stochastic(policy):
            raise ValueError(
                "stochastic=True needs a policy with a 'mean_std(states) -> (mean, std)' method, "
                f"such as nopg.GaussianMLPPolicy; {type(policy).__name__} has none")

    def _policy_input(self, policy: nn.Module, states: torch.Tensor) -> torch.Tensor:
        param = next(iter(policy.parameters()), None)
        return states.to(param.dtype) if param is not None else states

    # ------------------------------------------------------------------ eps_pi
    def policy_actions(self, policy: nn.Module, states: torch.Tensor,
                       generator: torch.Generator | None = None) -> torch.Tensor:
        """The actions the model queries at ``states`` (m, d_s): shape (m, N_pi, d_a), with
        ``N_pi = 1`` for a deterministic policy and Monte-Carlo samples for a stochastic one.

        Attached to the policy's graph, in the model's dtype.
        """
        states = self._policy_input(policy, states)
        if self.stochastic:
            mean, std = policy_outputs(policy.mean_std, policy, states)
            xi = self._noise((states.shape[0], self.n_mc_policy, mean.shape[-1]), generator
                             ).to(mean.dtype)
            actions = mean[:, None, :] + std[:, None, :] * xi
        else:
            actions = policy_outputs(policy, policy, states)[:, None, :]
        if actions.shape[-1] != self.data.action_dim:
            raise ValueError(
                f"the policy returned actions of dimension {actions.shape[-1]}, but the data set's "
                f"actions have dimension {self.data.action_dim}"
            )
        return actions.to(self.dtype)

    def _policy_rows(self, policy: nn.Module, states: torch.Tensor, queries: QueryStates,
                     group: int, generator: torch.Generator | None
                     ) -> tuple[Rows, torch.Tensor, torch.Tensor]:
        """``eps_pi`` at ``m * group`` query states (prepared as ``queries``), averaged over
        consecutive groups of ``group``; the thinness of every averaged row (m,); the actions."""
        actions = self.policy_actions(policy, states, generator)               # (M, N_pi, d_a)
        rows, thin = self.kernel_rows.rows(queries, actions / self.h_a, group)
        return rows, thin, actions

    def _prepare(self, states: torch.Tensor, cache: bool = False) -> QueryStates:
        return self.kernel_rows.prepare(states / self.h_s, cache)

    def responsibilities(self, policy: nn.Module, states: np.ndarray | torch.Tensor,
                         generator: torch.Generator | None = None) -> Rows:
        """``eps_pi(s)`` for query states of shape (m, d_s): rows of an (m, n) matrix (scaled by
        the support weights ``w`` in the support-aware model)."""
        s = self._tensor(as_states(states, self.data.state_dim, "states"))
        return self._policy_rows(policy, s, self._prepare(s), 1, generator)[0]

    def thinness(self, policy: nn.Module | None, states: np.ndarray | torch.Tensor,
                 actions: np.ndarray | torch.Tensor | None = None, seed: int = 0,
                 chunk: int = 4096) -> np.ndarray:
        """Thinness ``1 - w`` of the data at ``(s, pi(s))`` (or at ``(s, a)`` for given
        ``actions``) for states (m, d_s), in [0, 1], evaluated ``chunk`` queries at a time.

        0 where a data pair lies at the query (within ``support_radius`` bandwidths), close to
        1 where the kernel model extrapolates (see :func:`nopg.model.kernels.thinness`).
        """
        return self._query(policy, states, None, actions=actions, chunk=chunk, seed=seed)

    # ------------------------------------------------------------------ P and eps0
    def _transition(self, policy: nn.Module, generator: torch.Generator | None
                    ) -> tuple[Rows, torch.Tensor, torch.Tensor]:
        """``P`` (rows scaled by ``gamma_i``), the discounted lost mass ``gamma_i (1 - w_i)`` and
        the policy's actions at the next states."""
        if self.n_mc_next is None:
            if self._next_queries is None:
                self._next_queries = self._prepare(self.next_states, cache=True)
            states, queries, group = self.next_states, self._next_queries, 1
        else:
            xi = self._noise((self.n, self.n_mc_next, self.data.state_dim), generator)
            states = (self.next_states[:, None, :] + self.h_next * xi).reshape(-1, self.data.state_dim)
            queries, group = self._prepare(states), self.n_mc_next
        rows, thin, actions = self._policy_rows(policy, states, queries, group, generator)
        return rows.scale_rows(self.discounts), thin * self.discounts, actions

    def transition_matrix(self, policy: nn.Module, generator: torch.Generator | None = None) -> Rows:
        """``P`` (rows scaled by ``gamma_i``), attached to the policy's graph."""
        return self._transition(policy, generator)[0]

    def _initial(self, policy: nn.Module, initial_states: np.ndarray | torch.Tensor,
                 generator: torch.Generator | None
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``eps0`` (n,), the mean thinness of the initial queries (a scalar tensor) and the
        policy's actions at the initial states."""
        z = as_states(initial_states, self.data.state_dim, "initial_states")
        zt = self._tensor(z)
        if self._init_cache is None or not np.array_equal(self._init_cache[0], z):
            self._init_cache = (z, self._prepare(zt, cache=True))
        rows, thin, actions = self._policy_rows(policy, zt, self._init_cache[1], 1, generator)
        return rows.column_mean(), thin.mean(), actions

    def initial_vector(self, policy: nn.Module, initial_states: np.ndarray | torch.Tensor,
                       generator: torch.Generator | None = None) -> torch.Tensor:
        """``eps0 = mean_m eps_pi(z_m)`` of shape (n,), attached to the policy's graph."""
        return self._initial(policy, initial_states, generator)[0]

    # ------------------------------------------------------------------ solves
    def solve(self, P: Rows, eps0: torch.Tensor, warm_start: tuple[torch.Tensor, torch.Tensor] | None
              = None, rewards: torch.Tensor | None = None
              ) -> tuple[torch.Tensor, torch.Tensor, SolveInfo, SolveInfo]:
        """Solve ``(I - P) q = r`` and ``(I - P)^T mu = eps0`` in float64 (detached).

        ``rewards`` replaces the data's rewards (the support-aware model adds the absorbed mass).
        """
        return self.linear_solver.solve(P, eps0, self.rewards if rewards is None else rewards,
                                        warm_start)

    def solver_state(self) -> dict[str, torch.Tensor]:
        """What the solver carries across updates besides warm starts (for exact checkpoints)."""
        return self.linear_solver.state()

    def load_solver_state(self, state: dict[str, torch.Tensor]) -> None:
        """Restore :meth:`solver_state` (ignored when it belongs to another data set size)."""
        self.linear_solver.load_state(state)

    def solution(self, policy: nn.Module, initial_states: np.ndarray | torch.Tensor,
                 generator: torch.Generator | None = None,
                 warm_start: tuple[torch.Tensor, torch.Tensor] | None = None) -> BellmanSolution:
        """Build ``eps0`` and ``P`` at the policy and solve for ``q`` and ``mu`` (one update's
        model: ``J_hat``, the gradient surrogate, the support diagnostics)."""
        self.check_policy(policy)
        self.refined_rows_ = 0
        eps0, thin0, actions0 = self._initial(policy, initial_states, generator)
        P, lost, actions_next = self._transition(policy, generator)
        lost64, thin064 = lost.detach().to(torch.float64), float(thin0.detach())
        c = self.unsupported_value          # value per unit of thinness (absorb / penalty)
        rewards = None if c is None else self.rewards + c * lost64
        q, mu, info_q, info_mu = self.solve(P, eps0, warm_start, rewards)
        J = float(torch.dot(eps0.detach().to(torch.float64), q))
        if c is not None:
            J += c * thin064
        visits = mu.clamp_min(0)
        discounts = self.discounts.detach().to(torch.float64)
        gap = (thin064 + float(visits @ lost64)) / (1.0 + float(visits @ discounts))
        return BellmanSolution(J, q, mu, eps0, P, info_q, info_mu, self.refined_rows_,
                               lost_next=lost, thin_init=thin0, support_gap=gap,
                               absorbing_value=c, initial_actions=actions0,
                               next_actions=actions_next, initial_gap=thin064)
