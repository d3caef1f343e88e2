"""`nopg fit` on a user's own data file, and the CLI's handling of a user's mistakes."""

import json

import numpy as np
import pytest
from conftest import save_pendulum_episodes

from nopg import NOPG, TransitionDataset
from nopg.cli import main


@pytest.fixture(scope="module")
def data_file(tmp_path_factory) -> str:
    """Three 30-step episodes of uniformly random torques in gymnasium's Pendulum-v1."""
    return save_pendulum_episodes(tmp_path_factory.mktemp("data") / "pendulum.npz", 30)


def _fit(data_file, out, *extra):
    return main(["fit", data_file, "--n-updates", "3", "--out", str(out), "--name", "run",
                 "--no-progress", *extra])


def test_fit_without_environment_writes_results(data_file, tmp_path, capsys):
    assert _fit(data_file, tmp_path) == 0
    run = tmp_path / "run"
    for name in ("config.json", "summary.json", "run.log", "learning_curves.png",
                 "seed_0/log.csv", "seed_0/learning_curve.png", "seed_0/bandwidths.png",
                 "seed_0/actions.png", "seed_0/checkpoint/policy.pt"):
        assert (run / name).is_file() and (run / name).stat().st_size > 0, name
    summary = json.loads((run / "summary.json").read_text())
    seed = summary["seeds"][0]
    assert summary["return_mean"] is None and seed["return_mean"] is None
    assert np.isfinite(seed["J_hat"]) and 0.0 <= seed["support_gap"] <= 1.0
    assert "J_hat" in capsys.readouterr().out
    algo = NOPG.load(run / "seed_0" / "checkpoint")
    data = TransitionDataset.load(data_file)
    # Default initial states: the states that start the data's three episodes.
    assert np.allclose(algo.initial_states_, data.states[[0, 30, 60]])
    assert algo.J_hat() == pytest.approx(seed["J_hat"], rel=1e-12)
    # Action bound from the data (uniform torques in +-2): the policy cannot leave that range.
    assert np.allclose(algo.policy.action_max.numpy(), np.abs(data.actions).max(axis=0))


def test_fit_initial_states_file_sets_the_objective(data_file, tmp_path):
    data = TransitionDataset.load(data_file)
    starts = tmp_path / "starts.npy"
    np.save(starts, data.states[[0, 30, 60]])
    others = tmp_path / "others.csv"
    np.savetxt(others, data.states[[5, 17]], delimiter=",")
    assert _fit(data_file, tmp_path / "a") == 0
    assert _fit(data_file, tmp_path / "b", "--initial-states", str(starts)) == 0
    assert _fit(data_file, tmp_path / "c", "--initial-states", str(others)) == 0
    j = {k: json.loads((tmp_path / k / "run" / "summary.json").read_text())["seeds"][0]["J_hat"]
         for k in "abc"}
    assert j["b"] == pytest.approx(j["a"], rel=1e-12)   # the same states as the default
    assert j["c"] != pytest.approx(j["a"], rel=1e-6)
    algo = NOPG.load(tmp_path / "c" / "run" / "seed_0" / "checkpoint")
    assert np.allclose(algo.initial_states_, data.states[[5, 17]])


def test_fit_with_environment_evaluates(data_file, tmp_path):
    assert _fit(data_file, tmp_path, "--env", "Pendulum-v1", "--eval-every", "2",
                "--eval-episodes", "2", "--eval-steps", "20") == 0
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    seed = summary["seeds"][0]
    assert len(seed["returns"]) == 2 and np.isfinite(seed["return_mean"])
    # 20 steps of Pendulum cost at most 16.27 each: the cap was applied.
    assert all(-20 * 16.3 <= r <= 0 for r in seed["returns"])
    rows = (tmp_path / "run" / "seed_0" / "log.csv").read_text().strip().splitlines()
    assert rows[2].split(",")[-1] != ""                    # evaluated at update 2


@pytest.mark.parametrize("extra, message", [
    (["--set", "task.eval_stepz=3"], "did you mean 'task.eval_steps'"),
    (["--set", "task.eval_steps=abc"], "eval_steps"),
    (["--set", "nopg.gama=0.9"], "did you mean 'nopg.gamma'"),
    (["--env", "NoSuchEnv-v0"], "NoSuchEnv-v0"),
    (["--env", "MountainCarContinuous-v0"], "2-D observations"),
    (["--eval-every", "2"], "need --env"),
    (["--initial-states", "missing.npy"], "missing.npy"),
])
def test_fit_user_errors_are_one_line(data_file, tmp_path, capsys, extra, message):
    out = tmp_path / "out"
    assert _fit(data_file, out, *extra) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("nopg: error:") and message in err and len(err.splitlines()) == 1
    assert not out.exists() or not any(out.iterdir())       # nothing left behind


