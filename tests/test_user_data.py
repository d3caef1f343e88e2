"""The "user data" experiments: data collection, the swing-up controller, evaluation, CLI."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from nopg.cli import main
from nopg.envs.pendulum import BOTTOM_STATE, angle_normalize, obs_to_angle
from nopg.experiments import TASKS, get_task
from nopg.experiments.runner import environment_state_bounds, make_policy, with_task_bounds
from nopg.experiments.user_data import (
    USER_DATA_TASKS,
    collect_invertedpendulum_random,
    collect_mountaincar_uniform,
)
from nopg.experiments.user_data_pendulum import (
    collect_pendulum_episodes,
    controller_reference_returns,
    controller_return_from_bottom,
    swingup_action,
)

NAMES = ["pendulum-uniform", "pendulum-controller", "mountaincar-uniform", "invertedpendulum-random"]


def _same(a, b) -> bool:
    return all(np.array_equal(getattr(a, k), getattr(b, k))
               for k in ("states", "actions", "rewards", "next_states", "terminals", "truncations",
                         "episode_ids"))


def test_registered_with_library_defaults():
    assert [cls.name for cls in USER_DATA_TASKS] == NAMES
    bounds = {"pendulum-uniform": 2.0, "pendulum-controller": 2.0, "mountaincar-uniform": 1.0,
              "invertedpendulum-random": 3.0}
    for name in NAMES:
        assert name in TASKS
        task = get_task(name)
        cfg = task.default_config()
        assert task.action_max == bounds[name]
        assert cfg.n_updates == 1500 and cfg.bandwidth_method == "auto" and cfg.hidden == (50,)
        assert cfg.state_factor == 1.0 and cfg.action_factor == 1.0 and cfg.eval_every == 100
        assert cfg.nopg.gamma == 0.99 and cfg.nopg.optimizer.learning_rate == 1e-2
        assert cfg.nopg.model.top_k == 10 and cfg.nopg.model.solver == "bicgstab"


@pytest.mark.parametrize("behaviour", ["uniform", "controller"])
def test_pendulum_episodes_shapes_flags_and_chaining(behaviour):
    data = collect_pendulum_episodes(3, 50, seed=0, behaviour=behaviour)
    assert data.n == 150 and data.state_dim == 3 and data.action_dim == 1
    assert not data.terminals.any()
    np.testing.assert_array_equal(np.flatnonzero(data.truncations), [49, 99, 149])
    np.testing.assert_array_equal(np.bincount(data.episode_ids), [50, 50, 50])
    assert np.all(np.abs(data.actions) <= 2.0)
    same = data.episode_ids[1:] == data.episode_ids[:-1]
    np.testing.assert_allclose(data.next_states[:-1][same], data.states[1:][same], atol=1e-12)
    # Episodes start from distinct random reset states (theta in [-pi, pi], |theta_dot| <= 1).
    starts = data.episode_start_states()
    assert len({tuple(s) for s in starts}) == 3 and np.all(np.abs(starts[:, 2]) <= 1.0)
    # Rewards follow Pendulum-v1's cost on the pre-step state.
    th, thd = obs_to_angle(data.states)
    cost = angle_normalize(th) ** 2 + 0.1 * thd ** 2 + 0.001 * data.actions[:, 0] ** 2
    np.testing.assert_allclose(data.rewards, -cost, atol=1e-9)


def test_default_sizes_determinism_and_seeds():
    for name, n in (("pendulum-uniform", 2000), ("pendulum-controller", 2000),
                    ("mountaincar-uniform", 3000)):
        task = get_task(name)
        cfg = task.default_config()
        a, b, c = task.make_dataset(cfg, 0), task.make_dataset(cfg, 0), task.make_dataset(cfg, 1)
        assert a.n == n and _same(a, b) and not np.array_equal(a.states, c.states)
        assert not np.array_equal(a.actions, c.actions)
    task = get_task("pendulum-uniform")
    assert np.array_equal(task.initial_states(None, task.default_config(), 3), BOTTOM_STATE[None])


def test_mountaincar_one_step_episodes_follow_the_dynamics():
    data = collect_mountaincar_uniform(500, seed=0)
    assert data.n == 500 and data.state_dim == 2 and data.n_episodes == 500
    np.testing.assert_array_equal(data.episode_ids, np.arange(500))
    np.testing.assert_array_equal(data.truncations, ~data.terminals)
    x, v, a = data.states[:, 0], data.states[:, 1], data.actions[:, 0]
    assert x.min() >= -1.2 and x.max() <= 0.6 and np.abs(v).max() <= 0.07 and np.abs(a).max() <= 1
    assert x.min() < -1.0 and x.max() > 0.4  # spread over the whole range
    v_new = np.clip(v + 0.0015 * a - 0.0025 * np.cos(3 * x), -0.07, 0.07)
    x_new = np.clip(x + v_new, -1.2, 0.6)
    v_new = np.where((x_new == -1.2) & (v_new < 0), 0.0, v_new)
    np.testing.assert_allclose(data.next_states, np.column_stack([x_new, v_new]), atol=1e-6)
    goal = (data.next_states[:, 0] >= 0.45) & (data.next_states[:, 1] >= 0)
    np.testing.assert_array_equal(data.terminals, goal)
    assert 0 < goal.sum() < 500
    np.testing.assert_allclose(data.rewards, 100.0 * goal - 0.1 * a ** 2, atol=1e-6)
    assert _same(data, collect_mountaincar_uniform(500, seed=0))
    assert not np.array_equal(data.states, collect_mountaincar_uniform(500, seed=1).states)


def test_invertedpendulum_terminals_where_the_pole_fell():
    data = collect_invertedpendulum_random(400, seed=0)
    assert data.n == 400 and data.state_dim == 4 and data.action_dim == 1
    assert np.abs(data.actions).max() <= 3.0
    fell = np.abs(data.next_states[:, 1]) > 0.2
    np.testing.assert_array_equal(data.terminals, fell)
    assert data.terminals.sum() > 10 and np.all(np.abs(data.states[:, 1]) <= 0.2)
    np.testing.assert_array_equal(data.rewards, np.where(fell, 0.0, 1.0))
    # Every episode ends in a fall, except the last one, cut by the end of the data.
    ends = [idx[-1] for idx in data.episodes()]
    assert all(data.terminals[e] or (e == data.n - 1 and data.truncations[e]) for e in ends)
    assert data.terminals.sum() + data.truncations.sum() == data.n_episodes
    same = data.episode_ids[1:] == data.episode_ids[:-1]
    np.testing.assert_allclose(data.next_states[:-1][same], data.states[1:][same])
    assert _same(data, collect_invertedpendulum_random(400, seed=0))
    assert not np.array_equal(data.states, collect_invertedpendulum_random(400, seed=1).states)


def test_controller_swings_up_and_references():
    assert swingup_action(math.pi, 0.0) == 2.0          # kicks from rest at the bottom
    assert swingup_action(0.1, 0.0) == pytest.approx(-1.0)   # PD near the top
    noiseless = controller_return_from_bottom(0.0, 500)
    assert noiseless > -600
    ref = controller_reference_returns(noise_std=1.0, n_steps=200, episodes=3)
    assert np.isfinite(ref["noisy"]) and len(ref["noisy_returns"]) == 3
    assert ref["noisy"] == pytest.approx(np.mean(ref["noisy_returns"]))
    assert ref == controller_reference_returns(noise_std=1.0, n_steps=200, episodes=3)


@pytest.mark.parametrize("name", NAMES)
def test_evaluate_and_initial_states_on_a_tiny_policy(name):
    task = get_task(name)
    cfg = task.default_config().replace(hidden=[4], **{"task.eval_steps": 30})
    torch.manual_seed(0)
    policy = make_policy(task, cfg).double()
    returns = task.evaluate(policy, cfg, 0, 2)
    assert len(returns) == (1 if name.startswith("pendulum") else 2)
    assert all(np.isfinite(returns))
    if not name.startswith("pendulum"):
        s0 = task.initial_states(None, cfg, 0)
        assert s0.shape == (15, task.state_dim)
        assert len({tuple(s) for s in s0}) == 15
        assert np.array_equal(s0, task.initial_states(None, cfg, 0))
    if name == "mountaincar-uniform":
        assert task._last_eval["success_rate"] in (0.0, 0.5, 1.0)


def test_reproduce_pendulum_controller_via_cli(tmp_path):
    argv = ["reproduce", "pendulum-controller", "--seeds", "0", "--n-updates", "2",
            "--eval-every", "2", "--set", "task.n_episodes=2", "--set", "task.episode_length=40",
            "--set", "task.eval_steps=40", "--set", "task.portrait_resolution=6",
            "--set", "task.reference_episodes=2", "--out", str(tmp_path), "--name", "run",
            "--no-progress"]
    assert main(argv) == 0
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["seeds"][0]["n_samples"] == 80 and np.isfinite(summary["return_mean"])
    ref = json.loads((tmp_path / "run" / "seed_0" / "reference_returns.json").read_text())
    assert np.isfinite(ref["noisy"]) and np.isfinite(ref["noiseless"]) and ref["eval_steps"] == 40
    assert "behaviour controller from the bottom" in (tmp_path / "run" / "run.log").read_text()


def test_reproduce_with_the_anchored_model_and_cma_es_via_cli(tmp_path):
    """The inverted pendulum's option of the README: a linear policy, the anchored model and
    CMA-ES, through ``nopg reproduce`` (a small data set; two generations)."""
    argv = ["reproduce", "invertedpendulum-random", "--seeds", "0", "--n-updates", "2",
            "--set", "hidden=[]", "--set", "normalize_states=true",
            "--set", 'nopg.model.successors="anchored"', "--set", 'nopg.optimizer="cma-es"',
            "--set", "nopg.model.anchor_horizon=20", "--set", "task.n_samples=300",
            "--set", "task.eval_steps=50", "--set", "final_eval_episodes=1",
            "--out", str(tmp_path), "--name", "run", "--no-progress"]
    assert main(argv) == 0
    rows = (tmp_path / "run" / "seed_0" / "log.csv").read_text().strip().splitlines()
    header, last = rows[0].split(","), dict(zip(rows[0].split(","), rows[-1].split(",")))
    assert "evaluations" in header and len(rows) == 3
    assert float(last["evaluations"]) == 1 + 2 * 8          # the start, then 2 x 8 candidates
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert np.isfinite(summary["seeds"][0]["J_hat"])
    assert json.loads((tmp_path / "run" / "config.json").read_text())["nopg"]["optimizer"]["name"] == "cma-es"


def test_make_user_data_script(tmp_path, capsys):
    import importlib.util
    from pathlib import Path

    from nopg.data.dataset import TransitionDataset

    path = Path(__file__).resolve().parents[1] / "scripts" / "make_user_data.py"
    spec = importlib.util.spec_from_file_location("make_user_data", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main(["mountaincar-uniform", "--seeds", "0", "1", "--out", str(tmp_path),
                        "--set", "task.n_samples=50"]) == 0
    assert capsys.readouterr().out.count("n=50 ") == 2
    saved = TransitionDataset.load(tmp_path / "mountaincar-uniform__seed0.npz")
    assert _same(saved, collect_mountaincar_uniform(50, seed=0))


def test_moved_successors_get_the_environments_state_bounds():
    """The experiments give the local-linear and anchored models the bounds of the environment's
    observation space (the pendulum's speed limit); the kernel model, an unbounded space, an
    explicit setting and ``env_state_bounds=False`` get none from it."""
    pendulum = get_task("pendulum-uniform")
    config = pendulum.default_config()
    anchored = config.replace(**{"nopg.model.successors": "anchored"})
    assert environment_state_bounds(pendulum, anchored, 3) == [[-1.0, -1.0, -8.0], [1.0, 1.0, 8.0]]
    assert environment_state_bounds(pendulum, config, 3) == [[-1.0, -1.0, -8.0], [1.0, 1.0, 8.0]]
    assert with_task_bounds(pendulum, config, 3) == config          # the kernel model: unused
    assert environment_state_bounds(pendulum, anchored.replace(env_state_bounds=False), 3) is None
    own = anchored.replace(**{"nopg.model.state_bounds": [[-1, -1, -6], [1, 1, 6]]})
    assert with_task_bounds(pendulum, own, 3).nopg.model.state_bounds == [[-1, -1, -6], [1, 1, 6]]
    inverted = get_task("invertedpendulum-random")
    assert environment_state_bounds(
        inverted, inverted.default_config().replace(**{"nopg.model.successors": "anchored"}), 4) is None
