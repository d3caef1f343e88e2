"""One fit of :class:`nopg.AutoNOPG` with what it runs beside it: what the fits of one call
share (:class:`FitContext`), the judged policy snapshots (:func:`policy_snapshots`), a deadline
that spends the time budget in CPU seconds (:func:`start_budget`, :class:`Deadline`), and a TensorBoard writer
(:func:`run_fit`)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from torch import nn

from ..bandwidth.selection import Bandwidths
from ..data.dataset import TransitionDataset
from ..model.anchored import AnchoredBellman
from ..train.algorithm import NOPG, EvalCallback
from ..train.config_sections import CMAES
from .fit_report import FitReport
from .method_config import MethodConfig
from .recipes import BUDGET_FLOOR_S
from .snapshots import PolicySnapshots
from .task_knowledge import Bounds

__all__ = ["Deadline", "FitContext", "budget_words", "policy_snapshots", "run_fit",
           "start_budget"]


@dataclass
class FitContext:
    """What every fit of one :meth:`nopg.AutoNOPG.fit` call shares."""

    data: TransitionDataset
    bandwidths: Bandwidths
    starts: np.ndarray
    few_starts: np.ndarray        # the judge's and the moved-successor recipes' (selection_starts)
    action_max: np.ndarray
    state_bounds: Bounds | None
    terminal_bounds: Bounds | None
    horizon: int
    evaluate: Callable[[nn.Module], list[float]] | None
    monitor: Callable[[nn.Module], float] | None
    monitor_every: int
    evaluate_candidates: bool
    log_dir: Path | None
    tensorboard_dir: Path | None
    progress: bool
    escalate: bool = False        # auto's escalation applies (set by the plan)
    judge: AnchoredBellman | None = None
    budget_s: float | None = None  # CPU seconds after the plain fit (None: no limit, or not yet)
    budget_start: float = 0.0      # time.process_time() when the plain fit ended
    recorded_s: float = 0.0        # CPU seconds of record-only evaluations since, not charged

    def spent(self) -> float:
        """CPU seconds of this process charged to the budget since the plain fit ended."""
        return time.process_time() - self.budget_start - self.recorded_s

    def over_budget(self) -> bool:
        """Whether the budget is spent (never without one)."""
        return self.budget_s is not None and self.spent() >= self.budget_s

    def record(self, evaluate: Callable[[nn.Module], Any]) -> Callable[[nn.Module], Any]:
        """``evaluate`` whose CPU time is not charged to the budget (it only records)."""
        def recorded(policy: nn.Module) -> Any:
            start = time.process_time()
            try:
                return evaluate(policy)
            finally:
                self.recorded_s += time.process_time() - start
        return recorded

    def log_path(self, name: str) -> Path | None:
        return None if self.log_dir is None else self.log_dir / name


def policy_snapshots(config: MethodConfig) -> PolicySnapshots | None:
    """The policy snapshots of a gradient fit (``snapshot_every`` updates apart, from
    ``snapshot_from`` of ``n_updates`` on); ``None`` when off or for CMA-ES,
    whose search keeps its best candidate itself."""
    if config.snapshot_every is None or isinstance(config.nopg.optimizer, CMAES):
        return None
    return PolicySnapshots(config.snapshot_every,
                           int(math.ceil(config.snapshot_from * config.n_updates - 1e-9)))


def start_budget(ctx: FitContext, report: FitReport, budget: float | None,
                 plain_s: float) -> None:
    """Record the plain fit's CPU seconds (``report.plain_fit_s``) and, with a ``budget``, set
    ``report.budget_s`` (``budget`` times them, at least :data:`~nopg.select.recipes.BUDGET_FLOOR_S`;
    0 for 0) and start charging ``ctx`` from now on."""
    report.plain_fit_s = plain_s
    ctx.budget_start, ctx.recorded_s = time.process_time(), 0.0
    if budget is None:
        return
    report.budget_s = ctx.budget_s = \
        0.0 if budget == 0 else max(budget * plain_s, BUDGET_FLOOR_S)


def budget_words(report: FitReport, budget: float | None) -> str:
    """The budget as the report's decision lines name it."""
    assert report.budget_s is not None and report.plain_fit_s is not None and budget is not None
    return (f"the budget of {report.budget_s:.1f} s ({budget:g} times the plain fit's "
            f"{report.plain_fit_s:.1f} s, at least {BUDGET_FLOOR_S:g} s)")


class Deadline:
    """A fit callback that stops the fit at the first update that ends with ``over()`` true
    (:meth:`FitContext.over_budget`), and records that update in :attr:`stopped_at`."""

    def __init__(self, over: Callable[[], bool]) -> None:
        self.over = over
        self.stopped_at: int | None = None

    def __call__(self, algo: NOPG, metrics: dict[str, Any]) -> bool:
        if not self.over():
            return True
        self.stopped_at = algo.update_
        return False


def run_fit(algo: NOPG, data: TransitionDataset, bandwidths: Bandwidths, starts: Any,
            n_updates: int, monitor: EvalCallback | None, snapshots: PolicySnapshots | None,
            board_dir: Path | None, log_path: Path | None, progress: bool,
            stop: Deadline | None = None) -> None:
    """``algo.fit`` on ``data`` from ``starts`` with the monitor, the snapshots, a ``stop``
    deadline and, with a ``board_dir``, a TensorBoard writer after them (so it sees the
    monitor's return)."""
    callbacks: list[Any] = [cb for cb in (monitor, snapshots, stop) if cb is not None]
    board = None
    if board_dir is not None:
        from ..train.tensorboard import TensorBoardCallback

        board = TensorBoardCallback(board_dir)
        callbacks.append(board)
    try:
        algo.fit(data, bandwidths, starts, n_updates, callbacks=callbacks, log_path=log_path,
                 progress=progress)
    finally:
        if board is not None:
            board.close()
