"""An ensemble of probabilistic MLP dynamics models for the model-based baselines (MOPO, MOReL).

Written for this project (no MOPO/MOReL library installs with its torch 2.13 and gymnasium 1.x;
see :mod:`nopg.baselines.model_based`). Each of the ``K`` members maps a standardised ``(s, a)``
to a Gaussian over the standardised target ``(s' - s, r)``: a mean and a log-variance, the latter
softly bounded between learned limits as in MOPO/MBPO (Yu et al. 2020; Chua et al. 2018)::

    logvar = max_lv - softplus(max_lv - raw);  logvar = min_lv + softplus(logvar - min_lv)

trained by the Gaussian negative log-likelihood plus ``0.01 (sum max_lv - sum min_lv)``, with
Adam on mini-batches (members see independent shuffles). Training stops after ``max_epochs``
or, with a hold-out fraction, when no member improved its hold-out MSE by 1% for ``patience``
epochs (each member keeps its best weights). The ``n_elites`` members with the lowest hold-out
MSE are the ones used for prediction (all of them without a hold-out).

Terminals: when the data hold terminal transitions, every member also has a logit for
``terminal`` trained by binary cross-entropy; the ensemble's terminal probability is the members'
mean. Without terminals in the data, no transition of the model is terminal.

This module imports numpy and torch only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from ..data.dataset import TransitionDataset
from ..validation import check_choice, check_positive_int

__all__ = ["DynamicsEnsemble", "EnsembleConfig", "EnsemblePrediction", "fit_ensemble"]


@dataclass(frozen=True)
class EnsembleConfig:
    """Settings of :func:`fit_ensemble`.

    Attributes
    ----------
    n_models, n_elites : int
        Members trained and members used (``n_elites <= n_models``).
    hidden : tuple of int
        Hidden layer widths of every member.
    activation : {"silu", "relu"}
    learning_rate, weight_decay : float
        Adam's step size and L2 penalty.
    batch_size, max_epochs : int
    holdout : float
        Fraction of the transitions held out for early stopping and elite selection (0: none,
        a fixed ``max_epochs``).
    patience : int
        Epochs without a 1% hold-out improvement before stopping.
    """

    n_models: int = 7
    n_elites: int = 5
    hidden: tuple[int, ...] = (64, 64)
    activation: str = "silu"
    learning_rate: float = 1e-3
    weight_decay: float = 1e-5
    batch_size: int = 256
    max_epochs: int = 100
    holdout: float = 0.1
    patience: int = 5

    def __post_init__(self) -> None:
        for name in ("n_models", "n_elites", "batch_size", "max_epochs", "patience"):
            check_positive_int(name, getattr(self, name))
        if self.n_elites > self.n_models:
            raise ValueError(f"n_elites ({self.n_elites}) must not exceed n_models "
                             f"({self.n_models}).")
        check_choice("activation", self.activation, ("silu", "relu"))
        if not 0 <= self.holdout < 1:
            raise ValueError(f"The 'holdout' parameter must lie in [0, 1). "
                             f"Got {self.holdout!r} instead.")
        if not self.hidden or any(isinstance(h, bool) or not isinstance(h, int) or h < 1
                                  for h in self.hidden):
            raise ValueError(f"The 'hidden' parameter must be a non-empty tuple of positive "
                             f"ints. Got {self.hidden!r} instead.")


class EnsembleLinear(nn.Module):
    """``K`` independent affine maps applied at once: (K, B, d_in) -> (K, B, d_out)."""

    def __init__(self, n_models: int, d_in: int, d_out: int) -> None:
        super().__init__()
        bound = 1.0 / math.sqrt(d_in)
        self.weight = nn.Parameter(torch.empty(n_models, d_in, d_out).uniform_(-bound, bound))
        self.bias = nn.Parameter(torch.zeros(n_models, 1, d_out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.baddbmm(self.bias, x, self.weight)


class GaussianEnsembleNet(nn.Module):
    """The members' networks: standardised inputs to means, bounded log-variances, logits."""

    def __init__(self, n_models: int, d_in: int, d_out: int, hidden: tuple[int, ...],
                 activation: str, terminal: bool) -> None:
        super().__init__()
        widths = (d_in, *hidden)
        self.layers = nn.ModuleList(EnsembleLinear(n_models, a, b)
                                    for a, b in zip(widths[:-1], widths[1:]))
        self.head = EnsembleLinear(n_models, widths[-1], 2 * d_out + int(terminal))
        self.act = F.silu if activation == "silu" else F.relu
        self.d_out = d_out
        self.terminal = terminal
        self.max_logvar = nn.Parameter(torch.full((d_out,), 0.5))
        self.min_logvar = nn.Parameter(torch.full((d_out,), -10.0))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        for layer in self.layers:
            x = self.act(layer(x))
        out = self.head(x)
        mean, raw = out[..., :self.d_out], out[..., self.d_out:2 * self.d_out]
        logvar = self.max_logvar - F.softplus(self.max_logvar - raw)
        logvar = self.min_logvar + F.softplus(logvar - self.min_logvar)
        logit = out[..., -1] if self.terminal else None
        return mean, logvar, logit


