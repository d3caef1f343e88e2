"""The nonparametric Bellman model of NOPG (paper Section 3, DESIGN §1).

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

This module computes ``P`` densely (``top_k=None``) or keeps the ``k`` largest responsibilities
of every row and renormalises them (``top_k=k``); both build the ``(n, n)`` log-weights.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from .bandwidth import Bandwidths
from .data import TransitionDataset
from .policies import is_stochastic
from .rows import DenseRows, Rows, SparseRows
from .solvers import SolveInfo, bicgstab, solve_dense

logger = logging.getLogger(__name__)

_SOLVERS = ("auto", "dense", "bicgstab")


def _check_positive_int(name: str, value: int | None, allow_none: bool = True) -> None:
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"The '{name}' parameter must be a positive int. Got {value!r} instead.")


def as_states(x: np.ndarray | torch.Tensor, state_dim: int, name: str) -> np.ndarray:
    """Validate query points: float64 array of shape (m, state_dim), finite, m >= 1."""
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
    """

    J: float
    q: torch.Tensor
    mu: torch.Tensor
    eps0: torch.Tensor
    P: Rows
    info_q: SolveInfo
    info_mu: SolveInfo

    def surrogate(self) -> torch.Tensor:
        """``eps0(theta) . stop(q) + stop(mu)^T P(theta) stop(q)``; its gradient is ``grad J_hat``."""
        dtype = self.eps0.dtype
        q, mu = self.q.to(dtype), self.mu.to(dtype)
        return self.eps0 @ q + mu @ self.P.matvec(q)


