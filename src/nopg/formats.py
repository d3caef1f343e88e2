"""Reading and writing :class:`~nopg.data.TransitionDataset` in other formats.

Three formats are supported, and :func:`load_dataset` / :func:`save_dataset` pick one from the
location:

``.npz``
    nopg's own format (:meth:`TransitionDataset.save` / :meth:`TransitionDataset.load`).

``.hdf5`` / ``.h5`` (D4RL layout)
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

``minari:<dataset_id>`` (or a bare id such as ``D4RL/pointmaze/umaze-v2``)
    A Minari data set on local disk (``$MINARI_DATASETS_PATH``, default ``~/.minari/datasets``);
    nopg never downloads (run ``minari download <id>`` yourself). A Minari episode holds ``T + 1``
    observations and ``T`` actions, rewards, terminations and truncations. Dict observations
    (e.g. PointMaze's ``achieved_goal``, ``desired_goal``, ``observation``) are flattened by
    concatenating the keys in sorted order (recursively for nested dicts; tuples in order), or only
    the keys given by ``obs_keys``, in that order. Episode ids: Minari numbers episodes
    ``0..m-1``; nopg stores its own ids in the per-step info ``nopg_episode_id`` and reads them
    back when present. Exporting needs every episode to be a chain
    (``next_states[t] == states[t + 1]``); terminal and truncation flags are kept per step.
"""

from __future__ import annotations

import contextlib
import os
import re
import warnings
import zipfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .data import TransitionDataset, check_finite, check_parent_folder

__all__ = [
    "HDF5_SUFFIXES",
    "describe",
    "MINARI_PREFIX",
    "flatten_observations",
    "load_dataset",
    "load_hdf5",
    "load_minari",
    "resolve_location",
    "save_dataset",
    "save_hdf5",
    "save_minari",
]

MINARI_PREFIX = "minari:"
HDF5_SUFFIXES = (".hdf5", ".h5")
NPZ_SUFFIX = ".npz"
EPISODE_ID_INFO = "nopg_episode_id"
_OVERWRITE_HINT = "(use overwrite=True, or --overwrite on the command line, to replace it)"
_MINARI_ID = re.compile(r"^[\w.\-]+(/[\w.\-]+)*-v\d+$")


# ----------------------------------------------------------------------------- dispatch
def resolve_location(location: str | os.PathLike[str]) -> tuple[str, str]:
    """Classify a data location as ``("npz" | "hdf5" | "minari", target)``.

    ``minari:<id>`` is a Minari id; otherwise the file suffix decides (``.npz``, ``.hdf5``,
    ``.h5``); a string that is no existing file and looks like ``name-v<k>`` (optionally with
    ``namespace/`` parts) is a Minari id.

    Raises
    ------
    ValueError
        If the location matches none of these.
    """
    text = os.fspath(location)
    if text.startswith(MINARI_PREFIX):
        target = text[len(MINARI_PREFIX):]
        if not target:
            raise ValueError("empty Minari dataset id after 'minari:'")
        return "minari", target
    suffix = Path(text).suffix.lower()
    if suffix == NPZ_SUFFIX:
        return "npz", text
    if suffix in HDF5_SUFFIXES:
        return "hdf5", text
    if not Path(text).exists() and _MINARI_ID.match(text):
        return "minari", text
    raise ValueError(
        f"cannot tell the format of {text!r}: use a .npz, .hdf5 or .h5 file, or minari:<dataset id>"
    )


def load_dataset(location: str | os.PathLike[str], *, obs_keys: str | Sequence[str] | None = None
                 ) -> TransitionDataset:
    """Read a data set from a ``.npz`` / ``.hdf5`` file or a local Minari id (see the module doc).

    Parameters
    ----------
    location : str or path
        File path, ``minari:<id>`` or a bare Minari id.
    obs_keys : str or sequence of str, optional
        Minari dict observations only: the keys to use, in order (default: all, sorted).

    Raises
    ------
    ValueError
        If the location is unknown, the file is missing or malformed, or the data are invalid.
    """
    kind, target = resolve_location(location)
    if kind == "minari":
        return load_minari(target, obs_keys=obs_keys)
    if obs_keys is not None:
        raise ValueError("obs_keys applies to Minari data sets only")
    if not Path(target).is_file():
        raise ValueError(f"data file {target!r} does not exist")
    if kind == "hdf5":
        return load_hdf5(target)
    if not zipfile.is_zipfile(target):
        raise ValueError(f"{target}: not a readable .npz file (not a zip archive)")
    try:
        return TransitionDataset.load(target)
    except (OSError, EOFError, zipfile.BadZipFile) as err:
        raise ValueError(f"{target}: not a readable .npz file ({err})") from None


