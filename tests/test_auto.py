"""The default method as one object (:class:`nopg.AutoNOPG`): the Python API and ``nopg fit``
give the same policy, its fit report, what a task knows (bounds, horizon), constant state
dimensions, and bad inputs."""

import dataclasses
import json
import logging
import time

import numpy as np
import pytest
import torch
from conftest import make_arrays, save_pendulum_episodes

import nopg
from nopg import AutoNOPG, MethodConfig, NOPGConfig, TransitionDataset
from nopg.cli import main
from nopg.experiments.runner import ExperimentConfig


@pytest.fixture(scope="module")
def data_file(tmp_path_factory) -> str:
    """Three 20-step episodes of random torques in gymnasium's Pendulum-v1."""
    return save_pendulum_episodes(tmp_path_factory.mktemp("data") / "pendulum.npz", 20)


def test_the_python_api_and_nopg_fit_give_the_same_policy(data_file, tmp_path):
    """The README's example (the object with the defaults) and ``nopg fit FILE`` are one
    method: the same kept fit, ``J_hat`` and policy parameters for the same seed."""
    assert main(["fit", data_file, "--n-updates", "4", "--seeds", "1", "--out", str(tmp_path),
                 "--name", "cli", "--no-progress"]) == 0
    summary = json.loads((tmp_path / "cli" / "summary.json").read_text())["seeds"][0]
    data = nopg.data.formats.load_dataset(data_file)
    method = AutoNOPG(MethodConfig(n_updates=4), seed=1).fit(data, progress=False)
    assert method.J_hat_ == pytest.approx(summary["J_hat"], rel=1e-12)
    saved = torch.load(tmp_path / "cli" / "seed_1" / "checkpoint" / "policy.pt",
                       weights_only=True)
    for name, value in method.policy_.state_dict().items():
        torch.testing.assert_close(value, saved[name], rtol=0, atol=0)
    assert summary["fit_report"]["kept"] == method.report_.kept.name
    assert summary["fit_report"]["decisions"] == method.report_.decisions


def test_the_seed_is_the_methods_own_and_the_callers_random_state_is_left_alone(dataset):
    """The policy's initialisation comes from ``seed`` alone: the same policy whatever the
    caller's torch random state, and that state is left as it was."""
    def fit(global_seed: int) -> tuple[AutoNOPG, torch.Tensor]:
        torch.manual_seed(global_seed)
        method = AutoNOPG(MethodConfig(n_updates=2, snapshot_every=None), seed=3)
        method.fit(dataset, dataset.states[:2], progress=False)
        return method, torch.rand(3)

    first, after_first = fit(0)
    second, after_second = fit(1)
    torch.manual_seed(0)
    assert torch.equal(after_first, torch.rand(3))        # as if fit had not run
    assert not torch.equal(after_first, after_second)
    for (name, a), b in zip(first.policy_.state_dict().items(),
                            second.policy_.state_dict().values()):
        torch.testing.assert_close(a, b, rtol=0, atol=0, msg=name)


def test_the_experiments_config_is_the_methods_with_the_same_defaults():
    """``nopg fit``'s configuration adds seeds, evaluation and the task's settings to the
    method's; every method setting has one default."""
    method, experiment = MethodConfig(), ExperimentConfig()
    for name in (f.name for f in dataclasses.fields(MethodConfig)):
        assert getattr(experiment, name) == getattr(method, name), name
    assert isinstance(experiment.replace(n_updates=7), ExperimentConfig)
    with pytest.raises(ValueError, match="unknown method setting 'n_update'; did you mean"):
        method.replace(n_update=3)


def test_the_fit_report_records_every_decision_and_is_json(dataset, tmp_path):
    method = AutoNOPG(MethodConfig(n_updates=6, snapshot_every=2), seed=0)
    method.fit(dataset, dataset.states[:3], horizon=20, log_dir=tmp_path, progress=False,
               evaluate=lambda policy: [1.5])
    report = json.loads(json.dumps(method.report_.to_dict()))
    assert report["kept"] == "given" and report["horizon"] == 20
    (kept,) = report["candidates"]
    assert kept["kept"] and kept["return_mean"] == 1.5
    assert kept["snapshot"]["updates"][0] == 6 and kept["judge"]["steps"] == 20
    assert report["fit_time_s"] > 0 and report["bandwidth_time_s"] >= 0
    assert (tmp_path / "log.csv").is_file()


