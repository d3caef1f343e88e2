"""Gaussian kernel bandwidths and rules to select them from data.

A bandwidth is a per-dimension standard deviation of a diagonal Gaussian kernel.
Dimension indices in messages are 0-based.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from .data import TransitionDataset
from .validation import warn_user

__all__ = [
    "ACTION_EFFECT_MAX",
    "Bandwidths",
    "DuplicatedDataWarning",
    "action_effect",
    "check_max_action_effect",
    "cross_validated_bandwidth",
    "KnnSelection",
    "is_grid_like",
    "knn_bandwidths",
    "knn_selection",
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

METHODS = ("auto", "knn", "silverman", "scott", "cv")
_DEFAULT_GRID = np.geomspace(0.05, 5.0, 30)
_CHUNK_ELEMENTS = 1 << 21  # max held-out x train entries held at once (16 MiB)
_SUPPORT_QUERIES = 2000    # next states at which the support guard measures the thinness
SUPPORT_MAX_THINNESS = 0.5
"""The ``auto`` rule's support guard: the median thinness near the next states at most this."""
ACTION_EFFECT_MAX = 2.0
"""The ``auto`` rule's action guard: the state bandwidths by which a change of one action
bandwidth may move the next state before the action bandwidth is narrowed."""


class DuplicatedDataWarning(UserWarning):
    """Data lie on a grid or contain many repeated values (bad for cross-validation)."""


def _positive_vector(name: str, value: ArrayLike) -> np.ndarray:
    try:
        arr = np.array(value, dtype=np.float64, copy=True)
    except (TypeError, ValueError):
        raise ValueError(f"{name} bandwidth must be numeric. Got {value!r} instead.") from None
    if arr.ndim == 0:
        arr = arr.reshape(1)
    if arr.ndim != 1 or arr.shape[0] == 0:
        raise ValueError(
            f"{name} bandwidth must be a scalar or a non-empty 1-D array. "
            f"Got shape {arr.shape} instead."
        )
    for i, v in enumerate(arr):
        if not (np.isfinite(v) and v > 0):
            raise ValueError(
                f"bandwidth for {name} dimension {i} must be positive and finite. "
                f"Got {float(v)!r} instead."
            )
    arr.flags.writeable = False
    return arr


def _factor(name: str, factor: ArrayLike, dim: int) -> np.ndarray:
    """Validate a positive scalar or per-dimension factor and broadcast it to ``dim``."""
    try:
        arr = np.asarray(factor, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"The '{name}' parameter must be numeric. Got {factor!r}.") from None
    if arr.ndim > 1 or (arr.ndim == 1 and arr.shape[0] not in (1, dim)):
        raise ValueError(
            f"The '{name}' parameter must be a scalar or have length {dim}. "
            f"Got shape {arr.shape} instead."
        )
    if not np.all(np.isfinite(arr) & (arr > 0)):
        raise ValueError(
            f"The '{name}' parameter must be positive and finite. Got {factor!r} instead."
        )
    return np.broadcast_to(arr, (dim,)).astype(np.float64)


