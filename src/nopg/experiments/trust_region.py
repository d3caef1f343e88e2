"""The trust-region experiment on Pendulum (paper §6.3 "Trust Region", figure "trust-region").

Data: gymnasium ``Pendulum-v1`` episodes under the state-independent behaviour
``a ~ N(0, action_variance)`` (the paper's ``N(mu=0, Sigma=0.2 I)``), every episode started by
gymnasium's default reset (``theta ~ U[-pi, pi]``, ``theta_dot ~ U[-1, 1]``, seeded with
``seed + episode``). Policies: the paper's linear family
``a = th0 sin w + th1 cos w + th2 w_dot + th3`` with ``th0 = th1 = th2 = 0`` and ``th3`` on a grid
in ``[-2, 2]``, i.e. ``nopg.LinearPolicy(3, 1, bias=True)`` on the observation
``[cos w, sin w, w_dot]`` with zero weights and bias ``th3``. For each policy we record

* the log-likelihood ``mean_i log N(a_i; pi(s_i), action_variance)`` of the data's actions under
  the deterministic policy widened by the behaviour's variance. The paper does not define its
  x-axis; its values span about ``+1.3 .. -100``. Ours is a per-sample mean and spans
  ``-0.6 .. -10.6`` (``-0.5 log(2 pi 0.2) - (E[a^2] + th3^2) / 0.4``); it is an affine function of
  ``th3^2`` either way, so only the scale of the x-axis differs;
* ``J_hat`` and the NOPG-D gradient with respect to all four parameters (paper order
  ``th0`` (sin), ``th1`` (cos), ``th2`` (w_dot), ``th3`` (bias)), from
  :class:`nopg.NonparametricBellman` with the kernel mean as the next state.

Initial states (the ``eps0`` term): the data's episode start states by default (a sample of the
reset distribution, so ``J_hat`` estimates the expected return from gymnasium's reset);
``initial_states="bottom"`` uses the hanging pendulum at rest instead.

Per-sample contributions: with ``S = eps0(theta) . stop(q) + stop(mu)^T P(theta) stop(q)``, row
``i`` of ``P`` depends on ``theta`` only through the policy's action ``a'_i = pi(s'_i)``, so

    grad J_hat = sum_m  dS/da0_m  J_pi(z_m)  +  sum_i  dS/da'_i  J_pi(s'_i),

with ``dS/da'_i = mu_i d(P q)_i / da'_i`` from autograd on the queried actions the solution
exposes (``BellmanSolution.initial_actions``, ``next_actions``) and the policy Jacobians ``J_pi``
from ``torch.func.vmap(jacrev)``. The heat map places ``||g_i||`` at ``s'_i`` (where the policy
acts) and shows the mean per ``(w, w_dot)`` bin (``heatmap_stat``; the sum per bin is also
written).

Defaults: 10 episodes x 100 steps = 1000 samples, Silverman bandwidths unscaled, dense ``P``,
float64. How they were chosen, and the measured results: ``docs/experiments.md``.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import logging
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from scipy.stats import spearmanr
from torch import nn
from tqdm.auto import tqdm

from ..analysis.statistics import rank_correlation
from ..bandwidth.selection import METHODS, Bandwidths, select_bandwidths
from ..data.dataset import TransitionDataset
from ..envs.pendulum import BOTTOM_STATE, angle_to_obs, make_pendulum_env, obs_to_angle
from ..model.bellman import NonparametricBellman, as_states
from ..model.config import ModelConfig, keyword_config
from ..model.factory import bellman_model
from ..policies.networks import LinearPolicy
from ..train.gradient import surrogate_gradient
from ..validation import (
    check_choice,
    check_discount,
    check_finite_float,
    check_positive_float,
    check_positive_int,
    fail,
    is_float,
    is_int,
)
from .common import checked_replace, nests_model
from .runner import run_log

logger = logging.getLogger(__name__)

INITIAL_STATES = ("episode_starts", "bottom")
HEATMAP_STATS = ("mean", "sum")
PARAM_NAMES = ("th0", "th1", "th2", "th3")
"""Paper order: ``th0`` multiplies ``sin w``, ``th1`` ``cos w``, ``th2`` ``w_dot``, ``th3`` is the bias."""
_PAPER_ORDER = [1, 0, 2, 3]  # flat [w_cos, w_sin, w_wdot, bias] -> [th0, th1, th2, th3]


@nests_model
@dataclass(frozen=True)
class TrustRegionConfig:
    """Settings of the trust-region experiment (defaults: see the module docstring).

    ``model`` holds the Bellman model's settings (default :data:`nopg.model.config.KEYWORD_DEFAULTS`:
    the dense ``P``, float64); it may be given as a dict of changes, and ``top_k`` under its
    former name.
    """

    n_episodes: int = 10                  # behaviour episodes
    steps_per_episode: int = 100          # transitions per episode
    action_variance: float = 0.2          # behaviour N(0, variance); also the log-likelihood's
    clip_actions: bool = True             # record the applied torque clip(a, -2, 2)
    seed: int = 0                         # action noise and env resets
    theta3_min: float = -2.0
    theta3_max: float = 2.0
    n_theta3: int = 41                    # grid size of th3
    bandwidth_method: str = "silverman"   # silverman | scott | cv | auto
    state_factor: float = 1.0             # multiplier of the state (and next-state) bandwidths
    action_factor: float = 1.0            # multiplier of the action bandwidth
    gamma: float = 0.99
    model: ModelConfig = field(default_factory=keyword_config)   # the Bellman model: dense P
    initial_states: str = "episode_starts"   # episode_starts | bottom
    heatmap_theta3: float = 0.0           # policy whose per-sample contributions are mapped
    heatmap_bins_w: int = 24
    heatmap_bins_w_dot: int = 24
    heatmap_stat: str = "mean"            # mean | sum of ||g_i|| per bin
    dense_fraction: float = 0.25          # share of densest samples in the concentration figure

    MODEL_ALIASES: ClassVar[tuple[str, ...]] = ("top_k",)

    def __post_init__(self) -> None:
        owner = "TrustRegionConfig"
        for name in ("n_episodes", "steps_per_episode", "n_theta3", "heatmap_bins_w",
                     "heatmap_bins_w_dot"):
            check_positive_int(name, getattr(self, name), owner)
        _check_seed(self.seed, owner)
        if self.model.stochastic or self.model.n_mc_next is not None:
            raise ValueError("The trust-region experiment splits NOPG-D's gradient: its model "
                             "must have stochastic=False and n_mc_next=None. Got "
                             f"{self.model.stochastic} and {self.model.n_mc_next} instead.")
        for name in ("action_variance", "state_factor", "action_factor"):
            check_positive_float(name, getattr(self, name), owner)
        for name in ("theta3_min", "theta3_max", "heatmap_theta3"):
            check_finite_float(name, getattr(self, name), owner)
        if self.theta3_min > self.theta3_max or (self.n_theta3 > 1 and self.theta3_min == self.theta3_max):
            raise ValueError(f"theta3_min must be below theta3_max. Got {self.theta3_min} and "
                             f"{self.theta3_max} instead.")
        check_discount("gamma", self.gamma, owner)
        if not is_float(self.dense_fraction) or not 0.0 < self.dense_fraction <= 1.0:
            fail("dense_fraction", "a float in (0, 1]", self.dense_fraction, owner)
        for name, allowed in (("bandwidth_method", METHODS), ("initial_states", INITIAL_STATES),
                              ("heatmap_stat", HEATMAP_STATS)):
            check_choice(name, getattr(self, name), allowed, owner)
        if not isinstance(self.clip_actions, bool):
            fail("clip_actions", "a bool", self.clip_actions, owner)

    def replace(self, **changes: Any) -> TrustRegionConfig:
        """A validated copy with the named fields replaced (ValueError on unknown names)."""
        return checked_replace(self, changes, "trust-region")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def theta3_grid(self) -> np.ndarray:
        """The ``th3`` values, shape (n_theta3,)."""
        return np.linspace(self.theta3_min, self.theta3_max, self.n_theta3)


def _check_seed(seed: Any, owner: str | None = None) -> None:
    if not is_int(seed) or seed < 0:
        fail("seed", "a non-negative int", seed, owner)


# ---------------------------------------------------------------------------------- data
def collect_gaussian_pendulum(n_episodes: int = 10, steps_per_episode: int = 100,
                              action_variance: float = 0.2, seed: int = 0,
                              clip_actions: bool = True) -> TransitionDataset:
    """Pendulum episodes under the behaviour ``a ~ N(0, action_variance)``.

    Every episode starts from gymnasium's default reset (``theta ~ U[-pi, pi]``,
    ``theta_dot ~ U[-1, 1]``, seeded with ``seed + episode``); the actions come from
    ``numpy.random.default_rng(seed)``. States are read from the simulator in float64. With
    ``clip_actions`` the recorded action is the applied torque ``clip(a, -2, 2)`` (at variance 0.2
    a clip is a 4.5-sigma event); otherwise the sampled one.

    Returns
    -------
    TransitionDataset
        ``n_episodes * steps_per_episode`` transitions, ``truncations`` at each episode's end,
        ``episode_ids``, no terminals.
    """
    check_positive_int("n_episodes", n_episodes)
    check_positive_int("steps_per_episode", steps_per_episode)
    _check_seed(seed)
    check_positive_float("action_variance", action_variance)
    n = n_episodes * steps_per_episode
    rng = np.random.default_rng(seed)
    sampled = math.sqrt(action_variance) * rng.standard_normal(n)
    states, next_states = np.empty((n, 3)), np.empty((n, 3))
    rewards, applied = np.empty(n), np.empty(n)
    env = make_pendulum_env(max_episode_steps=steps_per_episode)
    try:
        max_torque = float(env.unwrapped.max_torque)
        i = 0
        for episode in range(n_episodes):
            env.reset(seed=seed + episode)
            obs = angle_to_obs(*env.unwrapped.state)
            for _ in range(steps_per_episode):
                states[i] = obs
                _, reward, _, _, _ = env.step(np.array([sampled[i]], dtype=np.float64))
                rewards[i] = float(reward)
                applied[i] = min(max(sampled[i], -max_torque), max_torque)
                obs = angle_to_obs(*env.unwrapped.state)
                next_states[i] = obs
                i += 1
    finally:
        env.close()
    clipped = int(np.sum(applied != sampled))
    if clipped:
        logger.info("%d of %d behaviour actions were clipped to +-%.1f", clipped, n, max_torque)
    truncations = np.zeros(n, dtype=bool)
    truncations[steps_per_episode - 1::steps_per_episode] = True
    return TransitionDataset(states=states, actions=(applied if clip_actions else sampled).reshape(n, 1),
                             rewards=rewards, next_states=next_states, terminals=np.zeros(n, dtype=bool),
                             truncations=truncations,
                             episode_ids=np.repeat(np.arange(n_episodes), steps_per_episode))


# ------------------------------------------------------------------------------ policies
def constant_policy(theta3: float) -> LinearPolicy:
    """The paper's linear policy with ``th0 = th1 = th2 = 0`` and bias ``th3`` (float64)."""
    policy = LinearPolicy(3, 1, bias=True).double()
    with torch.no_grad():
        policy.linear.bias.fill_(float(theta3))
    return policy


