"""The fit loop (``NOPG.updates``), the metrics loggers of ``nopg.train.loggers`` and
``nopg.train.checkpoint``."""

from __future__ import annotations

import logging
import sys

import numpy as np
import pytest
import torch

import nopg
from nopg.train.checkpoint import read_history, save_checkpoint
from nopg.train.loggers import (
    LOG_COLUMNS,
    CSVLogger,
    LogLineLogger,
    MetricsLogger,
    ProgressBarLogger,
)


def _algo(det_policy: torch.nn.Module) -> nopg.NOPG:
    return nopg.NOPG(det_policy, nopg.NOPGConfig(gamma=0.9, seed=3))


class Recorder:
    """A metrics logger keeping copies of what it receives."""

    def __init__(self) -> None:
        self.seen: list[dict] = []
        self.closed = False

    def on_update(self, metrics: dict) -> None:
        self.seen.append(dict(metrics))

    def close(self) -> None:
        self.closed = True


def test_updates_yields_what_fit_records(dataset, bandwidths, initial_states, det_policy):
    """Draining ``updates`` by hand is ``fit``: same metrics, same history, same policy."""
    state = {k: v.clone() for k, v in det_policy.state_dict().items()}
    fitted = _algo(det_policy).fit(dataset, bandwidths, initial_states, 4, progress=False)
    det_policy.load_state_dict(state)
    manual = _algo(det_policy)
    yielded = list(manual.updates(dataset, bandwidths, initial_states, 4))
    assert [m["update"] for m in yielded] == [1, 2, 3, 4]
    assert manual.history_ == yielded
    assert [m["J_hat"] for m in yielded] == [m["J_hat"] for m in fitted.history_]
    for a, b in zip(manual.policy.parameters(), fitted.policy.parameters()):
        assert torch.equal(a, b)


def test_updates_is_lazy_and_checks_eagerly(dataset, bandwidths, initial_states, det_policy):
    algo = _algo(det_policy)
    run = algo.updates(dataset, bandwidths, initial_states, 5)
    assert algo.model_ is not None and algo.update_ == 0      # set up, nothing run yet
    next(run)
    run.close()                                               # stopping early is allowed
    assert algo.update_ == 1 and len(algo.history_) == 1
    with pytest.raises(ValueError, match="n_updates"):
        algo.updates(dataset, bandwidths, initial_states, -1)


def test_loggers_see_callback_metrics_and_stay_open(tmp_path, dataset, bandwidths, initial_states,
                                                    det_policy):
    rec = Recorder()
    assert isinstance(rec, MetricsLogger)

    def add(algo, metrics):
        metrics["eval_return"] = float(metrics["update"])

    algo = _algo(det_policy).fit(dataset, bandwidths, initial_states, 3, callbacks=[add],
                                 loggers=[rec], progress=False)
    assert [m["eval_return"] for m in rec.seen] == [1.0, 2.0, 3.0]
    assert rec.seen == algo.history_
    assert not rec.closed                 # the caller owns the loggers it passes


def test_bad_n_updates_creates_no_log(tmp_path, dataset, bandwidths, initial_states, det_policy):
    with pytest.raises(ValueError, match="n_updates"):
        _algo(det_policy).fit(dataset, bandwidths, initial_states, 1.5, log_path=tmp_path / "l.csv")
    assert not (tmp_path / "l.csv").exists()


def test_csv_logger_appends_under_one_header(tmp_path):
    path = tmp_path / "sub" / "log.csv"
    for updates in ([1, 2], [3]):
        sink = CSVLogger(path)
        for u in updates:
            sink.on_update({"update": u, "J_hat": -u / 2, "ignored": "x"})
        sink.close()
    lines = path.read_text().splitlines()
    assert lines[0] == ",".join(LOG_COLUMNS)
    assert len(lines) == 4 and lines[3].startswith("3,-1.5,,")
    rows = read_history(path)
    assert [r["update"] for r in rows] == [1, 2, 3]
    assert rows[2]["J_hat"] == -1.5 and rows[2]["eval_return"] is None


def test_log_line_logger_every(caplog):
    sink = LogLineLogger(every=2)
    metrics = {"J_hat": 1.0, "support_gap": 0.1, "residual_q": 1e-9, "update_time_s": 0.01}
    with caplog.at_level(logging.INFO, logger="nopg.train.loggers"):
        for u in range(1, 6):
            sink.on_update({"update": u, **metrics})
    assert [r.getMessage().split(":")[0] for r in caplog.records] == \
        ["update 1", "update 2", "update 4"]
    with pytest.raises(ValueError, match="every"):
        LogLineLogger(every=0)


def test_progress_bar_puts_console_handlers_back():
    root = logging.getLogger()
    handler = logging.StreamHandler(sys.stderr)
    root.addHandler(handler)
    try:
        before = list(root.handlers)
        bar = ProgressBarLogger(3, show=True)
        assert root.handlers != before           # records go through tqdm.write meanwhile
        bar.on_update({"J_hat": 1.0, "support_gap": 0.0})
        bar.close()
        assert root.handlers == before
        quiet = ProgressBarLogger(3, show=False)
        assert root.handlers == before
        quiet.close()
    finally:
        root.removeHandler(handler)


def test_save_checkpoint_is_nopg_save(tmp_path, dataset, bandwidths, initial_states, det_policy):
    algo = _algo(det_policy).fit(dataset, bandwidths, initial_states, 2, progress=False)
    save_checkpoint(algo, tmp_path / "a")
    algo.save(tmp_path / "b")
    for name in ("config.json", "history.csv"):
        assert (tmp_path / "a" / name).read_text() == (tmp_path / "b" / name).read_text()
    loaded = nopg.NOPG.load(tmp_path / "a")
    assert loaded.history_ == read_history(tmp_path / "b" / "history.csv")
    np.testing.assert_allclose([m["J_hat"] for m in loaded.history_],
                               [m["J_hat"] for m in algo.history_], rtol=1e-15)