def save_dataset(data: TransitionDataset, location: str | os.PathLike[str], *,
                 overwrite: bool = False, env_id: str | None = None) -> str:
    """Write ``data`` to a ``.npz`` / ``.hdf5`` file or a local Minari data set.

    Parameters
    ----------
    data : TransitionDataset
    location : str or path
        As for :func:`load_dataset`.
    overwrite : bool, default=False
        Replace an existing file or Minari data set.
    env_id : str, optional
        Minari only: the gymnasium id recorded as the data set's environment.

    Returns
    -------
    str
        The kind written: ``"npz"``, ``"hdf5"`` or ``"minari"``.

    Raises
    ------
    ValueError
        If the destination exists (without ``overwrite``), its folder does not exist, or it
        cannot hold the data.
    """
    if not isinstance(data, TransitionDataset):
        raise ValueError(f"data must be a TransitionDataset. Got {type(data).__name__}.")
    kind, target = resolve_location(location)
    if kind == "minari":
        save_minari(data, target, env_id=env_id, overwrite=overwrite)
        return kind
    if env_id is not None:
        raise ValueError("env_id applies to Minari data sets only")
    if Path(target).exists() and not overwrite:
        raise ValueError(f"{target} already exists {_OVERWRITE_HINT}")
    if kind == "hdf5":
        save_hdf5(data, target)
    else:
        data.save(target)
    return kind


# -------------------------------------------------------------------------------- HDF5
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
    from .data import bool_array, int_array

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


# ------------------------------------------------------------------------------- Minari
def _import_minari() -> Any:
    """Import minari (an optional dependency: ``pip install "nopg[minari]"``)."""
    try:
        import minari
    except ImportError:
        raise ValueError('Minari data sets need the minari package: pip install "nopg[minari]"'
                         ) from None
    return minari


@contextlib.contextmanager
def _minari_root(datasets_path: str | os.PathLike[str] | None) -> Iterator[None]:
    """Temporarily point ``MINARI_DATASETS_PATH`` at ``datasets_path`` (not thread-safe)."""
    if datasets_path is None:
        yield
        return
    old = os.environ.get("MINARI_DATASETS_PATH")
    os.environ["MINARI_DATASETS_PATH"] = os.fspath(datasets_path)
    try:
        yield
    finally:
        if old is None:
            del os.environ["MINARI_DATASETS_PATH"]
        else:
            os.environ["MINARI_DATASETS_PATH"] = old


def flatten_observations(obs: Any, obs_keys: str | Sequence[str] | None = None) -> np.ndarray:
    """Flatten Minari episode observations to a float64 ``(T + 1, d)`` array.

    Arrays are reshaped to ``(T + 1, -1)``. Dicts concatenate their entries in sorted key order
    (recursively), or only ``obs_keys`` in the given order; tuples concatenate in order.

    Raises
    ------
    ValueError
        If a requested key is missing or the parts have different lengths.
    """
    if isinstance(obs, Mapping):
        if obs_keys is None:
            keys = sorted(obs)
        else:
            keys = [obs_keys] if isinstance(obs_keys, str) else list(obs_keys)
            missing = [k for k in keys if k not in obs]
            if missing:
                raise ValueError(f"observation keys {missing} not found; available: {sorted(obs)}")
        parts = [flatten_observations(obs[k]) for k in keys]
    elif isinstance(obs, (tuple, list)) and not isinstance(obs, np.ndarray):
        if obs_keys is not None:
            raise ValueError("obs_keys needs dict observations")
        parts = [flatten_observations(o) for o in obs]
    else:
        if obs_keys is not None:
            raise ValueError("obs_keys needs dict observations; these are arrays")
        arr = np.asarray(obs)
        if arr.dtype.kind not in "biuf":
            raise ValueError(f"observations must be numeric; got dtype {arr.dtype}")
        return arr.reshape(arr.shape[0], -1).astype(np.float64)
    lengths = {p.shape[0] for p in parts}
    if len(lengths) != 1:
        raise ValueError(f"observation parts have different lengths {sorted(lengths)}")
    return np.concatenate(parts, axis=1)