def log_likelihood(policy: nn.Module, data: TransitionDataset, variance: float = 0.2) -> float:
    """``mean_i log N(a_i; pi(s_i), variance)``: the data's actions under the widened policy."""
    check_positive_float("variance", variance)
    param = next(iter(policy.parameters()))
    with torch.no_grad():
        mean = policy(torch.tensor(data.states, dtype=param.dtype)).double().cpu().numpy()
    if mean.shape != data.actions.shape:
        raise ValueError(f"the policy returned actions of shape {mean.shape}; the data's are "
                         f"{data.actions.shape}")
    sq = ((data.actions - mean) ** 2).sum(1)
    d = data.action_dim
    return float(np.mean(-0.5 * sq / variance - 0.5 * d * math.log(2 * math.pi * variance)))


# -------------------------------------------------------------------- gradient splitting
@dataclass
class GradientSplit:
    """``J_hat``, its gradient and the gradient's exact split into per-sample terms.

    Attributes
    ----------
    J : float
    grad : ndarray of shape (p,)
        ``d J_hat / d theta`` from autograd on the surrogate (flattened ``policy.parameters()``).
    per_sample : ndarray of shape (n, p)
        ``g_i``: the term of row ``i`` of ``P`` (policy acting at ``s'_i``).
    initial : ndarray of shape (m, p)
        The terms of the ``eps0`` rows (policy acting at the initial states).
    next_actions : ndarray of shape (n, d_a)
        ``pi(s'_i)``.
    """

    J: float
    grad: np.ndarray
    per_sample: np.ndarray
    initial: np.ndarray
    next_actions: np.ndarray

    def residual(self) -> float:
        """``max |grad - sum of all terms|``."""
        return float(np.max(np.abs(self.grad - self.per_sample.sum(0) - self.initial.sum(0))))


