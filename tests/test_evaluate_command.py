"""`nopg evaluate` and `nopg export` on a tiny saved Pendulum run, and their error messages."""

import json
import warnings
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from conftest import pendulum_episodes

import nopg
from nopg import NOPG, ModelConfig, NOPGConfig
from nopg.cli import main
from nopg.io.run_evaluation import bootstrap_mean_ci, checkpoint_folders, load_saved, off_policy_estimate


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> dict:
    """A run folder with two seeds (NOPG-D and NOPG-S, 3 updates each) and another data set."""
    root = tmp_path_factory.mktemp("eval")
    data = pendulum_episodes(range(3), 25, 0)
    bw = nopg.select_bandwidths(data, "silverman")
    s0 = data.episode_start_states()
    for seed, cls in ((0, nopg.DeterministicMLPPolicy), (1, nopg.GaussianMLPPolicy)):
        torch.manual_seed(seed)
        policy = cls(3, 1, action_max=2.0, hidden=(8,)).double()
        algo = NOPG(policy, NOPGConfig(gamma=0.9, seed=seed, model=ModelConfig(n_mc_policy=3)))
        algo.fit(data, bw, s0, 3, progress=False)
        algo.save(root / "run" / f"seed_{seed}" / "checkpoint")
    other = pendulum_episodes(range(10, 12), 20, 1)
    other.save(root / "other.npz")
    return {"root": root, "run": root / "run", "data": data, "other": other,
            "other_path": str(root / "other.npz")}


def _json(argv: list, capsys) -> dict:
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_evaluate_in_environment_reports_mean_and_interval(run, capsys):
    out = _json(["evaluate", str(run["run"]), "--env", "Pendulum-v1", "--episodes", "2",
                 "--max-steps", "20", "--seed", "5", "--json"], capsys)
    assert [row["seed"] for row in out["checkpoints"]] == [0, 1]
    for row in out["checkpoints"]:
        env = row["env"]
        assert env["lengths"] == [20, 20] and len(env["returns"]) == 2
        assert all(-20 * 16.3 <= r <= 0.0 for r in env["returns"])
        assert env["mean"] == pytest.approx(np.mean(env["returns"]))
        assert min(env["returns"]) <= env["ci"][0] <= env["mean"] <= env["ci"][1] <= max(env["returns"])
        assert row["update"] == 3 and "data" not in row
    # The same rollouts by hand (reset seeds 5, 6; mean action; clipped to the action space).
    policy = NOPG.load(run["run"] / "seed_1" / "checkpoint").policy
    from nopg.envs.evaluation import evaluate_policy

    direct = evaluate_policy(lambda: gym.make("Pendulum-v1"), policy, 2, seed=5, max_steps=20)
    assert out["checkpoints"][1]["env"]["returns"] == pytest.approx(direct["returns"], rel=1e-12)
    pooled = [r for row in out["checkpoints"] for r in row["env"]["returns"]]
    assert out["env"]["n_episodes"] == 4 and out["env"]["mean"] == pytest.approx(np.mean(pooled))


def test_evaluate_on_other_data_equals_the_model(run, capsys):
    ckpt = run["run"] / "seed_0" / "checkpoint"
    out = _json(["evaluate", str(ckpt), "--data", run["other_path"], "--json"], capsys)
    row = out["checkpoints"][0]
    assert row["seed"] == 0 and "env" not in row
    # J_hat computed directly: the checkpoint's bandwidths and config, the data's episode starts.
    algo = NOPG.load(ckpt)
    c, other = algo.config.model, run["other"]
    model = nopg.NonparametricBellman(
        other, algo.model_.bandwidths, algo.config.gamma, top_k=c.top_k,
        n_mc_policy=c.n_mc_policy, n_mc_next=c.n_mc_next, solver=c.solver,
        solver_tol=c.solver_tol, unsupported=c.unsupported, support_radius=c.support_radius)
    with torch.no_grad():
        sol = model.solution(algo.policy, other.episode_start_states(),
                             torch.Generator().manual_seed(algo.config.seed))
    assert row["data"]["J_hat"] == pytest.approx(sol.J, rel=1e-8)
    assert row["data"]["support_gap"] == pytest.approx(sol.support_gap, rel=1e-8)
    assert row["data"]["n_initial_states"] == 2 and row["data"]["n_transitions"] == 40
    assert out["data"]["path"] == run["other_path"]


