"""Helpers shared by several experiments: settings, external data sets, sub-sampling, reset states."""

from __future__ import annotations

import dataclasses
import difflib
import os
from typing import Any

import numpy as np

from ..data import TransitionDataset
from ..formats import load_dataset, resolve_location


def suggestion(name: str, known: list[str]) -> str:
    """``"; did you mean 'x'?"`` for the closest known name, or the list of known names."""
    close = difflib.get_close_matches(name, known, n=1)
    if close:
        return f"; did you mean {close[0]!r}?"
    return f"; known settings: {', '.join(known)}"


def checked_replace(config: Any, changes: dict[str, Any], what: str) -> Any:
    """``dataclasses.replace(config, **changes)``; a ValueError names unknown ``what`` settings."""
    known = [f.name for f in dataclasses.fields(config)]
    for name in changes:
        if name not in known:
            raise ValueError(f"unknown {what} setting {name!r}{suggestion(name, known)}")
    return dataclasses.replace(config, **changes)

__all__ = ["checked_replace", "load_external_dataset", "sample_reset_states", "subsample",
           "suggestion"]


def load_external_dataset(spec: str | os.PathLike[str], minari_obs_keys: str | None = None
                          ) -> TransitionDataset:
    """Load a data set named by a path (``.npz``/``.hdf5``) or a Minari id from local disk.

    Uses :func:`nopg.formats.load_dataset`; ``minari_obs_keys`` selects the entry of Minari dict
    observations (e.g. ``"observation"`` for the point maze).
    """
    kind, _ = resolve_location(spec)
    if kind == "minari" and minari_obs_keys is not None:
        return load_dataset(spec, obs_keys=minari_obs_keys)
    return load_dataset(spec)


def subsample(data: TransitionDataset, n: int | None, seed: int) -> TransitionDataset:
    """``n`` transitions drawn uniformly without replacement (sorted), or ``data`` if ``n`` is None."""
    if n is None:
        return data
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"The 'n_samples' setting must be a positive int or null. Got {n!r}.")
    if n > data.n:
        raise ValueError(f"n_samples = {n} exceeds the {data.n} transitions available")
    if n == data.n:
        return data
    rng = np.random.default_rng([seed, 7])
    return data.subset(np.sort(rng.choice(data.n, size=int(n), replace=False)))


def sample_reset_states(env_fn: Any, m: int, seed: int) -> np.ndarray:
    """``m`` observations drawn from an environment's reset distribution (seeded once)."""
    if isinstance(m, bool) or not isinstance(m, (int, np.integer)) or m < 1:
        raise ValueError(f"The number of initial states must be a positive int. Got {m!r}.")
    env = env_fn()
    try:
        first, _ = env.reset(seed=int(seed))
        states = [np.asarray(first, dtype=np.float64)]
        for _ in range(int(m) - 1):
            obs, _ = env.reset()
            states.append(np.asarray(obs, dtype=np.float64))
    finally:
        env.close()
    return np.stack(states)