@dataclass(frozen=True)
class Bandwidths:
    """Per-dimension Gaussian kernel bandwidths (standard deviations).

    Parameters
    ----------
    state : float or array-like, shape (d_s,)
    action : float or array-like, shape (d_a,)
    next_state : float or array-like, shape (d_s,), optional
        Bandwidth of the next-state kernel; ``None`` means "same as ``state``".
    """

    state: np.ndarray
    action: np.ndarray
    next_state: np.ndarray | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "state", _positive_vector("state", self.state))
        object.__setattr__(self, "action", _positive_vector("action", self.action))
        if self.next_state is not None:
            object.__setattr__(
                self, "next_state", _positive_vector("next_state", self.next_state)
            )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Bandwidths):
            return NotImplemented
        same_next = (self.next_state is None) == (other.next_state is None) and (
            self.next_state is None or np.array_equal(self.next_state, other.next_state)
        )
        return (
            np.array_equal(self.state, other.state)
            and np.array_equal(self.action, other.action)
            and same_next
        )

    def __hash__(self) -> int:
        nxt = None if self.next_state is None else self.next_state.tobytes()
        return hash((self.state.tobytes(), self.action.tobytes(), nxt))

    @property
    def next_state_or_state(self) -> np.ndarray:
        """``next_state`` if set, else ``state``."""
        return self.state if self.next_state is None else self.next_state

    def broadcast(self, state_dim: int, action_dim: int) -> Bandwidths:
        """Expand length-1 vectors to the given dimensions and check the other lengths."""
        def expand(name: str, vec: np.ndarray | None, dim: int) -> np.ndarray | None:
            if vec is None:
                return None
            if vec.shape[0] == 1:
                return np.full(dim, vec[0])
            if vec.shape[0] != dim:
                raise ValueError(
                    f"{name} bandwidth has {vec.shape[0]} entries but the {name} "
                    f"dimension is {dim}"
                )
            return vec

        return Bandwidths(
            expand("state", self.state, state_dim),
            expand("action", self.action, action_dim),
            expand("next_state", self.next_state, state_dim),
        )

    def scaled(
        self,
        state_factor: ArrayLike,
        action_factor: ArrayLike,
        next_state_factor: ArrayLike | None = None,
    ) -> Bandwidths:
        """Multiply bandwidths per dimension by positive factors (scalar or per-dimension).

        With ``next_state_factor=None`` an explicit ``next_state`` is scaled by
        ``state_factor`` (and ``None`` stays "same as state"); otherwise the new
        next-state bandwidth is ``next_state_or_state * next_state_factor``.
        """
        state = self.state * _factor("state_factor", state_factor, self.state.shape[0])
        action = self.action * _factor("action_factor", action_factor, self.action.shape[0])
        if next_state_factor is not None:
            base = self.next_state_or_state
            nxt = base * _factor("next_state_factor", next_state_factor, base.shape[0])
        elif self.next_state is not None:
            nxt = self.next_state * _factor("state_factor", state_factor, self.next_state.shape[0])
        else:
            nxt = None
        return Bandwidths(state, action, nxt)

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly representation (lists of floats)."""
        return {
            "state": [float(v) for v in self.state],
            "action": [float(v) for v in self.action],
            "next_state": None if self.next_state is None else [float(v) for v in self.next_state],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Bandwidths:
        """Inverse of :meth:`to_dict`."""
        for key in ("state", "action"):
            if key not in data:
                raise ValueError(f"bandwidth dictionary is missing the key '{key}'")
        return cls(data["state"], data["action"], data.get("next_state"))


# ---------------------------------------------------------------------------- rules
def _columns(x: ArrayLike, name: str = "x") -> np.ndarray:
    """Return ``x`` as a finite float64 array of shape (n, d) with n >= 2."""
    try:
        arr = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a numeric array-like") from None
    if arr.ndim == 1:
        arr = arr.reshape(-1, 1)
    if arr.ndim != 2 or arr.shape[1] == 0:
        raise ValueError(f"{name} must have shape (n,) or (n, d). Got shape {arr.shape} instead.")
    if arr.shape[0] < 2:
        raise ValueError(
            f"at least 2 samples are needed to select a bandwidth; {name} has {arr.shape[0]}"
        )
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} contains NaN or inf values")
    return arr


def _checked_std(cols: np.ndarray) -> np.ndarray:
    std = cols.std(axis=0, ddof=1)
    for j in range(cols.shape[1]):
        col = cols[:, j]
        if col.max() == col.min() or not np.isfinite(std[j]) or std[j] <= 0:
            raise ValueError(
                f"dimension {j} is constant (all values {col[0]:g}); a kernel bandwidth "
                "cannot be selected for it: drop the dimension or pass an explicit bandwidth"
            )
    return std


def silverman_bandwidth(x: ArrayLike) -> np.ndarray:
    """Silverman's rule ``std(x, ddof=1) * (4 / (3 n)) ** (1/5)`` per column, shape (d,)."""
    cols = _columns(x)
    return _checked_std(cols) * (4.0 / (3.0 * cols.shape[0])) ** 0.2


