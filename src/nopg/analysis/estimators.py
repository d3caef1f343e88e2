"""Off-policy gradient estimators behind one interface (paper §6.3, Table "algorithms").

Every estimator takes a data set and a torch policy and returns ``d J / d theta`` as one flat
float64 vector over ``policy.parameters()`` (in their order):

* :class:`NOPGEstimator` -- NOPG-D / NOPG-S, the full gradient of the nonparametric ``J_hat``.
* :class:`GPOMDPEstimator` -- path-wise importance sampling (PWIS) G(PO)MDP, paper Eq. (pwis):
  ``sum_t rho_t gamma^t r_t sum_{i<=t} grad log pi(a_i|s_i)`` with ``rho_t`` the product of the
  per-step ratios ``pi / pi_beta`` up to ``t``. ``normalize=True`` is G(PO)MDP+N: the weights of
  each time step are self-normalised over the episodes (weighted importance sampling; Shelton
  2001, Rubinstein & Kroese 2016), biased but consistent. ``baseline=True`` is G(PO)MDP+BN: it
  also subtracts, per time step and per parameter, the variance-minimising baseline of G(PO)MDP
  (Peters & Schaal 2008) computed with the same importance weights (the generalised baselines
  of Jie & Abbeel 2010); estimated from the same data, it adds a small bias.
* :class:`DPGEstimator` -- offline deterministic policy gradient with an oracle ``dQ/da``
  (DPG+Q): ``sum_i w_i grad_theta pi(s_i) dQ/da(s_i, pi(s_i))`` over the data's states. Its
  sources of bias are the semi-gradient (the states come from the behaviour policy) and, by
  default, the improper discounting of practical implementations (every state of an episode
  weighted alike, Thomas 2014; Nota & Thomas 2020); ``discounting="proper"`` weights the state
  at step ``t`` by ``gamma^t``, which makes the estimate exact on the policy's own trajectory.

The path-wise estimators need data in whole episodes, each starting at step 0 (``episodes()``
of the data set, in time order). This module imports numpy and torch only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch
from torch import nn
from torch.func import functional_call, grad, vmap

from ..bandwidth.selection import Bandwidths
from ..data.dataset import TransitionDataset, check_gamma
from ..model.config import ModelConfig, keyword_config
from ..policies.networks import gaussian_log_prob, is_stochastic, normal_log_density
from ..train.gradient import policy_gradient, surrogate_gradient

__all__ = [
    "DPGEstimator",
    "GPOMDPEstimator",
    "GradientEstimator",
    "NOPGEstimator",
    "episode_arrays",
    "flat_gradient",
    "per_sample_scores",
]

QGradient = Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]
"""``dQ/da(states (n, d_s), actions (n, d_a), steps (n,)) -> (n, d_a)``."""


@runtime_checkable
class GradientEstimator(Protocol):
    """What every estimator provides."""

    name: str

    def estimate(self, data: TransitionDataset, policy: nn.Module) -> np.ndarray:
        """The gradient estimate, a float64 vector of ``sum(p.numel())`` entries."""
        ...


def _params(policy: nn.Module) -> list[torch.Tensor]:
    params = list(policy.parameters())
    if not params:
        raise ValueError("the policy has no parameters to differentiate")
    return params


def flat_gradient(grads: list[torch.Tensor]) -> np.ndarray:
    """Concatenate per-parameter gradients into one float64 vector."""
    return torch.cat([g.detach().reshape(-1).to(torch.float64).cpu() for g in grads]).numpy()


def episode_arrays(data: TransitionDataset) -> tuple[np.ndarray, np.ndarray]:
    """Episodes as padded arrays for the path-wise estimators.

    Returns
    -------
    index : int array of shape (M, T)
        ``index[e, t]`` is the transition at step ``t`` of episode ``e`` (0 where padded).
    mask : bool array of shape (M, T)
        False on the padding of episodes shorter than the longest, ``T``.
    """
    if not isinstance(data, TransitionDataset):
        raise ValueError(f"data must be a nopg.TransitionDataset. Got {type(data).__name__} instead.")
    episodes = data.episodes()
    lengths = np.array([len(e) for e in episodes])
    index = np.zeros((len(episodes), int(lengths.max())), dtype=np.int64)
    mask = np.arange(index.shape[1])[None, :] < lengths[:, None]
    for e, idx in enumerate(episodes):
        index[e, : len(idx)] = idx
    return index, mask


def per_sample_scores(policy: nn.Module, states: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    """``grad_theta log pi(a_i | s_i)`` for every sample, shape (n, p) (``torch.func`` vmap/grad)."""
    wrapper = _MeanStd(policy)
    names = [name for name, _ in policy.named_parameters()]
    params = {f"policy.{name}": p.detach() for name, p in policy.named_parameters()}
    buffers = {f"policy.{name}": b for name, b in policy.named_buffers()}

    def log_prob(values: dict[str, torch.Tensor], s: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
        mean, std = functional_call(wrapper, {**values, **buffers}, (s[None],))
        return normal_log_density(a[None], mean, std)[0]

    scores = vmap(grad(log_prob), in_dims=(None, 0, 0))(params, states, actions)
    return torch.cat([scores[f"policy.{name}"].reshape(states.shape[0], -1) for name in names], dim=1)


class _MeanStd(nn.Module):
    """Wraps ``policy`` so that ``forward`` is its ``mean_std`` (for ``functional_call``)."""

    def __init__(self, policy: nn.Module) -> None:
        super().__init__()
        self.policy = policy

    def forward(self, states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.policy.mean_std(states)


class NOPGEstimator:
    """NOPG-D or NOPG-S: the full gradient of the nonparametric ``J_hat`` (paper Eq. 6).

    Parameters
    ----------
    bandwidths : Bandwidths or callable
        Kernel bandwidths, or a function ``data -> Bandwidths`` (e.g. a rule of thumb).
    gamma : float in [0, 1)
    initial_states : array of shape (m, d_s)
        ``J_hat`` is the mean of ``V`` over these states.
    config : ModelConfig, optional
        The model's settings (:class:`nopg.ModelConfig`).
    seed : int
        Seed of the Monte-Carlo noise (NOPG-S, ``n_mc_next``).
    name : str, optional
        Label in reports (default ``NOPG-D`` / ``NOPG-S``).
    **settings
        Model settings replacing those of ``config``, as for :func:`nopg.policy_gradient`:
        ``stochastic=True`` (NOPG-S; the policy must provide ``mean_std``), ``top_k``,
        ``n_mc_policy``, ``n_mc_next``, ``solver``, ``neighbors``, ...
    """

    def __init__(self, bandwidths: Bandwidths | Callable[[TransitionDataset], Bandwidths], gamma: float,
                 initial_states: np.ndarray, *, config: ModelConfig | None = None, seed: int = 0,
                 name: str | None = None, **settings: Any) -> None:
        if not (isinstance(bandwidths, Bandwidths) or callable(bandwidths)):
            raise ValueError("bandwidths must be a nopg.Bandwidths or a function data -> Bandwidths")
        self.bandwidths = bandwidths
        self.gamma = check_gamma(gamma)
        self.initial_states = np.atleast_2d(np.asarray(initial_states, dtype=np.float64))
        self.config = keyword_config(config, **settings)
        self.stochastic = self.config.stochastic
        self.seed = int(seed)
        self.name = name or ("NOPG-S" if self.stochastic else "NOPG-D")
        self.last_J: float | None = None

    def estimate(self, data: TransitionDataset, policy: nn.Module) -> np.ndarray:
        if self.stochastic and not is_stochastic(policy):
            raise ValueError(f"{self.name} needs a Gaussian policy (with mean_std)")
        bw = self.bandwidths if isinstance(self.bandwidths, Bandwidths) else self.bandwidths(data)
        res = policy_gradient(data, policy, bandwidths=bw, gamma=self.gamma,
                              initial_states=self.initial_states, config=self.config, seed=self.seed)
        self.last_J = res.J
        return flat_gradient(res.grads)


class GPOMDPEstimator:
    """G(PO)MDP with path-wise importance sampling: G(PO)MDP+N and G(PO)MDP+BN.

    Parameters
    ----------
    behaviour : torch.nn.Module or None
        The Gaussian policy that collected the data (with ``mean_std``); ``None`` means the data
        are on-policy (all importance weights 1).
    gamma : float in [0, 1)
    normalize : bool, default=True
        Self-normalise the importance weights of each time step over the episodes (``+N``);
        ``False`` is plain importance sampling, ``rho_t / M`` (unbiased).
    baseline : bool, default=False
        Subtract the per-step, per-parameter variance-minimising baseline (``+BN``).
    name : str, optional
    behaviour_log_prob : callable, optional
        ``(states (n, d_s), actions (n, d_a)) -> log pi_beta(a | s)`` of shape (n,), for a
        behaviour policy that is not a Gaussian module (e.g. a mixture or a uniform density);
        give it instead of ``behaviour``.
    """

    def __init__(self, behaviour: nn.Module | None, gamma: float, *, normalize: bool = True,
                 baseline: bool = False, name: str | None = None,
                 behaviour_log_prob: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = None
                 ) -> None:
        if behaviour is not None and not is_stochastic(behaviour):
            raise ValueError("the behaviour policy must be Gaussian (provide mean_std)")
        if behaviour is not None and behaviour_log_prob is not None:
            raise ValueError("give the behaviour policy or its log-density, not both")
        self.behaviour = behaviour
        self.behaviour_log_prob = behaviour_log_prob
        self.gamma = check_gamma(gamma)
        self.normalize = bool(normalize)
        self.baseline = bool(baseline)
        suffix = ("B" if baseline else "") + ("N" if normalize else "")
        self.name = name or ("G(PO)MDP+" + suffix if suffix else "G(PO)MDP")
        self.last_ess: float | None = None

    def weights(self, data: TransitionDataset, policy: nn.Module) -> tuple[np.ndarray, np.ndarray,
                                                                              np.ndarray]:
        """Importance weights of every (episode, step), their index array and mask, (M, T).

        With ``normalize`` the weights of each step sum to 1 over the episodes alive at that
        step; otherwise they are ``rho_t / M``.
        """
        index, mask = episode_arrays(data)
        if self.behaviour_log_prob is not None:
            states = torch.tensor(data.states, dtype=torch.float64)
            actions = torch.tensor(data.actions, dtype=torch.float64)
            with torch.no_grad():
                target = gaussian_log_prob(policy, states, actions).to(torch.float64).numpy()
            log_ratio = target - np.asarray(self.behaviour_log_prob(data.states, data.actions),
                                            dtype=np.float64).reshape(-1)
        elif self.behaviour is None:
            log_ratio = np.zeros(data.n)
        else:
            states = torch.tensor(data.states, dtype=torch.float64)
            actions = torch.tensor(data.actions, dtype=torch.float64)
            with torch.no_grad():
                log_ratio = (gaussian_log_prob(policy, states, actions).to(torch.float64)
                             - gaussian_log_prob(self.behaviour, states, actions).to(torch.float64)
                             ).numpy()
        lr = np.where(mask, log_ratio[index], 0.0)
        log_rho = np.cumsum(lr, axis=1)                                           # (M, T)
        if self.normalize:
            shifted = np.where(mask, log_rho, -np.inf)
            top = shifted.max(axis=0, keepdims=True)
            w = np.where(mask, np.exp(shifted - top), 0.0)
            w = w / w.sum(axis=0, keepdims=True)
        else:
            w = np.where(mask, np.exp(log_rho), 0.0) / mask.shape[0]
        return w, index, mask

    def estimate(self, data: TransitionDataset, policy: nn.Module) -> np.ndarray:
        if not is_stochastic(policy):
            raise ValueError(f"{self.name} needs a Gaussian target policy (with mean_std)")
        params = _params(policy)
        w, index, mask = self.weights(data, policy)
        dtype = params[0].dtype
        states = torch.tensor(data.states, dtype=dtype)
        actions = torch.tensor(data.actions, dtype=dtype)
        scores = per_sample_scores(policy, states, actions).to(torch.float64).numpy()  # (n, p)
        cum = np.cumsum(np.where(mask[..., None], scores[index], 0.0), axis=1)      # (M, T, p)
        steps = np.arange(index.shape[1])
        reward = np.where(mask, data.rewards[index], 0.0) * self.gamma ** steps[None, :]  # (M, T)
        if self.baseline:
            w_sq = w[..., None] * cum * cum                                           # (M, T, p)
            den = w_sq.sum(axis=0)
            num = (w_sq * reward[..., None]).sum(axis=0)
            b = np.divide(num, den, out=np.zeros_like(num), where=den > 0)           # (T, p)
            signal = reward[..., None] - b[None]
        else:
            signal = reward[..., None]
        ess = 1.0 / np.sum(w[:, -1] ** 2) if self.normalize else float("nan")
        self.last_ess = float(ess)
        return (w[..., None] * signal * cum).sum(axis=(0, 1))


class DPGEstimator:
    """Offline deterministic policy gradient with an oracle ``dQ/da`` (DPG+Q).

    Parameters
    ----------
    q_action_gradient : callable
        ``(states (n, d_s), actions (n, d_a), steps (n,)) -> dQ/da (n, d_a)``, the oracle's action
        gradient at the policy's actions (``steps``: the time step of each state, for
        finite-horizon Q-functions).
    gamma : float in [0, 1)
    discounting : {"improper", "proper"}
        ``improper`` (default, as practical DPG/DDPG): every state of an episode has the weight
        ``sum_t gamma^t / T`` (the mass of the discounted horizon spread uniformly);
        ``proper``: the state at step ``t`` has the weight ``gamma^t``. Both are divided by the
        number of episodes.
    name : str, optional
    """

    DISCOUNTING = ("improper", "proper")

    def __init__(self, q_action_gradient: QGradient, gamma: float, *, discounting: str = "improper",
                 name: str | None = None) -> None:
        if not callable(q_action_gradient):
            raise ValueError("q_action_gradient must be callable")
        if discounting not in self.DISCOUNTING:
            raise ValueError(f"The 'discounting' parameter must be one of {self.DISCOUNTING}. "
                             f"Got {discounting!r} instead.")
        self.q_action_gradient = q_action_gradient
        self.gamma = check_gamma(gamma)
        self.discounting = discounting
        self.name = name or "DPG+Q"

    def state_weights(self, data: TransitionDataset) -> np.ndarray:
        """Weight of every transition's state in the estimate, shape (n,)."""
        return self._weights_and_steps(data)[0]

    def _weights_and_steps(self, data: TransitionDataset) -> tuple[np.ndarray, np.ndarray]:
        """State weights and the time step of every transition within its episode, both (n,)."""
        index, mask = episode_arrays(data)
        rows, steps = np.nonzero(mask)                       # episode-major, time order
        disc = self.gamma ** steps.astype(np.float64)
        if self.discounting == "improper":                   # each episode's mean discount
            disc = (np.bincount(rows, weights=disc) / mask.sum(1))[rows]
        weights, step_of = np.empty(data.n), np.empty(data.n, dtype=np.int64)
        weights[index[mask]] = disc / mask.shape[0]
        step_of[index[mask]] = steps
        return weights, step_of

    def estimate(self, data: TransitionDataset, policy: nn.Module) -> np.ndarray:
        params = _params(policy)
        dtype = params[0].dtype
        states = torch.tensor(data.states, dtype=dtype)
        actions = policy(states)
        if actions.shape != (data.n, data.action_dim):
            raise ValueError(f"the policy returned actions of shape {tuple(actions.shape)}; "
                             f"expected {(data.n, data.action_dim)}")
        weights, steps = self._weights_and_steps(data)
        dq = np.asarray(self.q_action_gradient(data.states, actions.detach().to(torch.float64).numpy(),
                                               steps), dtype=np.float64)
        if dq.shape != (data.n, data.action_dim) or not np.all(np.isfinite(dq)):
            raise ValueError(f"q_action_gradient must return finite values of shape "
                             f"{(data.n, data.action_dim)}; got {dq.shape}")
        surrogate = (torch.as_tensor(weights, dtype=dtype)[:, None] * actions
                     * torch.as_tensor(dq, dtype=dtype)).sum()
        return flat_gradient(surrogate_gradient(surrogate, params))
