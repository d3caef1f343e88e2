"""Kernel bandwidths: :class:`Bandwidths`, the per-dimension standard deviations of the model's
diagonal Gaussian kernels, and the checks of bandwidth vectors and of the factors that scale them.

Dimension indices in messages are 0-based.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

__all__ = ["Bandwidths", "broadcast_factor", "positive_vector"]


def positive_vector(name: str, value: ArrayLike) -> np.ndarray:
    """``value`` as a read-only float64 vector of positive finite bandwidths, shape (d,) (a scalar
    is one entry); ``name`` is the kernel named in errors."""
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


def broadcast_factor(name: str, factor: ArrayLike, dim: int) -> np.ndarray:
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
        object.__setattr__(self, "state", positive_vector("state", self.state))
        object.__setattr__(self, "action", positive_vector("action", self.action))
        if self.next_state is not None:
            object.__setattr__(
                self, "next_state", positive_vector("next_state", self.next_state)
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
        state = self.state * broadcast_factor("state_factor", state_factor, self.state.shape[0])
        action = self.action * broadcast_factor("action_factor", action_factor, self.action.shape[0])
        if next_state_factor is not None:
            base = self.next_state_or_state
            nxt = base * broadcast_factor("next_state_factor", next_state_factor, base.shape[0])
        elif self.next_state is not None:
            nxt = self.next_state * broadcast_factor("state_factor", state_factor, self.next_state.shape[0])
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
