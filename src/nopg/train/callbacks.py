"""Callbacks of :meth:`nopg.train.algorithm.NOPG.fit`: called after every update with the algorithm and
that update's metrics, they may add metrics (:class:`EvalCallback`'s ``eval_return``), save the
fit (:class:`CheckpointCallback`) or stop it (by returning ``False``)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from torch import nn

if TYPE_CHECKING:
    from .algorithm import NOPG

__all__ = ["Callback", "CheckpointCallback", "EvalCallback"]

logger = logging.getLogger("nopg.train.algorithm")    # the records keep the name of the module they left


class Callback(Protocol):
    """Called after every update with the algorithm and that update's metrics.

    It may add entries to ``metrics`` (e.g. ``eval_return``); returning ``False`` stops ``fit``.
    """

    def __call__(self, algo: NOPG, metrics: dict[str, Any]) -> bool | None: ...


class EvalCallback:
    """Evaluate the policy every ``every`` updates with ``eval_fn(policy) -> float``.

    The return is stored as ``metrics["eval_return"]`` and kept in :attr:`results`.
    """

    def __init__(self, eval_fn: Callable[[nn.Module], float], every: int) -> None:
        if every < 1:
            raise ValueError(f"The 'every' parameter must be >= 1. Got {every!r} instead.")
        self.eval_fn, self.every = eval_fn, int(every)
        self.results: list[tuple[int, float]] = []

    def __call__(self, algo: NOPG, metrics: dict[str, Any]) -> None:
        if metrics["update"] % self.every == 0:
            ret = float(self.eval_fn(algo.policy))
            metrics["eval_return"] = ret
            self.results.append((metrics["update"], ret))
            logger.info("update %d: eval return %.3f (J_hat %.4f)", metrics["update"], ret,
                        metrics["J_hat"])


class CheckpointCallback:
    """Save a checkpoint folder every ``every`` updates (overwriting the previous one)."""

    def __init__(self, path: str | Path, every: int) -> None:
        if every < 1:
            raise ValueError(f"The 'every' parameter must be >= 1. Got {every!r} instead.")
        self.path, self.every = Path(path), int(every)

    def __call__(self, algo: NOPG, metrics: dict[str, Any]) -> None:
        if metrics["update"] % self.every == 0:
            algo.save(self.path)


