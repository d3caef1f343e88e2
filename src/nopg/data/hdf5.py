"""D4RL-style HDF5 files (``.hdf5`` / ``.h5``): :func:`load_hdf5` and :func:`save_hdf5`.

Top-level datasets ``observations (N, d_s)``, ``actions (N, d_a)``, ``rewards (N,)``,
``terminals (N,)``, optional ``timeouts (N,)`` (time-limit truncations), optional
``next_observations (N, d_s)`` and, as a nopg extension, optional ``episode_ids (N,)``.
Everything else (``infos/...``, ``metadata/...``) is ignored. Written files always contain
``next_observations`` and ``timeouts``; the attribute ``nopg_has_truncations`` remembers
whether the data set had truncation flags at all, so a round trip is exact.

Without ``next_observations`` (e.g. D4RL's ``hopper-medium-v0``), the next observation of
row ``i`` is row ``i + 1`` of the same episode. Episodes are runs of equal ``episode_ids``
when present, otherwise they end after every row with ``terminals`` or ``timeouts`` set. The
last row of an episode has no next observation:

* if it is terminal, it is kept (its reward matters) and its next state is set to its own
  state, a placeholder that never enters the model because a terminal transition's discount
  is 0;
* otherwise (time-limit truncation, or the file simply ends) it is dropped, and the new last
  row of that episode is marked truncated.

Episode boundaries that are neither terminal nor timeout nor an id change cannot be detected.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import numpy as np

from .dataset import TransitionDataset, check_finite, check_parent_folder

__all__ = ["load_hdf5", "save_hdf5"]


def _finite(name: str, arr: np.ndarray, source: str) -> np.ndarray:
    if arr.dtype.kind == "f":
        try:
            check_finite(f"'{name}'", arr)
        except ValueError as err:
            raise ValueError(f"{source}: {err}") from None
    return arr


def _episode_ends(terminals: np.ndarray, timeouts: np.ndarray, episode_ids: np.ndarray | None
                  ) -> np.ndarray:
    """Boolean (n,): row i is the last row of its episode."""
    n = terminals.shape[0]
    ends = np.zeros(n, dtype=bool)
    ends[-1] = True
    if episode_ids is not None:
        ends[:-1] |= episode_ids[1:] != episode_ids[:-1]
    else:
        ends |= terminals | timeouts
    return ends


def load_hdf5(path: str | os.PathLike[str]) -> TransitionDataset:
    """Read a D4RL-style HDF5 file (see the module docstring for the layout and next states).

    Raises
    ------
    ValueError
        On a missing required key, a length mismatch, NaN/inf values, non-boolean flags, or a file
        that is not HDF5.
    """
    import h5py

    source = os.fspath(path)
    try:
        fh = h5py.File(source, "r")
    except OSError as err:
        raise ValueError(f"{source}: not a readable HDF5 file ({err})") from None
    with fh:
        raw: dict[str, np.ndarray] = {}
        for key in ("observations", "actions", "rewards", "terminals", "timeouts",
                    "next_observations", "episode_ids"):
            if key in fh:
                if not isinstance(fh[key], h5py.Dataset):
                    raise ValueError(f"{source}: '{key}' must be a dataset, not a group")
                raw[key] = np.asarray(fh[key][()])
        has_truncations = bool(fh.attrs.get("nopg_has_truncations", "timeouts" in raw))
    for key in ("observations", "actions", "rewards", "terminals"):
        if key not in raw:
            raise ValueError(f"{source}: missing the required key '{key}' (D4RL layout: "
                             "observations, actions, rewards, terminals[, timeouts, "
                             "next_observations])")
    n = raw["observations"].shape[0] if raw["observations"].ndim else 0
    if n == 0:
        raise ValueError(f"{source}: 'observations' is empty")
    for key, arr in raw.items():
        if arr.ndim == 0 or arr.shape[0] != n:
            rows = arr.shape[0] if arr.ndim else "no"
            raise ValueError(f"{source}: '{key}' has {rows} rows but 'observations' has {n}")
        _finite(key, arr, source)
    try:
        if "next_observations" in raw:
            return TransitionDataset(
                raw["observations"], raw["actions"], raw["rewards"], raw["next_observations"],
                raw["terminals"], raw.get("timeouts") if has_truncations else None,
                raw.get("episode_ids"))
        return _derive_next(raw, has_truncations)
    except ValueError as err:
        raise ValueError(f"{source}: {err}") from None


def _derive_next(raw: Mapping[str, np.ndarray], has_truncations: bool) -> TransitionDataset:
    """Transitions from consecutive rows when the file has no ``next_observations``."""
    from .dataset import bool_array, int_array

    obs = raw["observations"]
    n = obs.shape[0]
    terminals = bool_array("terminals", raw["terminals"])
    timeouts = (bool_array("timeouts", raw["timeouts"]) if "timeouts" in raw
                else np.zeros(n, dtype=bool))
    ids = int_array("episode_ids", raw["episode_ids"]) if "episode_ids" in raw else None
    ends = _episode_ends(terminals, timeouts, ids)
    next_obs = np.empty_like(obs)
    next_obs[:-1] = obs[1:]
    next_obs[ends] = obs[ends]               # placeholder; only kept where terminal
    keep = ~ends | terminals
    truncations = timeouts.copy()
    # A dropped episode end hands its "episode over" flag to the previous row of that episode.
    dropped = np.flatnonzero(ends & ~terminals)
    prev = dropped - 1
    prev = prev[(prev >= 0) & ~ends[np.maximum(prev, 0)]]
    truncations[prev] = True
    if not keep.any():
        raise ValueError("no transition has a next observation (every episode has one row)")
    return TransitionDataset(obs[keep], raw["actions"][keep], raw["rewards"][keep], next_obs[keep],
                             terminals[keep], truncations[keep] if (has_truncations or prev.size)
                             else None, None if ids is None else ids[keep])


def save_hdf5(data: TransitionDataset, path: str | os.PathLike[str]) -> None:
    """Write ``data`` as a D4RL-style HDF5 file (with ``next_observations`` and ``timeouts``).

    Raises
    ------
    ValueError
        If the file's folder does not exist.
    """
    import h5py

    check_parent_folder(path)
    with h5py.File(os.fspath(path), "w") as fh:
        fh.attrs["nopg_format"] = "nopg TransitionDataset, D4RL layout"
        fh.attrs["nopg_has_truncations"] = data.truncations is not None
        fh.create_dataset("observations", data=data.states)
        fh.create_dataset("actions", data=data.actions)
        fh.create_dataset("rewards", data=data.rewards)
        fh.create_dataset("next_observations", data=data.next_states)
        fh.create_dataset("terminals", data=data.terminals)
        fh.create_dataset("timeouts", data=data.truncations if data.truncations is not None
                          else np.zeros(data.n, dtype=bool))
        if data.episode_ids is not None:
            fh.create_dataset("episode_ids", data=data.episode_ids)