@dataclass
class EnsemblePrediction:
    """Every member's Gaussian over ``(s' - s, r)`` in the data's units, for a batch.

    Attributes
    ----------
    mean, std : ndarray of shape (K, B, d_s + 1)
        Per member, the mean and standard deviation of ``(s' - s, r)`` (reward last).
    mean_standardised : ndarray of shape (K, B, d_s + 1)
        The means in the targets' standardised units (for disagreement across state dims).
    terminal_prob : ndarray of shape (B,)
        The members' mean probability that the transition is terminal (zeros without terminals).
    """

    mean: np.ndarray
    std: np.ndarray
    mean_standardised: np.ndarray
    terminal_prob: np.ndarray


class DynamicsEnsemble:
    """A trained ensemble (made by :func:`fit_ensemble`); predicts with its elite members."""

    def __init__(self, net: GaussianEnsembleNet, scales: dict[str, torch.Tensor],
                 elites: np.ndarray) -> None:
        self.net = net.eval()
        self.scales = scales
        self.elites = np.asarray(elites, dtype=np.int64)

    @property
    def dtype(self) -> torch.dtype:
        return self.scales["x_mean"].dtype

    @torch.no_grad()
    def predict(self, states: np.ndarray, actions: np.ndarray) -> EnsemblePrediction:
        """The elite members' predictions at ``(states, actions)`` of shapes (B, d_s), (B, d_a)."""
        x = np.concatenate([np.atleast_2d(states), np.atleast_2d(actions)], axis=1)
        if not np.all(np.isfinite(x)):
            raise ValueError("the ensemble got non-finite states or actions")
        xt = (torch.as_tensor(x, dtype=self.dtype) - self.scales["x_mean"]) / self.scales["x_std"]
        mean, logvar, logit = self.net(xt.unsqueeze(0).expand(self.net.layers[0].weight.shape[0],
                                                             -1, -1))
        idx = torch.as_tensor(self.elites)
        mean, logvar = mean[idx], logvar[idx]
        y_std = self.scales["y_std"]
        prob = (torch.sigmoid(logit[idx]).mean(0) if logit is not None
                else torch.zeros(len(x), dtype=self.dtype))
        return EnsemblePrediction(
            mean=(mean * y_std + self.scales["y_mean"]).numpy(),
            std=(torch.exp(0.5 * logvar) * y_std).numpy(), mean_standardised=mean.numpy(),
            terminal_prob=prob.numpy())


def _targets(data: TransitionDataset) -> tuple[np.ndarray, np.ndarray]:
    x = np.concatenate([data.states, data.actions], axis=1)
    y = np.concatenate([data.next_states - data.states, data.rewards[:, None]], axis=1)
    return x, y


