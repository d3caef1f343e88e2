"""The experiment tasks' shared scaffolding: default settings and the evaluation record."""

import json
import pickle

import numpy as np
import pytest

from nopg.experiments import TASKS
from nopg.experiments.common import TaskSettings
from nopg.experiments.data_file import FitSettings, fit_config
from nopg.experiments.pendulum_grid import PendulumGridSettings, PendulumGridTask
from nopg.experiments.runner import ExperimentConfig
from nopg.experiments.task_base import EnvironmentTask, evaluation_summary, task_config


def test_task_config_gives_the_shared_settings_and_the_tasks_own():
    config = task_config({"n_samples": 7}, nopg={"model.top_k": 10}, n_updates=20, eval_episodes=3)
    assert isinstance(config, ExperimentConfig)
    assert (config.bandwidth_method, config.state_factor, config.action_factor) == ("auto", 1.0, 1.0)
    assert (config.hidden, config.sigma_max, config.eval_every) == ((50,), 1.0, 100)
    assert (config.n_updates, config.eval_episodes, config.task) == (20, 3, {"n_samples": 7})
    nopg = config.nopg
    assert (nopg.gamma, nopg.optimizer.learning_rate, nopg.model.top_k,
            nopg.model.dense_max_n) == (0.99, 1e-2, 10, 2000)


def test_evaluation_summary_keeps_the_episodes_first_and_adds_lengths_only_when_recorded():
    with_lengths = evaluation_summary({"returns": [1.0, 3.0], "lengths": [2, 4]}, extra=5)
    assert list(with_lengths) == ["returns", "lengths", "return_mean", "return_std", "length_mean",
                                  "episodes", "extra"]
    assert (with_lengths["return_mean"], with_lengths["return_std"]) == (2.0, 1.0)
    assert with_lengths["length_mean"] == 3.0 and with_lengths["episodes"] == 2
    without = evaluation_summary({"returns": [1.0], "successes": [True]})
    assert list(without) == ["returns", "successes", "return_mean", "return_std", "episodes"]


class _Recorder(EnvironmentTask):
    name = "recorder"


def test_environment_task_writes_the_last_evaluation_only_after_one(tmp_path):
    task = _Recorder()
    assert task.write_evaluation(tmp_path) == ([], None)
    assert not (tmp_path / "evaluation.json").exists()
    assert task.record({"returns": [1.0, 2.0], "lengths": [5, 5]}) == [1.0, 2.0]
    paths, summary = task.write_evaluation(tmp_path, note="x")
    assert paths == [tmp_path / "evaluation.json"]
    assert json.loads(paths[0].read_text()) == summary
    assert summary["note"] == "x" and np.isclose(summary["return_mean"], 1.5)


def test_environment_task_needs_an_environment():
    with pytest.raises(NotImplementedError):
        _Recorder().env_fn(task_config({}))


def test_task_settings_are_typed_and_read_like_the_former_dicts():
    config = PendulumGridTask().default_config()
    assert isinstance(config.task, PendulumGridSettings)
    assert config.task.n_theta == config.task["n_theta"] == config.task.get("n_theta") == 15
    assert list(config.task) == ["n_theta", "n_theta_dot", "n_action", "eval_steps",
                                 "portrait_resolution"]
    assert config.task == dict(config.task) and "n_thetaa" not in config.task
    changed = config.replace(**{"task.n_theta": 5}, task={"eval_steps": 7})
    assert isinstance(changed.task, PendulumGridSettings)
    assert (changed.task.n_theta, changed.task.eval_steps, config.task.n_theta) == (5, 7, 15)
    assert changed.to_dict()["task"] == {**dict(config.task), "n_theta": 5, "eval_steps": 7}
    assert pickle.loads(pickle.dumps(changed)).task == changed.task
    assert config.replace(task=changed.task).task == changed.task
    with pytest.raises(ValueError, match="did you mean 'task.n_theta'"):
        config.replace(**{"task.n_thetaa": 5})
    with pytest.raises(ValueError, match="'task.n_theta' must be a int like its default 15"):
        config.replace(task={"n_theta": "abc"})
    with pytest.raises(AttributeError):
        config.task.n_theta = 3      # frozen


def test_every_registered_task_declares_typed_settings():
    for name, cls in TASKS.items():
        assert isinstance(cls().default_config().task, TaskSettings), name
    assert fit_config(eval_steps=9).task == FitSettings(eval_steps=9)
    with pytest.raises(ValueError, match="did you mean 'task.eval_steps'"):
        fit_config(eval_stepz=9)
