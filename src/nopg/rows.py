"""The former name of :mod:`nopg.row_matrices` (the dense and sparse row matrices).

Its names still import from here, with a ``DeprecationWarning``.
"""

from __future__ import annotations

import warnings
from typing import Any

from . import row_matrices


def __getattr__(name: str) -> Any:
    value = getattr(row_matrices, name)
    warnings.warn(f"nopg.rows is now nopg.row_matrices; import {name} from there",
                  DeprecationWarning, stacklevel=2)
    return value
