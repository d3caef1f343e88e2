"""What a task knows beyond its data, checked, and the policy it asks for.

:class:`nopg.AutoNOPG` takes a task's knowledge as arguments of ``fit``: the policy's action
bound (:func:`action_bound`), the bounds of the state space and where episodes end
(:func:`check_bounds`, passed to the models whose successors move by :func:`with_bounds`), and
the evaluation's length (the caller's, else :func:`episode_horizon` from the data), over which
:func:`model_episode_report` says how long the anchored model's own episodes of a policy last.
:func:`make_policy` builds the paper's policy for a configuration.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import ArrayLike
from torch import nn

if TYPE_CHECKING:
    from ..train.algorithm import NOPG

from ..data.dataset import TransitionDataset
from ..model.config import check_state_bounds
from ..model.factory import rollout_model
from ..policies.networks import DeterministicMLPPolicy, GaussianMLPPolicy, input_scaling_from_data
from .method_config import MethodConfig

__all__ = ["Bounds", "action_bound", "check_bounds", "episode_horizon", "make_policy",
           "model_episode_report", "with_bounds"]

logger = logging.getLogger("nopg.select.auto")

Bounds = list[list[float | None]]
"""``[low, high]`` per state dimension (``None``: unbounded)."""


def make_policy(config: MethodConfig, state_dim: int, action_dim: int,
                action_max: float | ArrayLike, data: TransitionDataset | None = None) -> nn.Module:
    """The paper's policy: an MLP (``config.hidden``) with an ``a_max tanh`` output, Gaussian
    for NOPG-S; with ``config.normalize_states`` (and ``data``) its input is standardised by the
    data's states."""
    scaling = input_scaling_from_data(data.states) if config.normalize_states and data is not None \
        else {}
    if config.stochastic:
        return GaussianMLPPolicy(state_dim, action_dim, action_max=action_max,
                                 sigma_max=config.sigma_max, hidden=config.hidden, **scaling)
    return DeterministicMLPPolicy(state_dim, action_dim, action_max=action_max,
                                  hidden=config.hidden, **scaling)


def with_bounds(config: MethodConfig, state_bounds: Bounds | None,
                terminal_bounds: Bounds | None) -> MethodConfig:
    """``config`` with ``state_bounds`` and ``terminal_bounds`` (a task's knowledge), where its
    successors move and it sets none itself; logged."""
    if config.nopg.model.successors == "kernel":
        return config
    changes = {f"model.{name}": bounds for name, bounds in (("state_bounds", state_bounds),
                                                            ("terminal_bounds", terminal_bounds))
               if bounds is not None and getattr(config.nopg.model, name) is None}
    for name, bounds in changes.items():
        logger.debug("%s of the moved successors from the task: low %s, high %s",
                     name.removeprefix("model.").replace("_", " "), *bounds)
    return config.replace(nopg=changes) if changes else config


def episode_horizon(data: TransitionDataset) -> int | None:
    """The evaluation length the data show: the length ``L`` at which their episodes are cut,
    where at least two episodes longer than one step end without a terminal transition at the
    longest such length (a repeated cut is a time limit; a single one can be the end of the
    logging). ``None`` where the data show none (episodes that end in terminals, one
    transition each, or one cut)."""
    lengths = [len(idx) for idx in data.episodes() if not data.terminals[idx[-1]]]
    if not lengths:
        return None
    longest = max(lengths)
    return longest if longest > 1 and lengths.count(longest) >= 2 else None


def action_bound(action_max: float | ArrayLike | None, data: TransitionDataset) -> np.ndarray:
    """The policy's action bound per dimension: ``action_max`` broadcast, or the largest
    ``|a|`` per dimension in the data; positive and finite or one clear error."""
    raw = np.abs(np.asarray(data.actions, float)).max(axis=0) if action_max is None else \
        np.asarray(action_max, float)
    try:
        bound = np.broadcast_to(raw, (data.action_dim,)).astype(float)
    except ValueError:
        raise ValueError(f"The 'action_max' parameter must be a number or {data.action_dim} "
                         f"numbers (one per action dimension). Got shape {raw.shape} "
                         "instead.") from None
    if not (np.isfinite(bound).all() and (bound > 0).all()):
        raise ValueError(f"The action bound must be positive and finite per dimension. Got "
                         f"{bound.tolist()} instead (all actions in the data are 0? give "
                         "action_max).")
    return bound


def check_bounds(name: str, bounds: ArrayLike | Sequence[Any] | None, state_dim: int) -> Bounds | None:
    """``[low, high]`` of ``state_dim`` entries each (``None``, ``nan`` or an infinity:
    unbounded) as plain lists, or one clear error."""
    if bounds is None:
        return None
    what = f"[low, high] with {state_dim} entries each (None, nan or inf: unbounded)"
    try:
        out = [[None if b is None or not math.isfinite(float(b)) else float(b) for b in side]
               for side in bounds]  # type: ignore[union-attr]
    except (TypeError, ValueError):
        raise ValueError(f"The '{name}' parameter must be {what}. Got {bounds!r} "
                         "instead.") from None
    if len(out) != 2 or any(len(side) != state_dim for side in out):
        raise ValueError(f"The '{name}' parameter must be {what}, one per state dimension. "
                         f"Got {[len(side) for side in out]} entries instead.")
    check_state_bounds(out, name=name)
    return out


def model_episode_report(algo: NOPG, steps: int, seed: int) -> dict[str, Any]:
    """How long the anchored model's own episodes of ``algo``'s policy last from the fit's
    initial states, up to ``steps`` (the evaluation's length), logged; a warning where they
    end before half of it on average (a failure the discount of ``J_hat`` may hide). Empty for
    other models."""
    if rollout_model(algo.model_) is None:
        return {}
    lengths = algo.model_episode_lengths(int(steps))
    mean, shortest = float(np.mean(lengths)), int(np.min(lengths))
    message = (f"seed {seed}: the model's own episodes of the final policy last "
               f"{mean:.1f} of the evaluation's {steps} steps on average (shortest {shortest})")
    if mean < steps / 2:
        logger.warning("%s: the model predicts a failure there, which J_hat (discounted, "
                       "gamma %g) may not show", message, algo.config.gamma)
    else:
        logger.info(message)
    return {"model_episode_steps_mean": mean, "model_episode_steps_min": shortest,
            "model_episode_steps_of": int(steps)}
