"""Keep large freed memory blocks in the process for reuse (glibc's ``malloc`` on Linux).

Every NOPG update allocates temporaries of ``n x hidden`` or ``n x top_k`` floats (tens to
hundreds of MB from 10^5 samples on): the policy's activations and their gradients, the kernel
rows, the solver's vectors. glibc serves a block above its mmap threshold (at most 32 MB, its
dynamic ceiling) with a fresh ``mmap`` and unmaps it on ``free``, so each such temporary is
page-faulted and zeroed by the kernel again at every update. Raising the mmap threshold and the
trim threshold with ``mallopt`` makes those blocks come from the heap and stay there once freed,
so later updates reuse them. The cost: the process keeps its peak heap instead of returning it
to the system.

This is process-wide, so :class:`nopg.NOPG` applies it only when ``NOPGConfig.reuse_memory`` is
true (the default), once per process. Python has no portable interface to ``mallopt``; it is
called through ``ctypes`` where glibc is present and skipped elsewhere (macOS, Windows, musl).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import platform

logger = logging.getLogger(__name__)

M_TRIM_THRESHOLD = -1
M_TOP_PAD = -2
M_MMAP_THRESHOLD = -3
KEEP_BYTES = 2 ** 31 - 1
"""Both thresholds are set to this (the largest value ``mallopt``'s ``int`` takes, 2 GiB)."""

TOP_PAD_BYTES = 2 ** 28
"""The heap grows by at least this much at a time (256 MiB), so fewer ``brk`` calls."""

_applied: bool | None = None


def reuse_freed_memory() -> bool:
    """Raise glibc's mmap and trim thresholds to :data:`KEEP_BYTES` (once per process).

    Returns
    -------
    bool
        Whether the thresholds are raised (``False`` without glibc or if ``mallopt`` refused).
    """
    global _applied
    if _applied is None:
        _applied = _mallopt_thresholds()
    return _applied


def _mallopt_thresholds() -> bool:
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        logger.debug("malloc thresholds left as they are (not glibc)")
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        ok = all(libc.mallopt(ctypes.c_int(param), ctypes.c_int(value)) == 1
                 for param, value in ((M_MMAP_THRESHOLD, KEEP_BYTES), (M_TRIM_THRESHOLD, KEEP_BYTES),
                                      (M_TOP_PAD, TOP_PAD_BYTES)))
    except (OSError, AttributeError) as err:
        logger.debug("malloc thresholds left as they are (%s)", err)
        return False
    if ok:
        # DEBUG, not INFO: a process-wide detail of every run (a fit, a checkpoint loaded to
        # export or evaluate it), not news to its user.
        logger.debug("malloc: freed blocks up to %d MB stay in the process for reuse "
                     "(NOPGConfig.reuse_memory)", KEEP_BYTES >> 20)
    return ok
