"""The nonparametric Bellman model of NOPG (paper Section 3, Eq. 6).

For a policy ``pi`` the model's responsibilities at a state are ``eps_pi(s) = eps(s, pi(s))``
(NOPG-D) or the Monte-Carlo mean over reparameterised actions ``a_m = mu(s) + sigma(s) xi_m``
(NOPG-S), with ``eps(s, a)`` the softmax of Gaussian kernel log-weights (:mod:`nopg.kernels`,
rows built by :mod:`nopg.responsibilities`). Then

    P[i, :] = gamma_i * mean_m eps_pi(x_im),   x_im = s'_i (kernel mean) or s'_i + h_s' xi_im,
    eps0    = mean_m eps_pi(z_m),              z_m initial states,
    q  = (I - P)^{-1} r,   mu = (I - P)^{-T} eps0,   J_hat = eps0 . q,
    V(s) = eps_pi(s) . q,  Q(s, a) = eps(s, a) . q,  visitation(s) = eps_pi(s) . mu.

The two solves are :class:`nopg.bellman_solver.BellmanSolver`'s. The gradient of ``J_hat``
(paper Eq. 6) is the autograd gradient of the surrogate
``eps0(theta) . stop(q) + stop(mu)^T P(theta) stop(q)`` (:meth:`BellmanSolution.surrogate`).

Support. The unnormalised kernel mass gives the *thinness* ``1 - w`` of the data at every query
(:func:`nopg.kernels.thinness`). Its visitation-weighted mean is the ``support_gap`` reported
with ``J_hat``. With ``unsupported="absorb"`` every row of ``P`` and ``eps0`` is scaled by ``w``
and the missing mass enters an absorbing state of value ``v_abs``:
``q = (I - P_w)^{-1} (r + v_abs gamma (1 - w))``, ``J_hat = eps0_w . q + v_abs mean(1 - w_0)``,
still differentiable end to end.

Sparsification (``top_k=k``) keeps the ``k`` largest responsibilities of every row and
renormalises them; the ``neighbors`` option says how they are found (:mod:`nopg.responsibilities`,
:mod:`nopg.candidates`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from .bandwidth import Bandwidths
from .bellman_solver import PRECONDITIONERS, SOLVERS, BellmanSolver
from .candidates import CandidateSets, TopKSelector, candidate_action_scale, default_candidates
from .data import TransitionDataset
from .defaults import SPARSE_MIN_N, check_dense_max_n, check_top_k, resolve_neighbors, resolve_settings
from .policies import is_stochastic
from .responsibilities import KernelRows, QueryStates
from .rows import Rows
from .solvers import SolveInfo, check_solver_tol

__all__ = ["NonparametricBellman", "BellmanSolution", "as_states", "pessimistic_value",
           "candidate_action_scale", "default_candidates", "CandidateSets", "NEIGHBOR_MODES",
           "UNSUPPORTED", "PRECONDITIONERS", "SOLVERS"]

NEIGHBOR_MODES = ("auto", "dense", "candidates", "knn")
UNSUPPORTED = ("extrapolate", "absorb")
_DENSE_LIMIT = 20_000          # top_k=None beyond this many samples is refused (n x n memory)


def pessimistic_value(dataset: TransitionDataset, gamma: float) -> float:
    """``min(r) / (1 - gamma)``, capped at 0 when the data hold a terminal transition."""
    value = float(dataset.rewards.min()) / (1.0 - gamma)
    return min(value, 0.0) if bool(np.any(dataset.terminals)) else value


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
        ``J_hat = eps0 . q``.
    q, mu : tensor of shape (n,)
        Solutions of ``(I - P) q = r`` and ``(I - P)^T mu = eps0`` (float64, detached).
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
    absorbing_value : float or None
        Value of the absorbing state that takes the unsupported mass (support-aware model), or
        ``None`` for the paper's model.
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
    initial_actions: torch.Tensor | None = None
    next_actions: torch.Tensor | None = None

    def surrogate(self) -> torch.Tensor:
        """A scalar whose gradient is ``grad J_hat``.

        ``eps0(theta) . stop(q) + stop(mu)^T P(theta) stop(q)``; with the support-aware model
        the absorbed mass adds ``v_abs (thin_init(theta) + stop(mu)^T lost_next(theta))``.
        """
        dtype = self.eps0.dtype
        q, mu = self.q.to(dtype), self.mu.to(dtype)
        out = self.eps0 @ q + mu @ self.P.matvec(q)
        if self.absorbing_value is not None:
            assert self.thin_init is not None and self.lost_next is not None
            out = out + self.absorbing_value * (self.thin_init + mu @ self.lost_next)
        return out


def _check_positive_int(name: str, value: int | None, allow_none: bool = True) -> None:
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"The '{name}' parameter must be a positive int. Got {value!r} instead.")


def _check_data(dataset: TransitionDataset, bandwidths: Bandwidths, gamma: float) -> None:
    if not isinstance(dataset, TransitionDataset):
        raise ValueError(
            f"dataset must be a nopg.TransitionDataset. Got {type(dataset).__name__} instead."
        )
    if not isinstance(bandwidths, Bandwidths):
        raise ValueError(
            f"bandwidths must be a nopg.Bandwidths. Got {type(bandwidths).__name__} instead."
        )
    if isinstance(gamma, bool) or not (0.0 <= float(gamma) < 1.0):
        raise ValueError(f"The 'gamma' parameter must be a float in [0, 1). Got {gamma!r} instead.")


def _check_choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"The '{name}' parameter must be one of {choices}. Got {value!r} instead.")


def _check_options(*, top_k: int | str | None, dense_max_n: int | None, sparse_min_n: int,
                   n_mc_next: int | None, n_mc_policy: int | None, solver_max_iter: int,
                   solver: str, solver_tol: float | str, n_candidates: int | None,
                   preconditioner: str, unsupported: str, support_radius: float,
                   absorbing_value: float | None, neighbors: str) -> None:
    """The settings of :class:`NonparametricBellman`, each on its own."""
    if not check_top_k(top_k):
        raise ValueError(f"The 'top_k' parameter must be a positive int, 'auto' or None. "
                         f"Got {top_k!r} instead.")
    if not check_dense_max_n(dense_max_n):
        raise ValueError(f"The 'dense_max_n' parameter must be a positive int or None. "
                         f"Got {dense_max_n!r} instead.")
    _check_positive_int("sparse_min_n", sparse_min_n, allow_none=False)
    _check_positive_int("n_mc_next", n_mc_next)
    _check_positive_int("n_mc_policy", n_mc_policy)
    _check_positive_int("solver_max_iter", solver_max_iter, allow_none=False)
    _check_choice("solver", solver, SOLVERS)
    if not check_solver_tol(solver_tol):
        raise ValueError(f"The 'solver_tol' parameter must be a positive float or 'auto'. "
                         f"Got {solver_tol!r} instead.")
    _check_positive_int("n_candidates", n_candidates)
    _check_choice("preconditioner", preconditioner, PRECONDITIONERS)
    _check_choice("unsupported", unsupported, UNSUPPORTED)
    if isinstance(support_radius, bool) or not (
            isinstance(support_radius, (int, float)) and 0 < support_radius < float("inf")):
        raise ValueError(f"The 'support_radius' parameter must be a positive float. "
                         f"Got {support_radius!r} instead.")
    if absorbing_value is not None and (isinstance(absorbing_value, bool) or not np.isfinite(
            float(absorbing_value))):
        raise ValueError(f"The 'absorbing_value' parameter must be a finite float or None. "
                         f"Got {absorbing_value!r} instead.")
    _check_choice("neighbors", neighbors, NEIGHBOR_MODES)


def _resolve_preconditioner(preconditioner: str, device: torch.device) -> str:
    """``"auto"`` is an ILU on the CPU and none on a GPU; ``"ilu"`` runs on the CPU only."""
    if preconditioner == "ilu" and device.type != "cpu":
        raise ValueError(f"preconditioner='ilu' runs on the CPU only; use 'auto' or 'none' on {device}")
    if preconditioner == "auto":
        return "ilu" if device.type == "cpu" else "none"
    return preconditioner


def _check_resolved(n: int, top_k: int | None, n_candidates: int | None, neighbors: str) -> None:
    """The settings against each other and the data set size, after the ``auto`` rules."""
    if top_k is not None and top_k > n:
        raise ValueError(f"top_k must be at most the number of samples ({n}). Got {top_k} instead.")
    if n_candidates is not None and top_k is not None and n_candidates < top_k:
        raise ValueError(f"n_candidates ({n_candidates}) must be at least top_k ({top_k})")
    if top_k is None and neighbors != "dense":
        raise ValueError(f"neighbors={neighbors!r} needs top_k (the entries kept per row); "
                         "without top_k every entry is kept and the matrix is dense")
    if top_k is None and n > _DENSE_LIMIT:
        raise ValueError(
            f"top_k=None keeps all {n} x {n} entries of P ({8 * n * n / 2**30:.0f} GiB in "
            f"float64); set top_k (e.g. 10) for data sets above {_DENSE_LIMIT} samples")


class NonparametricBellman:
    """Nonparametric Bellman model over a fixed data set.

    Parameters
    ----------
    dataset : TransitionDataset
    bandwidths : Bandwidths
        Kernel standard deviations (per dimension) for states, actions and next states.
    gamma : float in [0, 1)
    top_k : int, "auto" or None
        Keep the ``k`` largest responsibilities per row (renormalised); ``None`` keeps all;
        ``"auto"`` keeps all below ``sparse_min_n`` samples and 10 from there on
        (:mod:`nopg.defaults`).
    n_mc_next : int, optional
        Monte-Carlo samples of the next-state kernel; ``None`` uses the kernel mean ``s'_i``.
    n_mc_policy : int, optional
        Monte-Carlo actions per state for a stochastic policy (default 10).
    stochastic : bool
        Integrate over the policy's Gaussian (NOPG-S) instead of using its mean (NOPG-D).
    dtype : torch.dtype
        Dtype of the kernel computations (the policy is evaluated in it). Solves are float64.
    device : str or torch.device
    solver : {"auto", "dense", "bicgstab"}
        ``auto`` is dense LU up to ``dense_max_n`` samples, BiCGSTAB above.
    solver_tol : float or "auto"
        BiCGSTAB relative tolerance (2-norm residual). ``"auto"``: as accurate as the gradient
        needs, with a proven error bound (:func:`nopg.solvers.solve_bellman_auto`: relative
        error of ``q`` against its spread and of ``mu`` in l1 at most 1e-3, reported as
        ``info.error_bound``), and the ILU rebuilt when the iterations it saves would pay for it.
    solver_max_iter : int
        BiCGSTAB iteration cap.
    dense_max_n : int or None
        ``solver="auto"`` uses the dense LU up to this many samples; ``None`` takes the measured
        limit for the kind of ``P`` (:func:`nopg.defaults.resolve_dense_max_n`).
    sparse_min_n : int
        Number of samples from which ``top_k="auto"`` keeps 10 entries per row.
    neighbors : {"auto", "dense", "candidates", "knn"}
        How the top-k entries are found (:mod:`nopg.responsibilities`); ``auto`` is ``dense`` without
        ``top_k``, ``candidates`` with it below 50 000 samples and ``knn`` from there on
        (:func:`nopg.defaults.resolve_neighbors`).
    n_candidates : int, optional
        ``K'``, the candidate neighbours kept per query (default :func:`nopg.candidates.default_candidates`).
    refine : bool
        Candidate mode: re-centre the rows the certificate cannot vouch for (exact, default).
        ``False`` keeps the first update's candidates, an approximation whose error
        :mod:`nopg.tuning` measures.
    neighbor_backend : {"auto", "kdtree", "torch"}
        Back end of the neighbour searches (:class:`nopg.neighbors.NeighborIndex`).
    preconditioner : {"auto", "ilu", "none"}
        BiCGSTAB preconditioner. ``ilu`` (the ``auto`` choice on the CPU): an incomplete LU of
        ``I - P`` reused across updates and rebuilt when a solve needs more than 15 iterations
        (with ``solver_tol="auto"``: when the iterations beyond those of the first solve after
        the build add up to 60, about the cost of a build). ``none`` on a GPU.
    unsupported : {"extrapolate", "absorb"}
        What the model does where the data are thin. ``extrapolate`` (the paper): the
        responsibilities are renormalised, so the nearest data point takes all the weight however
        far it is. ``absorb``: the rows of ``P`` and ``eps0`` keep the share ``w`` of their mass
        that the data support (:func:`nopg.kernels.thinness`); the rest goes to an absorbing state
        worth ``absorbing_value``, so the policy gains nothing by leaving the data.
    absorbing_value : float, optional
        Value of the absorbing state. Default: the pessimistic ``min(r) / (1 - gamma)``, capped
        at 0 when the data hold terminal transitions (reaching a terminal is then possible).
    support_radius : float
        Distance, in bandwidths, at which a single data pair leaves the thinness at ``1/e``
        (the diagnostic ``support_gap`` and the ``absorb`` model).
    """

    def __init__(
        self,
        dataset: TransitionDataset,
        bandwidths: Bandwidths,
        gamma: float,
        *,
        top_k: int | str | None = None,
        n_mc_next: int | None = None,
        n_mc_policy: int | None = None,
        stochastic: bool = False,
        dtype: torch.dtype = torch.float64,
        device: str | torch.device = "cpu",
        solver: str = "auto",
        solver_tol: float | str = 1e-10,
        solver_max_iter: int = 1000,
        dense_max_n: int | None = 2000,
        sparse_min_n: int = SPARSE_MIN_N,
        neighbors: str = "auto",
        n_candidates: int | None = None,
        refine: bool = True,
        neighbor_backend: str = "auto",
        preconditioner: str = "auto",
        unsupported: str = "extrapolate",
        absorbing_value: float | None = None,
        support_radius: float = 2.0,
    ) -> None:
        _check_data(dataset, bandwidths, gamma)
        _check_options(top_k=top_k, dense_max_n=dense_max_n, sparse_min_n=sparse_min_n,
                       n_mc_next=n_mc_next, n_mc_policy=n_mc_policy,
                       solver_max_iter=solver_max_iter, solver=solver, solver_tol=solver_tol,
                       n_candidates=n_candidates, preconditioner=preconditioner,
                       unsupported=unsupported, support_radius=support_radius,
                       absorbing_value=absorbing_value, neighbors=neighbors)
        n = dataset.n
        settings = resolve_settings(n, top_k, solver, dense_max_n, sparse_min_n, neighbors)
        neighbors = resolve_neighbors(neighbors, settings.top_k, n)
        _check_resolved(n, settings.top_k, n_candidates, neighbors)
        self.dataset = dataset
        self.bandwidths = bandwidths.broadcast(dataset.state_dim, dataset.action_dim)
        self.gamma = float(gamma)
        self.top_k = settings.top_k
        self.n_mc_next = n_mc_next
        self.stochastic = bool(stochastic)
        self.n_mc_policy = (n_mc_policy or 10) if self.stochastic else 1
        self.dtype = dtype
        self.device = torch.device(device)
        self.solver = solver
        self.solver_tol: float | str = solver_tol if isinstance(solver_tol, str) else float(solver_tol)
        self.solver_max_iter = int(solver_max_iter)
        self.dense_max_n = settings.dense_max_n
        self.neighbors = neighbors
        self.n_candidates = min(n_candidates or default_candidates(self.top_k or 1), n)
        self.refine = bool(refine)
        self.neighbor_backend = neighbor_backend
        self.preconditioner = _resolve_preconditioner(preconditioner, self.device)
        self.unsupported = unsupported
        self.support_radius = float(support_radius)
        self.absorbing_value = (pessimistic_value(dataset, self.gamma) if absorbing_value is None
                                else float(absorbing_value))
        self._build()

    def _build(self) -> None:
        """The data as tensors and the three parts of the model: top-k search, rows, solver."""
        t, bw = self._tensor, self.bandwidths
        self.h_s = t(bw.state)
        self.h_a = t(bw.action)
        self.h_next = t(bw.next_state_or_state)
        self.states = t(self.dataset.states)
        self.next_states = t(self.dataset.next_states)
        self.states_scaled = self.states / self.h_s                              # (n, d_s)
        self.actions_scaled = t(self.dataset.actions) / self.h_a                 # (n, d_a)
        self.rewards = torch.tensor(self.dataset.rewards, dtype=torch.float64, device=self.device)
        self.discounts = t(self.dataset.discounts(self.gamma))                   # (n,)
        self.selector = TopKSelector(self.states_scaled, self.actions_scaled, self.top_k,
                                     self.n_candidates, self.refine, self.neighbor_backend)
        absorb = self.unsupported == "absorb"
        self.kernel_rows = KernelRows(self.selector, self.neighbors, self.support_radius, absorb)
        self.linear_solver = BellmanSolver(
            self.n, self.solver, self.solver_tol, self.solver_max_iter, self.dense_max_n,
            self.preconditioner, self.gamma, self.absorbing_value if absorb else None)
        self._next_queries: QueryStates | None = None      # cached preparation of P's rows
        self._init_cache: tuple[np.ndarray, QueryStates] | None = None

    # ------------------------------------------------------------------ helpers
    def _tensor(self, x: np.ndarray) -> torch.Tensor:
        return torch.tensor(np.asarray(x), dtype=self.dtype, device=self.device)

    @property
    def n(self) -> int:
        return self.dataset.n

    @property
    def candidate_action_scale(self) -> float:
        """``lambda`` in (0, 1] of the candidate index (:func:`nopg.candidates.candidate_action_scale`)."""
        return self.selector.action_scale

    @candidate_action_scale.setter
    def candidate_action_scale(self, value: float) -> None:
        self.selector.action_scale = value

    @property
    def refined_rows_(self) -> int:
        """Rows re-centred by the candidate search since the last :meth:`evaluate`."""
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
            mean, std = policy.mean_std(states)
            xi = self._noise((states.shape[0], self.n_mc_policy, mean.shape[-1]), generator
                             ).to(mean.dtype)
            actions = mean[:, None, :] + std[:, None, :] * xi
        else:
            actions = policy(states)[:, None, :]
        if actions.shape[-1] != self.dataset.action_dim:
            raise ValueError(
                f"the policy returned actions of dimension {actions.shape[-1]}, but the data set's "
                f"actions have dimension {self.dataset.action_dim}"
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
        s = self._tensor(as_states(states, self.dataset.state_dim, "states"))
        return self._policy_rows(policy, s, self._prepare(s), 1, generator)[0]

    def thinness(self, policy: nn.Module | None, states: np.ndarray | torch.Tensor,
                 actions: np.ndarray | torch.Tensor | None = None, seed: int = 0,
                 chunk: int = 4096) -> np.ndarray:
        """Thinness ``1 - w`` of the data at ``(s, pi(s))`` (or at ``(s, a)`` for given
        ``actions``) for states (m, d_s), in [0, 1], evaluated ``chunk`` queries at a time.

        0 where a data pair lies at the query (within ``support_radius`` bandwidths), close to
        1 where the kernel model extrapolates (see :func:`nopg.kernels.thinness`).
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
            xi = self._noise((self.n, self.n_mc_next, self.dataset.state_dim), generator)
            states = (self.next_states[:, None, :] + self.h_next * xi).reshape(-1, self.dataset.state_dim)
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
        z = as_states(initial_states, self.dataset.state_dim, "initial_states")
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

    def evaluate(self, policy: nn.Module, initial_states: np.ndarray | torch.Tensor,
                 generator: torch.Generator | None = None,
                 warm_start: tuple[torch.Tensor, torch.Tensor] | None = None) -> BellmanSolution:
        """Build ``eps0`` and ``P`` at the current policy and solve for ``q`` and ``mu``."""
        if self.stochastic and not is_stochastic(policy):
            raise ValueError(
                "stochastic=True needs a policy with a 'mean_std(states) -> (mean, std)' method, "
                f"such as nopg.GaussianMLPPolicy; {type(policy).__name__} has none"
            )
        self.refined_rows_ = 0
        eps0, thin0, actions0 = self._initial(policy, initial_states, generator)
        P, lost, actions_next = self._transition(policy, generator)
        lost64, thin064 = lost.detach().to(torch.float64), float(thin0.detach())
        v_abs = self.absorbing_value if self.unsupported == "absorb" else None
        rewards = None if v_abs is None else self.rewards + v_abs * lost64
        q, mu, info_q, info_mu = self.solve(P, eps0, warm_start, rewards)
        J = float(torch.dot(eps0.detach().to(torch.float64), q))
        if v_abs is not None:
            J += v_abs * thin064
        visits = mu.clamp_min(0)
        discounts = self.discounts.detach().to(torch.float64)
        gap = (thin064 + float(visits @ lost64)) / (1.0 + float(visits @ discounts))
        return BellmanSolution(J, q, mu, eps0, P, info_q, info_mu, self.refined_rows_,
                               lost_next=lost, thin_init=thin0, support_gap=gap,
                               absorbing_value=v_abs, initial_actions=actions0,
                               next_actions=actions_next)

    # ------------------------------------------------------------------ queries
    @torch.no_grad()
    def _query(self, policy: nn.Module | None, states: np.ndarray | torch.Tensor,
               vector: torch.Tensor | None, actions: np.ndarray | torch.Tensor | None = None,
               chunk: int = 4096, seed: int = 0, absorbing: bool = False) -> np.ndarray:
        """``rows . vector`` at the queries (``vector=None``: the rows' thinness), in chunks."""
        s_all = as_states(states, self.dataset.state_dim, "states")
        a_all = None
        if actions is not None:
            a_all = as_states(actions, self.dataset.action_dim, "actions")
            if a_all.shape[0] != s_all.shape[0]:
                raise ValueError(f"actions has {a_all.shape[0]} rows but states has {s_all.shape[0]}")
        generator = torch.Generator().manual_seed(seed)
        vec = None if vector is None else vector.to(device=self.device, dtype=torch.float64)
        out = []
        for start in range(0, s_all.shape[0], chunk):
            s = self._tensor(s_all[start:start + chunk])
            prepared = self._prepare(s)
            if a_all is None:
                rows, thin, _ = self._policy_rows(policy, s, prepared, 1, generator)
            else:
                a = self._tensor(a_all[start:start + chunk]) / self.h_a
                rows, thin = self.kernel_rows.rows(prepared, a[:, None, :], 1)
            if vec is None:
                out.append(thin.to(torch.float64))
                continue
            values = rows.to(torch.float64).matvec(vec)
            if absorbing and self.unsupported == "absorb":
                values = values + self.absorbing_value * thin.to(torch.float64)
            out.append(values)
        return torch.cat(out).cpu().numpy()

    def value(self, policy: nn.Module, states: np.ndarray | torch.Tensor, q: torch.Tensor,
              seed: int = 0) -> np.ndarray:
        """``V(s) = eps_pi(s) . q`` at query states of shape (m, d_s) (plus the absorbed mass times
        its value in the support-aware model)."""
        return self._query(policy, states, q, seed=seed, absorbing=True)

    def q_value(self, states: np.ndarray | torch.Tensor, actions: np.ndarray | torch.Tensor,
                q: torch.Tensor) -> np.ndarray:
        """``Q(s, a) = eps(s, a) . q`` at query pairs (with the absorbed mass, as :meth:`value`)."""
        return self._query(None, states, q, actions=actions, absorbing=True)

    def visitation(self, policy: nn.Module, states: np.ndarray | torch.Tensor, mu: torch.Tensor,
                   seed: int = 0) -> np.ndarray:
        """Unnormalised discounted state-visitation estimate ``eps_pi(s) . mu``."""
        return self._query(policy, states, mu, seed=seed)
