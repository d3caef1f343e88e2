"""Batch transition datasets for off-policy reinforcement learning.

A :class:`TransitionDataset` stores ``n`` transitions ``(s, a, r, s', done)`` as
validated, read-only float64 arrays, together with optional time-limit flags
(``truncations``) and episode ids. Files are stored as ``.npz`` archives and
never use pickle.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

__all__ = ["FORMAT_VERSION", "TransitionDataset", "concatenate"]

FORMAT_VERSION = 1

# Alternative key names (D4RL / Minari style) -> canonical field name.
_KEY_ALIASES: dict[str, tuple[str, ...]] = {
    "states": ("states", "observations"),
    "actions": ("actions",),
    "rewards": ("rewards",),
    "next_states": ("next_states", "next_observations"),
    "terminals": ("terminals", "terminations"),
    "truncations": ("truncations", "timeouts"),
    "episode_ids": ("episode_ids",),
}


def check_gamma(gamma: float, *, allow_one: bool = False) -> float:
    """``gamma`` as a float, or a ValueError unless it lies in [0, 1) (or [0, 1] with ``allow_one``)."""
    upper = "1]" if allow_one else "1)"
    ok = isinstance(gamma, (int, float, np.integer, np.floating)) and not isinstance(gamma, bool)
    if ok:
        g = float(gamma)
        ok = 0.0 <= g < 1.0 or (allow_one and g == 1.0)
    if not ok:
        raise ValueError(
            f"The 'gamma' parameter must be a float in [0, {upper}. Got {gamma!r} instead."
        )
    return float(gamma)


def check_parent_folder(path: str | os.PathLike[str]) -> None:
    """Raise a ValueError naming the folder of ``path`` if it does not exist (before writing)."""
    folder = os.path.dirname(os.path.abspath(os.fspath(path)))
    if not os.path.isdir(folder):
        what = "is not a folder" if os.path.exists(folder) else "does not exist"
        raise ValueError(f"cannot write {os.fspath(path)}: the folder {folder} {what} "
                         "(create it first)")


def float_array(name: str, x: ArrayLike, ndim: int, *, allow_1d: bool = False) -> np.ndarray:
    """Copy ``x`` to a C-contiguous float64 array with ``ndim`` dims and finite values."""
    try:
        arr = np.array(x, dtype=np.float64, order="C", copy=True)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{name} must be a numeric array-like: {err}") from None
    if ndim == 2 and allow_1d and arr.ndim == 1:
        arr = arr.reshape(-1, 1)
    if ndim == 1 and arr.ndim == 2 and arr.shape[1] == 1:
        arr = arr.reshape(-1)
    if arr.ndim != ndim:
        expected = "(n,)" if ndim == 1 else "(n, d)"
        raise ValueError(
            f"{name} must have shape {expected}; got an array with shape {arr.shape} instead."
        )
    if ndim == 2 and arr.shape[1] == 0:
        raise ValueError(f"{name} has zero columns; at least one dimension is required.")
    check_finite(name, arr)
    return arr


def check_finite(name: str, arr: np.ndarray) -> None:
    """Raise a ValueError naming ``name``, the number of non-finite values and the first row."""
    bad = ~np.isfinite(arr)
    if bad.any():
        count = int(bad.sum())
        row = int(np.flatnonzero(bad.reshape(arr.shape[0], -1).any(axis=1))[0])
        raise ValueError(f"{name} contains NaN or inf values: {count} non-finite "
                         f"value{'s' if count != 1 else ''}; first at row {row}")


def _vector(name: str, x: ArrayLike) -> np.ndarray:
    """``x`` as an array of shape (n,) (a column of shape (n, 1) is flattened)."""
    arr = np.asarray(x)
    if arr.ndim == 2 and arr.shape[1] == 1:
        arr = arr.reshape(-1)
    if arr.ndim != 1:
        raise ValueError(f"{name} must have shape (n,); got an array with shape {arr.shape}.")
    return arr


def bool_array(name: str, x: ArrayLike) -> np.ndarray:
    """Convert boolean-like values (bool, or numbers equal to 0/1) to a bool array."""
    arr = _vector(name, x)
    if arr.dtype == np.bool_:
        return arr.astype(bool, copy=True)
    if arr.dtype.kind not in "iuf":
        raise ValueError(f"{name} must contain booleans or 0/1 values; got dtype {arr.dtype}.")
    bad = ~((arr == 0) | (arr == 1))
    if np.any(bad):
        example = arr[np.argmax(bad)]
        raise ValueError(
            f"{name} must contain booleans or 0/1 values; found the value {example!r}."
        )
    return arr == 1


def int_array(name: str, x: ArrayLike) -> np.ndarray:
    """Convert integer-like values to an int64 array."""
    arr = _vector(name, x)
    if arr.dtype.kind in "iu":
        return arr.astype(np.int64, copy=True)
    if arr.dtype.kind == "f":
        if not np.all(np.isfinite(arr)) or np.any(arr != np.round(arr)):
            raise ValueError(f"{name} must contain integer values")
        return arr.astype(np.int64)
    raise ValueError(f"{name} must contain integer values; got dtype {arr.dtype}.")


def _first_present(mapping: Mapping[str, Any], field: str) -> Any | None:
    for key in _KEY_ALIASES[field]:
        if key in mapping:
            return mapping[key]
    return None


@dataclass(frozen=True, eq=False)
class TransitionDataset:
    """A validated batch of transitions ``(s, a, r, s', terminal)``.

    Parameters
    ----------
    states : array-like, shape (n, d_s)
    actions : array-like, shape (n, d_a) or (n,)
    rewards : array-like, shape (n,) or (n, 1)
    next_states : array-like, shape (n, d_s)
    terminals : array-like of bool or 0/1, shape (n,)
        True where the episode ended in a terminal state (no bootstrapping).
    truncations : array-like of bool or 0/1, shape (n,), optional
        True where the episode was cut by a time limit (not terminal).
    episode_ids : array-like of int, shape (n,), optional
        Episode membership of every transition.

    Notes
    -----
    All arrays are copied on construction and made read-only.
    """

    states: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    next_states: np.ndarray
    terminals: np.ndarray
    truncations: np.ndarray | None = None
    episode_ids: np.ndarray | None = None

    def __post_init__(self) -> None:
        arrays: dict[str, np.ndarray | None] = {
            "states": float_array("states", self.states, 2),
            "actions": float_array("actions", self.actions, 2, allow_1d=True),
            "rewards": float_array("rewards", self.rewards, 1),
            "next_states": float_array("next_states", self.next_states, 2),
            "terminals": bool_array("terminals", self.terminals),
            "truncations": (
                None if self.truncations is None
                else bool_array("truncations", self.truncations)
            ),
            "episode_ids": (
                None if self.episode_ids is None
                else int_array("episode_ids", self.episode_ids)
            ),
        }
        n = arrays["states"].shape[0]
        if n == 0:
            raise ValueError("dataset is empty: states has 0 rows")
        for name, arr in arrays.items():
            if arr is not None and arr.shape[0] != n:
                raise ValueError(f"{name} has {arr.shape[0]} rows but states has {n}")
        d_s, d_ns = arrays["states"].shape[1], arrays["next_states"].shape[1]
        if d_ns != d_s:
            raise ValueError(f"next_states has {d_ns} columns but states has {d_s}")
        for name, arr in arrays.items():
            if arr is not None:
                arr.flags.writeable = False
            object.__setattr__(self, name, arr)

    # ------------------------------------------------------------------ basic info
    @property
    def n(self) -> int:
        """Number of transitions."""
        return int(self.states.shape[0])

    def __len__(self) -> int:
        return self.n

    @property
    def state_dim(self) -> int:
        """Dimension of the state space."""
        return int(self.states.shape[1])

    @property
    def action_dim(self) -> int:
        """Dimension of the action space."""
        return int(self.actions.shape[1])

    @property
    def n_episodes(self) -> int:
        """Number of episodes (see :meth:`episode_starts`)."""
        return int(self.episode_starts().shape[0])

    def __repr__(self) -> str:
        return (
            f"TransitionDataset(n={self.n}, state_dim={self.state_dim}, "
            f"action_dim={self.action_dim}, n_episodes={self.n_episodes})"
        )

    def discounts(self, gamma: float) -> np.ndarray:
        """Per-transition discount: 0 where terminal, ``gamma`` otherwise (shape (n,))."""
        g = check_gamma(gamma)
        return np.where(self.terminals, 0.0, g)

    # -------------------------------------------------------------------- episodes
    def episode_starts(self) -> np.ndarray:
        """Indices of the first transition of every episode.

        With ``episode_ids``: first index of each distinct id, in order of first
        appearance. Otherwise index 0 and every ``i > 0`` such that transition
        ``i - 1`` was terminal or truncated or ``next_states[i-1] != states[i]``.
        """
        if self.episode_ids is not None:
            _, first = np.unique(self.episode_ids, return_index=True)
            return np.sort(first).astype(np.int64)
        ended = self.terminals[:-1].copy()
        if self.truncations is not None:
            ended |= self.truncations[:-1]
        ended |= np.any(self.next_states[:-1] != self.states[1:], axis=1)
        return np.concatenate([[0], np.flatnonzero(ended) + 1]).astype(np.int64)

    def episode_start_states(self) -> np.ndarray:
        """States at :meth:`episode_starts`, shape (m, d_s)."""
        return self.states[self.episode_starts()].copy()

    def episodes(self) -> list[np.ndarray]:
        """Index arrays of the transitions of each episode, in episode order."""
        starts = self.episode_starts()
        if self.episode_ids is not None:
            ids = self.episode_ids
            return [np.flatnonzero(ids == ids[s]) for s in starts]
        bounds = np.append(starts, self.n)
        return [np.arange(a, b, dtype=np.int64) for a, b in itertools.pairwise(bounds)]

    def episode_returns(self, gamma: float = 1.0) -> np.ndarray:
        """(Discounted) sum of rewards of every episode, shape (m,)."""
        g = check_gamma(gamma, allow_one=True)
        out = []
        for idx in self.episodes():
            weights = g ** np.arange(idx.shape[0], dtype=np.float64)
            out.append(float(np.dot(weights, self.rewards[idx])))
        return np.asarray(out, dtype=np.float64)

    # ---------------------------------------------------------------- manipulation
    def _fields(self) -> dict[str, np.ndarray | None]:
        return {
            "states": self.states,
            "actions": self.actions,
            "rewards": self.rewards,
            "next_states": self.next_states,
            "terminals": self.terminals,
            "truncations": self.truncations,
            "episode_ids": self.episode_ids,
        }

    def subset(self, indices: ArrayLike) -> TransitionDataset:
        """Dataset restricted to ``indices`` (integer indices or a boolean mask)."""
        idx = np.asarray(indices)
        if idx.dtype == np.bool_:
            if idx.shape != (self.n,):
                raise ValueError(f"boolean mask has shape {idx.shape} but the dataset n={self.n}")
            idx = np.flatnonzero(idx)
        elif idx.dtype.kind not in "iu" or idx.ndim != 1:
            raise ValueError("indices must be a 1-D array of integers or a boolean mask")
        if idx.size and (idx.min() < -self.n or idx.max() >= self.n):
            raise ValueError(f"indices out of range for a dataset with n={self.n}")
        return TransitionDataset(
            **{k: (None if v is None else v[idx]) for k, v in self._fields().items()}
        )

    @classmethod
    def concatenate(cls, datasets: Sequence[TransitionDataset]) -> TransitionDataset:
        """Stack datasets; see :func:`concatenate`."""
        return concatenate(datasets)

    # ------------------------------------------------------------------------- I/O
    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the dataset to a compressed ``.npz`` file (no pickle).

        Raises
        ------
        ValueError
            If the file's folder does not exist.
        """
        check_parent_folder(path)
        arrays = {k: v for k, v in self._fields().items() if v is not None}
        arrays["format_version"] = np.asarray(FORMAT_VERSION, dtype=np.int64)
        with open(path, "wb") as fh:
            np.savez_compressed(fh, **arrays)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> TransitionDataset:
        """Read a ``.npz`` file written by :meth:`save` or with D4RL/Minari key names.

        Aliases: ``observations`` -> states, ``next_observations`` -> next_states,
        ``terminations`` -> terminals, ``timeouts`` -> truncations.
        """
        with np.load(path, allow_pickle=False) as npz:
            content = {k: npz[k] for k in npz.files}
        if "format_version" in content:
            version = int(np.asarray(content["format_version"]).reshape(-1)[0])
            if version > FORMAT_VERSION:
                raise ValueError(
                    f"unsupported format_version {version}; this version of nopg reads "
                    f"format_version <= {FORMAT_VERSION}"
                )
        fields: dict[str, Any] = {}
        for field, aliases in _KEY_ALIASES.items():
            value = _first_present(content, field)
            if value is None and field not in ("truncations", "episode_ids"):
                raise ValueError(
                    f"{os.fspath(path)!s} is missing the required key '{field}' "
                    f"(accepted names: {', '.join(aliases)})"
                )
            fields[field] = value
        return cls(**fields)

    @classmethod
    def from_episodes(cls, episodes: Sequence[Mapping[str, ArrayLike]]) -> TransitionDataset:
        """Build a dataset from a list of per-episode mappings.

        Each mapping has ``states`` (or ``observations``), ``actions`` and
        ``rewards``, and either ``next_states`` (or ``next_observations``) or
        T + 1 rows of states (Minari style). Optional: ``terminals`` (default all
        False) and ``truncations``. The episode id is the position in the list.
        """
        if len(episodes) == 0:
            raise ValueError("episodes is empty; at least one episode is required")
        parts: list[dict[str, np.ndarray | None]] = []
        for i, ep in enumerate(episodes):
            if not isinstance(ep, Mapping):
                raise TypeError(f"episode {i} must be a mapping, got {type(ep).__name__}")
            try:
                parts.append(_episode_arrays(ep))
            except ValueError as err:
                raise ValueError(f"episode {i}: {err}") from None
        any_trunc = any(p["truncations"] is not None for p in parts)
        cat: dict[str, Any] = {}
        for key in ("states", "actions", "rewards", "next_states", "terminals"):
            try:
                cat[key] = np.concatenate([p[key] for p in parts], axis=0)
            except ValueError as err:
                raise ValueError(f"episodes have inconsistent {key} shapes: {err}") from None
        cat["truncations"] = None
        if any_trunc:
            cat["truncations"] = np.concatenate([
                np.zeros(p["rewards"].shape[0], bool) if p["truncations"] is None
                else p["truncations"] for p in parts
            ])
        cat["episode_ids"] = np.concatenate(
            [np.full(p["rewards"].shape[0], i, dtype=np.int64) for i, p in enumerate(parts)]
        )
        return cls(**cat)

    # ---------------------------------------------------------------------- summary
    def summary(self) -> dict[str, Any]:
        """JSON-serialisable summary statistics of the dataset."""
        returns = self.episode_returns()
        return {
            "n": self.n,
            "state_dim": self.state_dim,
            "action_dim": self.action_dim,
            "n_episodes": int(returns.shape[0]),
            "n_terminals": int(self.terminals.sum()),
            "n_truncations": 0 if self.truncations is None else int(self.truncations.sum()),
            "reward_min": float(self.rewards.min()),
            "reward_max": float(self.rewards.max()),
            "reward_mean": float(self.rewards.mean()),
            "state_min": [float(v) for v in self.states.min(axis=0)],
            "state_max": [float(v) for v in self.states.max(axis=0)],
            "action_min": [float(v) for v in self.actions.min(axis=0)],
            "action_max": [float(v) for v in self.actions.max(axis=0)],
            "episode_return_mean": float(returns.mean()),
        }


def _episode_arrays(ep: Mapping[str, ArrayLike]) -> dict[str, np.ndarray | None]:
    """Validate one episode mapping and return its per-transition arrays."""
    states_raw = _first_present(ep, "states")
    if states_raw is None:
        raise ValueError("missing the key 'states' (or 'observations')")
    for key in ("actions", "rewards"):
        if key not in ep:
            raise ValueError(f"missing the key '{key}'")
    actions = float_array("actions", ep["actions"], 2, allow_1d=True)
    rewards = float_array("rewards", ep["rewards"], 1)
    states = float_array("states", states_raw, 2, allow_1d=True)
    t = actions.shape[0]
    if t == 0:
        raise ValueError("the episode has no transitions")
    next_raw = _first_present(ep, "next_states")
    if next_raw is not None:
        next_states = float_array("next_states", next_raw, 2, allow_1d=True)
    elif states.shape[0] == t + 1:
        states, next_states = states[:-1], states[1:]
    else:
        raise ValueError(
            f"without next_states, states must have T + 1 = {t + 1} rows; got {states.shape[0]}"
        )
    term_raw = _first_present(ep, "terminals")
    terminals = np.zeros(t, dtype=bool) if term_raw is None else bool_array("terminals", term_raw)
    trunc_raw = _first_present(ep, "truncations")
    truncations = None if trunc_raw is None else bool_array("truncations", trunc_raw)
    out = {
        "states": states,
        "actions": actions,
        "rewards": rewards,
        "next_states": next_states,
        "terminals": terminals,
        "truncations": truncations,
    }
    for name, arr in out.items():
        if arr is not None and arr.shape[0] != t:
            raise ValueError(f"{name} has {arr.shape[0]} rows but actions has {t}")
    return out


def concatenate(datasets: Sequence[TransitionDataset]) -> TransitionDataset:
    """Stack several datasets into one.

    Optional ``truncations`` are filled with False where missing. If any dataset
    has ``episode_ids``, every dataset's episodes (from :meth:`episodes`) get new
    consecutive ids so that episodes of different datasets stay distinct; if none
    has ids the result has none either.
    """
    datasets = list(datasets)
    if not datasets:
        raise ValueError("datasets is empty; at least one dataset is required")
    for i, ds in enumerate(datasets):
        if not isinstance(ds, TransitionDataset):
            raise TypeError(f"datasets[{i}] is a {type(ds).__name__}, not a TransitionDataset")
    out: dict[str, Any] = {
        key: np.concatenate([getattr(ds, key) for ds in datasets], axis=0)
        for key in ("rewards", "terminals")
    }
    for key in ("states", "actions", "next_states"):
        dims = {getattr(ds, key).shape[1] for ds in datasets}
        if len(dims) > 1:
            raise ValueError(f"datasets have different {key} dimensions: {sorted(dims)}")
        out[key] = np.concatenate([getattr(ds, key) for ds in datasets], axis=0)
    if any(ds.truncations is not None for ds in datasets):
        out["truncations"] = np.concatenate(
            [ds.truncations if ds.truncations is not None else np.zeros(ds.n, dtype=bool)
             for ds in datasets]
        )
    if any(ds.episode_ids is not None for ds in datasets):
        ids, offset = [], 0
        for ds in datasets:
            local = np.empty(ds.n, dtype=np.int64)
            episodes = ds.episodes()
            for j, idx in enumerate(episodes):
                local[idx] = offset + j
            ids.append(local)
            offset += len(episodes)
        out["episode_ids"] = np.concatenate(ids)
    return TransitionDataset(**out)