def policy_jacobians(policy: nn.Module, states: torch.Tensor) -> torch.Tensor:
    """Per-state Jacobians ``d pi(s) / d theta`` of shape (m, d_a, p) (``torch.func``)."""
    params = {k: v.detach() for k, v in policy.named_parameters()}

    def single(p: dict[str, torch.Tensor], s: torch.Tensor) -> torch.Tensor:
        return torch.func.functional_call(policy, p, (s[None],))[0]

    jac = torch.func.vmap(torch.func.jacrev(single), in_dims=(None, 0))(params, states)
    flat = [jac[k].reshape(states.shape[0], -1, params[k].numel()) for k in params]
    return torch.cat(flat, dim=-1)


def gradient_contributions(model: NonparametricBellman, policy: nn.Module,
                           initial_states: np.ndarray) -> GradientSplit:
    """Evaluate NOPG-D at ``policy`` and split ``grad J_hat`` into per-sample terms.

    ``model`` must be deterministic with kernel-mean next states (``n_mc_next=None``).
    """
    if model.stochastic or model.n_mc_next is not None:
        raise ValueError("gradient_contributions needs a deterministic model with n_mc_next=None")
    sol = model.solution(policy, initial_states)
    params = list(policy.parameters())
    d_a0, d_next, *grads = surrogate_gradient(sol.surrogate(),
                                              [sol.initial_actions, sol.next_actions, *params])
    grad = torch.cat([g.reshape(-1) for g in grads])
    dtype = params[0].dtype                  # the states the policy saw, as the model passes them
    z = torch.tensor(as_states(initial_states, model.data.state_dim, "initial_states"),  # a copy:
                     dtype=dtype, device=model.next_states.device)     # the states may be read-only
    per_sample = torch.einsum("na,nap->np", d_next[:, 0].to(dtype),
                              policy_jacobians(policy, model.next_states.to(dtype)))
    initial = torch.einsum("ma,map->mp", d_a0[:, 0].to(dtype), policy_jacobians(policy, z))
    return GradientSplit(J=sol.J, grad=grad.double().cpu().numpy(),
                         per_sample=per_sample.double().cpu().numpy(),
                         initial=initial.double().cpu().numpy(),
                         next_actions=sol.next_actions[:, 0].detach().double().cpu().numpy())