@pytest.mark.parametrize("seed", [0, 1])
def test_off_policy_estimate_on_the_training_data_is_the_checkpoints_j_hat(run, seed):
    [(k, folder)] = checkpoint_folders(run["run"], seed)
    saved = load_saved(folder, k)
    est = off_policy_estimate(saved, run["data"])
    assert est["J_hat"] == pytest.approx(saved.algo.J_hat(), rel=1e-8)
    assert est["support_gap"] == pytest.approx(saved.algo.support_gap_, rel=1e-8)


def test_evaluate_text_output(run, capsys):
    assert main(["evaluate", str(run["run"] / "seed_1"), "--env", "Pendulum-v1", "--episodes", "1",
                 "--max-steps", "5", "--data", run["other_path"]]) == 0
    text = capsys.readouterr().out
    assert "seed 1 (update 3): return" in text and "J_hat" in text and "support gap" in text


def test_bootstrap_interval():
    lo, hi = bootstrap_mean_ci([1.0, 2.0, 3.0, 10.0])
    assert 1.0 <= lo < 4.0 < hi <= 10.0
    assert bootstrap_mean_ci([2.5]) == (2.5, 2.5)
    with pytest.raises(ValueError):
        bootstrap_mean_ci([])


def test_export_writes_files_that_load(run, tmp_path, capsys):
    from nopg.io.export import load_exported_policy

    states = run["other"].states
    for seed, name in ((0, "policy.pt"), (1, "policy.onnx")):
        out = tmp_path / name
        assert main(["export", str(run["run"]), "--seed", str(seed), "--out", str(out)]) == 0
        assert f"wrote {out}" in capsys.readouterr().out
        act, meta = load_exported_policy(out)
        expected = NOPG.load(run["run"] / f"seed_{seed}" / "checkpoint").predict(states)
        np.testing.assert_allclose(act(states), expected, rtol=1e-10, atol=1e-12)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)     # TorchScript, torch >= 2.10
        scripted = torch.jit.load(str(tmp_path / "policy.pt"))
    assert tuple(scripted(torch.zeros(4, 3, dtype=torch.float64)).shape) == (4, 1)
    assert main(["export", str(run["run"] / "seed_0" / "checkpoint"), "--out",
                 str(tmp_path / "policy.pt"), "--overwrite", "--format", "torchscript",
                 "--dtype", "float32"]) == 0


def _bad(run, tmp_path: Path) -> list:
    r, other = str(run["run"]), run["other_path"]
    empty = tmp_path / "empty"
    empty.mkdir()
    (tmp_path / "exists.pt").write_text("x")
    return [
        (["evaluate", str(tmp_path / "missing"), "--env", "Pendulum-v1"], "does not exist"),
        (["evaluate", str(empty), "--env", "Pendulum-v1"], "neither a NOPG checkpoint"),
        (["evaluate", r, "--env", "NoSuchEnv-v0", "--episodes", "1"], "cannot make the gymnasium"),
        (["evaluate", r, "--env", "CartPole-v1", "--episodes", "1"], "does not fit the policy"),
        (["evaluate", r], "nothing to evaluate"),
        (["evaluate", r, "--env", "Pendulum-v1", "--episodes", "0"], "--episodes"),
        (["evaluate", r, "--data", str(tmp_path / "none.npz")], "none.npz"),
        (["export", r, "--out", str(tmp_path / "p.pt")], "choose one with --seed"),
        (["export", r, "--seed", "7", "--out", str(tmp_path / "p.pt")], "no checkpoint of seed 7"),
        (["export", r, "--seed", "0", "--out", str(tmp_path / "no" / "p.pt")], "does not exist"),
        (["export", r, "--seed", "0", "--out", str(tmp_path / "exists.pt")], "already exists"),
        (["export", r, "--seed", "0", "--out", str(tmp_path / "p.bin")], "cannot tell the export"),
        (["export", other, "--out", str(tmp_path / "p.pt")], "neither a NOPG checkpoint"),
    ]


def test_user_mistakes_end_in_one_line(run, tmp_path, capsys):
    for argv, message in _bad(run, tmp_path):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.strip()
        assert err.startswith("nopg: error: ") and message in err, (argv, err)
        assert "\n" not in err and "Traceback" not in err, (argv, err)