class NonparametricBellman:
    """Nonparametric Bellman model over a fixed data set.

    Parameters
    ----------
    dataset : TransitionDataset
    bandwidths : Bandwidths
        Kernel standard deviations (per dimension) for states, actions and next states.
    gamma : float in [0, 1)
    top_k : int, optional
        Keep the ``k`` largest responsibilities per row (renormalised); ``None`` keeps all.
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
    solver_tol, solver_max_iter : float, int
        BiCGSTAB relative tolerance and iteration cap.
    """

    def __init__(
        self,
        dataset: TransitionDataset,
        bandwidths: Bandwidths,
        gamma: float,
        *,
        top_k: int | None = None,
        n_mc_next: int | None = None,
        n_mc_policy: int | None = None,
        stochastic: bool = False,
        dtype: torch.dtype = torch.float64,
        device: str | torch.device = "cpu",
        solver: str = "auto",
        solver_tol: float = 1e-10,
        solver_max_iter: int = 1000,
        dense_max_n: int = 2000,
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
        _check_positive_int("top_k", top_k)
        _check_positive_int("n_mc_next", n_mc_next)
        _check_positive_int("n_mc_policy", n_mc_policy)
        _check_positive_int("solver_max_iter", solver_max_iter, allow_none=False)
        if solver not in _SOLVERS:
            raise ValueError(f"The 'solver' parameter must be one of {_SOLVERS}. Got {solver!r} instead.")
        if not (solver_tol > 0):
            raise ValueError(f"The 'solver_tol' parameter must be positive. Got {solver_tol!r} instead.")
        n = dataset.n
        if top_k is not None and top_k > n:
            raise ValueError(f"top_k must be at most the number of samples ({n}). Got {top_k} instead.")
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
        self.solver_tol = float(solver_tol)
        self.solver_max_iter = int(solver_max_iter)
        self.dense_max_n = int(dense_max_n)

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
        self._next_fixed: torch.Tensor | None = None      # cached fixed logits of P's rows
        self._init_cache: tuple[np.ndarray, torch.Tensor] | None = None

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

    def _rows(self, logits: torch.Tensor) -> Rows:
        """Responsibility rows from log-weights (m, G, n), averaged over the G samples per row."""
        m, g, n = logits.shape
        if self.top_k is None:
            return DenseRows(torch.softmax(logits, dim=-1).mean(1))
        vals, idx = torch.topk(logits, self.top_k, dim=-1)                     # (m, G, k)
        weights = torch.softmax(vals, dim=-1) / g
        return SparseRows(idx.reshape(m, -1), weights.reshape(m, -1), n)

    def _policy_rows(self, policy: nn.Module, states: torch.Tensor, fixed: torch.Tensor,
                     group: int, generator: torch.Generator | None) -> Rows:
        """``eps_pi`` at ``m * group`` query states, averaged over consecutive groups of ``group``.

        ``fixed`` holds the :meth:`_fixed_logits` of the query states.
        """
        actions = self._actions(policy, states, generator) / self.h_a          # (M, N_pi, d_a)
        logits = fixed[:, None, :] + actions @ self.actions_scaled.T           # (M, N_pi, n)
        M, npi, n = logits.shape
        return self._rows(logits.reshape(M // group, group * npi, n))

    def _policy_input(self, policy: nn.Module, states: torch.Tensor) -> torch.Tensor:
        param = next(iter(policy.parameters()), None)
        return states.to(param.dtype) if param is not None else states

    # ------------------------------------------------------------------ model pieces
    def responsibilities(self, policy: nn.Module, states: np.ndarray | torch.Tensor,
                         generator: torch.Generator | None = None) -> Rows:
        """``eps_pi(s)`` for query states of shape (m, d_s): rows of an (m, n) matrix."""
        s = self._tensor(as_states(states, self.dataset.state_dim, "states"))
        return self._policy_rows(policy, self._policy_input(policy, s), self._fixed_logits(s), 1,
                                 generator)

    def transition_matrix(self, policy: nn.Module, generator: torch.Generator | None = None) -> Rows:
        """``P`` (rows scaled by ``gamma_i``), attached to the policy's graph."""
        if self.n_mc_next is None:
            if self._next_fixed is None:
                self._next_fixed = self._fixed_logits(self.next_states)
            queries, fixed, group = self.next_states, self._next_fixed, 1
        else:
            xi = self._noise((self.n, self.n_mc_next, self.dataset.state_dim), generator)
            queries = (self.next_states[:, None, :] + self.h_next * xi).reshape(-1, self.dataset.state_dim)
            fixed, group = self._fixed_logits(queries), self.n_mc_next
        rows = self._policy_rows(policy, self._policy_input(policy, queries), fixed, group, generator)
        return rows.scale_rows(self.discounts)

    def initial_vector(self, policy: nn.Module, initial_states: np.ndarray | torch.Tensor,
                       generator: torch.Generator | None = None) -> torch.Tensor:
        """``eps0 = mean_m eps_pi(z_m)`` of shape (n,), attached to the policy's graph."""
        z = as_states(initial_states, self.dataset.state_dim, "initial_states")
        zt = self._tensor(z)
        if self._init_cache is None or not np.array_equal(self._init_cache[0], z):
            self._init_cache = (z, self._fixed_logits(zt))
        rows = self._policy_rows(policy, self._policy_input(policy, zt), self._init_cache[1], 1,
                                 generator)
        return rows.column_mean()

    # ------------------------------------------------------------------ solves
    def _use_dense(self) -> bool:
        return self.solver == "dense" or (self.solver == "auto" and self.n <= self.dense_max_n)

    def solve(self, P: Rows, eps0: torch.Tensor, warm_start: tuple[torch.Tensor, torch.Tensor] | None
              = None) -> tuple[torch.Tensor, torch.Tensor, SolveInfo, SolveInfo]:
        """Solve ``(I - P) q = r`` and ``(I - P)^T mu = eps0`` in float64 (detached)."""
        P64 = P.detach().to(torch.float64)
        e64 = eps0.detach().to(torch.float64)
        if self._use_dense():
            q, mu, info = solve_dense(P64.to_dense(), self.rewards, e64)
            return q, mu, info, info
        q0, mu0 = warm_start if warm_start is not None else (None, None)
        q, info_q = bicgstab(lambda v: v - P64.matvec(v), self.rewards, q0,
                             tol=self.solver_tol, max_iter=self.solver_max_iter)
        mu, info_mu = bicgstab(lambda v: v - P64.rmatvec(v), e64, mu0,
                               tol=self.solver_tol, max_iter=self.solver_max_iter)
        return q, mu, info_q, info_mu

    def evaluate(self, policy: nn.Module, initial_states: np.ndarray | torch.Tensor,
                 generator: torch.Generator | None = None,
                 warm_start: tuple[torch.Tensor, torch.Tensor] | None = None) -> BellmanSolution:
        """Build ``eps0`` and ``P`` at the current policy and solve for ``q`` and ``mu``."""
        if self.stochastic and not is_stochastic(policy):
            raise ValueError(
                "stochastic=True needs a policy with a 'mean_std(states) -> (mean, std)' method, "
                f"such as nopg.GaussianMLPPolicy; {type(policy).__name__} has none"
            )
        eps0 = self.initial_vector(policy, initial_states, generator)
        P = self.transition_matrix(policy, generator)
        q, mu, info_q, info_mu = self.solve(P, eps0, warm_start)
        J = float(torch.dot(eps0.detach().to(torch.float64), q))
        return BellmanSolution(J, q, mu, eps0, P, info_q, info_mu)

    # ------------------------------------------------------------------ queries
    @torch.no_grad()
    def _query(self, policy: nn.Module | None, states: np.ndarray | torch.Tensor,
               vector: torch.Tensor, actions: np.ndarray | torch.Tensor | None = None,
               chunk: int = 4096, seed: int = 0) -> np.ndarray:
        s_all = as_states(states, self.dataset.state_dim, "states")
        a_all = None
        if actions is not None:
            a_all = as_states(actions, self.dataset.action_dim, "actions")
            if a_all.shape[0] != s_all.shape[0]:
                raise ValueError(f"actions has {a_all.shape[0]} rows but states has {s_all.shape[0]}")
        generator = torch.Generator().manual_seed(seed)
        vec = vector.to(device=self.device, dtype=torch.float64)
        out = []
        for start in range(0, s_all.shape[0], chunk):
            s = self._tensor(s_all[start:start + chunk])
            fixed = self._fixed_logits(s)
            if a_all is None:
                rows = self._policy_rows(policy, self._policy_input(policy, s), fixed, 1, generator)
            else:
                a = self._tensor(a_all[start:start + chunk]) / self.h_a
                rows = self._rows((fixed + a @ self.actions_scaled.T)[:, None, :])
            out.append(rows.to(torch.float64).matvec(vec))
        return torch.cat(out).cpu().numpy()

    def value(self, policy: nn.Module, states: np.ndarray | torch.Tensor, q: torch.Tensor,
              seed: int = 0) -> np.ndarray:
        """``V(s) = eps_pi(s) . q`` at query states of shape (m, d_s)."""
        return self._query(policy, states, q, seed=seed)

    def q_value(self, states: np.ndarray | torch.Tensor, actions: np.ndarray | torch.Tensor,
                q: torch.Tensor) -> np.ndarray:
        """``Q(s, a) = eps(s, a) . q`` at query pairs."""
        return self._query(None, states, q, actions=actions)

    def visitation(self, policy: nn.Module, states: np.ndarray | torch.Tensor, mu: torch.Tensor,
                   seed: int = 0) -> np.ndarray:
        """Unnormalised discounted state-visitation estimate ``eps_pi(s) . mu``."""
        return self._query(policy, states, mu, seed=seed)
