"""Restarts in the experiment runner: the fit with the highest J_hat is kept."""

from __future__ import annotations

import json

import pytest

from nopg.experiments import get_task, run_seed


def _config(restarts: int):
    task = get_task("pendulum-grid")
    config = task.default_config().replace(
        n_updates=3, eval_every=100, restarts=restarts,
        task={"n_theta": 5, "n_theta_dot": 5, "n_action": 2, "eval_steps": 50,
              "portrait_resolution": 10})
    return task, config


def test_restarts_keep_the_best_j_hat(tmp_path):
    task, config = _config(3)
    res = run_seed(task, config, 0, tmp_path / "three", progress=False).to_dict()
    runs = res["restarts"]
    assert [r["restart"] for r in runs] == [0, 1, 2]
    best = max(runs, key=lambda r: r["J_hat"])
    assert res["J_hat"] == pytest.approx(best["J_hat"])
    assert res["return_mean"] == pytest.approx(best["return_mean"])
    assert len({round(r["J_hat"], 10) for r in runs}) == 3          # different initialisations
    # Restart 0 is the single run: restarts=1 reproduces it exactly.
    task, single = _config(1)
    one = run_seed(task, single, 0, tmp_path / "one", progress=False).to_dict()
    assert one["J_hat"] == pytest.approx(runs[0]["J_hat"], rel=1e-12)
    assert (tmp_path / "three" / "log.csv").read_text() == \
        (tmp_path / "three" / f"log_restart{best['restart']}.csv").read_text()
    json.dumps(res["restarts"])


def test_restart_updates_choose_early_and_continue_the_best(tmp_path):
    task, config = _config(2)
    config = config.replace(restart_updates=2, n_updates=5)
    res = run_seed(task, config, 0, tmp_path, progress=False).to_dict()
    best = max(res["restarts"], key=lambda r: r["J_hat"])
    rows = (tmp_path / "log.csv").read_text().splitlines()[1:]
    assert [int(r.split(",")[0]) for r in rows] == [1, 2, 3, 4, 5]    # 2 before, 3 after
    other = 1 - best["restart"]
    assert len((tmp_path / f"log_restart{other}.csv").read_text().splitlines()) == 3


def test_bad_restarts():
    task = get_task("pendulum-grid")
    with pytest.raises(ValueError, match="'restarts' parameter"):
        task.default_config().replace(restarts=0)
    with pytest.raises(ValueError, match="'restart_updates' parameter"):
        task.default_config().replace(restart_updates=0)


def test_experiments_pass_the_action_guard_to_the_bandwidths(tmp_path):
    """``max_action_effect`` reaches the ``auto`` rule (None: the guard is off) and bad values
    are refused."""
    from nopg import AutoNOPG
    from nopg.bandwidth.selection import knn_bandwidths

    task = get_task("cartpole-random")
    config = task.default_config().replace(task={"n_samples": 300})
    data = task.make_dataset(config, 0)
    on = AutoNOPG(config, seed=0).select_bandwidths(data).bandwidths
    off = AutoNOPG(config.replace(max_action_effect=None), seed=0).select_bandwidths(data).bandwidths
    assert on == knn_bandwidths(data, seed=0) and off == knn_bandwidths(data, seed=0, max_action_effect=None)
    assert on.action[0] < off.action[0]                 # cart-pole's strong actuator: narrowed
    for bad in (0.0, -1.0, True, "2"):
        with pytest.raises(ValueError, match="'max_action_effect' parameter"):
            task.default_config().replace(max_action_effect=bad)