def _scales(x: np.ndarray, y: np.ndarray, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    def t(a: np.ndarray) -> torch.Tensor:
        return torch.as_tensor(a, dtype=dtype)
    x_std, y_std = x.std(0), y.std(0)
    return {"x_mean": t(x.mean(0)), "x_std": t(np.where(x_std > 1e-8, x_std, 1.0)),
            "y_mean": t(y.mean(0)), "y_std": t(np.where(y_std > 1e-8, y_std, 1.0))}


def _loss(net: GaussianEnsembleNet, x: torch.Tensor, y: torch.Tensor,
          term: torch.Tensor) -> torch.Tensor:
    """Gaussian NLL (+ terminal BCE) summed over members, plus the log-variance bound term."""
    mean, logvar, logit = net(x)
    nll = (((mean - y) ** 2) * torch.exp(-logvar) + logvar).mean(dim=(1, 2)).sum()
    if logit is not None:
        nll = nll + F.binary_cross_entropy_with_logits(logit, term, reduction="none").mean(1).sum()
    return nll + 0.01 * (net.max_logvar.sum() - net.min_logvar.sum())


@torch.no_grad()
def _holdout_mse(net: GaussianEnsembleNet, x: torch.Tensor, y: torch.Tensor) -> np.ndarray:
    mean, _, _ = net(x.unsqueeze(0).expand(net.head.weight.shape[0], -1, -1))
    return ((mean - y) ** 2).mean(dim=(1, 2)).numpy()


def _check_data(data: TransitionDataset) -> None:
    if data.n < 2:
        raise ValueError(f"the dynamics ensemble needs at least 2 transitions. Got {data.n}.")
    for name in ("states", "actions", "rewards", "next_states"):
        if not np.all(np.isfinite(getattr(data, name))):
            raise ValueError(f"the data's {name} hold NaN or infinite values")


def fit_ensemble(data: TransitionDataset, config: EnsembleConfig | None = None, seed: int = 0,
                 dtype: torch.dtype = torch.float32) -> DynamicsEnsemble:
    """Train an ensemble on ``data`` (module docstring) and return it.

    Parameters
    ----------
    data : TransitionDataset
        At least two finite transitions.
    config : EnsembleConfig, optional
    seed : int
        Seeds the initialisation, the hold-out split and the shuffles.
    dtype : torch.dtype
        Of the networks (float64 in tests).
    """
    config = config or EnsembleConfig()
    _check_data(data)
    rng = np.random.default_rng(seed)
    torch.manual_seed(seed)
    x, y = _targets(data)
    order = rng.permutation(data.n)
    n_hold = min(int(round(config.holdout * data.n)), data.n - 1)
    hold, train = order[:n_hold], order[n_hold:]
    scales = _scales(x[train], y[train], dtype)
    xs = (torch.as_tensor(x, dtype=dtype) - scales["x_mean"]) / scales["x_std"]
    ys = (torch.as_tensor(y, dtype=dtype) - scales["y_mean"]) / scales["y_std"]
    terms = torch.as_tensor(np.array(data.terminals, dtype=np.float64), dtype=dtype)
    net = GaussianEnsembleNet(config.n_models, x.shape[1], y.shape[1], config.hidden,
                              config.activation, bool(data.terminals.any())).to(dtype)
    _train(net, config, rng, (xs[train], ys[train], terms[train]),
           (xs[hold], ys[hold]) if n_hold else None)
    if n_hold:
        elites = np.argsort(_holdout_mse(net, xs[hold], ys[hold]), kind="stable")
    else:
        elites = np.arange(config.n_models)
    return DynamicsEnsemble(net, scales, np.sort(elites[:config.n_elites]))


def _train(net: GaussianEnsembleNet, config: EnsembleConfig, rng: np.random.Generator,
           train: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
           hold: tuple[torch.Tensor, torch.Tensor] | None) -> None:
    """Mini-batch Adam with per-member shuffles; early stopping on the hold-out MSE."""
    optim = torch.optim.Adam(net.parameters(), lr=config.learning_rate,
                             weight_decay=config.weight_decay)
    x, y, term = train
    k, n = config.n_models, len(x)
    best = _holdout_mse(net, *hold) if hold else None
    snapshot = {name: p.detach().clone() for name, p in net.named_parameters()}
    stale = 0
    for _ in range(config.max_epochs):
        perm = np.stack([rng.permutation(n) for _ in range(k)])
        for start in range(0, n, config.batch_size):
            idx = torch.as_tensor(perm[:, start:start + config.batch_size])
            optim.zero_grad()
            _loss(net, x[idx], y[idx], term[idx]).backward()
            optim.step()
        if hold is None:
            continue
        mse = _holdout_mse(net, *hold)
        improved = (best - mse) / np.maximum(best, 1e-12) > 0.01
        _keep_best(net, snapshot, improved)
        best = np.where(improved, mse, best)
        stale = 0 if improved.any() else stale + 1
        if stale >= config.patience:
            break
    if hold is not None:
        _restore(net, snapshot)


@torch.no_grad()
def _keep_best(net: GaussianEnsembleNet, snapshot: dict[str, torch.Tensor],
               improved: np.ndarray) -> None:
    """Copy the improved members' weights (and the shared bounds) into ``snapshot``."""
    if not improved.any():
        return
    members = torch.as_tensor(np.flatnonzero(improved))
    for name, p in net.named_parameters():
        if p.dim() == 3:                       # per-member weights and biases (K, ., .)
            snapshot[name][members] = p[members]
        else:
            snapshot[name] = p.detach().clone()


@torch.no_grad()
def _restore(net: GaussianEnsembleNet, snapshot: dict[str, torch.Tensor]) -> None:
    for name, p in net.named_parameters():
        p.copy_(snapshot[name])