# ---------------------------------------------------------------------------- heat map
def state_density(query: np.ndarray, states: np.ndarray, h: np.ndarray) -> np.ndarray:
    """Unnormalised kernel density ``mean_j exp(-||(x - s_j) / h||^2 / 2)`` at ``query`` (m,)."""
    qs, ss = query / h, states / h
    sq = (qs * qs).sum(1)[:, None] + (ss * ss).sum(1)[None, :] - 2.0 * qs @ ss.T
    return np.exp(-0.5 * np.maximum(sq, 0.0)).mean(1)


def bin_contributions(w: np.ndarray, w_dot: np.ndarray, values: np.ndarray, bins_w: int,
                      bins_w_dot: int, w_dot_range: tuple[float, float] = (-8.0, 8.0)
                      ) -> dict[str, np.ndarray]:
    """Count, sum and mean of ``values`` on a ``(w, w_dot)`` grid over ``[-pi, pi] x w_dot_range``.

    Returns edges ``w_edges`` (bins_w + 1,), ``w_dot_edges`` and arrays ``count``, ``sum``,
    ``mean`` of shape (bins_w, bins_w_dot) (``mean`` is NaN in empty bins).
    """
    w_edges = np.linspace(-np.pi, np.pi, bins_w + 1)
    wd_edges = np.linspace(*w_dot_range, bins_w_dot + 1)
    count, _, _ = np.histogram2d(w, w_dot, bins=(w_edges, wd_edges))
    total, _, _ = np.histogram2d(w, w_dot, bins=(w_edges, wd_edges), weights=values)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(count > 0, total / np.maximum(count, 1), np.nan)
    return {"w_edges": w_edges, "w_dot_edges": wd_edges, "count": count, "sum": total, "mean": mean}