def test_fit_missing_data_file(tmp_path, capsys):
    assert main(["fit", str(tmp_path / "none.npz"), "--no-progress"]) == 2
    assert "none.npz" in capsys.readouterr().err


def test_fit_initial_states_of_wrong_width(data_file, tmp_path, capsys):
    bad = tmp_path / "bad.npy"
    np.save(bad, np.zeros((4, 2)))
    assert _fit(data_file, tmp_path / "out", "--initial-states", str(bad)) == 2
    assert "(m, 3)" in capsys.readouterr().err


def _tiny_grid(tmp_path, *extra):
    return ["reproduce", "pendulum-grid", "--seeds", "0", "--n-updates", "2",
            "--set", "task.n_theta=4", "--set", "task.n_theta_dot=3", "--set", "task.eval_steps=5",
            "--set", "task.portrait_resolution=4", "--out", str(tmp_path), "--no-progress", *extra]


@pytest.mark.parametrize("extra, message", [
    (["--set", "task.n_thetaa=20"], "did you mean 'task.n_theta'"),
    (["--set", "task.n_theta=abc"], "'task.n_theta' must be a int"),
])
def test_reproduce_rejects_task_setting_typos(tmp_path, capsys, extra, message):
    out = tmp_path / "out"
    assert main(_tiny_grid(out, *extra)) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert not out.exists()


def test_failed_run_leaves_no_folder(tmp_path, capsys):
    """A failure inside the run (here: an empty grid) removes the folder it had created."""
    out = tmp_path / "out"
    code = main(_tiny_grid(out, "--set", "task.n_theta=0"))
    assert code == 2 and "n_theta" in capsys.readouterr().err
    assert not any(out.iterdir())


def test_out_that_is_a_file_and_bad_config(tmp_path, capsys):
    afile = tmp_path / "afile"
    afile.write_text("x")
    assert main(_tiny_grid(afile)) == 2
    err = capsys.readouterr().err
    assert "cannot create the results folder" in err and len(err.strip().splitlines()) == 1
    cfg = tmp_path / "cfg.json"
    cfg.write_text("{not json")
    assert main(_tiny_grid(tmp_path / "out", "--config", str(cfg))) == 2
    err = capsys.readouterr().err
    assert str(cfg) in err and "not valid JSON" in err


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="needs a machine without CUDA")
def test_unavailable_device_leaves_no_folder(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(_tiny_grid(out, "--device", "cuda")) == 2
    assert "CUDA is not available" in capsys.readouterr().err
    assert not out.exists()


def test_policy_actions_match_the_module(data_file):
    from nopg import DeterministicMLPPolicy
    from nopg.envs.evaluation import policy_actions

    policy = DeterministicMLPPolicy(3, 1, action_max=2.0).double()
    states = TransitionDataset.load(data_file).states[:7]
    import torch

    expected = policy(torch.as_tensor(states)).detach().numpy()
    assert np.allclose(policy_actions(policy, states), expected, rtol=0, atol=0)


def test_fit_tensorboard_logs_the_updates(data_file, tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    assert _fit(data_file, tmp_path, "--tensorboard", "--env", "Pendulum-v1", "--eval-every", "3",
                "--eval-episodes", "1", "--eval-steps", "5") == 0
    seed = tmp_path / "run" / "seed_0"
    events = EventAccumulator(str(seed / "tensorboard"))
    events.Reload()
    j_hat = [(e.step, e.value) for e in events.Scalars("nopg/J_hat")]
    header, *rows = (seed / "log.csv").read_text().strip().splitlines()
    column = header.split(",").index("J_hat")
    assert [step for step, _ in j_hat] == [1, 2, 3]
    assert np.allclose([v for _, v in j_hat], [float(r.split(",")[column]) for r in rows],
                       rtol=1e-6)                              # TensorBoard stores float32
    assert [e.step for e in events.Scalars("nopg/eval_return")] == [3]


def test_uncalled_method_as_initial_states_is_named(data_file):
    import nopg

    data = TransitionDataset.load(data_file)
    algo = NOPG(nopg.DeterministicMLPPolicy(3, 1, action_max=2.0).double(), nopg.NOPGConfig())
    with pytest.raises(ValueError, match=r"episode_start_states.*call it"):
        algo.setup(data, nopg.select_bandwidths(data), data.episode_start_states)


def test_analysis_bad_config_names_the_file(tmp_path, capsys):
    cfg = tmp_path / "cfg.json"
    cfg.write_text("{not json")
    assert main(["reproduce", "trust-region", "--config", str(cfg), "--out", str(tmp_path),
                 "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert str(cfg) in err and "not valid JSON" in err and len(err.strip().splitlines()) == 1