def test_constant_state_dimensions_are_ignored_as_if_dropped(caplog):
    """A constant state column is ignored with one log line: the fit is the one of the data
    without it, and the policy acts on full states."""
    arrays = make_arrays(seed=3)
    plain = TransitionDataset(**arrays)
    padded = {**arrays}
    for key in ("states", "next_states"):
        padded[key] = np.insert(arrays[key], 1, 7.5, axis=1)
    wide = TransitionDataset(**padded)
    config = MethodConfig(n_updates=3, snapshot_every=None)
    reference = AutoNOPG(config, seed=0).fit(plain, plain.states[:4], progress=False)
    with caplog.at_level(logging.INFO, logger="nopg.select.auto"):
        method = AutoNOPG(config, seed=0).fit(wide, wide.states[:4], progress=False)
    assert [r for r in caplog.records if "carry no information" in r.getMessage()]
    assert method.report_.dropped_state_dims == [1] and reference.report_.dropped_state_dims == []
    assert method.J_hat_ == pytest.approx(reference.J_hat_, rel=1e-12)
    np.testing.assert_allclose(method.predict(wide.states[:5]), reference.predict(plain.states[:5]),
                               rtol=1e-12)
    actions = method.policy_(torch.as_tensor(wide.states[:5]))
    np.testing.assert_allclose(actions.detach().numpy(), reference.predict(plain.states[:5]),
                               rtol=1e-12)


def test_a_fit_without_constant_dimensions_saves_loads_and_exports_on_full_states(tmp_path):
    """The kept fit's checkpoint holds the policy that takes full states (and the model's
    reduced ones): loaded, and exported with the model's states, it acts as fitted."""
    from nopg.io.export import export_policy, load_exported_policy

    arrays = make_arrays(seed=3)
    for key in ("states", "next_states"):
        arrays[key] = np.insert(arrays[key], 0, -2.0, axis=1)
    wide = TransitionDataset(**arrays)
    method = AutoNOPG(MethodConfig(n_updates=3, snapshot_every=None), seed=0)
    method.fit(wide, wide.states[:4], progress=False)
    expected = method.predict(wide.states[:6])
    loaded = nopg.NOPG.load(method.save(tmp_path / "checkpoint"))
    assert loaded.J_hat() == pytest.approx(method.J_hat_, rel=1e-9)
    with torch.no_grad():
        acted = loaded.policy(torch.as_tensor(wide.states[:6], dtype=torch.float64)).numpy()
    np.testing.assert_allclose(acted, expected, rtol=1e-12)
    path = export_policy(loaded.policy, tmp_path / "policy.pt",
                         example_states=loaded.model_.data.states[:8])
    run, _ = load_exported_policy(path)
    np.testing.assert_allclose(run(wide.states[:6]), expected, rtol=1e-6, atol=1e-9)


def test_task_bounds_reach_the_models_whose_successors_move(dataset):
    """``state_bounds`` and ``terminal_bounds`` go to the anchored recipe and the judge, never
    to the kernel model, and an explicit setting is kept."""
    low, high = [-3.0, None], [3.0, 4.0]
    config = MethodConfig(n_updates=2, recipes=("given", "anchored"), snapshot_every=None)
    method = AutoNOPG(config, seed=0).fit(dataset, dataset.states[:2], terminal_bounds=[low, high],
                                          state_bounds=[[-9, -9], [9, float("inf")]],
                                          horizon=10, progress=False)
    fits = {c.name: c for c in method.report_.candidates}
    assert fits["anchored"].config.nopg.model.terminal_bounds == [low, high]
    assert fits["anchored"].config.nopg.model.state_bounds == [[-9.0, -9.0], [9.0, None]]
    assert fits["given"].config.nopg.model.terminal_bounds is None


