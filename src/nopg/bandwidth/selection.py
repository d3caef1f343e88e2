"""Bandwidth selection: :func:`select_bandwidths` picks the kernel bandwidths of a data set by a
named rule (``auto``/``knn``, ``silverman``, ``scott``, ``cv``, ``relevance``) and applies the
user's factors.

The parts live apart: :mod:`nopg.bandwidth.vectors` (:class:`Bandwidths`),
:mod:`nopg.bandwidth.rules` (rules of thumb, cross-validation), :mod:`nopg.bandwidth.knn` (the
``auto`` rule and its guards) and :mod:`nopg.bandwidth.relevance` (per-dimension widths fitted by
held-out one-step prediction); this module imports their public names, so that
``from nopg.bandwidth.selection import ...`` reaches them all.
"""

from __future__ import annotations

import logging

import numpy as np
from numpy.typing import ArrayLike

from ..data.dataset import TransitionDataset
from .knn import (
    ACTION_EFFECT_MAX,
    SUPPORT_MAX_THINNESS,
    KnnSelection,
    action_effect,
    check_max_action_effect,
    knn_bandwidths,
    knn_selection,
    support_widening,
    thinness_at,
)
from .relevance import RelevanceFit, relevance_bandwidths, relevance_fit
from .rules import (
    DuplicatedDataWarning,
    cross_validated_bandwidth,
    is_grid_like,
    scott_bandwidth,
    seed_generator,
    silverman_bandwidth,
)
from .vectors import Bandwidths, broadcast_factor

__all__ = [
    "ACTION_EFFECT_MAX",
    "METHODS",
    "SUPPORT_MAX_THINNESS",
    "Bandwidths",
    "DuplicatedDataWarning",
    "action_effect",
    "check_max_action_effect",
    "cross_validated_bandwidth",
    "KnnSelection",
    "RelevanceFit",
    "is_grid_like",
    "knn_bandwidths",
    "knn_selection",
    "relevance_bandwidths",
    "relevance_fit",
    "resolve_method",
    "scott_bandwidth",
    "seed_generator",
    "select_bandwidths",
    "select_bandwidths_and_guards",
    "silverman_bandwidth",
    "support_widening",
    "thinness_at",
]

logger = logging.getLogger(__name__)

METHODS = ("auto", "knn", "silverman", "scott", "cv", "relevance")


def resolve_method(method: str) -> str:
    """The rule a method name stands for: ``"auto"`` is ``"knn"``, the others are themselves."""
    if method not in METHODS:
        raise ValueError(
            f"The 'method' parameter must be one of {', '.join(map(repr, METHODS))}. "
            f"Got {method!r} instead."
        )
    return "knn" if method == "auto" else method


def select_bandwidths(
    data: TransitionDataset,
    method: str = "auto",
    state_factor: ArrayLike = 1.0,
    action_factor: ArrayLike = 1.0,
    next_state_factor: ArrayLike | None = None,
    n_folds: int = 5,
    max_samples: int = 5000,
    seed: np.random.Generator | int | None = None,
    max_action_effect: float | None = ACTION_EFFECT_MAX,
) -> Bandwidths:
    """Select state/action bandwidths from a dataset: the bandwidths of
    :func:`select_bandwidths_and_guards` (parameters as there)."""
    return select_bandwidths_and_guards(
        data, method, state_factor, action_factor, next_state_factor, n_folds, max_samples,
        seed, max_action_effect)[0]


def select_bandwidths_and_guards(
    data: TransitionDataset,
    method: str = "auto",
    state_factor: ArrayLike = 1.0,
    action_factor: ArrayLike = 1.0,
    next_state_factor: ArrayLike | None = None,
    n_folds: int = 5,
    max_samples: int = 5000,
    seed: np.random.Generator | int | None = None,
    max_action_effect: float | None = ACTION_EFFECT_MAX,
) -> tuple[Bandwidths, KnnSelection | None]:
    """Select state/action bandwidths from a dataset; with ``auto`` also what its guards did.

    Parameters
    ----------
    data : TransitionDataset
    method : {"auto", "knn", "silverman", "scott", "cv", "relevance"}
        "auto" (= "knn") is :func:`knn_bandwidths`, local bandwidths that need no factors;
        "silverman" and "scott" are per-column rules of thumb; "cv" maximises the held-out
        likelihood of per-column density estimates (collapses on grids and trajectories);
        "relevance" starts from the ``auto`` bandwidths (with ``seed`` and
        ``max_action_effect``) and fits one width per state and action dimension by held-out
        one-step prediction of ``(s' - s, r)`` (:func:`relevance_bandwidths`, its defaults).
    state_factor, action_factor : float or array-like
        Positive multipliers applied to the selected bandwidths.
    next_state_factor : float or array-like, optional
        If given, ``next_state = (state rule) * next_state_factor``; else None.
    n_folds, max_samples, seed
        Passed to :func:`cross_validated_bandwidth` (``seed``, formerly ``rng``, also to
        :func:`knn_selection` and :func:`relevance_bandwidths`).
    max_action_effect : float or None
        ``auto`` (and the start of ``relevance``): the action guard's threshold
        (:func:`knn_selection`); ``None`` turns it off.

    Returns
    -------
    (Bandwidths, KnnSelection or None)
        The bandwidths (factors applied) and, for ``auto``/``knn``, the rule's
        :class:`KnnSelection` (its bandwidths before the factors, and the guards' factors).
    """
    if not isinstance(data, TransitionDataset):
        raise TypeError(
            f"data must be a TransitionDataset. Got {type(data).__name__} instead."
        )
    resolved = resolve_method(method)
    s_fac = broadcast_factor("state_factor", state_factor, data.state_dim)
    a_fac = broadcast_factor("action_factor", action_factor, data.action_dim)
    ns_fac = (
        None if next_state_factor is None
        else broadcast_factor("next_state_factor", next_state_factor, data.state_dim)
    )
    if resolved == "knn":
        selection = knn_selection(data, seed=seed, max_action_effect=max_action_effect)
        knn = selection.bandwidths
        result = Bandwidths(knn.state * s_fac, knn.action * a_fac,
                            None if ns_fac is None else knn.state * ns_fac)
        logger.info("selected bandwidths (%s: local k-NN rule): %s", method, result.to_dict())
        return result, selection
    if resolved == "relevance":
        fitted = relevance_bandwidths(data, seed=seed, max_action_effect=max_action_effect)
        result = Bandwidths(fitted.state * s_fac, fitted.action * a_fac,
                            None if ns_fac is None else fitted.state * ns_fac)
        logger.info("selected bandwidths (relevance): %s", result.to_dict())
        return result, None
    if method == "cv":
        generator = seed_generator(seed)

        def rule(x: np.ndarray) -> np.ndarray:
            return cross_validated_bandwidth(
                x, n_folds=n_folds, max_samples=max_samples, seed=generator
            )
    else:
        rule = silverman_bandwidth if method == "silverman" else scott_bandwidth
    try:
        state = rule(data.states)
    except ValueError as err:
        raise ValueError(f"states: {err}") from None
    try:
        action = rule(data.actions)
    except ValueError as err:
        raise ValueError(f"actions: {err}") from None
    result = Bandwidths(state * s_fac, action * a_fac, None if ns_fac is None else state * ns_fac)
    logger.info("selected bandwidths (%s): %s", method, result.to_dict())
    return result, None