def load_minari(dataset_id: str, *, obs_keys: str | Sequence[str] | None = None,
                datasets_path: str | os.PathLike[str] | None = None) -> TransitionDataset:
    """Read a Minari data set from local disk into a :class:`TransitionDataset` (never downloads).

    Parameters
    ----------
    dataset_id : str
        E.g. ``"D4RL/pointmaze/umaze-v2"``.
    obs_keys : str or sequence of str, optional
        For dict observations: the keys to use, in order (default all keys, sorted).
    datasets_path : path, optional
        Root folder of local Minari data sets (default ``$MINARI_DATASETS_PATH`` or
        ``~/.minari/datasets``).

    Raises
    ------
    ValueError
        If the data set is not on disk, or its episodes are malformed (lengths, NaN, dict actions).
    """
    minari = _import_minari()

    with _minari_root(datasets_path):
        try:
            ds = minari.load_dataset(dataset_id, download=False)
        except (FileNotFoundError, ValueError, KeyError, OSError) as err:
            from minari.storage.datasets_root_dir import get_dataset_path

            raise ValueError(
                f"Minari data set {dataset_id!r} is not available under {get_dataset_path()} "
                f"({err}); nopg never downloads: run `minari download {dataset_id}` first"
            ) from None
        parts: dict[str, list[np.ndarray]] = {k: [] for k in (
            "states", "actions", "rewards", "next_states", "terminals", "truncations", "ids")}
        for ep in ds.iterate_episodes():
            where = f"Minari data set {dataset_id!r}, episode {ep.id}"
            try:
                obs = flatten_observations(ep.observations, obs_keys)
                if isinstance(ep.actions, (Mapping, tuple)):
                    raise ValueError("dict or tuple actions are not supported")
                actions = np.asarray(ep.actions, dtype=np.float64)
                actions = actions.reshape(actions.shape[0], -1)
                t = actions.shape[0]
                rewards = np.asarray(ep.rewards, dtype=np.float64).reshape(-1)
                term = np.asarray(ep.terminations).reshape(-1)
                trunc = np.asarray(ep.truncations).reshape(-1)
                if obs.shape[0] != t + 1:
                    raise ValueError(f"{obs.shape[0]} observations for {t} actions (need T + 1)")
                for name, arr in (("rewards", rewards), ("terminations", term),
                                  ("truncations", trunc)):
                    if arr.shape[0] != t:
                        raise ValueError(f"'{name}' has {arr.shape[0]} entries for {t} actions")
                for name, arr in (("observations", obs), ("actions", actions),
                                  ("rewards", rewards)):
                    if not np.all(np.isfinite(arr)):
                        raise ValueError(f"'{name}' contains NaN or inf values")
            except ValueError as err:
                raise ValueError(f"{where}: {err}") from None
            info_ids = (ep.infos or {}).get(EPISODE_ID_INFO) if isinstance(ep.infos, Mapping) else None
            ep_id = int(np.asarray(info_ids).reshape(-1)[0]) if info_ids is not None else int(ep.id)
            parts["states"].append(obs[:-1])
            parts["next_states"].append(obs[1:])
            parts["actions"].append(actions)
            parts["rewards"].append(rewards)
            parts["terminals"].append(term)
            parts["truncations"].append(trunc)
            parts["ids"].append(np.full(t, ep_id, dtype=np.int64))
    if not parts["states"]:
        raise ValueError(f"Minari data set {dataset_id!r} has no episodes")
    cat = {k: np.concatenate(v) for k, v in parts.items()}
    try:
        return TransitionDataset(cat["states"], cat["actions"], cat["rewards"], cat["next_states"],
                                 cat["terminals"], cat["truncations"], cat["ids"])
    except ValueError as err:
        raise ValueError(f"Minari data set {dataset_id!r}: {err}") from None


