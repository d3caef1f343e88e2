"""The checks shared by nopg's configurations, with one error format for every parameter.

Every message reads like scikit-learn's: "The 'top_k' parameter of NOPGConfig must be a positive
int, 'auto' or None. Got 0 instead." (``owner`` names the class; without it the message reads
"The 'top_k' parameter must be ...").
"""

from __future__ import annotations

from typing import Any, NoReturn

import numpy as np


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
