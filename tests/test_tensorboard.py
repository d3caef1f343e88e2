"""TensorBoardCallback writes every update's metrics; they read back from the event file."""

import numpy as np
import pytest
import torch

import nopg
from nopg import NOPG, EvalCallback, NOPGConfig
from nopg.train.tensorboard import TensorBoardCallback

pytest.importorskip("tensorboard")


def _scalars(log_dir) -> dict:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(log_dir))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def test_scalars_equal_the_logged_metrics(tmp_path, dataset, bandwidths, initial_states, det_policy):
    algo = NOPG(det_policy, NOPGConfig(gamma=0.9))
    def evaluate(policy: torch.nn.Module) -> float:
        with torch.no_grad():
            return 1.5 + float(policy(torch.zeros(1, 2, dtype=torch.float64)).sum())

    evaluator = EvalCallback(evaluate, every=2)
    with TensorBoardCallback(tmp_path / "tb") as tb:
        algo.fit(dataset, bandwidths, initial_states, 4, callbacks=[evaluator, tb], progress=False)
    scalars = _scalars(tmp_path / "tb")
    for key in ("J_hat", "support_gap", "grad_norm", "update_time_s", "residual_q"):
        steps, values = zip(*scalars[f"nopg/{key}"])
        assert steps == (1, 2, 3, 4)
        np.testing.assert_allclose(values, [m[key] for m in algo.history_], rtol=1e-6, atol=1e-12)
    steps, values = zip(*scalars["nopg/eval_return"])
    assert steps == (2, 4)
    np.testing.assert_allclose(values, [ret for _, ret in evaluator.results], rtol=1e-6)
    assert "nopg/update" not in scalars


def test_as_a_metrics_logger(tmp_path, dataset, bandwidths, initial_states, det_policy):
    """Passed as ``fit(loggers=[tb])`` it sees every callback's metrics and stays open."""
    algo = NOPG(det_policy, NOPGConfig(gamma=0.9))
    evaluator = EvalCallback(lambda policy: 2.5, every=3)
    with TensorBoardCallback(tmp_path / "tb") as tb:
        algo.fit(dataset, bandwidths, initial_states, 3, callbacks=[evaluator], loggers=[tb],
                 progress=False)
        algo.fit(dataset, bandwidths, initial_states, 1, loggers=[tb], progress=False)
    scalars = _scalars(tmp_path / "tb")
    steps, values = zip(*scalars["nopg/J_hat"])
    assert steps == (1, 2, 3, 4)
    np.testing.assert_allclose(values, [m["J_hat"] for m in algo.history_], rtol=1e-6)
    assert scalars["nopg/eval_return"] == [(3, 2.5)]


def test_every_and_bad_arguments(tmp_path, dataset, bandwidths, initial_states, det_policy):
    tb = TensorBoardCallback(tmp_path / "tb", prefix="", every=2)
    NOPG(det_policy, NOPGConfig(gamma=0.9)).fit(dataset, bandwidths, initial_states, 3,
                                                callbacks=[tb], progress=False)
    tb.close()
    assert [step for step, _ in _scalars(tmp_path / "tb")["J_hat"]] == [2]
    with pytest.raises(ValueError, match="every"):
        TensorBoardCallback(tmp_path, every=0)


def test_missing_tensorboard_gives_an_install_hint(tmp_path, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)
    with pytest.raises(ImportError, match=r"pip install 'nopg\[tensorboard\]'"):
        TensorBoardCallback(tmp_path)
    assert nopg.NOPG is NOPG
