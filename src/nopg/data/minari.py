"""Local Minari data sets (``minari:<dataset_id>``): :func:`load_minari`, :func:`save_minari` and
:func:`flatten_observations`.

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
import warnings
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from .dataset import TransitionDataset

__all__ = ["EPISODE_ID_INFO", "OVERWRITE_HINT", "flatten_observations", "load_minari",
           "minari_dataset_exists", "save_minari"]

EPISODE_ID_INFO = "nopg_episode_id"
"""The per-step info of an exported Minari data set that holds nopg's episode ids."""
OVERWRITE_HINT = "(use overwrite=True, or --overwrite on the command line, to replace it)"
"""How to replace a destination that exists (the end of the error that refuses it)."""


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


def minari_dataset_exists(dataset_id: str,
                          datasets_path: str | os.PathLike[str] | None = None) -> bool:
    """Whether the local Minari data set ``dataset_id`` exists (under ``datasets_path``, default
    ``$MINARI_DATASETS_PATH`` or Minari's own default)."""
    minari = _import_minari()
    with _minari_root(datasets_path):
        return dataset_id in minari.list_local_datasets()


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
        if minari_dataset_exists(dataset_id):
            if not overwrite:
                raise ValueError(f"Minari data set {dataset_id!r} already exists {OVERWRITE_HINT}")
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
