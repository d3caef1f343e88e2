"""Data states as extra starts of the objective (``NOPGConfig.starts.data``).

NOPG's objective weights every state by the policy's discounted visitation from the initial
states. A policy therefore gets a gradient only along its own path from them: a swing-up that
has not yet reached the top gets none for what it does there, and gradient ascent settles in a
policy that spins the pendulum through the top. Adding data states as starts of the objective
(``J_hat`` the mean return over the initial states and these) improves the policy where the
data go too, so the catch at the top is learnt from the states near the top before the swing
reaches them.

The states are chosen by greedy farthest-point sampling (Gonzalez's 2-approximation of the
k-centre problem), in units of the data's standard deviation per dimension and starting from
the initial states: each next one is the data state farthest from the initial states and the
states chosen so far, so a few of them cover the data's range. The choice is deterministic
(ties go to the first data state). Hand-written: the selection is a dozen lines over a
``(n, d)`` distance update, and no library in the dependencies offers it.
"""

from __future__ import annotations

import numpy as np

__all__ = ["farthest_data_states"]


def farthest_data_states(states: np.ndarray, initial_states: np.ndarray, k: int) -> np.ndarray:
    """``k`` rows of ``states`` (n, d) spread over them by farthest-point sampling from
    ``initial_states`` (m, d), in units of the states' standard deviation per dimension.

    Returns the chosen rows' indices, in the order chosen. Each is the state farthest from the
    initial states and the states chosen before it (ties: the first such state)."""
    x = np.asarray(states, dtype=np.float64)
    z = np.asarray(initial_states, dtype=np.float64)
    if x.ndim != 2 or z.ndim != 2 or z.shape[1] != x.shape[1]:
        raise ValueError(f"states (n, d) and initial_states (m, d) must share d. Got shapes "
                         f"{x.shape} and {z.shape}.")
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k <= len(x):
        raise ValueError(f"starts.data must be an int in [1, {len(x)}] (the number of data "
                         f"states). Got {k!r}.")
    scale = x.std(axis=0)
    scale = np.where(scale > 0, scale, 1.0)
    x, z = x / scale, z / scale
    nearest = np.full(len(x), np.inf)
    for point in z:
        nearest = np.minimum(nearest, np.linalg.norm(x - point, axis=1))
    chosen = np.empty(int(k), dtype=np.int64)
    for j in range(int(k)):
        i = int(np.argmax(nearest))
        chosen[j] = i
        nearest = np.minimum(nearest, np.linalg.norm(x - x[i], axis=1))
    return chosen
