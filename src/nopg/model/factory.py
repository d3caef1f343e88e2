"""The Bellman model a configuration names, built by one factory.

``ModelConfig.successors`` chooses among three models of the same data: the paper's kernel model
(:class:`nopg.model.bellman.NonparametricBellman`, ``"kernel"``), its two-hop local-linear form
(:class:`nopg.model.local_linear.LocalLinearBellman`, ``"local-linear"``) and the anchored model
(:class:`nopg.model.anchored.AnchoredBellman`, ``"anchored"``). :func:`bellman_model` builds the class
the configuration (or the ``successors`` keyword) names, so that callers that take the setting
from a configuration need not know the classes, and no model module imports another's subclass.
"""

from __future__ import annotations

from typing import Any

from ..bandwidth.selection import Bandwidths
from ..data.dataset import TransitionDataset
from .anchored import AnchoredBellman
from .bellman import NonparametricBellman
from .config import ModelConfig
from .local_linear import LocalLinearBellman

__all__ = ["MODELS", "bellman_model"]

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
