"""The ``auto`` bandwidth rule: local k-nearest-neighbour bandwidths and their three guards.

:func:`knn_selection` takes the state bandwidths from the data's local spacing and the action
bandwidths from the action spread, then applies the replay guard and the support guard (which
widen the state bandwidths, :func:`support_widening` with :func:`thinness_at`) and the action
guard (which narrows the action bandwidths where :func:`action_effect` is large); it returns a
:class:`KnnSelection` with what each guard did. :func:`knn_bandwidths` is its bandwidths alone.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from ..data.dataset import TransitionDataset
from .rules import checked_std, data_columns, seed_generator
from .vectors import Bandwidths, positive_vector

__all__ = [
    "ACTION_EFFECT_MAX",
    "KnnSelection",
    "SUPPORT_MAX_THINNESS",
    "action_effect",
    "check_max_action_effect",
    "knn_bandwidths",
    "knn_selection",
    "support_widening",
    "thinness_at",
]

logger = logging.getLogger("nopg.bandwidth.selection")    # the records keep the name of the module they left

_SUPPORT_QUERIES = 2000    # next states at which the support guard measures the thinness
SUPPORT_MAX_THINNESS = 0.5
"""The ``auto`` rule's support guard: the median thinness near the next states at most this."""
ACTION_EFFECT_MAX = 2.0
"""The ``auto`` rule's action guard: the state bandwidths by which a change of one action
bandwidth may move the next state before the action bandwidth is narrowed."""


def _check_knn_arguments(k: int, max_queries: int, coverage: float, reach: float,
                         max_thinness: float | None, support_radius: float,
                         max_action_effect: float | None = None) -> None:
    """Clear errors for the settings of :func:`knn_selection`."""
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"The 'k' parameter must be a positive int. Got {k!r} instead.")
    if not 0 < coverage <= 1:
        raise ValueError(f"The 'coverage' parameter must be in (0, 1]. Got {coverage!r} instead.")
    if not reach > 0:
        raise ValueError(f"The 'reach' parameter must be positive. Got {reach!r} instead.")
    if isinstance(max_queries, bool) or not isinstance(max_queries, (int, np.integer)) \
            or max_queries < 1:
        raise ValueError(f"The 'max_queries' parameter must be a positive int. "
                         f"Got {max_queries!r} instead.")
    if max_thinness is not None and not 0 < max_thinness < 1:
        raise ValueError(f"The 'max_thinness' parameter must be in (0, 1) or None. "
                         f"Got {max_thinness!r} instead.")
    if not support_radius > 0:
        raise ValueError(f"The 'support_radius' parameter must be positive. Got {support_radius!r} instead.")
    check_max_action_effect(max_action_effect)


def check_max_action_effect(value: object) -> None:
    """Refuse a ``max_action_effect`` (the ``auto`` rule's action guard) that is not ``None`` or
    a positive finite number (booleans and strings included)."""
    if value is None:
        return
    number = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)
    if not (number and 0 < value < np.inf):
        raise ValueError(f"The 'max_action_effect' parameter must be positive and finite or None. "
                         f"Got {value!r} instead.")


@dataclass(frozen=True)
class KnnSelection:
    """What :func:`knn_selection` found: the bandwidths, the factors by which its two state
    guards widened the state bandwidths (1.0: the guard did not act), the action effect per
    action dimension (:func:`action_effect`, at the action spread) and the factors by which the
    action guard narrowed the action bandwidths (1.0 each: it did not act; empty when off)."""

    bandwidths: Bandwidths
    replay_widening: float
    support_widening: float
    action_effect: tuple[float, ...] = ()
    action_narrowing: tuple[float, ...] = ()


def knn_bandwidths(
    data: TransitionDataset,
    k: int = 10,
    max_queries: int = 20_000,
    seed: np.random.Generator | int | None = None,
    coverage: float = 0.9,
    reach: float = 8.0,
    max_thinness: float | None = SUPPORT_MAX_THINNESS,
    support_radius: float = 2.0,
    max_action_effect: float | None = ACTION_EFFECT_MAX,
) -> Bandwidths:
    """The bandwidths of :func:`knn_selection`, the rule behind ``method="auto"`` (parameters
    as there)."""
    return knn_selection(data, k, max_queries, seed, coverage, reach, max_thinness,
                         support_radius, max_action_effect).bandwidths


