"""The checks shared by nopg's configurations, with one error format for every parameter.

Every message reads like scikit-learn's: "The 'top_k' parameter of NOPGConfig must be a positive
int, 'auto' or None. Got 0 instead." (``owner`` names the class; without it the message reads
"The 'top_k' parameter must be ...").
"""

from __future__ import annotations

import difflib
import inspect
import math
import os
import warnings
from typing import Any, NoReturn

import numpy as np

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


def suggestion(name: str, known: list[str]) -> str:
    """``"; did you mean 'x'?"`` for the closest known name, or the list of known names."""
    close = difflib.get_close_matches(name, known, n=1)
    if close:
        return f"; did you mean {close[0]!r}?"
    return f"; known settings: {', '.join(known)}"


def warn_user(message: str | Warning, category: type[Warning] = UserWarning) -> None:
    """``warnings.warn`` at the first frame outside the ``nopg`` package: the user's line, not
    the library's (a fixed ``stacklevel`` lands inside nopg when a call passes through
    another nopg function)."""
    frame, level = inspect.currentframe().f_back, 1  # type: ignore[union-attr]
    while frame.f_back is not None and os.path.abspath(frame.f_code.co_filename).startswith(
            _PACKAGE_DIR + os.sep):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, category, stacklevel=level + 1)


def fail(name: str, requirement: str, value: Any, owner: str | None = None) -> NoReturn:
    """Raise the ValueError for parameter ``name`` that is not ``requirement``."""
    of = f" of {owner}" if owner else ""
    raise ValueError(f"The '{name}' parameter{of} must be {requirement}. Got {value!r} instead.")


def is_int(value: Any) -> bool:
    """A Python or NumPy integer, not a bool."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def is_float(value: Any) -> bool:
    """A Python or NumPy real number (integers included), not a bool."""
    return isinstance(value, (int, float, np.integer, np.floating)) and \
        not isinstance(value, (bool, np.bool_))


def check_choice(name: str, value: Any, choices: tuple[str, ...], owner: str | None = None) -> None:
    if value not in choices:
        fail(name, f"one of {choices}", value, owner)


def check_positive_int(name: str, value: Any, owner: str | None = None, *,
                       allow_none: bool = False) -> None:
    if value is None and allow_none:
        return
    if not is_int(value) or value < 1:
        fail(name, "a positive int or None" if allow_none else "a positive int", value, owner)


def check_bool(name: str, value: Any, owner: str | None = None) -> None:
    if not isinstance(value, (bool, np.bool_)):
        fail(name, "a bool", value, owner)


def check_positive_float(name: str, value: Any, owner: str | None = None) -> None:
    """A finite float above 0."""
    if not is_float(value) or not 0 < value < np.inf:
        fail(name, "a positive float", value, owner)


def check_finite_float(name: str, value: Any, owner: str | None = None, *,
                       allow_none: bool = False) -> None:
    """A finite real number (or ``None`` with ``allow_none``)."""
    if value is None and allow_none:
        return
    if not is_float(value) or not math.isfinite(value):
        fail(name, "a finite float or None" if allow_none else "a finite float", value, owner)


def check_discount(name: str, value: Any, owner: str | None = None) -> None:
    """A discount factor: a real number in [0, 1)."""
    if not is_float(value) or not 0.0 <= value < 1.0:
        fail(name, "a float in [0, 1)", value, owner)
