"""End-to-end: the real `nopg` entry point with a tiny budget."""

import json
import warnings

import numpy as np
import pytest

from nopg import NOPG
from nopg.cli import main
from nopg.envs.pendulum import BOTTOM_STATE


def _tiny(tmp_path, *extra):
    return ["reproduce", "pendulum-grid", "--seeds", "0", "--n-updates", "4", "--eval-every", "2",
            "--set", "task.n_theta=5", "--set", "task.n_theta_dot=4", "--set", "task.eval_steps=50",
            "--set", "task.portrait_resolution=8", "--out", str(tmp_path), "--name", "run",
            "--no-progress", *extra]


@pytest.mark.parametrize("stochastic", [False, True])
def test_reproduce_writes_results_folder(tmp_path, stochastic):
    extra = ["--stochastic", "--n-mc-policy", "3"] if stochastic else []
    assert main(_tiny(tmp_path, *extra)) == 0
    run = tmp_path / "run"
    for name in ("config.json", "summary.json", "run.log", "learning_curves.png",
                 "seed_0/log.csv", "seed_0/learning_curve.png", "seed_0/phase_portraits.png",
                 "seed_0/checkpoint/policy.pt"):
        assert (run / name).is_file() and (run / name).stat().st_size > 0, name
    summary = json.loads((run / "summary.json").read_text())
    assert summary["algorithm"] == ("nopg-s" if stochastic else "nopg-d")
    seed = summary["seeds"][0]
    assert seed["n_samples"] == 5 * 4 * 2
    assert np.isfinite(seed["return_mean"]) and np.isfinite(seed["J_hat"])
    assert summary["return_ci"] == pytest.approx([seed["return_mean"]] * 2)   # one seed
    config = json.loads((run / "config.json").read_text())
    assert config["experiment"] == "pendulum-grid" and config["n_updates"] == 4
    assert config["task"]["n_theta"] == 5
    rows = (run / "seed_0" / "log.csv").read_text().strip().splitlines()
    assert len(rows) == 1 + 4                              # header + one row per update
    assert rows[2].split(",")[-1] != ""                    # evaluation logged at update 2
    # The checkpoint reloads on its own and reproduces the reported J_hat.
    algo = NOPG.load(run / "seed_0" / "checkpoint")
    assert algo.update_ == 4 and algo.stochastic == stochastic
    assert algo.J_hat() == pytest.approx(seed["J_hat"], rel=1e-12)
    assert np.allclose(algo.initial_states_, BOTTOM_STATE[None])


def test_recipes_flag_fits_each_and_records_the_judges_choice(tmp_path, monkeypatch):
    from nopg.select.recipes import RECIPES

    monkeypatch.setitem(RECIPES["stabilise"], "n_updates", 2)
    assert main(_tiny(tmp_path, "--recipes", "given", "stabilise")) == 0
    run = tmp_path / "run"
    seed = json.loads((run / "summary.json").read_text())["seeds"][0]
    assert [r["recipe"] for r in seed["recipes"]][0] == seed["recipe"]
    assert sorted(r["recipe"] for r in seed["recipes"]) == ["given", "stabilise"]
    assert json.loads((run / "config.json").read_text())["recipes"] == ["given", "stabilise"]
    for name in ("log_given.csv", "log_stabilise.csv", "log.csv", "checkpoint/policy.pt"):
        assert (run / "seed_0" / name).is_file(), name
    assert "the judge keeps recipe " + seed["recipe"] in (run / "run.log").read_text()


def test_config_file_and_flags(tmp_path):
    cfg = tmp_path / "cfg.json"
    cfg.write_text(json.dumps({"nopg": {"gamma": 0.9}, "action_factor": 2.0}))
    assert main(_tiny(tmp_path, "--config", str(cfg), "--top-k", "10")) == 0
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert config["nopg"]["gamma"] == 0.9 and config["nopg"]["model"]["top_k"] == 10
    assert config["action_factor"] == 2.0