def knn_selection(
    data: TransitionDataset,
    k: int = 10,
    max_queries: int = 20_000,
    seed: np.random.Generator | int | None = None,
    coverage: float = 0.9,
    reach: float = 8.0,
    max_thinness: float | None = SUPPORT_MAX_THINNESS,
    support_radius: float = 2.0,
    max_action_effect: float | None = ACTION_EFFECT_MAX,
) -> KnnSelection:
    """Local bandwidths from the data's own spacing: the rule behind ``method="auto"``.

    State, per dimension: the median absolute difference between a next state ``s'_i`` and its
    ``k`` nearest data states ``s_j`` (neighbours found in the state space standardised by each
    dimension's standard deviation). This is the scale at which the model must look up where a
    transition leads, so it follows the data's local spacing: the spacing of a grid, the
    distance between neighbouring trajectories, the step along a trajectory. Marginal rules
    (Silverman, Scott) see only the spread of each coordinate and smooth far too much on data
    that lie on a few trajectories.

    Action, per dimension: the standard deviation of the data's actions times ``sqrt(d_a)``. The
    model must weigh every action the policy may take at every state, and with logged data each
    neighbourhood in state space holds only a few actions; a kernel as wide as the action spread
    keeps ``Q(s, a)`` an average over those neighbours, tilted towards the closer actions,
    instead of a copy of the single nearest one that the policy would exploit. With ``d_a``
    action dimensions the squared kernel distance between two independent data actions adds up
    over the dimensions; the factor ``sqrt(d_a)`` keeps its expectation at 2, as in one dimension.

    Replay guard: where most data sit in one place (a controller holding a set point), the median
    spacing is that of the cluster, and elsewhere a next state's only neighbour within many
    bandwidths is its own successor, so the model replays the logged trajectory whatever the
    action. The state bandwidths are therefore widened (all by one factor) until a share
    ``coverage`` of the next states have 5 data states within ``reach`` bandwidths.

    Support guard: in many state dimensions a neighbourhood one bandwidth wide in every
    dimension holds hardly any data state, so the model's rows around the data copy single
    samples and the policy's visits fall where the data are thin. The state bandwidths are
    widened (all by one factor) until the median thinness of the data (the model's
    ``1 - w``, :func:`thinness_at`) at next states moved by one draw of the state kernel
    (``s'_i + h_s xi``, where the Monte-Carlo model queries) paired with data actions drawn at
    random is at most ``max_thinness``.

    Action guard: an action kernel as wide as the action spread blurs the action's effect. Where
    one step of the dynamics moves the next state by many state bandwidths per action bandwidth
    (:func:`action_effect`, ``e``; balancing tasks driven by strong actuators), the model then
    sees a fraction of what the action does, undervalues the policies that use it precisely and
    rates highly policies that saturate the action. A kernel so narrow that one bandwidth moves
    the next state by one state bandwidth (``h_a / e``) makes the action a selector of
    neighbours instead, which the policy exploits. Where ``e > max_action_effect`` the action
    bandwidth is therefore narrowed to the geometric compromise ``h_a sqrt(max_action_effect /
    e)``, which moves the next state by ``sqrt(max_action_effect e)`` state bandwidths; elsewhere
    it is left as it is. The guard acts last, on the state bandwidths the other two chose.

    Parameters
    ----------
    data : TransitionDataset
    k : int
        Neighbours per next state (capped at ``n``).
    coverage, reach : float
        The replay guard (see above); ``reach=inf`` turns it off.
    max_thinness : float in (0, 1) or None
        The support guard (see above); ``None`` turns it off.
    support_radius : float
        The model's ``support_radius`` (:func:`thinness_at`).
    max_action_effect : float or None
        The action guard (see above); ``None`` turns it off.
    max_queries : int
        At most this many next states (drawn without replacement) are queried, and at most
        this many transitions enter the action guard's regression.
    seed : numpy Generator or int, optional
        Randomness of that subsample (default seed 0). Formerly ``rng``.

    Returns
    -------
    KnnSelection
    """
    from scipy.spatial import cKDTree

    _check_knn_arguments(k, max_queries, coverage, reach, max_thinness, support_radius,
                         max_action_effect)
    states = data_columns(data.states, "states")
    try:
        std = checked_std(states)
    except ValueError as err:
        raise ValueError(f"states: {err}") from None
    try:
        action_std = checked_std(data_columns(data.actions, "actions"))
    except ValueError as err:
        raise ValueError(f"actions: {err}") from None
    n, d = states.shape
    queries = data.next_states
    generator = seed_generator(seed)
    if queries.shape[0] > max_queries:
        queries = queries[generator.choice(queries.shape[0], size=max_queries, replace=False)]
    k = min(int(k), n)
    _, idx = cKDTree(states / std).query(queries / std, k=k)
    diff = np.abs(queries[:, None, :] - states[idx.reshape(queries.shape[0], k)])
    h_state = np.median(diff.reshape(-1, d), axis=0)
    # A dimension whose next states coincide with data states (e.g. a constant-velocity
    # coordinate sampled on a grid) gets no spacing; fall back to a small share of its spread.
    h_state = np.where(h_state > 0, h_state, 1e-3 * std)
    replay, widen = 1.0, 1.0
    if np.isfinite(reach) and n >= 5:
        fifth, _ = cKDTree(states / h_state).query(queries / h_state, k=[5])
        spread = float(np.quantile(fifth, coverage)) / reach
        if spread > 1.0:
            logger.info("k-NN bandwidths: %.0f%% of the next states have their 5th nearest data "
                        "state beyond %.3g bandwidths; state bandwidths widened x %.3g",
                        100 * (1 - coverage), reach, spread)
            h_state, replay = h_state * spread, spread
    h_action = action_std * np.sqrt(action_std.size)
    if max_thinness is not None:
        widen = _support_guard(data, queries, h_state, h_action, max_thinness, support_radius,
                               generator)
        if widen > 1.0:
            logger.info("k-NN bandwidths: the median thinness near the next states exceeds %.3g; "
                        "state bandwidths widened x %.3g", max_thinness, widen)
            h_state = h_state * widen
    h_action, effect, narrowing = _action_guard(data, h_state, h_action, max_action_effect,
                                                max_queries, generator)
    return KnnSelection(Bandwidths(h_state, h_action), replay, widen, effect, narrowing)