@pytest.mark.parametrize("kwargs, message", [
    (dict(state_bounds=[[0, 0, 0], [1, 1, 1]]), r"'state_bounds' parameter must be \[low, high\] "
                                                r"with 2 entries each"),
    (dict(terminal_bounds=[[0, 0]]), "'terminal_bounds' parameter must be"),
    (dict(horizon=0), "'horizon' parameter must be a positive int"),
    (dict(action_max=[1.0, 2.0, 3.0]), "'action_max' parameter must be a number or 1 numbers"),
    (dict(initial_states=np.zeros((2, 3))), r"initial_states must have shape \(m, 2\)"),
    (dict(initial_states=np.full((1, 2), np.nan)), "initial_states contains NaN or inf"),
])
def test_bad_task_knowledge_is_one_clear_error(dataset, kwargs, message):
    with pytest.raises(ValueError, match=message):
        AutoNOPG(MethodConfig(n_updates=1)).fit(dataset, progress=False, **kwargs)


def test_bad_method_arguments_are_refused(dataset):
    with pytest.raises(ValueError, match="'config' parameter must be a MethodConfig"):
        AutoNOPG(NOPGConfig())
    with pytest.raises(ValueError, match="'seed' parameter must be an int"):
        AutoNOPG(seed=1.5)
    with pytest.raises(ValueError, match="'data' parameter must be a TransitionDataset"):
        AutoNOPG().fit(dataset.states)