@pytest.mark.parametrize("argv, message", [
    (["reproduce", "no-such-task"], "unknown experiment"),
    (["reproduce", "pendulum-grid", "--set", "novalue"], "key=value"),
    (["reproduce", "pendulum-grid", "--set", "nonsense=1"], "unknown experiment setting"),
    (["reproduce", "pendulum-grid", "--gamma", "1.5"], "gamma"),
    (["reproduce", "pendulum-grid", "--config", "/nonexistent.json"], "does not exist"),
    (["reproduce", "pendulum-grid", "--recipes", "given", "stabilize"], "unknown recipe"),
])
def test_bad_input_is_reported(argv, message, capsys):
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_list_and_data(tmp_path, capsys):
    assert main(["list"]) == 0
    assert "pendulum-grid" in capsys.readouterr().out
    from nopg.envs.pendulum import collect_pendulum_grid

    collect_pendulum_grid(3, 3, 2).save(tmp_path / "d.npz")
    assert main(["data", str(tmp_path / "d.npz")]) == 0
    assert json.loads(capsys.readouterr().out)["n"] == 18


def test_cross_validation_on_grid_data_is_flagged_in_run_log(tmp_path):
    assert main(_tiny(tmp_path, "--bandwidth", "cv", "--n-updates", "1")) == 0
    log = (tmp_path / "run" / "run.log").read_text()
    assert "DuplicatedDataWarning" in log and "selected bandwidths (cv)" in log


def test_a_support_warning_reaches_the_run_log_once(tmp_path):
    # fit logs the warning's text on the nopg logger; the CLI's captured warnings must not
    # repeat it
    with warnings.catch_warnings():
        warnings.simplefilter("default")          # shown, whatever pytest's -W says
        assert main(_tiny(tmp_path, "--n-updates", "1", "--set", "nopg.support_warning=0.0")) == 0
    log = (tmp_path / "run" / "run.log").read_text()
    assert log.count("of the policy's discounted visitation lies where the data are thin") == 1


def test_data_inspect_and_convert_between_formats(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    from nopg.datasets import load_mountaincar_human

    src = tmp_path / "mc.npz"
    load_mountaincar_human([5, 9]).save(src)
    assert main(["data", "convert", str(src), str(tmp_path / "mc.hdf5")]) == 0
    assert main(["data", "convert", str(tmp_path / "mc.hdf5"), "minari:nopgtest/mc-v0",
                 "--env-id", "MountainCarContinuous-v0"]) == 0
    capsys.readouterr()
    assert main(["data", "inspect", "minari:nopgtest/mc-v0"]) == 0
    desc = json.loads(capsys.readouterr().out)
    assert desc["n"] == 208 + 302 and desc["n_episodes"] == 2
    assert desc["episodes_ending_terminal"] == 2 and desc["n_truncations"] == 0
    assert desc["episode_length_min"] == 208 and desc["episode_length_max"] == 302
    assert desc["episode_return_max"] == pytest.approx(90.9, abs=0.05)
    assert main(["data", str(tmp_path / "mc.hdf5"), "--format", "text"]) == 0
    text = capsys.readouterr().out
    assert "2 terminal, 0 truncated" in text and "transitions       510" in text
    # Existing outputs, unknown formats and bad usage are reported, not raised.
    for argv, message in ((["data", "convert", str(src), str(tmp_path / "mc.hdf5")], "already exists"),
                          (["data", "convert", str(src)], "usage"),
                          (["data", str(tmp_path / "x.csv")], "cannot tell the format"),
                          (["data", "minari:nopgtest/none-v0"], "never downloads")):
        assert main(argv) == 2
        assert message in capsys.readouterr().err


def test_collect_needs_a_terminal(tmp_path, capsys):
    assert main(["collect", "mountaincar", "--out", str(tmp_path / "demos.npz")]) == 2
    assert "interactive terminal" in capsys.readouterr().err


def test_reproduce_mountaincar_human_tiny(tmp_path):
    argv = ["reproduce", "mountaincar-human", "--seeds", "0", "--n-updates", "3", "--eval-every", "3",
            "--set", "task.demonstrations=[5]", "--set", "task.n_initial_states=3",
            "--set", "task.portrait_resolution=6", "--set", "final_eval_episodes=2",
            "--set", "eval_episodes=1", "--out", str(tmp_path), "--name", "mc", "--no-progress"]
    assert main(argv) == 0
    run = tmp_path / "mc"
    assert (run / "seed_0" / "phase_portraits.png").stat().st_size > 0
    seed = json.loads((run / "summary.json").read_text())["seeds"][0]
    assert seed["n_samples"] == 208 and len(seed["returns"]) == 2
    # Environment returns lie between "push for 999 steps" and "goal at once".
    assert all(-100.0 <= r <= 100.0 for r in seed["returns"])
    algo = NOPG.load(run / "seed_0" / "checkpoint")
    assert algo.initial_states_.shape == (3, 2)
