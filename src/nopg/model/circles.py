"""Pairs of state coordinates that lie on a circle: an angle observed as ``(cos, sin)``.

Many environments observe an angle ``theta`` as ``(r cos theta, r sin theta)`` (gymnasium's
Pendulum, Acrobot and Reacher; the Quanser cart-pole), so every state of the data lies on the
circle ``x_i^2 + x_k^2 = r^2``. A local-linear step (:mod:`nopg.model.local_linear`) does not know
that: it moves a successor along the circle's tangent, and it carries a query's offset from the
circle into its successors unchanged, so along a chain of model steps the state drifts off the
circle with nothing to pull it back. Inside the circle the fitted dynamics act on a shrunken
``(cos, sin)``: a pendulum held upright by the model drifted to radius 0.4-0.9, where its fitted
gravity is that much weaker, and the model caught swing-ups the real pendulum does not
(``docs/bandwidths.md``). Putting every moved successor back on its circle, ``(x_i, x_k) r /
|(x_i, x_k)|``, keeps the model's states where the data's are.

:func:`find_circles` finds such pairs in the data: both coordinates vary, and ``x_i^2 + x_k^2``
is the same for every state and next state up to ``rtol`` (float32 rounding is ~1e-7). Random
data never pass this test; quaternions and other norm constraints of more than two coordinates
are not looked for.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from ..validation import fail, is_int

__all__ = ["find_circles", "resolve_circles", "check_state_circles", "plain_circles",
           "project_to_circles", "CIRCLE_RTOL"]

CIRCLE_RTOL = 1e-5
"""Largest relative spread of ``x_i^2 + x_k^2`` over the data for a pair to count as a circle."""

_MIN_SPREAD = 1e-3   # each coordinate of a circle spans at least this share of the radius


def find_circles(points: np.ndarray, rtol: float = CIRCLE_RTOL) -> list[tuple[int, int]]:
    """Disjoint pairs ``(i, k)``, ``i < k``, of columns of ``points`` (n, d) on a circle about 0.

    Pairs are taken in order of ``i`` then ``k``; a column already in a pair is not reused.
    """
    x = np.asarray(points, float)
    if x.ndim != 2 or x.shape[0] < 3:
        return []
    pairs: list[tuple[int, int]] = []
    used: set[int] = set()
    for i in range(x.shape[1]):
        for k in range(i + 1, x.shape[1]):
            if i in used or k in used:
                continue
            q = x[:, i] ** 2 + x[:, k] ** 2
            r2 = float(np.median(q))
            if not np.isfinite(r2) or r2 <= 0.0:
                continue
            spread = _MIN_SPREAD * np.sqrt(r2)
            if (np.ptp(x[:, i]) > spread and np.ptp(x[:, k]) > spread
                    and float(np.max(np.abs(q / r2 - 1.0))) <= rtol):
                pairs.append((i, k))
                used.update((i, k))
    return pairs


def check_state_circles(value: Any, owner: str | None = None) -> None:
    """``state_circles``: ``"auto"``, ``None`` or a list of disjoint ``[i, k]`` index pairs."""
    if value is None or value == "auto":
        return
    what = "'auto', None or a list of disjoint [i, k] pairs of state indices (i != k, >= 0)"
    if isinstance(value, str) or not isinstance(value, Sequence):
        fail("state_circles", what, value, owner)
    seen: set[int] = set()
    for pair in value:
        if (isinstance(pair, str) or not isinstance(pair, Sequence) or len(pair) != 2
                or not all(is_int(i) and i >= 0 for i in pair) or pair[0] == pair[1]
                or seen & {int(pair[0]), int(pair[1])}):
            fail("state_circles", what, value, owner)
        seen.update(int(i) for i in pair)


def plain_circles(value: Any) -> str | list[list[int]] | None:
    """``state_circles`` in the form that survives JSON (pairs as lists of ints)."""
    if value is None or isinstance(value, str):
        return value
    return [[int(i), int(k)] for i, k in value]


def resolve_circles(setting: Any, points: np.ndarray) -> list[tuple[int, int, float]]:
    """``(i, k, r)`` of each circle: found in ``points`` (n, d_s) for ``"auto"``, the given
    pairs otherwise (``r`` the median radius of the points there); none for ``None``."""
    if setting is None:
        return []
    x = np.asarray(points, float)
    pairs = find_circles(x) if setting == "auto" else [(int(i), int(k)) for i, k in setting]
    out = []
    for i, k in pairs:
        if max(i, k) >= x.shape[1]:
            raise ValueError(f"state_circles names state index {max(i, k)} but the data's states "
                             f"have {x.shape[1]} dimensions")
        r = float(np.median(np.hypot(x[:, i], x[:, k])))
        if not r > 0.0:
            raise ValueError(f"state_circles: the data's states have radius 0 in dimensions "
                             f"({i}, {k}); a circle needs a positive radius")
        out.append((i, k, r))
    return out


def project_to_circles(states: torch.Tensor, circles: Sequence[tuple[int, int, float]]
                       ) -> torch.Tensor:
    """``states`` (..., d_s) with each circle's pair of coordinates scaled onto its radius
    (differentiable; a pair at the origin stays there)."""
    if not circles:
        return states
    out = states.clone()
    for i, k, r in circles:
        pair = states[..., [i, k]]
        norm = pair.norm(dim=-1, keepdim=True)
        scale = torch.where(norm > 0, r / norm.clamp_min(torch.finfo(states.dtype).tiny), 1.0)
        out[..., [i, k]] = pair * scale
    return out
