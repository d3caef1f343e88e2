"""Where a fit's per-update metrics go: one small protocol and its CSV, progress-bar and log back ends.

:meth:`nopg.NOPG.updates` yields one metrics dictionary per policy update; :meth:`nopg.NOPG.fit`
drains it, runs the callbacks (which may add entries such as ``eval_return``) and then hands the
dictionary to every :class:`MetricsLogger`:

- :class:`CSVLogger`: one row of :data:`LOG_COLUMNS` per update (``log.csv``);
- :class:`ProgressBarLogger`: a tqdm bar showing ``J_hat`` and the support gap;
- :class:`LogLineLogger`: a ``logging`` record every ``every`` updates;
- :class:`nopg.train.tensorboard.TensorBoardCallback`: scalars for TensorBoard.

A logger is any object with ``on_update(metrics)`` and ``close()``; pass more of them as
``NOPG.fit(..., loggers=[...])``.
"""

from __future__ import annotations

import contextlib
import csv
import logging
import math
import sys
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from tqdm.auto import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm

logger = logging.getLogger(__name__)

__all__ = ["LOG_COLUMNS", "CSVLogger", "LogLineLogger", "MetricsLogger", "ProgressBarLogger",
           "show_progress"]

LOG_COLUMNS = ("update", "J_hat", "support_gap", "initial_gap", "grad_norm", "solver_iters_q",
               "solver_iters_mu",
               "residual_q", "residual_mu", "refined_rows", "update_time_s", "sigma_scale",
               "behaviour_loss", "behaviour_kept", "behaviour_ess", "evaluations", "search_sigma",
               "search_restarts", "search_alive", "eval_return")
"""The columns of ``log.csv`` and of a checkpoint's ``history.csv``, in order."""


def csv_row(metrics: dict[str, Any], columns: tuple[str, ...]) -> dict[str, Any]:
    """One CSV row of ``columns`` from ``metrics``: missing metrics and NaN (a metric that does
    not apply) as empty cells."""
    def cell(value: Any) -> Any:
        return "" if isinstance(value, float) and math.isnan(value) else value
    return {k: cell(metrics.get(k, "")) for k in columns}


@runtime_checkable
class MetricsLogger(Protocol):
    """Receives every update's metrics (after the callbacks); ``close`` ends it.

    ``NOPG.fit`` closes the loggers it builds (CSV, progress bar, log records) when it returns;
    those passed to it as ``loggers=`` belong to the caller, who may use them for several fits.
    """

    def on_update(self, metrics: dict[str, Any]) -> None: ...

    def close(self) -> None: ...


class CSVLogger:
    """Append one row of :data:`LOG_COLUMNS` per update to a CSV file (flushed every row).

    The header is written when the file is new or empty, so a resumed fit continues the same
    file (with that file's columns, should it come from an older version). Metrics outside the
    columns are ignored; missing ones, and NaN (a metric that does not apply, such as the
    behaviour term's when it is off), are left empty.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        new = not self.path.exists() or self.path.stat().st_size == 0
        self.columns: tuple[str, ...] = LOG_COLUMNS
        if not new:
            with open(self.path, newline="") as fh:
                self.columns = tuple(next(csv.reader(fh), LOG_COLUMNS)) or LOG_COLUMNS
        self._handle = open(self.path, "a", newline="")
        self._writer = csv.DictWriter(self._handle, fieldnames=self.columns, extrasaction="ignore")
        if new:
            self._writer.writeheader()

    def on_update(self, metrics: dict[str, Any]) -> None:
        self._writer.writerow(csv_row(metrics, self.columns))
        self._handle.flush()

    def close(self) -> None:
        self._handle.close()


class LogLineLogger:
    """A ``logging`` INFO record with ``J_hat``, the support gap, the residual and the update
    time at the first update and every ``every`` updates.

    Parameters
    ----------
    every : int
    log : logging.Logger, optional
        Where the records go (``nopg.train.loggers`` by default; ``NOPG.fit`` passes its own).
    """

    def __init__(self, every: int = 100, log: logging.Logger | None = None) -> None:
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise ValueError(f"The 'every' parameter must be a positive int. Got {every!r} instead.")
        self.every, self.log = every, log if log is not None else logger

    def on_update(self, metrics: dict[str, Any]) -> None:
        update = metrics["update"]
        if update % self.every == 0 or update == 1:
            self.log.info("update %d: J_hat %.5f (support gap %.3f, initial gap %.3f), residual "
                          "%.1e, %.4f s/update", update, metrics["J_hat"], metrics["support_gap"],
                          metrics.get("initial_gap", float("nan")), metrics["residual_q"],
                          metrics["update_time_s"])

    def close(self) -> None:
        pass


def show_progress(progress: bool) -> bool:
    """Whether a progress bar is drawn: only on a terminal or in a notebook.

    When stderr is redirected (a file, a pipe, a batch job's log) the bar is off: tqdm would write
    a redraw per refresh (hundreds of KB per run) and :class:`LogLineLogger`'s records already
    carry the progress.
    """
    if not progress:
        return False
    if any(cls.__module__.startswith("tqdm.notebook") for cls in tqdm.__mro__):
        return True
    try:
        return bool(sys.stderr.isatty())
    except (AttributeError, ValueError, OSError):   # no stderr, or a closed one
        return False


def _is_console_handler(handler: logging.Handler) -> bool:
    return (isinstance(handler, logging.StreamHandler) and not isinstance(handler, logging.FileHandler)
            and handler.stream in (sys.stdout, sys.stderr))


def _console_levels() -> dict[logging.Logger, int]:
    """The lowest level of the console handlers of the root and ``nopg`` loggers that have one."""
    levels = {}
    for lg in (logging.getLogger(), logging.getLogger("nopg")):
        console = [h.level for h in lg.handlers if _is_console_handler(h)]
        if console:
            levels[lg] = min(console)
    return levels


class ProgressBarLogger:
    """A tqdm bar over ``total`` updates with the running ``J_hat`` and support gap.

    While the bar is drawn, console log records go through ``tqdm.write``:
    ``logging_redirect_tqdm`` swaps the console handlers (stream handlers on stdout/stderr) of the
    root logger and of the ``nopg`` logger for one that clears the bar, writes the record on its
    own line and redraws the bar, so log lines never land inside a half-drawn bar. Other handlers
    (e.g. a run's log file) are untouched. :meth:`close` puts the handlers back.

    Parameters
    ----------
    total : int
        Updates the bar counts to.
    show : bool
        Draw the bar; when false (e.g. from :func:`show_progress` with stderr redirected) nothing
        is drawn and the handlers stay as they are.
    """

    def __init__(self, total: int, show: bool = True) -> None:
        with contextlib.ExitStack() as stack:     # undone if the bar cannot be built
            levels = _console_levels() if show else {}
            if levels:
                stack.enter_context(logging_redirect_tqdm(loggers=list(levels), tqdm_class=tqdm))
                for lg, level in levels.items():
                    lg.handlers[-1].setLevel(level)     # the tqdm handler keeps the level
            self._bar = tqdm(total=total, disable=not show, desc="NOPG", dynamic_ncols=True)
            stack.callback(self._bar.close)
            self._stack = stack.pop_all()

    def on_update(self, metrics: dict[str, Any]) -> None:
        self._bar.update(1)
        self._bar.set_postfix(J_hat=f"{metrics['J_hat']:.4f}", gap=f"{metrics['support_gap']:.2f}")

    def close(self) -> None:
        self._stack.close()
