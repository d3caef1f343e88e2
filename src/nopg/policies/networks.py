"""Policies for NOPG: deterministic MLP, Gaussian MLP and linear.

Any ``torch.nn.Module`` that maps a batch of states ``(batch, d_s)`` to actions ``(batch, d_a)``
works as a deterministic policy. A stochastic (Gaussian) policy additionally provides
``mean_std(states) -> (mean, std)``, both ``(batch, d_a)``; NOPG-S draws reparameterised actions
``a = mean + std * xi`` from it, so gradients flow through both.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

_ACTIVATIONS = {"relu": nn.ReLU, "tanh": nn.Tanh, "elu": nn.ELU, "silu": nn.SiLU}


def _mlp(in_dim: int, out_dim: int, hidden: Sequence[int], activation: str) -> nn.Sequential:
    if activation not in _ACTIVATIONS:
        raise ValueError(
            f"The 'activation' parameter must be one of {sorted(_ACTIVATIONS)}. "
            f"Got {activation!r} instead."
        )
    layers: list[nn.Module] = []
    last = in_dim
    for width in hidden:
        if int(width) < 1:
            raise ValueError(f"hidden layer widths must be >= 1. Got {list(hidden)} instead.")
        layers += [nn.Linear(last, int(width)), _ACTIVATIONS[activation]()]
        last = int(width)
    layers.append(nn.Linear(last, out_dim))
    return nn.Sequential(*layers)


def _input_scaling(module: nn.Module, state_dim: int, shift: Sequence[float] | None,
                   scale: Sequence[float] | None) -> dict[str, Any]:
    """Register ``state_shift``/``state_scale`` buffers (policy input ``(s - shift) / scale``).

    They are non-persistent: the spec carries them, so checkpoints without them still load.
    """
    out: dict[str, Any] = {}
    for name, value, default in (("state_shift", shift, 0.0), ("state_scale", scale, 1.0)):
        if value is None:
            arr = np.full(state_dim, default)
        else:
            arr = np.asarray(value, dtype=float).reshape(-1)
            if arr.shape[0] != state_dim or not np.all(np.isfinite(arr)):
                raise ValueError(f"{name} must hold {state_dim} finite values. Got {value!r} instead.")
            if name == "state_scale" and not np.all(arr > 0):
                raise ValueError(f"state_scale must be positive. Got {value!r} instead.")
            out[name] = arr.tolist()
        module.register_buffer(name, torch.tensor(arr), persistent=False)
    return out


def _scaled_input(module: nn.Module, states: torch.Tensor) -> torch.Tensor:
    return (states - module.state_shift.to(states.dtype)) / module.state_scale.to(states.dtype)


def input_scaling_from_data(states: np.ndarray) -> dict[str, list[float]]:
    """``state_shift``/``state_scale`` keyword arguments that standardise ``states`` (n, d_s)."""
    states = np.asarray(states, dtype=float)
    std = states.std(axis=0)
    return {"state_shift": states.mean(axis=0).tolist(),
            "state_scale": np.where(std > 0, std, 1.0).tolist()}


def _check_dims(state_dim: int, action_dim: int) -> None:
    for name, value in (("state_dim", state_dim), ("action_dim", action_dim)):
        if int(value) < 1:
            raise ValueError(f"The '{name}' parameter must be >= 1. Got {value!r} instead.")


def _per_dim(name: str, value: float | Sequence[float], action_dim: int) -> np.ndarray:
    """Validate a scalar or per-dimension positive bound and expand it to (action_dim,)."""
    arr = np.atleast_1d(np.asarray(value, dtype=float))
    if arr.ndim != 1 or arr.shape[0] not in (1, action_dim):
        raise ValueError(f"{name} must be a scalar or have one entry per action dimension "
                         f"({action_dim}). Got {value!r} instead.")
    if not np.all(np.isfinite(arr) & (arr > 0)):
        raise ValueError(f"{name} must be positive and finite. Got {value!r} instead.")
    return np.broadcast_to(arr, (action_dim,)).copy()


class _ScaledMLPPolicy(nn.Module):
    """An MLP on the scaled state ``(s - state_shift) / state_scale``, with positive
    per-action-dimension bounds (``action_max``, ...) as buffers and its arguments as its spec."""

    def __init__(self, state_dim: int, action_dim: int, bounds: dict[str, float | Sequence[float]],
                 n_outputs: int, hidden: Sequence[int], activation: str,
                 state_shift: Sequence[float] | None, state_scale: Sequence[float] | None) -> None:
        super().__init__()
        _check_dims(state_dim, action_dim)
        values = {name: _per_dim(name, value, action_dim) for name, value in bounds.items()}
        self._spec = dict(state_dim=int(state_dim), action_dim=int(action_dim),
                          **{name: v.tolist() for name, v in values.items()},
                          hidden=[int(h) for h in hidden], activation=activation)
        self._spec.update(_input_scaling(self, int(state_dim), state_shift, state_scale))
        self.net = _mlp(state_dim, n_outputs, hidden, activation)
        for name, v in values.items():
            self.register_buffer(name, torch.tensor(v))

    def spec(self) -> dict[str, Any]:
        """JSON-serialisable constructor arguments (see :func:`policy_from_spec`)."""
        return {"type": type(self).__name__, "kwargs": dict(self._spec)}


class DeterministicMLPPolicy(_ScaledMLPPolicy):
    """``a = a_max * tanh(f_theta(s))`` with an MLP ``f_theta`` (paper appendix: 1 x 50 ReLU).

    Parameters
    ----------
    state_dim, action_dim : int
        Dimensions of states and actions.
    action_max : float or sequence of float
        Per-dimension action bound ``a_max``.
    hidden : sequence of int
        Hidden layer widths.
    activation : {"relu", "tanh", "elu", "silu"}
    state_shift, state_scale : sequence of float, optional
        The MLP sees ``(s - state_shift) / state_scale`` (default: ``s``);
        :func:`input_scaling_from_data` standardises by the data.
    """

    def __init__(
        self,
        state_dim: int,
        action_dim: int,
        action_max: float | Sequence[float] = 1.0,
        hidden: Sequence[int] = (50,),
        activation: str = "relu",
        state_shift: Sequence[float] | None = None,
        state_scale: Sequence[float] | None = None,
    ) -> None:
        super().__init__(state_dim, action_dim, {"action_max": action_max}, action_dim, hidden,
                         activation, state_shift, state_scale)

    def forward(self, states: torch.Tensor) -> torch.Tensor:
        """Actions of shape (batch, action_dim) for states of shape (batch, state_dim)."""
        return self.action_max.to(states.dtype) * torch.tanh(self.net(_scaled_input(self, states)))


class GaussianMLPPolicy(_ScaledMLPPolicy):
    """Gaussian policy ``N(mu(s), diag(sigma(s)^2))`` (paper appendix, NOPG-S).

    One MLP with ``2 * action_dim`` outputs ``[f, g]``: ``mu = a_max * tanh(f)``,
    ``sigma = sigma_max * sigmoid(g) * sigma_scale``. ``sigma_scale`` (a buffer, 1 by default) is
    what the fit loop decays linearly when ``NOPGConfig.sigma_decay`` is set.
    ``forward`` returns the mean, so the policy can be evaluated deterministically.
    ``state_shift``/``state_scale`` scale the input as in :class:`DeterministicMLPPolicy`.
    """

    def __init__(
        self,
        state_dim: int,
        action_dim: int,
        action_max: float | Sequence[float] = 1.0,
        sigma_max: float | Sequence[float] = 1.0,
        hidden: Sequence[int] = (50,),
        activation: str = "relu",
        state_shift: Sequence[float] | None = None,
        state_scale: Sequence[float] | None = None,
    ) -> None:
        super().__init__(state_dim, action_dim, {"action_max": action_max, "sigma_max": sigma_max},
                         2 * action_dim, hidden, activation, state_shift, state_scale)
        self.action_dim = int(action_dim)
        self.register_buffer("sigma_scale", torch.ones(()))

    def mean_std(self, states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Mean and standard deviation, each of shape (batch, action_dim)."""
        out = self.net(_scaled_input(self, states))
        f, g = out[..., : self.action_dim], out[..., self.action_dim:]
        mean = self.action_max.to(states.dtype) * torch.tanh(f)
        std = self.sigma_max.to(states.dtype) * torch.sigmoid(g) * self.sigma_scale.to(states.dtype)
        return mean, std

    def forward(self, states: torch.Tensor) -> torch.Tensor:
        """The mean action (the deterministic action used for evaluation)."""
        return self.mean_std(states)[0]

    def sample(self, states: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        """Reparameterised sample ``mean + std * xi``."""
        mean, std = self.mean_std(states)
        xi = torch.randn(mean.shape, generator=generator, dtype=mean.dtype, device=mean.device)
        return mean + std * xi


class LinearPolicy(nn.Module):
    """Linear deterministic policy ``a = W s + b`` (``W`` zero-initialised).

    Parameters
    ----------
    state_dim, action_dim : int
    bias : bool
        Whether to learn the offset ``b``.
    """

    def __init__(self, state_dim: int, action_dim: int, bias: bool = True) -> None:
        super().__init__()
        _check_dims(state_dim, action_dim)
        self._spec = dict(state_dim=int(state_dim), action_dim=int(action_dim), bias=bool(bias))
        self.linear = nn.Linear(state_dim, action_dim, bias=bias)
        nn.init.zeros_(self.linear.weight)
        if bias:
            nn.init.zeros_(self.linear.bias)

    def forward(self, states: torch.Tensor) -> torch.Tensor:
        return self.linear(states)

    def spec(self) -> dict[str, Any]:
        return {"type": type(self).__name__, "kwargs": dict(self._spec)}


class DiagonalLinearPolicy(nn.Module):
    """Linear policy with a diagonal gain, ``a = theta * s`` (the LQG's ``K = diag(theta)``).

    With ``sigma`` it is also the Gaussian policy ``N(theta * s, diag(sigma^2))`` (``mean_std``),
    whose standard deviation is fixed (a buffer, not a parameter): the paper's gradient analysis
    differentiates with respect to ``theta`` only.

    Parameters
    ----------
    theta : array-like of shape (d,)
        Initial gains; ``state_dim == action_dim == d``.
    sigma : float or array-like of shape (d,), optional
        Standard deviation of the Gaussian policy; ``None`` makes ``mean_std`` unavailable
        (a purely deterministic policy).
    """

    def __init__(self, theta: Sequence[float] | np.ndarray,
                 sigma: float | Sequence[float] | None = None) -> None:
        super().__init__()
        th = np.atleast_1d(np.asarray(theta, dtype=np.float64))
        if th.ndim != 1 or th.size < 1 or not np.all(np.isfinite(th)):
            raise ValueError(f"theta must be a finite vector. Got {theta!r} instead.")
        d = int(th.size)
        self._spec = dict(theta=th.tolist(),
                          sigma=None if sigma is None else _per_dim("sigma", sigma, d).tolist())
        self.theta = nn.Parameter(torch.tensor(th))
        self.has_sigma = sigma is not None
        self.register_buffer("sigma", torch.tensor(_per_dim("sigma", 1.0 if sigma is None else sigma, d)))

    def forward(self, states: torch.Tensor) -> torch.Tensor:
        return states * self.theta.to(states.dtype)

    def mean_std(self, states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Mean ``theta * s`` and the fixed standard deviation, both (batch, d)."""
        if not self.has_sigma:
            raise ValueError("this DiagonalLinearPolicy is deterministic (sigma=None)")
        mean = self(states)
        return mean, self.sigma.to(states.dtype).expand_as(mean)

    def spec(self) -> dict[str, Any]:
        return {"type": type(self).__name__, "kwargs": dict(self._spec)}


def gaussian_log_prob(policy: nn.Module, states: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    """``log pi(a | s)`` of a Gaussian policy (one that provides ``mean_std``), shape (batch,).

    The action dimensions are independent: the log-densities are summed over them.
    """
    if not is_stochastic(policy):
        raise ValueError(f"{type(policy).__name__} has no mean_std: a log-likelihood needs a "
                         "Gaussian policy")
    mean, std = policy.mean_std(states)
    if actions.shape != mean.shape:
        raise ValueError(f"actions must have shape {tuple(mean.shape)}; got {tuple(actions.shape)}")
    return normal_log_density(actions, mean, std)


def normal_log_density(actions: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """Log-density of independent normals ``N(mean, std^2)`` summed over the last axis."""
    z = (actions - mean) / std
    return (-0.5 * z * z - torch.log(std) - 0.5 * math.log(2.0 * math.pi)).sum(-1)


def mean_actions(policy: nn.Module, states: torch.Tensor) -> torch.Tensor:
    """The policy's action (a Gaussian policy's mean) at ``states``, shape (batch, d_a)."""
    if is_stochastic(policy):
        return policy.mean_std(states)[0]
    return policy(states)


_POLICIES = {cls.__name__: cls for cls in (DeterministicMLPPolicy, GaussianMLPPolicy, LinearPolicy,
                                          DiagonalLinearPolicy)}


def policy_from_spec(spec: dict[str, Any]) -> nn.Module:
    """Rebuild a built-in policy from :meth:`spec` output (weights are loaded separately).

    A :class:`nopg.data.dimensions.StateSelect` is rebuilt around its rebuilt inner policy.
    """
    kind = spec.get("type")
    if kind == "StateSelect":
        from ..data.dimensions import StateSelect

        kwargs = spec.get("kwargs", {})
        if kwargs.get("policy") is None:
            raise ValueError("this StateSelect wraps a custom policy: pass the policy module "
                             "explicitly to load it")
        return StateSelect.from_spec(kwargs, policy_from_spec(kwargs["policy"]))
    if kind not in _POLICIES:
        raise ValueError(
            f"Unknown policy type {kind!r}; known types are {sorted(_POLICIES)}. Pass the policy "
            "module explicitly to load a custom policy."
        )
    return _POLICIES[kind](**spec.get("kwargs", {}))


def is_stochastic(policy: nn.Module) -> bool:
    """True when ``policy`` provides ``mean_std`` (a Gaussian policy usable by NOPG-S).

    A policy can opt out with a false ``has_sigma`` attribute (``DiagonalLinearPolicy(sigma=None)``).
    """
    return callable(getattr(policy, "mean_std", None)) and bool(getattr(policy, "has_sigma", True))
