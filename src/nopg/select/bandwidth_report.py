"""Which kernel bandwidths the library picks for a data set, and whether the data support the model.

:func:`bandwidth_report` runs
:func:`nopg.bandwidth.selection.select_bandwidths_and_guards` (timed) and explains the
result with these groups of numbers:

- per state and action dimension: the standard deviation, Silverman's bandwidth, the chosen
  bandwidth and the ratio chosen / Silverman;
- for ``auto``: the factors by which its replay and support guards widened the state bandwidths
  (:func:`nopg.bandwidth.selection.knn_selection`);
- the criterion behind the choice: for every next state ``s'_i`` the distance, in units of the
  chosen state bandwidths, to its nearest data state and to its 5th nearest (10/50/90 % quantiles).
  The model looks up where a transition leads by the kernel around ``s'_i``: a median nearest
  distance well above 1 means the bandwidths are small against the spacing of the data;
- the support of the data for the model: the thinness ``1 - w`` of
  :meth:`nopg.model.bellman.NonparametricBellman.thinness` (0 where a data pair lies within the support
  radius of the query, 1 where the kernel model extrapolates) at the next states with (a) the
  data's own next actions (the action of the next transition of the same episode, where there is
  one) and (b) actions drawn uniformly over the data's per-dimension action range. (a) low and (b)
  high means the model only knows the actions in the data: a policy that leaves them is judged by
  extrapolation.

This module is math only (numpy, scipy, torch); the figure is :mod:`nopg.viz.bandwidth_plots`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike
from scipy.spatial import cKDTree

from ..bandwidth.selection import (
    ACTION_EFFECT_MAX,
    SUPPORT_MAX_THINNESS,
    Bandwidths,
    resolve_method,
    seed_generator,
    select_bandwidths_and_guards,
    silverman_bandwidth,
)
from ..data.dataset import TransitionDataset
from ..model.bellman import NonparametricBellman
from ..train.behaviour import AUTO_SCALE, action_predictability

__all__ = ["BandwidthReport", "bandwidth_report"]

QUANTILES = (0.1, 0.5, 0.9)
"""Quantiles of the distance and thinness summaries."""

N_NEIGHBORS = 5                 # the "5th nearest" data state of the criterion
DENSE_MAX_N = 3000              # above this many samples the support model keeps top_k entries
TOP_K = 10
MAX_PROBE_STATES = 2000         # next states probed with uniform actions (b)
MAX_OWN_QUERIES = 20_000        # next states probed with the data's own next actions (a)
_BLOCK = 1 << 20                # query rows x data points x (d_s + 1) held at once (dense model)
_GAMMA = 0.99


@dataclass(frozen=True, eq=False)
class BandwidthReport:
    """The result of :func:`bandwidth_report`.

    Arrays hold the raw values behind the summaries (for the figure); :meth:`to_dict` keeps the
    summaries only.
    """

    n: int
    state_dim: int
    action_dim: int
    method: str
    """The requested rule."""
    method_used: str
    """The rule that ran (:func:`nopg.bandwidth.selection.resolve_method`: ``"auto"`` is ``"knn"``)."""
    state_factor: np.ndarray
    action_factor: np.ndarray
    seconds: float
    """Wall time of :func:`select_bandwidths`."""
    bandwidths: Bandwidths
    state_std: np.ndarray
    action_std: np.ndarray
    state_silverman: np.ndarray
    action_silverman: np.ndarray
    neighbor_k: int
    """Rank of the second neighbour distance (5, or n when there are fewer data)."""
    nearest_distance: np.ndarray
    """(n,) distance of every next state to its nearest data state, in state bandwidths."""
    kth_distance: np.ndarray
    """(n,) the same for the ``neighbor_k``-th nearest data state."""
    support_model: str
    """``"dense"`` or ``"top_k=10"`` (thinness then counts the 10 nearest pairs only)."""
    support_radius: float
    own_available: int
    """Next states whose next action is known (consecutive transitions of an episode)."""
    thinness_own: np.ndarray
    """(m_a,) thinness at (s'_i, a_{i+1}); empty when no next action is known."""
    n_probe_states: int
    n_action_probes: int
    thinness_uniform: np.ndarray
    """(n_probe_states * n_action_probes,) thinness at next states with uniform actions."""
    action_predictability: float = 0.0
    """:func:`nopg.train.behaviour.action_predictability` of the data (0: exploration data)."""
    replay_widening: float | None = None
    """The ``auto`` rule's replay-guard factor on the state bandwidths (``None``: other rules)."""
    support_widening: float | None = None
    """The ``auto`` rule's support-guard factor on the state bandwidths (``None``: other rules)."""
    action_effect: tuple[float, ...] = ()
    """The ``auto`` rule's action effect per action dimension (state bandwidths the next state
    moves per action bandwidth, at the action spread; empty: other rules or the guard off)."""
    action_narrowing: tuple[float, ...] = ()
    """The ``auto`` rule's action-guard factors on the action bandwidths (1.0: not narrowed)."""

    @property
    def behaviour_weight(self) -> float:
        """The weight ``Behaviour(weight="auto")`` gives the behaviour term."""
        return AUTO_SCALE * self.action_predictability

    # ---------------------------------------------------------------- derived values
    @property
    def state_ratio(self) -> np.ndarray:
        """Chosen state bandwidth / Silverman's, per dimension."""
        return self.bandwidths.state / self.state_silverman

    @property
    def action_ratio(self) -> np.ndarray:
        """Chosen action bandwidth / Silverman's, per dimension."""
        return self.bandwidths.action / self.action_silverman

    def dimensions(self) -> list[dict[str, Any]]:
        """One record per state and action dimension (std, Silverman, chosen, ratio)."""
        rows = []
        for kind, std, silver, chosen in (
                ("state", self.state_std, self.state_silverman, self.bandwidths.state),
                ("action", self.action_std, self.action_silverman, self.bandwidths.action)):
            for j in range(std.shape[0]):
                rows.append({"kind": kind, "index": j, "std": float(std[j]),
                             "silverman": float(silver[j]), "chosen": float(chosen[j]),
                             "ratio": float(chosen[j] / silver[j])})
        return rows

    @staticmethod
    def _support_summary(thin: np.ndarray) -> dict[str, Any]:
        if thin.size == 0:
            return {"n_queries": 0, "mean": None, "share_above_half": None,
                    "quantiles": [None] * len(QUANTILES)}
        return {"n_queries": int(thin.size), "mean": float(thin.mean()),
                "share_above_half": float(np.mean(thin > 0.5)),
                "quantiles": [float(v) for v in np.quantile(thin, QUANTILES)]}

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly summary (floats, lists, ``None`` where a value is not available)."""
        own = self._support_summary(self.thinness_own)
        own["available"] = int(self.own_available)
        uniform = self._support_summary(self.thinness_uniform)
        uniform.update(n_states=int(self.n_probe_states), n_action_probes=int(self.n_action_probes))
        return {
            "n": int(self.n), "state_dim": int(self.state_dim), "action_dim": int(self.action_dim),
            "method": self.method, "method_used": self.method_used,
            "state_factor": [float(v) for v in self.state_factor],
            "action_factor": [float(v) for v in self.action_factor],
            "seconds": float(self.seconds),
            "bandwidths": self.bandwidths.to_dict(),
            "dimensions": self.dimensions(),
            "distances": {
                "unit": "chosen state bandwidths",
                "quantiles": list(QUANTILES),
                "nearest": [float(v) for v in np.quantile(self.nearest_distance, QUANTILES)],
                "k": int(self.neighbor_k),
                "kth_nearest": [float(v) for v in np.quantile(self.kth_distance, QUANTILES)],
                "share_coinciding": float(np.mean(self.nearest_distance == 0.0)),
            },
            "support": {"model": self.support_model, "support_radius": float(self.support_radius),
                        "own_actions": own, "uniform_actions": uniform},
            "action_predictability": float(self.action_predictability),
            "behaviour_weight": float(self.behaviour_weight),
            "guards": None if self.replay_widening is None else {
                "replay_widening": float(self.replay_widening),
                "support_widening": float(self.support_widening),
                "action_effect": list(self.action_effect),
                "action_narrowing": list(self.action_narrowing)},
        }

    def _guard_lines(self) -> list[str]:
        """What the ``auto`` rule's guards did (no lines for the other rules)."""
        if self.replay_widening is None:
            return []
        lines = ["", f"guards      state bandwidths widened x {self.replay_widening:.3g} "
                 f"(replay guard), x {self.support_widening:.3g} (support guard: median "
                 f"thinness near the next states at most {SUPPORT_MAX_THINNESS:g})"]
        if self.action_narrowing:
            lines.append(f"            action bandwidths x {_vec(np.asarray(self.action_narrowing))} "
                         f"(action guard: one action bandwidth of the spread moved the next "
                         f"state by {_vec(np.asarray(self.action_effect))} state bandwidths; "
                         f"at most {ACTION_EFFECT_MAX:g} before narrowing)")
        return lines

    def to_text(self) -> str:
        """Human-readable summary."""
        method = self.method if self.method_used == self.method \
            else f"{self.method} (= {self.method_used})"
        factors = ""
        if np.any(self.state_factor != 1.0) or np.any(self.action_factor != 1.0):
            factors = (f"; factors state {_vec(self.state_factor)}, "
                       f"action {_vec(self.action_factor)}")
        lines = [
            f"data        {self.n} transitions, state dim {self.state_dim}, "
            f"action dim {self.action_dim}",
            f"method      {method}{factors}; selected in {self.seconds:.3g} s",
            "",
            f"{'dimension':<11}{'std':>11}{'silverman':>11}{'chosen':>11}{'chosen/silv':>13}",
        ]
        for r in self.dimensions():
            lines.append(f"{r['kind'] + ' ' + str(r['index']):<11}{r['std']:>11.4g}"
                         f"{r['silverman']:>11.4g}{r['chosen']:>11.4g}{r['ratio']:>13.3g}")
        lines += self._guard_lines()
        q = "/".join(f"{100 * v:g}" for v in QUANTILES)
        near = np.quantile(self.nearest_distance, QUANTILES)
        kth = np.quantile(self.kth_distance, QUANTILES)
        kth_name = f"{ordinal(self.neighbor_k)} nearest"
        lines += [
            "",
            f"next state -> data state, in chosen state bandwidths (quantiles {q} %)",
            f"  {'nearest':<13}" + "  ".join(f"{v:9.3g}" for v in near),
            f"  {kth_name:<13}" + "  ".join(f"{v:9.3g}" for v in kth),
        ]
        same = float(np.mean(self.nearest_distance == 0.0))
        if same > 0:
            lines.append(f"  {100 * same:.1f} % of the next states are data states (trajectories: "
                         "their nearest distance is 0)")
        lines += [
            "",
            f"support: thinness 1-w at next states (0 supported, 1 extrapolated; radius "
            f"{self.support_radius:g} bandwidths; model {self.support_model})",
        ]
        own = self._support_summary(self.thinness_own)
        if own["n_queries"]:
            capped = "" if own["n_queries"] == self.own_available \
                else f" (of {self.own_available})"
            lines.append(f"  (a) data's next actions   {own['n_queries']:>7} queries{capped}   "
                         f"mean {own['mean']:.3f}   > 0.5: {100 * own['share_above_half']:.1f} %")
        else:
            lines.append("  (a) data's next actions   n/a (no transition is followed by another "
                         "of the same episode)")
        uni = self._support_summary(self.thinness_uniform)
        lines.append(f"  (b) uniform actions       {uni['n_queries']:>7} queries "
                     f"({self.n_probe_states} states x {self.n_action_probes})   "
                     f"mean {uni['mean']:.3f}   > 0.5: {100 * uni['share_above_half']:.1f} %")
        lines += ["", f"behaviour: action predictability {self.action_predictability:.3f} (0: the "
                  f"actions do not depend on the state); behaviour.weight='auto' = "
                  f"{self.behaviour_weight:.3g}"]
        return "\n".join(lines)


def _vec(values: np.ndarray) -> str:
    if values.size and np.all(values == values[0]):
        return f"{float(values[0]):g}"
    return "[" + ", ".join(f"{float(v):g}" for v in values) + "]"


def ordinal(k: int) -> str:
    """``1st``, ``2nd``, ``3rd``, ``4th``, ... ``11th``, ``21st``."""
    suffix = "th" if 10 <= k % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(k % 10, "th")
    return f"{k}{suffix}"


# ------------------------------------------------------------------------------ pieces
def _thinness(model: NonparametricBellman, states: np.ndarray, actions: np.ndarray) -> np.ndarray:
    """Thinness at the pairs ``(states[i], actions[i])``, in blocks that bound the dense model's
    (block, n, d_s) arrays."""
    if states.shape[0] == 0:
        return np.zeros(0)
    chunk = states.shape[0] if model.top_k is not None \
        else max(1, _BLOCK // (model.n * (model.data.state_dim + 1)))
    return model.thinness(None, states, actions=actions, chunk=chunk)


def _own_next_pairs(data: TransitionDataset) -> tuple[np.ndarray, np.ndarray]:
    """Indices ``(i, j)``: ``j`` follows the non-terminal transition ``i`` in its episode."""
    first, second = [], []
    for idx in data.episodes():
        if idx.shape[0] > 1:
            first.append(idx[:-1])
            second.append(idx[1:])
    if not first:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    i, j = np.concatenate(first), np.concatenate(second)
    keep = ~data.terminals[i]
    return i[keep], j[keep]


def _check_probes(value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"The 'n_action_probes' parameter must be a positive int. "
                         f"Got {value!r} instead.")
    return int(value)


# ------------------------------------------------------------------------------ report
def bandwidth_report(
    data: TransitionDataset,
    method: str = "auto",
    state_factor: ArrayLike = 1.0,
    action_factor: ArrayLike = 1.0,
    seed: np.random.Generator | int | None = 0,
    n_action_probes: int = 16,
    max_action_effect: float | None = ACTION_EFFECT_MAX,
) -> BandwidthReport:
    """Select bandwidths for ``data`` and measure what they mean for the model.

    Parameters
    ----------
    data : TransitionDataset
        Formerly ``dataset``.
    method, state_factor, action_factor
        Passed to :func:`nopg.bandwidth.selection.select_bandwidths` (``method`` one of
        :data:`nopg.bandwidth.selection.METHODS`).
    seed : numpy Generator or int or None
        Passed to :func:`select_bandwidths`; with an int or ``None`` (seed 0) the probes draw from
        their own generator of that seed, a Generator is shared (used after the selection).
        Formerly ``rng``.
    n_action_probes : int
        Uniform actions drawn per probed next state for the support check (b).
    max_action_effect : float or None
        The ``auto`` rule's action guard (:func:`nopg.bandwidth.selection.knn_selection`); ``None``: off.

    Returns
    -------
    BandwidthReport
        Module docstring. The support model is dense up to 3000 samples and keeps the 10
        largest responsibilities per row above (its thinness then slightly overstates).
        At most 2000 next states are probed with uniform actions and at most 20 000 with the
        data's own next actions (random subsets).
    """
    if not isinstance(data, TransitionDataset):
        raise TypeError(f"data must be a TransitionDataset. Got {type(data).__name__} instead.")
    used = resolve_method(method)
    n_action_probes = _check_probes(n_action_probes)
    seed = 0 if seed is None else seed
    generator = seed_generator(seed)      # checks the seed before any work
    start = time.perf_counter()
    bw, guards = select_bandwidths_and_guards(data, method, state_factor, action_factor, seed=seed,
                                              max_action_effect=max_action_effect)
    seconds = time.perf_counter() - start
    bw = bw.broadcast(data.state_dim, data.action_dim)
    n = data.n
    states, actions, nxt = data.states, data.actions, data.next_states

    # Criterion: next states against data states, in chosen state bandwidths.
    k = min(N_NEIGHBORS, n)
    dist, _ = cKDTree(states / bw.state).query(nxt / bw.state, k=k)
    dist = np.asarray(dist, dtype=np.float64).reshape(n, k)

    # Support of the data for the model.
    top_k = None if n <= DENSE_MAX_N else min(TOP_K, n)
    model = NonparametricBellman(data, bw, _GAMMA, top_k=top_k)
    i, j = _own_next_pairs(data)
    own_available = int(i.shape[0])
    if own_available > MAX_OWN_QUERIES:
        keep = np.sort(generator.choice(own_available, MAX_OWN_QUERIES, replace=False))
        i, j = i[keep], j[keep]
    thin_own = _thinness(model, nxt[i], actions[j])
    rows = np.arange(n) if n <= MAX_PROBE_STATES \
        else np.sort(generator.choice(n, MAX_PROBE_STATES, replace=False))
    low, high = actions.min(axis=0), actions.max(axis=0)
    probes = generator.uniform(low, high, size=(rows.shape[0], n_action_probes, data.action_dim))
    probe_states = np.repeat(nxt[rows], n_action_probes, axis=0)
    thin_uniform = _thinness(model, probe_states, probes.reshape(-1, data.action_dim))

    return BandwidthReport(
        n=n, state_dim=data.state_dim, action_dim=data.action_dim,
        method=method, method_used=used,
        state_factor=np.broadcast_to(np.asarray(state_factor, dtype=np.float64),
                                     (data.state_dim,)).copy(),
        action_factor=np.broadcast_to(np.asarray(action_factor, dtype=np.float64),
                                      (data.action_dim,)).copy(),
        seconds=seconds, bandwidths=bw,
        state_std=states.std(axis=0, ddof=1), action_std=actions.std(axis=0, ddof=1),
        state_silverman=silverman_bandwidth(states), action_silverman=silverman_bandwidth(actions),
        neighbor_k=k, nearest_distance=dist[:, 0], kth_distance=dist[:, k - 1],
        support_model="dense" if top_k is None else f"top_k={top_k}",
        support_radius=model.support_radius, own_available=own_available,
        thinness_own=thin_own, n_probe_states=int(rows.shape[0]),
        n_action_probes=n_action_probes, thinness_uniform=thin_uniform,
        action_predictability=action_predictability(data),
        replay_widening=None if guards is None else guards.replay_widening,
        support_widening=None if guards is None else guards.support_widening,
        action_effect=() if guards is None else guards.action_effect,
        action_narrowing=() if guards is None else guards.action_narrowing,
    )