# ----------------------------------------------------------------------------- running
def initial_states_for(data: TransitionDataset, kind: str) -> np.ndarray:
    """The ``eps0`` states: the episode start states or the bottom state, (m, 3)."""
    if kind == "episode_starts":
        return data.episode_start_states()
    if kind == "bottom":
        return BOTTOM_STATE[None, :].copy()
    raise ValueError(f"initial_states must be one of {', '.join(INITIAL_STATES)}. Got {kind!r} instead.")


def _write_csv(path: Path, header: list[str], rows: np.ndarray) -> None:
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        writer.writerows([[repr(float(v)) for v in row] for row in rows])


def _sweep(model: NonparametricBellman, data: TransitionDataset, s0: np.ndarray, config: TrustRegionConfig,
           progress: bool) -> np.ndarray:
    """Rows (theta3, loglik, |g|, log|g|, J_hat, g_th0..g_th3, residual) over the grid."""
    rows = []
    for th3 in tqdm(config.theta3_grid(), desc="trust region: th3", disable=not progress):
        policy = constant_policy(th3)
        split = gradient_contributions(model, policy, s0)
        g = split.grad[_PAPER_ORDER]
        norm = float(np.linalg.norm(g))
        ll = log_likelihood(policy, data, config.action_variance)
        rows.append([th3, ll, norm, math.log(norm) if norm > 0 else -math.inf, split.J, *g, split.residual()])
        logger.debug("th3 %.3f: loglik %.3f, |grad| %.4g, J_hat %.3f", th3, ll, norm, split.J)
    return np.asarray(rows)


def _summarise_policies(table: np.ndarray) -> dict[str, Any]:
    th3, ll, norm, log_norm = table[:, 0], table[:, 1], table[:, 2], table[:, 3]
    peak = int(np.argmax(ll))
    left, right = slice(0, peak + 1), slice(peak, None)
    return {
        "spearman_loglik_vs_log_grad_norm": float(spearmanr(ll, log_norm).statistic),
        "spearman_left_of_peak": rank_correlation(ll[left], log_norm[left]),
        "spearman_right_of_peak": rank_correlation(ll[right], log_norm[right]),
        "theta3_max_loglik": float(th3[peak]),
        "theta3_max_grad_norm": float(th3[int(np.argmax(norm))]),
        "log_grad_norm_min": float(log_norm.min()), "log_grad_norm_max": float(log_norm.max()),
        "loglik_min": float(ll.min()), "loglik_max": float(ll.max()),
        "grad_norm_at_ends": [float(norm[0]), float(norm[-1])],
        "grad_norm_at_max_loglik": float(norm[peak]),
        "max_split_residual": float(table[:, -1].max()),
    }


