"""The Bellman model a configuration names, built by one factory.

``ModelConfig.successors`` chooses among three models of the same data: the paper's kernel model
(:class:`nopg.model.bellman.NonparametricBellman`, ``"kernel"``), its two-hop local-linear form
(:class:`nopg.model.local_linear.LocalLinearBellman`, ``"local-linear"``) and the anchored model
(:class:`nopg.model.anchored.AnchoredBellman`, ``"anchored"``). :func:`bellman_model` builds the class
the configuration (or the ``successors`` keyword) names, so that callers that take the setting
from a configuration need not know the classes, and no model module imports another's subclass.
What a model that rolls the policy out adds (the model's own episodes) is the small protocol
:class:`RolloutModel`; :func:`rollout_model` gives it where the model has it, so the estimator
asks for a capability instead of testing classes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, cast

import numpy as np
import torch
from torch import nn

from ..bandwidth.selection import Bandwidths
from ..data.dataset import TransitionDataset
from .anchored import AnchoredBellman
from .bellman import NonparametricBellman
from .config import ModelConfig
from .local_linear import LocalLinearBellman

if TYPE_CHECKING:
    from ..policies.candidates import CandidatePolicies

__all__ = ["MODELS", "RolloutModel", "bellman_model", "rollout_model"]

MODELS: dict[str, type[NonparametricBellman]] = {
    cls.SUCCESSORS: cls for cls in (NonparametricBellman, LocalLinearBellman, AnchoredBellman)}
"""The model class of each ``successors`` value."""


def bellman_model(data: TransitionDataset, bandwidths: Bandwidths, gamma: float,
                  config: ModelConfig | None = None, **settings: Any) -> NonparametricBellman:
    """The model of ``data`` that ``config`` (with ``settings`` replacing its fields, as
    :class:`~nopg.model.bellman.NonparametricBellman` takes them) names by its ``successors``.

    Raises
    ------
    ValueError
        For an unknown ``successors`` (the known ones named).
    """
    default = config.successors if isinstance(config, ModelConfig) else "kernel"
    successors = settings.get("successors", default)
    if successors not in MODELS:
        raise ValueError(f"The 'successors' parameter must be one of {', '.join(MODELS)}. "
                         f"Got {successors!r} instead.")
    return MODELS[successors](data, bandwidths, gamma, config, **settings)


class RolloutModel(Protocol):
    """What a model that rolls the policy out itself (``ROLLS_OUT``) answers besides a solve:
    the length of its own episodes of a policy, and the rollouts of several parameter sets of one
    policy at once (:class:`~nopg.model.anchored.AnchoredBellman`)."""

    def episode_lengths(self, policy: nn.Module, initial_states: np.ndarray | torch.Tensor,
                        steps: int, generator: torch.Generator | None = None,
                        from_anchors: bool = False) -> np.ndarray: ...

    def candidate_rollouts(self, policies: CandidatePolicies,
                           initial_states: np.ndarray | torch.Tensor, steps: int
                           ) -> tuple[list[torch.Tensor], list[np.ndarray]]: ...


def rollout_model(model: NonparametricBellman | None) -> RolloutModel | None:
    """``model`` as a :class:`RolloutModel` where it rolls the policy out, else ``None``."""
    return cast(RolloutModel, model) if model is not None and model.ROLLS_OUT else None