def _action_guard(data: TransitionDataset, h_state: np.ndarray, h_action: np.ndarray,
                  max_action_effect: float | None, max_rows: int, generator: np.random.Generator
                  ) -> tuple[np.ndarray, tuple[float, ...], tuple[float, ...]]:
    """The action guard of :func:`knn_selection`: ``(h_action, effect, narrowing)``."""
    if max_action_effect is None:
        return h_action, (), ()
    e = action_effect(data, h_state, h_action, max_rows, generator)
    shrink = np.sqrt(max_action_effect / np.maximum(e, max_action_effect))
    if np.any(shrink < 1.0):
        logger.info("k-NN bandwidths: a change of one action bandwidth moves the next state by "
                    "%s state bandwidths (more than %.3g); action bandwidths x %s",
                    np.round(e, 3).tolist(), max_action_effect, np.round(shrink, 3).tolist())
    return h_action * shrink, tuple(map(float, e)), tuple(map(float, shrink))


def action_effect(data: TransitionDataset, h_state: ArrayLike, h_action: ArrayLike,
                  max_rows: int = 20_000, seed: np.random.Generator | int | None = None
                  ) -> np.ndarray:
    """How far the next state moves, in state bandwidths, when an action moves by its bandwidth.

    The least-squares fit of ``(s' - s) / h_state`` on an intercept, ``s / h_state`` and the
    actions over the non-terminal transitions (at most ``max_rows`` of them, drawn without
    replacement) gives the slope ``B`` (``(d_s, d_a)``, state bandwidths per unit action); the
    effect of action dimension ``j`` is ``||B[:, j]|| h_action[j]``, the Euclidean length that
    the kernel's distance sees. A global linear fit measures the typical size of the action's
    one-step effect, not the local dynamics.

    Parameters
    ----------
    data : TransitionDataset
    h_state : array_like of shape (d_s,)
    h_action : array_like of shape (d_a,)
    max_rows : int
    seed : numpy Generator or int, optional
        Randomness of the subsample.

    Returns
    -------
    numpy.ndarray of shape (d_a,)
        Zeros when fewer non-terminal transitions than fitted coefficients are available.
    """
    h_s = positive_vector("h_state", h_state)
    h_a = positive_vector("h_action", h_action)
    if h_s.shape != (data.state_dim,) or h_a.shape != (data.action_dim,):
        raise ValueError(f"h_state and h_action must have shapes ({data.state_dim},) and "
                         f"({data.action_dim},). Got {h_s.shape} and {h_a.shape} instead.")
    rows = np.flatnonzero(~np.asarray(data.terminals, dtype=bool))
    if rows.size > max_rows:
        rows = np.sort(seed_generator(seed).choice(rows, size=max_rows, replace=False))
    if rows.size <= 1 + data.state_dim + data.action_dim:
        return np.zeros(data.action_dim)
    s = data.states[rows] / h_s
    design = np.column_stack([np.ones(rows.size), s, data.actions[rows]])
    coef, *_ = np.linalg.lstsq(design, data.next_states[rows] / h_s - s, rcond=None)
    slope = coef[1 + data.state_dim:]                    # (d_a, d_s)
    return np.linalg.norm(slope, axis=1) * h_a


