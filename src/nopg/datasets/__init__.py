"""Data sets shipped with nopg (package data).

``mountaincar_human_10.npz``
    Ten human keyboard demonstrations of gymnasium's ``MountainCarContinuous-v0``, published with
    the NOPG paper's code (``jacarvalho/nopg``, ``datasets/mountaincar/10_trajectories.npy``) and
    converted to plain arrays: 3589 transitions, episode lengths 499, 338, 371, 285, 301, 208, 442,
    422, 421, 302. Every episode starts at rest (position in [-0.58, -0.40], velocity 0), chains
    (``next_states[t] == states[t + 1]``) and ends with a terminal transition at the goal
    (position >= 0.45). The stored rewards are the environment's: ``-0.1 a^2`` per step and
    ``+100`` on the goal step; episode returns 65.3-90.9, mean 82.4. Actions are about half 0 and
    half about +-1 (the recorder added N(0, 0.001) noise to the key's +-1).

``paper_nopg_curves.csv``
    The NOPG-D and NOPG-S curves of the paper's sample-efficiency figures (§6.4): mean return and
    the figure's 95% band over 10 trials per data size, read from the paper's LaTeX source by
    ``scripts/paper_curves.py``. Rows with a ``note`` are not comparable with this project's
    tasks (U-Maze's axis repeats the cart-pole's tables; mountain car uses other reward units).

Only numpy is imported here.
"""

from __future__ import annotations

from collections.abc import Sequence
from importlib import resources
from pathlib import Path

import numpy as np

from ..data.dataset import TransitionDataset

__all__ = ["MOUNTAINCAR_HUMAN_FILE", "PAPER_CURVES_FILE", "REWARDS", "load_mountaincar_human",
           "mountaincar_human_path", "paper_curves"]

MOUNTAINCAR_HUMAN_FILE = "mountaincar_human_10.npz"
"""File name of the ten human demonstrations inside this package."""

PAPER_CURVES_FILE = "paper_nopg_curves.csv"
"""File name of the paper's NOPG sample-efficiency curves inside this package."""

REWARDS = ("env", "time")
"""Reward choices of :func:`load_mountaincar_human`."""

_N_HUMAN_EPISODES = 10


def mountaincar_human_path() -> Path:
    """Path of the packaged ``mountaincar_human_10.npz``.

    Raises
    ------
    ValueError
        If the file is missing from the installation (package data not installed).
    """
    return _packaged_file(MOUNTAINCAR_HUMAN_FILE)


def _packaged_file(name: str) -> Path:
    """Path of the package-data file ``name``; a clear error if the installation lacks it."""
    path = Path(str(resources.files(__name__).joinpath(name)))
    if not path.is_file():
        raise ValueError(f"the packaged data set {name} is missing from {path.parent}; "
                         "reinstall nopg with its package data")
    return path


def paper_curves(task: str) -> list[dict[str, float | str]]:
    """The paper's NOPG-D/NOPG-S curve points of sweep task ``task`` that compare with ours.

    Returns
    -------
    list of dict
        ``algorithm``, ``size``, ``mean``, ``low``, ``high`` (``low``/``high`` are NaN where the
        figure has no band); empty for tasks the paper's figures do not show comparably.
    """
    import csv

    with _packaged_file(PAPER_CURVES_FILE).open(newline="") as handle:
        rows = [r for r in csv.DictReader(handle) if r["task"] == task and not r["note"]]
    return [{"algorithm": r["algorithm"], "size": float(r["size"]), "mean": float(r["mean"]),
             "low": float(r["low"] or "nan"), "high": float(r["high"] or "nan")} for r in rows]


def _episode_selection(episodes: None | int | Sequence[int]) -> list[int]:
    if episodes is None:
        return list(range(_N_HUMAN_EPISODES))
    if isinstance(episodes, bool):
        raise ValueError(f"The 'episodes' parameter must be None, an int or a list of ints. "
                         f"Got {episodes!r}.")
    if isinstance(episodes, (int, np.integer)):
        if not 1 <= episodes <= _N_HUMAN_EPISODES:
            raise ValueError(f"The 'episodes' count must be in [1, {_N_HUMAN_EPISODES}]. "
                             f"Got {episodes}.")
        return list(range(int(episodes)))
    chosen = list(episodes)
    if not chosen:
        raise ValueError("The 'episodes' list is empty; choose at least one demonstration.")
    for e in chosen:
        if isinstance(e, bool) or not isinstance(e, (int, np.integer)) or not 0 <= e < _N_HUMAN_EPISODES:
            raise ValueError(f"Demonstration indices must be ints in [0, {_N_HUMAN_EPISODES - 1}]. "
                             f"Got {e!r}.")
    if len(set(int(e) for e in chosen)) != len(chosen):
        raise ValueError(f"Demonstration indices must be distinct. Got {chosen}.")
    return [int(e) for e in chosen]


def load_mountaincar_human(episodes: None | int | Sequence[int] = None,
                           reward: str = "env") -> TransitionDataset:
    """The human mountain-car demonstrations as a :class:`~nopg.data.dataset.TransitionDataset`.

    Parameters
    ----------
    episodes : None, int or sequence of int
        ``None``: all ten demonstrations; an int ``k``: the first ``k``; a sequence: those
        demonstrations (indices 0-9), in the given order.
    reward : {"env", "time"}
        ``"env"``: the stored environment rewards (``-0.1 a^2`` per step, ``+100`` at the goal).
        ``"time"``: ``-1`` on every step, the paper's shortest-time objective (paper §6, "Human
        Demonstrated Data").

    Returns
    -------
    TransitionDataset
        States ``(position, velocity)``, actions ``(n, 1)``; ``episode_ids`` keep the original
        demonstration index (so ``episodes=[3, 7]`` has ids 3 and 7).

    Raises
    ------
    ValueError
        On an invalid selection or reward name.
    """
    if reward not in REWARDS:
        raise ValueError(f"The 'reward' parameter must be one of {', '.join(REWARDS)}. "
                         f"Got {reward!r}.")
    chosen = _episode_selection(episodes)
    data = TransitionDataset.load(mountaincar_human_path())
    assert data.episode_ids is not None
    index = np.concatenate([np.flatnonzero(data.episode_ids == e) for e in chosen])
    data = data.subset(index)
    if reward == "time":
        data = TransitionDataset(data.states, data.actions, -np.ones(data.n), data.next_states,
                                 data.terminals, data.truncations, data.episode_ids)
    return data