def scott_bandwidth(x: ArrayLike) -> np.ndarray:
    """Scott's rule ``std(x, ddof=1) * n ** (-1/5)`` per column, shape (d,)."""
    cols = _columns(x)
    return _checked_std(cols) * cols.shape[0] ** -0.2


def is_grid_like(x: ArrayLike, max_unique_fraction: float = 0.5) -> np.ndarray:
    """Per-column flag: values lie on a grid or repeat heavily.

    A column of length n is grid-like when its number of distinct values is at
    most ``max_unique_fraction * n`` (default: values occur on average at least
    twice). Continuous data have (almost) all values distinct; discrete actions,
    clipped values or coarse rounding produce exact repeats, for which held-out
    points coincide with training points and cross-validation favours
    vanishing bandwidths.
    """
    cols = _columns(x)
    n = cols.shape[0]
    n_unique = np.array([np.unique(cols[:, j]).shape[0] for j in range(cols.shape[1])])
    return n_unique <= max_unique_fraction * n


def seed_generator(seed: np.random.Generator | int | None) -> np.random.Generator:
    """The NumPy generator of a ``seed``: an int, a Generator (returned as it is, so its stream
    continues) or ``None`` (seed 0)."""
    if seed is None:
        return np.random.default_rng(0)
    if isinstance(seed, np.random.Generator):
        return seed
    if isinstance(seed, (int, np.integer)) and not isinstance(seed, bool):
        return np.random.default_rng(int(seed))
    raise ValueError(f"seed must be a numpy Generator, an int or None. Got {seed!r} instead.")