def _support_guard(data: TransitionDataset, queries: np.ndarray, h_state: np.ndarray,
                   h_action: np.ndarray, max_thinness: float, support_radius: float,
                   generator: np.random.Generator) -> float:
    """:func:`support_widening` at up to ``_SUPPORT_QUERIES`` of the next states ``queries``,
    each moved by one draw of the state kernel and paired with a data action drawn at random."""
    m = min(queries.shape[0], _SUPPORT_QUERIES)
    rows = generator.choice(queries.shape[0], size=m, replace=False)
    noise = generator.normal(size=(m, data.state_dim))
    acts = data.actions[generator.choice(data.n, size=m, replace=True)]
    return support_widening(data.states, data.actions, queries[rows], noise, acts, h_state,
                            h_action, max_thinness, support_radius)


def thinness_at(sq_dist: np.ndarray, support_radius: float = 2.0) -> np.ndarray:
    """The model's thinness ``1 - w = exp(-c / c0)`` per row of squared kernel distances (m, k)
    (in bandwidths, over the state and action kernels) to the nearest data pairs:
    ``c = sum_j exp(-d_j^2 / 2)``, ``c0 = exp(-support_radius^2 / 2)``
    (:func:`nopg.model.kernels.thinness`)."""
    mass = np.exp(-0.5 * sq_dist).sum(axis=1)
    return np.exp(-mass * np.exp(0.5 * support_radius ** 2))


def support_widening(states: np.ndarray, actions: np.ndarray, query_states: np.ndarray,
                     noise: np.ndarray, query_actions: np.ndarray, h_state: np.ndarray, h_action: np.ndarray,
                     max_thinness: float, support_radius: float = 2.0, k: int = 50,
                     max_factor: float = 100.0) -> float:
    """The smallest factor ``f >= 1`` (to 2%, by bisection in ``log f``) by which ``h_state``
    must grow for the median thinness (:func:`thinness_at`, over the ``k`` nearest data pairs)
    at the queries to be at most ``max_thinness``; ``max_factor`` at most.

    The queries are ``query_states + f h_state noise`` (a draw of the widened state kernel around
    each query state; ``noise`` of the same shape) with ``query_actions``, all in the data's
    units.
    """
    from scipy.spatial import cKDTree

    k = min(int(k), states.shape[0])
    scaled_actions = actions / h_action
    target_actions = query_actions / h_action

    def median_thinness(factor: float) -> float:
        data_pts = np.hstack([states / (h_state * factor), scaled_actions])
        query_pts = np.hstack([query_states / (h_state * factor) + noise, target_actions])
        dist, _ = cKDTree(data_pts).query(query_pts, k=k)
        dist = dist.reshape(query_pts.shape[0], -1)
        return float(np.median(thinness_at(dist ** 2, support_radius)))

    if median_thinness(1.0) <= max_thinness:
        return 1.0
    if median_thinness(max_factor) > max_thinness:
        logger.warning("k-NN bandwidths: the data stay thin near the next states even with state "
                       "bandwidths x %.3g", max_factor)
        return float(max_factor)
    lo, hi = 0.0, float(np.log(max_factor))
    while hi - lo > np.log(1.02):
        mid = 0.5 * (lo + hi)
        if median_thinness(float(np.exp(mid))) <= max_thinness:
            hi = mid
        else:
            lo = mid
    return float(np.exp(hi))
