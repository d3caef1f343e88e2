"""The pre-registered tasks' data generators (benchmarks/preregistered_data.py) on tiny sizes."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

_PATH = Path(__file__).resolve().parents[1] / "benchmarks" / "preregistered_data.py"


@pytest.fixture(scope="module")
def gen():
    spec = importlib.util.spec_from_file_location("preregistered_data", _PATH)
    module = importlib.util.module_from_spec(spec)
    sys.modules["preregistered_data"] = module
    spec.loader.exec_module(module)
    return module


def _needs(env_id: str) -> None:
    gym = pytest.importorskip("gymnasium")
    if "Pendulum-v1" != env_id and "MountainCar" not in env_id:
        pytest.importorskip("mujoco")
    gym.spec(env_id)


DIMS = {"pendulum-strong-gravity": (3, 1), "pendulum-mixed": (3, 1),
        "mountaincar-push-heuristic": (2, 1), "invertedpendulum-small": (4, 1),
        "reacher-random": (10, 2), "invertedpendulum-mixed": (4, 1),
        "inverteddoublependulum-random": (9, 1)}


@pytest.mark.parametrize("name", list(DIMS))
def test_generator_shapes_flags_and_determinism(gen, name):
    spec = gen.TASKS[name]
    _needs(spec.env_id)
    n = 37
    a, info = gen.collect(spec, size=n, seed=0)
    d_s, d_a = DIMS[name]
    assert a["states"].shape == (n, d_s) and a["next_states"].shape == (n, d_s)
    assert a["actions"].shape == (n, d_a) and a["rewards"].shape == (n,)
    assert not np.any(a["terminals"] & a["truncations"])          # kept apart
    assert a["truncations"][-1] or a["terminals"][-1]             # the data's end is an end
    ids = a["episode_ids"]
    assert ids[0] == 0 and np.all(np.diff(ids) >= 0) and len(info["labels"]) == ids[-1] + 1
    ends = np.flatnonzero(np.diff(ids)) # last transition of every episode but the final one
    assert np.all(a["terminals"][ends] | a["truncations"][ends])
    inside = np.setdiff1d(np.arange(n - 1), ends)
    assert np.array_equal(a["next_states"][inside], a["states"][inside + 1])
    assert not np.any((a["terminals"] | a["truncations"])[inside])
    low, high = -np.abs(a["actions"]).max(), np.abs(a["actions"]).max()
    bound = {1: 2.0, 2: 2.0, 3: 1.0, 4: 3.0, 5: 1.0, 6: 3.0, 7: 1.0}[spec.number]
    assert -bound <= low and high <= bound
    b, _ = gen.collect(spec, size=n, seed=0)
    assert gen.content_sha256(a) == gen.content_sha256(b)                # deterministic
    c, _ = gen.collect(spec, size=n, seed=1)
    assert gen.content_sha256(a) != gen.content_sha256(c)


def test_cut_last_episode_is_a_truncation(gen):
    spec = gen.TASKS["pendulum-mixed"]
    _needs(spec.env_id)
    a, info = gen.collect(spec, size=250, seed=0)     # episode 0 (200 steps), episode 1 cut at 50
    assert info["cut"] and info["labels"] == ["swingup", "uniform"]
    assert a["truncations"][199] and a["truncations"][249] and a["truncations"].sum() == 2
    assert not a["terminals"].any()
    np.testing.assert_array_equal(np.bincount(a["episode_ids"]), [200, 50])


def test_episodes_start_from_reset_seed_k(gen):
    gym = pytest.importorskip("gymnasium")
    spec = gen.TASKS["pendulum-strong-gravity"]
    a, _ = gen.collect(spec, size=401, seed=0)
    env = gym.make("Pendulum-v1", g=14.0)
    assert env.unwrapped.g == 14.0
    for k, start in enumerate((0, 200, 400)):
        obs, _ = env.reset(seed=k)
        np.testing.assert_allclose(a["states"][start], obs)


def test_dataset_round_trip(gen, tmp_path):
    pytest.importorskip("gymnasium")
    from nopg import TransitionDataset

    spec = gen.TASKS["mountaincar-push-heuristic"]
    data = gen.make_dataset(spec, size=300, seed=0)
    data.save(tmp_path / "d.npz")
    back = TransitionDataset.load(tmp_path / "d.npz")
    assert back.n == 300 and back.truncations is not None
    np.testing.assert_array_equal(back.terminals, data.terminals)
    np.testing.assert_array_equal(back.truncations, data.truncations)
    assert back.n_episodes == len(np.unique(data.episode_ids))