def test_fit_takes_the_task_knowledge_flags(data_file, tmp_path, capsys):
    """``--state-low/--state-high`` and ``--terminal-low/--terminal-high`` reach the moved
    successors; a wrong count is one line and exit 2."""
    args = ["fit", data_file, "--n-updates", "2", "--out", str(tmp_path), "--no-progress",
            "--recipes", "anchored", "--set", "snapshot_every=null"]
    assert main([*args, "--name", "ok", "--terminal-low", "none", "none", "-8",
                 "--terminal-high", "none", "none", "8", "--state-low", "-1", "-1", "none"]) == 0
    config = json.loads((tmp_path / "ok" / "seed_0" / "checkpoint" / "config.json").read_text())
    assert config["model"]["terminal_bounds"] == [[None, None, -8.0], [None, None, 8.0]]
    assert config["model"]["state_bounds"] == [[-1.0, -1.0, None], [None, None, None]]
    capsys.readouterr()
    assert main([*args, "--name", "bad", "--state-low", "1", "2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "need 3 values each" in err[0]


def test_fit_with_env_takes_its_observation_bounds_and_time_limit(data_file, tmp_path):
    from nopg.experiments.data_file import DataFileTask
    from nopg.experiments.runner import environment_state_bounds, judge_steps

    task = DataFileTask(data_file, env_id="Pendulum-v1")
    config = task.default_config()
    assert environment_state_bounds(task, config, 3) == [[-1.0, -1.0, -8.0], [1.0, 1.0, 8.0]]
    assert judge_steps(config, task) == 200                   # Pendulum-v1's time limit
    assert judge_steps(config.replace(**{"task.eval_steps": 50}), task) == 50


def test_many_initial_states_reach_the_judge_and_moved_successors_as_a_spread_subsample(dataset):
    """With more initial states than SELECTION_STARTS the kernel fit keeps them all, while the
    anchored recipe and the judge use the farthest-point subsample, and the report says so."""
    from nopg.select.recipes import SELECTION_STARTS, selection_starts

    starts = dataset.states[:30]
    config = MethodConfig(n_updates=2, recipes=("given", "anchored"), snapshot_every=None)
    method = AutoNOPG(config, seed=0).fit(dataset, starts, horizon=10, progress=False)
    fits = {c.name: c for c in method.report_.candidates}
    assert len(fits["given"].algo.initial_states_) == 30
    np.testing.assert_array_equal(fits["anchored"].algo.initial_states_, selection_starts(starts))
    assert len(selection_starts(starts)) == SELECTION_STARTS
    assert any(f"use {SELECTION_STARTS} of the 30 initial states" in d
               for d in method.report_.decisions)


def test_the_judges_horizon_is_where_the_datas_episodes_are_cut(data_file, dataset):
    """Without a horizon the judge forecasts over the length at which at least two episodes
    are cut without a terminal (a time limit), else over 10 / (1 - gamma) steps."""
    from nopg.select.task_knowledge import episode_horizon

    pendulum = nopg.data.formats.load_dataset(data_file)            # three 20-step episodes
    assert episode_horizon(pendulum) == 20
    assert episode_horizon(pendulum.subset(np.arange(45))) == 20    # the last one cut short
    assert episode_horizon(pendulum.subset(np.arange(30))) is None  # one cut: end of logging
    failed = np.zeros(60, bool)
    failed[[19, 39, 59]] = True
    ends = TransitionDataset(pendulum.states, pendulum.actions, pendulum.rewards,
                             pendulum.next_states, failed, episode_ids=pendulum.episode_ids)
    assert len(ends.episodes()) == 3 and episode_horizon(ends) is None   # every one a failure
    singles = TransitionDataset(**{**make_arrays(), "episode_ids": np.arange(40)})
    assert episode_horizon(singles) is None                    # no episode structure
    config = MethodConfig(n_updates=2, snapshot_every=None)
    assert AutoNOPG(config).fit(pendulum, progress=False).report_.horizon == 20
    assert AutoNOPG(config).fit(singles, progress=False).report_.horizon == 1000   # gamma 0.99


def test_reproduce_and_the_sweep_run_the_same_object(tmp_path, monkeypatch):
    """``nopg reproduce`` (the runner) and the sample-efficiency sweep fit through
    :class:`nopg.AutoNOPG`, and the sweep's NOPG row is the method's policy and ``J_hat``."""
    from nopg.experiments import get_task, run_seed
    from nopg.experiments.sample_efficiency import SampleEfficiencyConfig
    from nopg.experiments.sample_efficiency_jobs import run_job
    from nopg.experiments.sample_efficiency_sweep import plan

    fitted: list[AutoNOPG] = []
    original = AutoNOPG.fit

    def spy(self, *args, **kwargs):
        fitted.append(self)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(AutoNOPG, "fit", spy)
    task = get_task("pendulum-grid")
    config = task.default_config().replace(
        n_updates=2, task={"n_theta": 4, "n_theta_dot": 4, "eval_steps": 20,
                           "portrait_resolution": 8})
    res = run_seed(task, config, 0, tmp_path / "run", progress=False).to_dict()
    assert len(fitted) == 1 and fitted[0].J_hat_ == pytest.approx(res["J_hat"], rel=1e-12)
    cfg = SampleEfficiencyConfig(task="pendulum-grid", algorithms=("NOPG-D",), sizes=(32,),
                                 seeds=(0,), settings={"task.eval_steps": 20}, nopg_updates=2)
    jobs, _ = plan(cfg, tmp_path / "sweep")
    (rows,) = [run_job(job) for job in jobs]
    assert len(fitted) == 2 and rows[0]["J_hat"] == pytest.approx(fitted[1].J_hat_, rel=1e-12)


def test_the_later_fits_spend_at_most_the_budget(dataset, monkeypatch):
    """What follows the first fit's updates stops once it has spent ``budget`` times their
    seconds (the plain fit's; the floor set to 0 so that a test-sized fit reaches it); a budget
    of 0 fits nothing after the first, and the kept policy is then the first fit's."""
    monkeypatch.setattr("nopg.select.fit_run.BUDGET_FLOOR_S", 0.0)
    config = MethodConfig(n_updates=400, recipes=("given", "anchored"), snapshot_every=None,
                          budget=0.5)
    method = AutoNOPG(config, seed=0).fit(dataset, dataset.states[:3], horizon=15,
                                          progress=False)
    report = method.report_
    first, later = (next(c for c in report.candidates if c.name == name)
                    for name in ("given", "anchored"))
    assert 0 < report.plain_fit_s <= first.fit_time_s
    assert report.budget_s == pytest.approx(0.5 * report.plain_fit_s, rel=1e-12)
    assert later.stopped_at is not None and later.stopped_at < config.n_updates
    assert later.algo.update_ == later.stopped_at
    slowest = max(m["update_time_s"] for m in later.algo.history_)       # one update may overrun
    assert report.budget_s <= report.budget_spent_s <= report.budget_s + 2 * slowest + 0.5
    assert any("stopped recipe anchored at update" in d for d in report.decisions)
    assert {c["name"]: c["stopped_at"] for c in report.to_dict()["candidates"]} == \
        {"given": None, "anchored": later.stopped_at}
    assert report.to_dict()["plain_fit_s"] == report.plain_fit_s

    none = AutoNOPG(config.replace(budget=0.0), seed=0).fit(dataset, dataset.states[:3],
                                                            horizon=15, progress=False)
    assert [c.name for c in none.report_.candidates] == ["given"]
    assert none.J_hat_ == pytest.approx(first.algo.J_hat(), rel=1e-12)
    for bad in (-1.0, float("nan"), "fast", True):
        with pytest.raises(ValueError, match="'budget' parameter must be a finite number >= 0"):
            MethodConfig(budget=bad)


def test_the_snapshot_choice_stops_at_the_budget(dataset, monkeypatch):
    """The judge's snapshot choice is part of what the budget pays for: with a budget spent as
    the plain fit ends, only the final policy is scored (and kept), the report says how many
    snapshots were left, and without a limit every snapshot is scored."""
    monkeypatch.setattr("nopg.select.fit_run.BUDGET_FLOOR_S", 0.0)
    config = MethodConfig(n_updates=40, recipes=("given",), snapshot_every=10,
                          snapshot_from=0.0, budget=1e-9)
    spent = AutoNOPG(config, seed=0).fit(dataset, dataset.states[:3], horizon=15,
                                         progress=False).report_
    choice = spent.kept.snapshot
    assert choice is not None and choice.updates == [40] and choice.kept_final
    assert choice.unscored == 3 and choice.to_dict()["unscored"] == 3
    assert any("3 of the 3 snapshots were not scored" in d for d in spent.decisions)
    free = AutoNOPG(config.replace(budget=None), seed=0).fit(dataset, dataset.states[:3],
                                                              horizon=15, progress=False).report_
    assert free.budget_s is None and free.plain_fit_s > 0
    assert free.kept.snapshot.updates == [40, 30, 20, 10] and free.kept.snapshot.unscored == 0
    zero = AutoNOPG(config.replace(budget=0.0), seed=0).fit(dataset, dataset.states[:3],
                                                             horizon=15, progress=False)
    assert zero.report_.kept.snapshot is None and zero.algo_.update_ == 40
    assert any("a budget of 0" in d for d in zero.report_.decisions)


def test_record_only_evaluations_are_not_charged_to_the_budget(dataset):
    """The caller's evaluations (for the report, never used to choose) cost the budget nothing:
    each burns a second of CPU here (four snapshots), and the charged CPU time stays that of the
    same fit without them, to within half a second."""
    def evaluate(policy):
        start = time.process_time()
        while time.process_time() - start < 1.0:
            pass
        return [0.0]

    config = MethodConfig(n_updates=20, recipes=("given",), snapshot_every=5, snapshot_from=0.0)
    method = AutoNOPG(config, seed=0).fit(dataset, dataset.states[:3], horizon=10,
                                          progress=False, evaluate=evaluate,
                                          evaluate_candidates=True)
    report = method.report_
    assert report.kept.snapshot.returns == [0.0] * 4        # every snapshot evaluated
    assert report.plain_fit_s > 0 and report.budget_s is not None
    alone = AutoNOPG(config, seed=0).fit(dataset, dataset.states[:3], horizon=10,
                                         progress=False).report_
    assert alone.kept.snapshot.returns is None
    assert abs(report.budget_spent_s - alone.budget_spent_s) < 0.5
