"""The nonparametric Bellman model of NOPG (paper Section 3).

With Gaussian kernels of diagonal bandwidths ``h_s``, ``h_a`` the responsibilities of the data
points for a state-action pair are a softmax of log-weights,

    l_j(s, a) = -1/2 ||(s - s_j) / h_s||^2 - 1/2 ||(a - a_j) / h_a||^2,
    eps_j(s, a) = softmax_j l_j(s, a),

computed in log space so that queries far from the data never divide 0 by 0. For a policy,
``eps_pi(s) = eps(s, pi(s))`` (deterministic) or the Monte-Carlo mean over reparameterised actions
``a_m = mu(s) + sigma(s) xi_m`` (stochastic). Then

    P[i, :] = gamma_i * mean_m eps_pi(x_im),   x_im = s'_i (kernel mean) or s'_i + h_s' xi_im,
    eps0    = mean_m eps_pi(z_m),              z_m initial states,
    q  = (I - P)^{-1} r,   mu = (I - P)^{-T} eps0,   J_hat = eps0 . q,
    V(s) = eps_pi(s) . q,  Q(s, a) = eps(s, a) . q,  visitation(s) = eps_pi(s) . mu.

The gradient of ``J_hat`` (paper Eq. 6) is the autograd gradient of the surrogate
``eps0(theta) . stop(q) + stop(mu)^T P(theta) stop(q)`` (:meth:`BellmanSolution.surrogate`).

Support. The softmax hides how far the data are: far from every sample it still sums to one.
The unnormalised kernel mass ``c(s, a) = sum_j exp(l_j(s, a))`` does not, and gives the
*thinness* ``1 - w = exp(-c / c0)``, ``c0 = exp(-support_radius^2 / 2)``, at every query. Its
visitation-weighted mean is the ``support_gap`` reported with ``J_hat``. With
``unsupported="absorb"`` every row of ``P`` and ``eps0`` is scaled by ``w`` and the missing mass
enters an absorbing state of value ``v_abs``: ``q = (I - P_w)^{-1} (r + v_abs gamma (1 - w))``,
``J_hat = eps0_w . q + v_abs mean(1 - w_0)``, still differentiable end to end.

Sparsification (``top_k=k``) keeps the ``k`` largest responsibilities of every row and
renormalises them. How those ``k`` are found is the ``neighbors`` option:

- ``"dense"``: build the full ``(m, n)`` log-weights and take ``topk`` (the paper's method; also
  used without ``top_k``). ``O(n^2)`` time and memory per update: a reference for small ``n``.
- ``"candidates"`` (default with ``top_k`` below 50 000 samples): the ``k`` largest log-weights
  are the ``k`` nearest neighbours of ``(s/h_s, a/h_a)`` among the scaled data pairs
  ``(s_j/h_s, a_j/h_a)``. For the
  rows of ``P`` and ``eps0`` (fixed query states) the ``K'`` nearest neighbours of the pair at a
  *centre* action are kept as candidates, with the distance ``R`` of the nearest point left out.
  Every update re-ranks only the candidates at the policy's new action ``a`` (a gather,
  ``O(n K')``). By the triangle inequality every other point lies at least ``R - |a - centre|``
  away, so a row whose ``k``-th candidate is nearer than that is *certified* exact. Rows that are
  not are re-centred at their current action by a k-NN query (a KD-tree on the CPU, tiled top-k
  on a GPU), so the result always equals the dense top-k (up to ties); the policy moves slowly,
  so few rows need it per update, and their number is reported. With ``n_candidates`` above
  ``4 k`` the candidates are found with the action axes shrunk by ``lambda`` (reaching further
  along the actions, where the policy moves; :meth:`NonparametricBellman._certified` gives the
  bound). ``refine=False`` skips the certificate (candidates from the first update only): an
  approximation.
- ``"knn"`` (default with ``top_k`` from 50 000 samples, where Silverman's bandwidths are so
  narrow that the policy's moves leave most certificates): an exact k-NN query in scaled
  (state, action) space for every row and update, since
  the ``k`` largest log-weights are the ``k`` nearest neighbours of ``(s/h_s, pi(s)/h_a)``.

On the sparse paths the kept log-weights are recomputed from the coordinates of the kept
points, so gradients flow through them (the selection itself is piecewise constant), and no
``(n, n)`` array is ever allocated.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from .bandwidth import Bandwidths
from .data import TransitionDataset
from .defaults import SPARSE_MIN_N, check_dense_max_n, check_top_k, resolve_neighbors, resolve_settings
from .neighbors import NeighborIndex
from .policies import is_stochastic
from .rows import DenseRows, Rows, SparseRows
from .solvers import (
    AUTO_ERROR,
    SolveInfo,
    bicgstab,
    check_solver_tol,
    ilu_preconditioner,
    solve_bellman_auto,
    solve_dense,
)

logger = logging.getLogger(__name__)

_SOLVERS = ("auto", "dense", "bicgstab")
PRECONDITIONERS = ("auto", "ilu", "none")
_ILU_REFRESH_ITERS = 15        # rebuild the ILU preconditioner when a solve needs more iterations
_ILU_BUILD_ITERATIONS = 60     # solver_tol="auto": an ILU build costs about this many iterations
NEIGHBOR_MODES = ("auto", "dense", "candidates", "knn")
UNSUPPORTED = ("extrapolate", "absorb")
_DENSE_LIMIT = 20_000          # top_k=None beyond this many samples is refused (n x n memory)
_BLOCK = 1 << 22               # elements per block of candidate scores (bounds peak memory)
_SCALE_MARGIN = 4.0            # candidate_action_scale rule: lambda^d_a = margin * k / K'


def candidate_action_scale(top_k: int, n_candidates: int, action_dim: int) -> float:
    """Default ``lambda`` of the candidate index: ``min(1, 4 k / K') ** (1 / d_a)``.

    Shrinking the action axes by ``lambda`` puts about ``lambda^d_a`` times fewer points in a
    ball, so ``K'`` candidates found that way span about as much of the state space as ``4 k``
    would unshrunk (a margin over the ``k`` kept), while they reach ``1 / lambda`` times further
    along the actions, where the policy moves.
    """
    return min(1.0, _SCALE_MARGIN * top_k / max(n_candidates, 1)) ** (1.0 / max(action_dim, 1))


def default_candidates(top_k: int) -> int:
    """Default candidate count ``K'`` for ``k`` kept entries per row: ``max(4 k, 32)``."""
    return max(4 * top_k, 32)


@dataclass
class _Queries:
    """Query states prepared for one neighbour mode.

    ``scaled`` are the states divided by ``h_s``; dense mode adds ``fixed``, the (m, n)
    policy-independent log-weights. Candidate mode with ``cached=True`` keeps, per query, the
    ``K'`` nearest data points ``cand`` (m, K') of the scaled pair ``(s, centre)`` in (state,
    action) space with the action axes shrunk by ``scale`` (m,), their squared state distances
    ``cand_sq_state`` (m, K') and ``radius`` (m,), the distance in that space from the centre to
    the nearest point left out (``inf`` if none is); see :meth:`NonparametricBellman._certified`.
    """

    scaled: torch.Tensor
    fixed: torch.Tensor | None = None
    cached: bool = False
    cand: torch.Tensor | None = None
    cand_sq_state: torch.Tensor | None = None
    centre: torch.Tensor | None = None
    radius: torch.Tensor | None = None
    scale: torch.Tensor | None = None


def pessimistic_value(dataset: TransitionDataset, gamma: float) -> float:
    """``min(r) / (1 - gamma)``, capped at 0 when the data hold a terminal transition."""
    value = float(dataset.rewards.min()) / (1.0 - gamma)
    return min(value, 0.0) if bool(np.any(dataset.terminals)) else value


def _check_positive_int(name: str, value: int | None, allow_none: bool = True) -> None:
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"The '{name}' parameter must be a positive int. Got {value!r} instead.")


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
        How the top-k entries are found (module docstring); ``auto`` is ``dense`` without
        ``top_k``, ``candidates`` with it below 50 000 samples and ``knn`` from there on
        (:func:`nopg.defaults.resolve_neighbors`).
    n_candidates : int, optional
        ``K'``, the candidate neighbours kept per query (default :func:`default_candidates`).
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
        that the data support (:meth:`_support_weights`); the rest goes to an absorbing state
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
        if solver not in _SOLVERS:
            raise ValueError(f"The 'solver' parameter must be one of {_SOLVERS}. Got {solver!r} instead.")
        if not check_solver_tol(solver_tol):
            raise ValueError(f"The 'solver_tol' parameter must be a positive float or 'auto'. "
                             f"Got {solver_tol!r} instead.")
        _check_positive_int("n_candidates", n_candidates)
        if preconditioner not in PRECONDITIONERS:
            raise ValueError(f"The 'preconditioner' parameter must be one of {PRECONDITIONERS}. "
                             f"Got {preconditioner!r} instead.")
        if unsupported not in UNSUPPORTED:
            raise ValueError(f"The 'unsupported' parameter must be one of {UNSUPPORTED}. "
                             f"Got {unsupported!r} instead.")
        if isinstance(support_radius, bool) or not (
                isinstance(support_radius, (int, float)) and 0 < support_radius < float("inf")):
            raise ValueError(f"The 'support_radius' parameter must be a positive float. "
                             f"Got {support_radius!r} instead.")
        if absorbing_value is not None and (isinstance(absorbing_value, bool) or not np.isfinite(
                float(absorbing_value))):
            raise ValueError(f"The 'absorbing_value' parameter must be a finite float or None. "
                             f"Got {absorbing_value!r} instead.")
        if neighbors not in NEIGHBOR_MODES:
            raise ValueError(f"The 'neighbors' parameter must be one of {NEIGHBOR_MODES}. "
                             f"Got {neighbors!r} instead.")
        n = dataset.n
        settings = resolve_settings(n, top_k, solver, dense_max_n, sparse_min_n, neighbors)
        top_k = settings.top_k
        if top_k is not None and top_k > n:
            raise ValueError(f"top_k must be at most the number of samples ({n}). Got {top_k} instead.")
        if n_candidates is not None and top_k is not None and n_candidates < top_k:
            raise ValueError(f"n_candidates ({n_candidates}) must be at least top_k ({top_k})")
        neighbors = resolve_neighbors(neighbors, top_k, n)
        if top_k is None and neighbors != "dense":
            raise ValueError(f"neighbors={neighbors!r} needs top_k (the entries kept per row); "
                             "without top_k every entry is kept and the matrix is dense")
        if top_k is None and n > _DENSE_LIMIT:
            raise ValueError(
                f"top_k=None keeps all {n} x {n} entries of P ({8 * n * n / 2**30:.0f} GiB in "
                f"float64); set top_k (e.g. 10) for data sets above {_DENSE_LIMIT} samples")
        bw = bandwidths.broadcast(dataset.state_dim, dataset.action_dim)

        self.dataset = dataset
        self.bandwidths = bw
        self.gamma = float(gamma)
        self.top_k = top_k
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
        self.n_candidates = min(n_candidates or default_candidates(top_k or 1), n)
        self.refine = bool(refine)
        self.neighbor_backend = neighbor_backend
        if preconditioner == "ilu" and self.device.type != "cpu":
            raise ValueError("preconditioner='ilu' runs on the CPU only; use 'auto' or 'none' on "
                             f"{self.device}")
        self.preconditioner = ("ilu" if self.device.type == "cpu" else "none") \
            if preconditioner == "auto" else preconditioner
        self._ilu: tuple | None = None
        self._ilu_source: SparseRows | None = None       # the P the ILU was built from
        self._last_iterations = 0
        self.preconditioner_builds_ = 0
        # solver_tol="auto" rebuilds the ILU when the iterations above the count of the first solve
        # after the build (_ilu_base) add up to the cost of a build; a float keeps the old rule.
        self._ilu_refresh = "cost" if self.solver_tol == "auto" else "iterations"
        self._ilu_excess = 0
        self._ilu_base: int | None = None
        self._ilu_options: dict[str, float] = {}
        self._joint_index: NeighborIndex | None = None
        self._candidate_index: NeighborIndex | None = None
        self._candidate_index_scale = 1.0
        # lambda in (0, 1] of the candidate index (exact for any; the speed depends on it)
        self.candidate_action_scale = candidate_action_scale(top_k or 1, self.n_candidates,
                                                             dataset.action_dim)
        self.unsupported = unsupported
        self.support_radius = float(support_radius)
        self.absorbing_value = (pessimistic_value(dataset, self.gamma) if absorbing_value is None
                                else float(absorbing_value))
        self.refined_rows_ = 0                            # refined rows since the last evaluate()

        t = self._tensor
        self.h_s = t(bw.state)
        self.h_a = t(bw.action)
        self.h_next = t(bw.next_state_or_state)
        self.states = t(dataset.states)
        self.next_states = t(dataset.next_states)
        self.states_scaled = self.states / self.h_s                              # (n, d_s)
        self.actions_scaled = t(dataset.actions) / self.h_a                      # (n, d_a)
        self.rewards = torch.tensor(dataset.rewards, dtype=torch.float64, device=self.device)
        self.discounts = t(dataset.discounts(self.gamma))                        # (n,)
        self._action_sq = (self.actions_scaled ** 2).sum(-1)                     # (n,)
        self._next_queries: _Queries | None = None      # cached preparation of P's rows
        self._init_cache: tuple[np.ndarray, _Queries] | None = None

    # ------------------------------------------------------------------ helpers
    def _tensor(self, x: np.ndarray) -> torch.Tensor:
        return torch.tensor(np.asarray(x), dtype=self.dtype, device=self.device)

    @property
    def n(self) -> int:
        return self.dataset.n

    def _fixed_logits(self, query_states: torch.Tensor) -> torch.Tensor:
        """The policy-independent part of the log-weights, shape (m, n).

        ``l_j(s, a) = -1/2 ||(s - s_j)/h_s||^2 - 1/2 ||a/h_a||^2 + (a/h_a).(a_j/h_a)
        - 1/2 ||a_j/h_a||^2``. The term ``-1/2 ||a/h_a||^2`` is the same for every ``j`` and
        cancels in the softmax and the top-k selection, so it is dropped; what is left is this
        fixed part plus the bilinear term ``(a/h_a).(a_j/h_a)``, a matrix product.
        """
        diff = query_states[:, None, :] / self.h_s - self.states_scaled[None, :, :]
        return -0.5 * ((diff * diff).sum(-1) + self._action_sq)

    def _noise(self, shape: tuple[int, ...], generator: torch.Generator | None) -> torch.Tensor:
        """Standard normal noise drawn on the CPU (so CPU and CUDA runs see the same numbers)."""
        return torch.randn(shape, generator=generator, dtype=torch.float64).to(
            device=self.device, dtype=self.dtype)

    def _actions(self, policy: nn.Module, states: torch.Tensor, generator: torch.Generator | None
                 ) -> torch.Tensor:
        """Policy actions of shape (m, N_pi, d_a) (``N_pi = 1`` when deterministic)."""
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

    def _rows(self, logits: torch.Tensor, shift: torch.Tensor) -> tuple[Rows, torch.Tensor]:
        """Responsibility rows from log-weights (m, G, n), averaged over the G samples per row.

        ``logits + shift[..., None]`` are the full log-weights ``l_j`` (``shift`` (m, G) is the
        term dropped by :meth:`_fixed_logits`); returns the rows and their thinness (m,).
        """
        m, g, n = logits.shape
        if self.top_k is None:
            weights = torch.softmax(logits, dim=-1)
            lse = torch.logsumexp(logits, dim=-1) + shift
            weights, thin = self._support_weights(weights, lse)
            return DenseRows(weights.mean(1)), thin.mean(1)
        vals, idx = torch.topk(logits, self.top_k, dim=-1)                     # (m, G, k)
        weights, thin = self._support_weights(torch.softmax(vals, dim=-1),
                                              torch.logsumexp(vals, dim=-1) + shift)
        return SparseRows(idx.reshape(m, -1), (weights / g).reshape(m, -1), n), thin.mean(1)

    def _support_weights(self, weights: torch.Tensor, lse: torch.Tensor
                         ) -> tuple[torch.Tensor, torch.Tensor]:
        """Thinness ``1 - w`` from the log kernel mass ``lse`` (..., ) and, for the support-aware
        model, the responsibilities (..., k) scaled by ``w`` (the rest goes to the absorbing state).

        ``1 - w = exp(-c / c0)`` with ``c = sum_j exp(l_j)`` the unnormalised kernel mass and
        ``c0 = exp(-support_radius^2 / 2)``: one data point at the query gives ``1 - w < 1e-3``
        (for the default radius 2), one at ``support_radius`` bandwidths gives ``1/e``.
        """
        thin = torch.exp(-torch.exp(lse + 0.5 * self.support_radius ** 2))
        if self.unsupported == "absorb":
            return weights * (1.0 - thin)[..., None], thin
        return weights, thin.detach()

    # ------------------------------------------------------------------ sparse path
    def joint_index(self) -> NeighborIndex:
        """k-NN index over scaled (state, action) pairs (built on first use)."""
        if self._joint_index is None:
            points = torch.cat([self.states_scaled, self.actions_scaled], dim=1)
            self._joint_index = NeighborIndex(points, self.neighbor_backend)
        return self._joint_index

    def candidate_index(self) -> NeighborIndex:
        """k-NN index over ``(s_j/h_s, lambda a_j/h_a)`` (``lambda = candidate_action_scale``), in
        which candidate sets are found: shrinking the action axes makes a candidate set reach
        ``1/lambda`` times further along the actions than across the states, so it stays
        certified while the policy's action moves (see :meth:`_certified`)."""
        lam = float(self.candidate_action_scale)
        if not 0.0 < lam <= 1.0:
            raise ValueError(f"candidate_action_scale must be in (0, 1]. Got {lam!r} instead.")
        if lam == 1.0:
            return self.joint_index()
        if self._candidate_index is None or self._candidate_index_scale != lam:
            points = torch.cat([self.states_scaled, lam * self.actions_scaled], dim=1)
            self._candidate_index = NeighborIndex(points, self.neighbor_backend)
            self._candidate_index_scale = lam
        return self._candidate_index

    def _prepare(self, query_states: torch.Tensor, cache: bool = False) -> _Queries:
        """Per-query data that does not depend on the policy.

        ``cache=True`` (P's rows, eps0) keeps candidate sets across updates in candidate mode;
        one-off queries are answered by exact k-NN.
        """
        scaled = query_states / self.h_s
        if self.neighbors == "dense":
            return _Queries(scaled, fixed=self._fixed_logits(query_states))
        return _Queries(scaled, cached=cache and self.neighbors == "candidates")

    def _exact_knn(self, scaled: torch.Tensor, actions: torch.Tensor, k: int
                   ) -> tuple[torch.Tensor, torch.Tensor]:
        """Exact k-NN of the scaled pairs ``(scaled[i], actions[i])``: (sqdist, index)."""
        return self.joint_index().query(torch.cat([scaled, actions], dim=-1), k)

    def _recentre(self, queries: _Queries, rows: torch.Tensor, centre: torch.Tensor) -> None:
        """New candidate sets for ``rows``: the ``K'`` neighbours of ``(s, lambda centre)`` in the
        space of :meth:`candidate_index`, and ``radius``, the distance there to the next one.

        A row whose shrunk set cannot certify its own centre (its ``k``-th candidate lies beyond
        ``radius``) takes the ``K'`` joint neighbours instead (``lambda = 1``), which always can.
        """
        n, kc, m = self.n, self.n_candidates, queries.scaled.shape[0]
        if queries.cand is None:
            queries.cand = torch.zeros(m, kc, dtype=torch.long, device=self.device)
            queries.cand_sq_state = torch.zeros(m, kc, dtype=self.dtype, device=self.device)
            queries.centre = torch.zeros(m, centre.shape[1], dtype=self.dtype, device=self.device)
            queries.radius = torch.zeros(m, dtype=self.dtype, device=self.device)
            queries.scale = torch.ones(m, dtype=self.dtype, device=self.device)
        assert queries.cand_sq_state is not None and queries.centre is not None
        assert queries.radius is not None and queries.scale is not None
        scaled = queries.scaled[rows]
        lam = torch.ones(rows.numel(), dtype=self.dtype, device=self.device)
        if kc >= n:  # every point is a candidate: nothing is left out
            idx = torch.arange(n, device=self.device).expand(rows.numel(), n)
            radius = torch.full((rows.numel(),), torch.inf, dtype=self.dtype, device=self.device)
            sq_state = self._sq_state(scaled, idx)
        else:
            lam.fill_(float(self.candidate_action_scale))
            d2, idx = self.candidate_index().query(torch.cat([scaled, lam[:, None] * centre], dim=-1),
                                                   kc + 1)
            radius, idx = d2[:, kc].sqrt(), idx[:, :kc]
            sq_state = self._sq_state(scaled, idx)
            if float(self.candidate_action_scale) < 1.0:
                da = centre[:, None, :] - self.actions_scaled[idx]
                kth = torch.kthvalue(sq_state + (da * da).sum(-1), self.top_k, dim=1).values
                bad = torch.nonzero(kth > radius * radius).reshape(-1)
                if bad.numel():  # rare: fall back to the joint neighbours of these rows
                    d2b, idxb = self._exact_knn(scaled[bad], centre[bad], kc + 1)
                    idx[bad], radius[bad], lam[bad] = idxb[:, :kc], d2b[:, kc].sqrt(), 1.0
                    sq_state[bad] = self._sq_state(scaled[bad], idx[bad])
        queries.cand[rows] = idx
        queries.cand_sq_state[rows] = sq_state
        queries.centre[rows] = centre
        queries.radius[rows] = radius
        queries.scale[rows] = lam

    def _sq_state(self, scaled: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        """Squared scaled state distances (r, K) from ``scaled`` (r, d_s) to the points ``idx``."""
        diff = scaled[:, None, :] - self.states_scaled[idx]
        return (diff * diff).sum(-1)

    def _rerank(self, queries: _Queries, rows: torch.Tensor, actions: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor]:
        """Top-k of the candidates of ``rows`` at ``actions`` (r, G, d_a): (index, k-th sqdist)."""
        assert queries.cand is not None and queries.cand_sq_state is not None
        k = self.top_k
        assert k is not None
        G, d_a = actions.shape[1:]
        kc = queries.cand.shape[1]
        block = max(1, _BLOCK // (G * kc * d_a))
        idx_parts, kth_parts = [], []
        for s0 in range(0, rows.numel(), block):
            r = rows[s0:s0 + block]
            c = queries.cand[r]                                                 # (b, K')
            da = actions[s0:s0 + block, :, None, :] - self.actions_scaled[c][:, None, :, :]
            d2 = queries.cand_sq_state[r][:, None, :] + (da * da).sum(-1)         # (b, G, K')
            vals, pos = torch.topk(d2, k, dim=-1, largest=False)
            idx_parts.append(c[:, None, :].expand(-1, G, -1).gather(2, pos))
            kth_parts.append(vals[..., -1])
        return torch.cat(idx_parts), torch.cat(kth_parts)

    def _certified(self, queries: _Queries, rows: torch.Tensor, actions: torch.Tensor,
                   kth_sq: torch.Tensor) -> torch.Tensor:
        """(r, G) mask: the candidates provably hold the exact top-k.

        Every data point ``j`` outside a candidate set has ``|ds_j|^2 + lambda^2 u_j^2 >= R^2``
        (``ds_j`` its scaled state offset, ``u_j = |a_j - centre|``, ``R = radius``). At an action
        ``a`` with ``t = |a - centre|`` its distance satisfies ``D_j^2 >= |ds_j|^2 + (u_j - t)_+^2
        >= (R^2 - lambda^2 u_j^2)_+ + (u_j - t)_+^2``, whose minimum over ``u_j >= 0`` is

            R^2 - lambda^2 t^2 / (1 - lambda^2)   for lambda t <= R (1 - lambda^2),
            (R / lambda - t)_+^2                  otherwise

        (for ``lambda = 1``: ``(R - t)_+^2``, the triangle inequality). The row is exact when its
        ``k``-th candidate lies no further than that bound.
        """
        assert queries.centre is not None and queries.radius is not None
        assert queries.scale is not None
        t = torch.linalg.vector_norm(actions - queries.centre[rows][:, None, :], dim=-1)
        radius, lam = queries.radius[rows][:, None], queries.scale[rows][:, None]
        far = (radius / lam - t).clamp_min(0.0) ** 2
        shrunk = lam < 1.0
        if not bool(shrunk.any()):
            return kth_sq <= far
        one_minus = torch.where(shrunk, 1.0 - lam * lam, torch.ones_like(lam))
        near = radius * radius - (lam * lam / one_minus) * t * t
        bound = torch.where(shrunk & (lam * t <= radius * one_minus), near, far)
        return kth_sq <= bound

    @torch.no_grad()
    def _select(self, queries: _Queries, actions: torch.Tensor) -> torch.Tensor:
        """Indices (M, G, k) of the ``k`` largest log-weights for query states and actions.

        ``actions`` (M, G, d_a) are scaled by ``h_a``. With cached candidates, rows the
        certificate cannot vouch for are re-centred at their current action (counted in
        ``refined_rows_``); pairs still uncertified get an exact k-NN query.
        """
        M, G, _ = actions.shape
        k = self.top_k
        assert k is not None
        if not queries.cached:
            points = queries.scaled[:, None, :].expand(M, G, -1).reshape(M * G, -1)
            joint = torch.cat([points, actions.reshape(M * G, -1)], dim=-1)
            return self.joint_index().query_index(joint, k).reshape(M, G, k)
        centre = actions.mean(1)                                               # (M, d_a)
        all_rows = torch.arange(M, device=self.device)
        if queries.cand is None:
            self._recentre(queries, all_rows, centre)
        idx, kth = self._rerank(queries, all_rows, actions)
        if not self.refine:
            return idx
        bad = ~self._certified(queries, all_rows, actions, kth).all(1)
        rows = torch.nonzero(bad).reshape(-1)
        if rows.numel():
            self.refined_rows_ += int(rows.numel())
            self._recentre(queries, rows, centre[rows])
            sub_idx, sub_kth = self._rerank(queries, rows, actions[rows])
            ok = self._certified(queries, rows, actions[rows], sub_kth)
            idx[rows] = sub_idx
            r_bad, g_bad = torch.nonzero(~ok, as_tuple=True)                  # stochastic outliers
            if r_bad.numel():
                r = rows[r_bad]
                _, exact = self._exact_knn(queries.scaled[r], actions[r, g_bad], k)
                idx[r, g_bad] = exact
        return idx

    def _sparse_rows(self, queries: _Queries, actions: torch.Tensor, group: int
                     ) -> tuple[SparseRows, torch.Tensor]:
        """Rows over the selected entries, log-weights recomputed so gradients reach ``actions``."""
        M, G, _ = actions.shape
        idx = self._select(queries, actions.detach())                          # (M, G, k)
        ds = queries.scaled[:, None, None, :] - self.states_scaled[idx]         # (M, G, k, d_s)
        da = actions[:, :, None, :] - self.actions_scaled[idx]                  # (M, G, k, d_a)
        logits = -0.5 * ((ds * ds).sum(-1) + (da * da).sum(-1))
        weights, thin = self._support_weights(torch.softmax(logits, dim=-1),
                                              torch.logsumexp(logits, dim=-1))
        m = M // group
        return (SparseRows(idx.reshape(m, -1), (weights / (G * group)).reshape(m, -1), self.n),
                thin.reshape(m, -1).mean(1))

    # ------------------------------------------------------------------ rows of eps_pi
    def _policy_rows(self, policy: nn.Module, states: torch.Tensor, queries: _Queries,
                     group: int, generator: torch.Generator | None) -> tuple[Rows, torch.Tensor]:
        """``eps_pi`` at ``m * group`` query states, averaged over consecutive groups of ``group``,
        and the thinness of every averaged row (m,).

        ``queries`` holds the query states as prepared by :meth:`_prepare`.
        """
        actions = self._actions(policy, states, generator) / self.h_a          # (M, N_pi, d_a)
        return self._action_rows(queries, actions, group)

    def _action_rows(self, queries: _Queries, actions: torch.Tensor, group: int
                     ) -> tuple[Rows, torch.Tensor]:
        """Responsibility rows and their thinness at query states and scaled actions (M, G, d_a)."""
        if self.neighbors != "dense":
            return self._sparse_rows(queries, actions, group)
        assert queries.fixed is not None
        logits = queries.fixed[:, None, :] + actions @ self.actions_scaled.T   # (M, G, n)
        shift = -0.5 * (actions * actions).sum(-1)                               # (M, G)
        M, g, n = logits.shape
        return self._rows(logits.reshape(M // group, group * g, n),
                          shift.reshape(M // group, group * g))

    def _policy_input(self, policy: nn.Module, states: torch.Tensor) -> torch.Tensor:
        param = next(iter(policy.parameters()), None)
        return states.to(param.dtype) if param is not None else states

    def policy_actions(self, policy: nn.Module, states: torch.Tensor,
                       generator: torch.Generator | None = None) -> torch.Tensor:
        """The actions the model queries at ``states`` (m, d_s): shape (m, N_pi, d_a), with
        ``N_pi = 1`` for a deterministic policy and Monte-Carlo samples for a stochastic one."""
        return self._actions(policy, self._policy_input(policy, states), generator)

    # ------------------------------------------------------------------ model pieces
    def responsibilities(self, policy: nn.Module, states: np.ndarray | torch.Tensor,
                         generator: torch.Generator | None = None) -> Rows:
        """``eps_pi(s)`` for query states of shape (m, d_s): rows of an (m, n) matrix (scaled by
        the support weights ``w`` in the support-aware model)."""
        s = self._tensor(as_states(states, self.dataset.state_dim, "states"))
        return self._policy_rows(policy, self._policy_input(policy, s), self._prepare(s), 1,
                                 generator)[0]

    def thinness(self, policy: nn.Module | None, states: np.ndarray | torch.Tensor,
                 actions: np.ndarray | torch.Tensor | None = None, seed: int = 0,
                 chunk: int = 4096) -> np.ndarray:
        """Thinness ``1 - w`` of the data at ``(s, pi(s))`` (or at ``(s, a)`` for given
        ``actions``) for states (m, d_s), in [0, 1], evaluated ``chunk`` queries at a time.

        0 where a data pair lies at the query (within ``support_radius`` bandwidths), close to
        1 where the kernel model extrapolates (see :meth:`_support_weights`).
        """
        return self._query(policy, states, None, actions=actions, chunk=chunk, seed=seed)

    def _transition(self, policy: nn.Module, generator: torch.Generator | None
                    ) -> tuple[Rows, torch.Tensor]:
        """``P`` (rows scaled by ``gamma_i``) and the discounted lost mass ``gamma_i (1 - w_i)``."""
        if self.n_mc_next is None:
            if self._next_queries is None:
                self._next_queries = self._prepare(self.next_states, cache=True)
            states, queries, group = self.next_states, self._next_queries, 1
        else:
            xi = self._noise((self.n, self.n_mc_next, self.dataset.state_dim), generator)
            states = (self.next_states[:, None, :] + self.h_next * xi).reshape(-1, self.dataset.state_dim)
            queries, group = self._prepare(states), self.n_mc_next
        rows, thin = self._policy_rows(policy, self._policy_input(policy, states), queries, group,
                                       generator)
        return rows.scale_rows(self.discounts), thin * self.discounts

    def transition_matrix(self, policy: nn.Module, generator: torch.Generator | None = None) -> Rows:
        """``P`` (rows scaled by ``gamma_i``), attached to the policy's graph."""
        return self._transition(policy, generator)[0]

    def _initial(self, policy: nn.Module, initial_states: np.ndarray | torch.Tensor,
                 generator: torch.Generator | None) -> tuple[torch.Tensor, torch.Tensor]:
        """``eps0`` (n,) and the mean thinness of the initial queries (a scalar tensor)."""
        z = as_states(initial_states, self.dataset.state_dim, "initial_states")
        zt = self._tensor(z)
        if self._init_cache is None or not np.array_equal(self._init_cache[0], z):
            self._init_cache = (z, self._prepare(zt, cache=True))
        rows, thin = self._policy_rows(policy, self._policy_input(policy, zt), self._init_cache[1],
                                       1, generator)
        return rows.column_mean(), thin.mean()

    def initial_vector(self, policy: nn.Module, initial_states: np.ndarray | torch.Tensor,
                       generator: torch.Generator | None = None) -> torch.Tensor:
        """``eps0 = mean_m eps_pi(z_m)`` of shape (n,), attached to the policy's graph."""
        return self._initial(policy, initial_states, generator)[0]

    # ------------------------------------------------------------------ solves
    def _use_dense(self) -> bool:
        return self.solver == "dense" or (self.solver == "auto" and self.n <= self.dense_max_n)

    def solve(self, P: Rows, eps0: torch.Tensor, warm_start: tuple[torch.Tensor, torch.Tensor] | None
              = None, rewards: torch.Tensor | None = None
              ) -> tuple[torch.Tensor, torch.Tensor, SolveInfo, SolveInfo]:
        """Solve ``(I - P) q = r`` and ``(I - P)^T mu = eps0`` in float64 (detached).

        ``rewards`` replaces the data's rewards (the support-aware model adds the absorbed mass).
        """
        P64 = P.detach().to(torch.float64)
        e64 = eps0.detach().to(torch.float64)
        r64 = self.rewards if rewards is None else rewards.detach().to(torch.float64)
        if self._use_dense():
            q, mu, info = solve_dense(P64.to_dense(), r64, e64)
            return q, mu, info, info
        q0, mu0 = warm_start if warm_start is not None else (None, None)
        matvec, rmatvec = P64.operators()
        pre_q = pre_mu = None
        if self.preconditioner == "ilu" and isinstance(P64, SparseRows):
            if self._ilu is None or self._ilu_stale():
                self._build_ilu(P64)
            if self._ilu is not None:
                pre_q, pre_mu = self._ilu
        if self.solver_tol == "auto":
            extra = self.absorbing_value if self.unsupported == "absorb" else None
            q, mu, info_q, info_mu = solve_bellman_auto(
                matvec, rmatvec, r64, e64, self.gamma, warm_start, error=AUTO_ERROR,
                max_iter=self.solver_max_iter, precond=pre_q, precond_transpose=pre_mu,
                extra_value=extra)
            logger.debug("solve: %d/%d iterations, error bound q %.1e mu %.1e (solver_tol='auto')",
                         info_q.iterations, info_mu.iterations, info_q.error_bound, info_mu.error_bound)
        else:
            q, info_q = bicgstab(lambda v: v - matvec(v), r64, q0,
                                 tol=self.solver_tol, max_iter=self.solver_max_iter, precond=pre_q)
            mu, info_mu = bicgstab(lambda v: v - rmatvec(v), e64, mu0,
                                   tol=self.solver_tol, max_iter=self.solver_max_iter, precond=pre_mu)
        self._last_iterations = max(info_q.iterations, info_mu.iterations)
        if self._ilu is not None:
            its = info_q.iterations + info_mu.iterations
            if self._ilu_base is None:
                self._ilu_base = its
            self._ilu_excess += max(its - self._ilu_base, 0)
        return q, mu, info_q, info_mu

    def _ilu_stale(self) -> bool:
        """Whether to rebuild the ILU before this solve. ``"iterations"`` (explicit ``solver_tol``):
        the last solve needed more than 15 iterations. ``"cost"`` (``"auto"``): the iterations
        beyond those of the first solve after the build add up to the cost of a build, which
        keeps the total within twice that of the best rebuild schedule in hindsight."""
        if self._ilu_refresh == "cost":
            return self._ilu_excess >= _ILU_BUILD_ITERATIONS
        if self._ilu_refresh == "always":
            return True
        if self._ilu_refresh == "once":
            return False
        return self._last_iterations > _ILU_REFRESH_ITERS

    def _build_ilu(self, P: SparseRows) -> None:
        self._ilu_source = P
        self._ilu = ilu_preconditioner(P.to_scipy(), **self._ilu_options)
        self._ilu_excess, self._ilu_base = 0, None
        self.preconditioner_builds_ += 1

    def solver_state(self) -> dict[str, torch.Tensor]:
        """What the solver carries across updates besides warm starts: the matrix its ILU
        preconditioner was built from and the last iteration count (for exact checkpoints)."""
        if self._ilu_source is None:
            return {}
        return {"ilu_index": self._ilu_source.index.cpu(), "ilu_values": self._ilu_source.values.cpu(),
                "last_iterations": torch.tensor(self._last_iterations),
                "ilu_excess": torch.tensor(self._ilu_excess),
                "ilu_base": torch.tensor(-1 if self._ilu_base is None else self._ilu_base)}

    def load_solver_state(self, state: dict[str, torch.Tensor]) -> None:
        """Restore :meth:`solver_state` (ignored when it belongs to another data set size)."""
        if "ilu_index" in state and state["ilu_index"].shape[0] == self.n and self.preconditioner == "ilu":
            self._build_ilu(SparseRows(state["ilu_index"], state["ilu_values"].to(torch.float64), self.n))
            self._last_iterations = int(state["last_iterations"])
            if "ilu_excess" in state:
                self._ilu_excess = int(state["ilu_excess"])
                base = int(state["ilu_base"])
                self._ilu_base = None if base < 0 else base

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
        eps0, thin0 = self._initial(policy, initial_states, generator)
        P, lost = self._transition(policy, generator)
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
                               absorbing_value=v_abs)

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
                rows, thin = self._policy_rows(policy, self._policy_input(policy, s), prepared, 1,
                                               generator)
            else:
                a = self._tensor(a_all[start:start + chunk]) / self.h_a
                rows, thin = self._action_rows(prepared, a[:, None, :], 1)
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
