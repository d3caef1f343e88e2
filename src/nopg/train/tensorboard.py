"""Log NOPG's per-update metrics to TensorBoard.

:class:`TensorBoardCallback` is a callback for :meth:`nopg.NOPG.fit` and a metrics logger of
:mod:`nopg.train.loggers` (``fit(loggers=[tb])``): after every update it writes each numeric entry of the
update's metrics (``J_hat``, ``support_gap``, ``grad_norm``, solver iterations and residuals,
``update_time_s``, ``sigma_scale``, and ``eval_return`` when an :class:`~nopg.EvalCallback`
added it) as a scalar at step ``update``::

    with TensorBoardCallback("runs/pendulum") as tb:
        algo.fit(data, bw, s0, 1500, callbacks=[EvalCallback(evaluate, 100), tb])

    tensorboard --logdir runs

Callbacks run in list order, so put this one last to see what the others add (as a logger it runs
after all the callbacks). It needs the optional ``tensorboard`` package (``pip install 'nopg[tensorboard]'``).
"""

from __future__ import annotations

import numbers
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .algorithm import NOPG

__all__ = ["TensorBoardCallback"]


def _summary_writer(log_dir: Path) -> Any:
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError as err:
        raise ImportError(f"TensorBoardCallback needs the tensorboard package ({err}); install it "
                          "with: pip install 'nopg[tensorboard]'") from None
    return SummaryWriter(log_dir=str(log_dir))


class TensorBoardCallback:
    """Write every update's numeric metrics to TensorBoard (a :class:`nopg.train.algorithm.Callback`).

    Parameters
    ----------
    log_dir : path
        Folder of the event files (created when missing).
    prefix : str
        Tag prefix: a metric ``J_hat`` is logged as ``f"{prefix}J_hat"``.
    every : int
        Log every ``every``-th update (and always when ``eval_return`` is present).
    flush : bool
        Flush the event file after each logged update, so TensorBoard shows a running fit.

    Attributes
    ----------
    log_dir : pathlib.Path
    """

    def __init__(self, log_dir: str | os.PathLike[str], *, prefix: str = "nopg/", every: int = 1,
                 flush: bool = True) -> None:
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise ValueError(f"The 'every' parameter must be a positive int. Got {every!r} instead.")
        self.log_dir = Path(log_dir)
        self.prefix, self.every, self.flush = str(prefix), every, bool(flush)
        self._writer = _summary_writer(self.log_dir)

    def __call__(self, algo: NOPG, metrics: dict[str, Any]) -> None:
        self.on_update(metrics)

    def on_update(self, metrics: dict[str, Any]) -> None:
        """Write ``metrics`` (a :class:`nopg.train.loggers.MetricsLogger`: ``fit(loggers=[tb])``)."""
        step = int(metrics["update"])
        if step % self.every and "eval_return" not in metrics:
            return
        for key, value in metrics.items():
            if key == "update" or isinstance(value, bool) or not isinstance(value, numbers.Real):
                continue
            self._writer.add_scalar(f"{self.prefix}{key}", float(value), step)
        if self.flush:
            self._writer.flush()

    def close(self) -> None:
        """Flush and close the event file."""
        self._writer.close()

    def __enter__(self) -> TensorBoardCallback:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