def _heldout_loglik(train: np.ndarray, test: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """Summed log-density of ``test`` under a 1-D Gaussian KDE on ``train``, per bandwidth.

    Uses the log-sum-exp trick with the row maximum taken once per chunk (the
    nearest training point), which is shared by all bandwidths; this is several
    times faster than calling ``scipy.special.logsumexp`` once per bandwidth.
    Memory is bounded by processing held-out points in chunks.
    """
    n_train = train.shape[0]
    total = np.zeros(grid.shape[0])
    chunk = max(1, _CHUNK_ELEMENTS // n_train)
    neg_half_prec = -0.5 / grid**2
    buf = np.empty((min(chunk, test.shape[0]), n_train))
    for start in range(0, test.shape[0], chunk):
        sq = (test[start:start + chunk, None] - train[None, :]) ** 2
        nearest = sq.min(axis=1)
        sq -= nearest[:, None]  # >= 0 with a zero in every row, so each sum is >= 1
        out = buf[: sq.shape[0]]
        for k, c in enumerate(neg_half_prec):
            np.multiply(sq, c, out=out)
            np.exp(out, out=out)
            total[k] += np.log(out.sum(axis=1)).sum() + c * nearest.sum()
    log_norm = np.log(n_train) + np.log(grid) + 0.5 * np.log(2.0 * np.pi)
    return total - test.shape[0] * log_norm


def cross_validated_bandwidth(
    x: ArrayLike,
    n_folds: int = 5,
    grid: ArrayLike | None = None,
    max_samples: int = 5000,
    seed: np.random.Generator | int | None = None,
) -> np.ndarray:
    """Per-column bandwidth maximising the K-fold held-out log-likelihood of a 1-D KDE.

    Parameters
    ----------
    x : array-like, shape (n,) or (n, d)
    n_folds : int
        Number of cross-validation folds (2 <= n_folds <= n).
    grid : array-like, optional
        Candidate bandwidths as multiples of each column's Silverman bandwidth.
        Default: 30 log-spaced factors from 0.05 to 5.
    max_samples : int
        Columns are subsampled (without replacement) to this many points first.
    seed : numpy Generator or int, optional
        Randomness for subsampling and folds; default seed 0 (reproducible). Formerly ``rng``.

    Returns
    -------
    numpy.ndarray, shape (d,)

    Warns
    -----
    DuplicatedDataWarning
        If a column is grid-like (see :func:`is_grid_like`).
    """
    cols = _columns(x)
    n, d = cols.shape
    if isinstance(n_folds, bool) or not isinstance(n_folds, (int, np.integer)) or n_folds < 2:
        raise ValueError(f"The 'n_folds' parameter must be an int >= 2. Got {n_folds!r} instead.")
    if isinstance(max_samples, bool) or not isinstance(max_samples, (int, np.integer)) \
            or max_samples < 2:
        raise ValueError(
            f"The 'max_samples' parameter must be an int >= 2. Got {max_samples!r} instead."
        )
    factors = _DEFAULT_GRID if grid is None else np.asarray(grid, dtype=np.float64).reshape(-1)
    if factors.size == 0 or not np.all(np.isfinite(factors) & (factors > 0)):
        raise ValueError("The 'grid' parameter must be a non-empty array of positive factors.")
    generator = seed_generator(seed)
    reference = silverman_bandwidth(cols)  # also rejects constant columns
    grid_like = is_grid_like(cols)
    if np.any(grid_like):
        warn_user(
            f"dimension(s) {np.flatnonzero(grid_like).tolist()} lie on a grid or contain many "
            "duplicated values; cross-validation then selects too-small bandwidths. "
            "Prefer the Silverman rule (method='silverman').",
            DuplicatedDataWarning,
        )
    if n > max_samples:
        cols = cols[generator.choice(n, size=max_samples, replace=False)]
        n = max_samples
    if n_folds > n:
        raise ValueError(f"n_folds={n_folds} is larger than the number of samples ({n})")
    folds = np.array_split(generator.permutation(n), n_folds)
    result = np.empty(d)
    for j in range(d):
        col = cols[:, j]
        candidates = reference[j] * factors
        score = np.zeros(candidates.shape[0])
        for fold in folds:
            mask = np.ones(n, dtype=bool)
            mask[fold] = False
            score += _heldout_loglik(col[mask], col[fold], candidates)
        best = int(np.argmax(score))
        if best in (0, candidates.shape[0] - 1):
            logger.debug("CV bandwidth for dimension %d is at the edge of the grid", j)
        result[j] = candidates[best]
    return result


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
    states = _columns(data.states, "states")
    try:
        std = _checked_std(states)
    except ValueError as err:
        raise ValueError(f"states: {err}") from None
    try:
        action_std = _checked_std(_columns(data.actions, "actions"))
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
    h_s = _positive_vector("h_state", h_state)
    h_a = _positive_vector("h_action", h_action)
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
    (:func:`nopg.kernels.thinness`)."""
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
    method : {"auto", "knn", "silverman", "scott", "cv"}
        "auto" (= "knn") is :func:`knn_bandwidths`, local bandwidths that need no factors;
        "silverman" and "scott" are per-column rules of thumb; "cv" maximises the held-out
        likelihood of per-column density estimates (collapses on grids and trajectories).
    state_factor, action_factor : float or array-like
        Positive multipliers applied to the selected bandwidths.
    next_state_factor : float or array-like, optional
        If given, ``next_state = (state rule) * next_state_factor``; else None.
    n_folds, max_samples, seed
        Passed to :func:`cross_validated_bandwidth` (``seed``, formerly ``rng``, also to
        :func:`knn_selection`).
    max_action_effect : float or None
        ``auto`` only: the action guard's threshold (:func:`knn_selection`); ``None`` turns it off.

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
    s_fac = _factor("state_factor", state_factor, data.state_dim)
    a_fac = _factor("action_factor", action_factor, data.action_dim)
    ns_fac = (
        None if next_state_factor is None
        else _factor("next_state_factor", next_state_factor, data.state_dim)
    )
    if resolved == "knn":
        selection = knn_selection(data, seed=seed, max_action_effect=max_action_effect)
        knn = selection.bandwidths
        result = Bandwidths(knn.state * s_fac, knn.action * a_fac,
                            None if ns_fac is None else knn.state * ns_fac)
        logger.info("selected bandwidths (%s: local k-NN rule): %s", method, result.to_dict())
        return result, selection
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