def save_minari(data: TransitionDataset, dataset_id: str, *, env_id: str | None = None,
                overwrite: bool = False, datasets_path: str | os.PathLike[str] | None = None,
                description: str | None = None) -> None:
    """Write ``data`` as a local Minari data set (``minari.create_dataset_from_buffers``).

    Observation and action spaces are unbounded float64 ``Box`` spaces of the data's dimensions,
    so values are stored exactly. Each episode of :meth:`TransitionDataset.episodes` becomes one
    Minari episode with ``T + 1`` observations; the data set's episode ids go into the per-step
    info ``nopg_episode_id``.

    Raises
    ------
    ValueError
        If an episode is not a chain, or the id exists (without ``overwrite``) or is invalid.
    """
    import gymnasium as gym

    minari = _import_minari()
    from minari.data_collector import EpisodeBuffer

    buffers = []
    for j, idx in enumerate(data.episodes()):
        broken = np.flatnonzero(np.any(data.next_states[idx[:-1]] != data.states[idx[1:]], axis=1))
        if broken.size:
            raise ValueError(
                f"episode {j} is not a chain: next_states of transition {int(idx[broken[0]])} differs "
                "from the following state; Minari stores T + 1 observations per episode")
        obs = np.vstack([data.states[idx], data.next_states[idx[-1:]]])
        infos = None
        if data.episode_ids is not None:
            infos = {EPISODE_ID_INFO: np.full(idx.size + 1, data.episode_ids[idx[0]], dtype=np.int64)}
        trunc = (data.truncations[idx] if data.truncations is not None
                 else np.zeros(idx.size, dtype=bool))
        buffers.append(EpisodeBuffer(
            id=j, observations=obs, actions=data.actions[idx].copy(),
            rewards=data.rewards[idx].tolist(), terminations=data.terminals[idx].tolist(),
            truncations=trunc.tolist(), infos=infos))
    box = lambda d: gym.spaces.Box(-np.inf, np.inf, (d,), np.float64)  # noqa: E731
    with _minari_root(datasets_path):
        if dataset_id in minari.list_local_datasets():
            if not overwrite:
                raise ValueError(f"Minari data set {dataset_id!r} already exists {_OVERWRITE_HINT}")
            minari.delete_dataset(dataset_id)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", module=r"minari\..*")
            try:
                minari.create_dataset_from_buffers(
                    dataset_id, buffers, env=env_id, observation_space=box(data.state_dim),
                    action_space=box(data.action_dim), algorithm_name="nopg export",
                    description=description or f"exported by nopg: {data!r}")
            except (ValueError, AssertionError) as err:
                raise ValueError(f"cannot create the Minari data set {dataset_id!r}: {err}") from None


# ------------------------------------------------------------------------------ inspection
def describe(data: TransitionDataset) -> dict[str, Any]:
    """JSON-serialisable description of a data set (used by ``nopg data``).

    Extends :meth:`TransitionDataset.summary` with episode lengths, the min/max/std of the
    episode returns, how episodes end (terminal, truncated, neither) and per-dimension
    next-state ranges.
    """
    out = data.summary()
    episodes = data.episodes()
    lengths = np.array([idx.size for idx in episodes])
    returns = data.episode_returns()
    last = np.array([idx[-1] for idx in episodes])
    trunc = data.truncations if data.truncations is not None else np.zeros(data.n, dtype=bool)
    out.update({
        "has_episode_ids": data.episode_ids is not None,
        "has_truncation_flags": data.truncations is not None,
        "episode_length_min": int(lengths.min()),
        "episode_length_mean": float(lengths.mean()),
        "episode_length_max": int(lengths.max()),
        "episodes_ending_terminal": int(data.terminals[last].sum()),
        "episodes_ending_truncated": int((trunc[last] & ~data.terminals[last]).sum()),
        "episodes_ending_open": int((~trunc[last] & ~data.terminals[last]).sum()),
        "episode_return_min": float(returns.min()),
        "episode_return_max": float(returns.max()),
        "episode_return_std": float(returns.std()),
        "next_state_min": [float(v) for v in data.next_states.min(axis=0)],
        "next_state_max": [float(v) for v in data.next_states.max(axis=0)],
    })
    return out