def run_trust_region(config: TrustRegionConfig | None = None, out: str | Path = "results",
                     progress: bool = True, run_name: str | None = None) -> dict[str, Any]:
    """Run the experiment and write ``<out>/<run_name or trust-region__<time>>/``.

    Files: ``config.json``, ``run.log``, ``policies.csv``, ``contributions.csv``, ``heatmap.csv``,
    ``trust_region.png`` and ``summary.json``. Returns the summary (with ``run_dir``).
    """
    config = TrustRegionConfig() if config is None else config
    if not isinstance(config, TrustRegionConfig):
        raise ValueError(f"config must be a TrustRegionConfig. Got {type(config).__name__} instead.")
    run_dir = Path(out) / (run_name or f"trust-region__{time.strftime('%Y%m%d-%H%M%S')}")
    run_dir.mkdir(parents=True, exist_ok=True)
    with run_log(run_dir):
        return _run(config, run_dir, progress)


def _model(data: TransitionDataset, config: TrustRegionConfig
           ) -> tuple[Bandwidths, NonparametricBellman, np.ndarray]:
    """The data's bandwidths, the dense (or top-k) model and the ``eps0`` states."""
    bw: Bandwidths = select_bandwidths(data, method=config.bandwidth_method,
                                       state_factor=config.state_factor,
                                       action_factor=config.action_factor, seed=config.seed)
    logger.info("trust region: %r, action mean %.4f variance %.4f; bandwidths state=%s action=%s",
                data, data.actions.mean(), data.actions.var(), np.round(bw.state, 4).tolist(),
                np.round(bw.action, 4).tolist())
    model = bellman_model(data, bw, config.gamma, config.model)
    return bw, model, initial_states_for(data, config.initial_states)


