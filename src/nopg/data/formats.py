"""Reading and writing :class:`~nopg.data.dataset.TransitionDataset` in other formats.

Three formats are supported, and :func:`load_dataset` / :func:`save_dataset` pick one from the
location:

``.npz``
    nopg's own format (:meth:`TransitionDataset.save` / :meth:`TransitionDataset.load`).

``.hdf5`` / ``.h5`` (D4RL layout)
    :mod:`nopg.data.hdf5` (the layout, and how next states are derived without
    ``next_observations``).

``minari:<dataset_id>`` (or a bare id such as ``D4RL/pointmaze/umaze-v2``)
    A local Minari data set, never downloaded: :mod:`nopg.data.minari` (episodes, dict
    observations, episode ids).

This module picks the format from the location (:func:`resolve_location`) and describes a data
set (:func:`describe`); it imports the readers' and writers' names, so that
``from nopg.data.formats import ...`` reaches them all.
"""

from __future__ import annotations

import os
import re
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .dataset import TransitionDataset
from .hdf5 import load_hdf5, save_hdf5
from .minari import (
    EPISODE_ID_INFO,
    OVERWRITE_HINT,
    flatten_observations,
    load_minari,
    save_minari,
)

__all__ = [
    "EPISODE_ID_INFO",
    "HDF5_SUFFIXES",
    "describe",
    "MINARI_PREFIX",
    "NPZ_SUFFIX",
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
        raise ValueError(f"{target} already exists {OVERWRITE_HINT}")
    if kind == "hdf5":
        save_hdf5(data, target)
    else:
        data.save(target)
    return kind


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
