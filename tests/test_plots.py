"""Smoke tests for the figures: each function writes a non-empty PNG."""

from __future__ import annotations

import csv
import subprocess
import sys

import numpy as np
import pytest

from nopg.viz.pendulum_plots import plot_phase_portraits
from nopg.viz.plots import load_log, plot_learning_curve, plot_learning_curves

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def assert_png(path):
    assert path.is_file() and path.stat().st_size > 1000
    assert path.read_bytes()[:8] == PNG_MAGIC


def make_log(n=20, shift=0.0, with_eval=True):
    updates = list(range(n))
    j_hat = [-100.0 + 4 * u + shift for u in updates]
    log = {"update": updates, "J_hat": j_hat}
    if with_eval:
        log["eval_return"] = [(-3000.0 + 100 * u + shift) if u % 5 == 0 else None for u in updates]
    return log


def write_csv(path, log):
    names = list(log)
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(names + ["time"])
        for row in zip(*(log[k] for k in names), strict=True):
            writer.writerow(["" if v is None else v for v in row] + ["2024-01-01T00:00"])
    return path


def test_import_needs_no_matplotlib_or_gymnasium():
    code = "import sys, nopg.viz.plots; print('matplotlib' in sys.modules, 'gymnasium' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


@pytest.mark.parametrize("with_eval", [True, False])
def test_learning_curve_from_dict(tmp_path, with_eval):
    out = plot_learning_curve(make_log(with_eval=with_eval), tmp_path / "lc.png", title="t")
    assert_png(out)


def test_learning_curve_from_csv(tmp_path):
    csv_path = write_csv(tmp_path / "log.csv", make_log())
    cols = load_log(csv_path)
    assert "time" not in cols  # non-numeric column dropped
    assert np.isnan(cols["eval_return"][1]) and cols["eval_return"][0] == -3000.0
    assert_png(plot_learning_curve(csv_path, tmp_path / "sub" / "lc.png"))
    assert_png(plot_learning_curve(str(csv_path), tmp_path / "lc2.png"))


def test_learning_curve_explicit_eval(tmp_path):
    out = plot_learning_curve(
        make_log(with_eval=False), tmp_path / "lc.png", eval_updates=[0, 10, 19],
        eval_returns=[-4000.0, -1000.0, -500.0],
    )
    assert_png(out)
    with pytest.raises(ValueError, match="both"):
        plot_learning_curve(make_log(), tmp_path / "x.png", eval_updates=[0])


def test_learning_curve_bad_log(tmp_path):
    with pytest.raises(ValueError, match="J_hat"):
        plot_learning_curve({"update": [0, 1]}, tmp_path / "x.png")
    with pytest.raises(ValueError, match="does not exist"):
        plot_learning_curve(tmp_path / "missing.csv", tmp_path / "x.png")
    with pytest.raises(ValueError, match="equal lengths"):
        plot_learning_curve({"update": [0, 1], "J_hat": [1.0]}, tmp_path / "x.png")


@pytest.mark.parametrize("with_eval", [True, False])
def test_learning_curves_several_seeds(tmp_path, with_eval):
    logs = [make_log(shift=s, with_eval=with_eval) for s in (0.0, 10.0)]
    logs.append(write_csv(tmp_path / "seed2.csv", make_log(n=15, shift=-5.0, with_eval=with_eval)))
    out = plot_learning_curves(logs, tmp_path / "lcs.png", labels=["a", "b", "c"])
    assert_png(out)
    with pytest.raises(ValueError, match="label"):
        plot_learning_curves(logs, tmp_path / "x.png", labels=["a"])
    with pytest.raises(ValueError, match="non-empty"):
        plot_learning_curves([], tmp_path / "x.png")


def test_phase_portraits(tmp_path):
    def value_fn(obs):
        assert obs.ndim == 2 and obs.shape[1] == 3
        return obs[:, 0] - 0.01 * obs[:, 2] ** 2

    def visitation_fn(obs):
        return np.exp(-((obs[:, 0] - 1) ** 2) - 0.1 * obs[:, 2] ** 2)

    rng = np.random.default_rng(0)
    th = rng.uniform(-np.pi, np.pi, 30)
    data = np.stack([np.cos(th), np.sin(th), rng.uniform(-8, 8, 30)], axis=1)
    t = np.linspace(0, 4 * np.pi, 50)  # theta wraps around twice
    trajectory = np.stack([np.cos(t), np.sin(t), np.full_like(t, 2.0)], axis=1)
    out = plot_phase_portraits(
        value_fn, visitation_fn, tmp_path / "phase.png", resolution=12,
        data_states=data, trajectory=trajectory, title="phase",
    )
    assert_png(out)
    assert_png(plot_phase_portraits(value_fn, visitation_fn, tmp_path / "p2.png", resolution=5))
    with pytest.raises(ValueError, match="one value per observation"):
        plot_phase_portraits(lambda o: np.zeros(3), visitation_fn, tmp_path / "x.png",
                             resolution=5)
    with pytest.raises(ValueError, match="resolution"):
        plot_phase_portraits(value_fn, visitation_fn, tmp_path / "x.png", resolution=1)