def _contributions(model: NonparametricBellman, data: TransitionDataset, bw: Bandwidths,
                   s0: np.ndarray, config: TrustRegionConfig, run_dir: Path
                   ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Split the gradient at ``heatmap_theta3`` into per-sample terms; write
    ``contributions.csv`` and ``heatmap.csv``; return the bins and the heat map's summary."""
    split = gradient_contributions(model, constant_policy(config.heatmap_theta3), s0)
    g = split.per_sample[:, _PAPER_ORDER]
    g_norm = np.linalg.norm(g, axis=1)
    w, w_dot = obs_to_angle(data.states)
    nw, nw_dot = obs_to_angle(data.next_states)
    density = state_density(data.next_states, data.states, bw.state)
    _write_csv(run_dir / "contributions.csv",
               ["w", "w_dot", "action", "next_w", "next_w_dot", "policy_action", "density",
                *[f"g_{p}" for p in PARAM_NAMES], "g_norm"],
               np.column_stack([w, w_dot, data.actions[:, 0], nw, nw_dot, split.next_actions[:, 0],
                                density, g, g_norm]))
    bins = bin_contributions(nw, nw_dot, g_norm, config.heatmap_bins_w, config.heatmap_bins_w_dot)
    cw = 0.5 * (bins["w_edges"][1:] + bins["w_edges"][:-1])
    cwd = 0.5 * (bins["w_dot_edges"][1:] + bins["w_dot_edges"][:-1])
    gw, gwd = np.meshgrid(cw, cwd, indexing="ij")
    _write_csv(run_dir / "heatmap.csv", ["w", "w_dot", "count", "sum_g_norm", "mean_g_norm"],
               np.column_stack([gw.ravel(), gwd.ravel(), bins["count"].ravel(), bins["sum"].ravel(),
                                bins["mean"].ravel()]))
    n_dense = max(1, int(round(config.dense_fraction * data.n)))
    densest = np.argsort(-density)[:n_dense]
    sq = g_norm ** 2
    filled = bins["count"] > 0
    heat = {
        "theta3": config.heatmap_theta3, "stat": config.heatmap_stat,
        "split_residual": split.residual(),
        "initial_terms_norm": float(np.linalg.norm(split.initial.sum(0))),
        "per_sample_terms_norm": float(np.linalg.norm(split.per_sample.sum(0))),
        "dense_fraction": config.dense_fraction,
        "sq_norm_share_of_densest": float(sq[densest].sum() / sq.sum()) if sq.sum() > 0 else None,
        "spearman_g_norm_vs_density": float(spearmanr(g_norm, density).statistic),
        "spearman_bin_mean_vs_count": rank_correlation(bins["count"][filled], bins["mean"][filled]),
        "spearman_bin_sum_vs_count": rank_correlation(bins["count"][filled], bins["sum"][filled]),
    }
    return bins, heat


def _run(config: TrustRegionConfig, run_dir: Path, progress: bool) -> dict[str, Any]:
    from ..viz.pendulum_plots import plot_trust_region

    (run_dir / "config.json").write_text(json.dumps(
        {"experiment": "trust-region", **config.to_dict()}, indent=2))
    start = time.perf_counter()
    data = collect_gaussian_pendulum(config.n_episodes, config.steps_per_episode, config.action_variance,
                                     config.seed, config.clip_actions)
    t_data = time.perf_counter() - start
    bw, model, s0 = _model(data, config)

    t0 = time.perf_counter()
    table = _sweep(model, data, s0, config, progress)
    t_sweep = time.perf_counter() - t0
    _write_csv(run_dir / "policies.csv", ["theta3", "log_likelihood", "grad_norm", "log_grad_norm", "J_hat",
                                          *[f"grad_{p}" for p in PARAM_NAMES]], table[:, :-1])

    t0 = time.perf_counter()
    bins, heat = _contributions(model, data, bw, s0, config, run_dir)
    t_contrib = time.perf_counter() - t0

    t0 = time.perf_counter()
    png = plot_trust_region(
        data.states, data.actions[:, 0], table[:, 1], table[:, 3], table[:, 0], bins["w_edges"],
        bins["w_dot_edges"], bins[config.heatmap_stat], run_dir / "trust_region.png",
        heat_label=(rf"{config.heatmap_stat} $\|g_i\|$ per bin at policy $\theta_3$ = "
                    rf"{config.heatmap_theta3:g}"),
    )
    t_plot = time.perf_counter() - t0
    summary = {
        "experiment": "trust-region", "run_dir": str(run_dir), "n_samples": data.n,
        "action_mean": float(data.actions.mean()), "action_variance": float(data.actions.var()),
        "bandwidths": bw.to_dict(), "n_initial_states": int(s0.shape[0]),
        **_summarise_policies(table), "heatmap": heat, "plot": png.name,
        "timings_s": {"data": t_data, "sweep": t_sweep, "per_policy": t_sweep / len(table),
                      "contributions": t_contrib, "plot": t_plot, "total": time.perf_counter() - start},
    }
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    logger.info("trust region: spearman(loglik, log|grad|) %.3f (left %s, right %s), log|grad| in "
                "[%.2f, %.2f], densest-%.0f%% share of sum ||g_i||^2 %.3f, %.1f s",
                summary["spearman_loglik_vs_log_grad_norm"], summary["spearman_left_of_peak"],
                summary["spearman_right_of_peak"], summary["log_grad_norm_min"],
                summary["log_grad_norm_max"], 100 * config.dense_fraction,
                heat["sq_norm_share_of_densest"] or math.nan, summary["timings_s"]["total"])
    return summary
