"""Locomotion data sets made here (nopg.datasets.locomotion): tiny Hopper-v5 versions, both
formats, chains, whole-episode subsamples, behaviour returns, errors and the cache."""

import json
import os

import numpy as np
import pytest

pytest.importorskip("mujoco")
pytest.importorskip("stable_baselines3")
pytest.importorskip("minari")

from nopg.data.dataset import TransitionDataset  # noqa: E402
from nopg.data.formats import load_dataset  # noqa: E402
from nopg.datasets.locomotion import main, make_locomotion_datasets, subsample_episodes  # noqa: E402

TINY = {"train_steps": 300, "seed": 0, "max_episode_steps": 50, "n_checkpoints": 3,
        "eval_episodes": 2}
SIZES = (100, 250)


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """The tiny data sets: random, medium and expert at two sizes, then medium-replay (a second
    call, which must reuse the cached training run)."""
    out = tmp_path_factory.mktemp("loco")
    root = out / "minari"
    first = make_locomotion_datasets("Hopper-v5", ["random", "medium", "expert"], SIZES, out=out,
                                     minari_root=root, **TINY)
    replay = make_locomotion_datasets("Hopper-v5", ["medium-replay"], (60,), out=out,
                                      minari_root=root, **TINY)
    return {"out": out, "root": root, "first": first, "replay": replay,
            "datasets": first.datasets + replay.datasets}


def _arrays(data):
    return [data.states, data.actions, data.rewards, data.next_states, data.terminals,
            data.truncations]


def test_both_formats_load_and_agree(made, monkeypatch):
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(made["root"]))
    assert len(made["datasets"]) == 7
    for meta in made["datasets"]:
        h5 = load_dataset(made["out"] / f"{meta['name']}.hdf5")
        mi = load_dataset(f"minari:{meta['minari_id']}")
        assert h5.n == mi.n == meta["n_transitions"] >= meta["size"]
        if "collected" in meta:
            assert meta["collected"]["n_transitions"] >= max(SIZES)
        for a, b in zip(_arrays(h5), _arrays(mi)):
            np.testing.assert_array_equal(a, b)
        assert [len(e) for e in h5.episodes()] == [len(e) for e in mi.episodes()]
        assert h5.states.shape[1] == 11 and h5.actions.shape[1] == 3


def test_episodes_are_chains_with_one_end_each(made):
    for meta in made["datasets"]:
        data = load_dataset(made["out"] / f"{meta['name']}.hdf5")
        ends = data.terminals | data.truncations
        assert not (data.terminals & data.truncations).any()
        for idx in data.episodes():
            np.testing.assert_array_equal(data.next_states[idx[:-1]], data.states[idx[1:]])
            assert ends[idx[-1]] and not ends[idx[:-1]].any()
            assert idx.size <= TINY["max_episode_steps"]
            if meta["level"] != "medium-replay":     # whole episodes: cut only by the time limit
                assert data.terminals[idx[-1]] or idx.size == TINY["max_episode_steps"]
        assert data.n_episodes == meta["n_episodes"]


def test_behaviour_return_is_the_datas_mean_episode_return(made, monkeypatch):
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(made["root"]))
    import minari

    for meta in made["datasets"]:
        data = load_dataset(made["out"] / f"{meta['name']}.hdf5")
        assert meta["n_episodes"] == data.n_episodes
        assert meta["behaviour_return"] == pytest.approx(float(np.mean(data.episode_returns())))
        assert meta["mixed_policies"] == (meta["level"] == "medium-replay")
        assert json.loads((made["out"] / f"{meta['name']}.json").read_text()) == \
            {k: v for k, v in meta.items() if k != "cached"}
        described = json.loads(minari.load_dataset(meta["minari_id"]).storage.metadata["description"])
        assert described["behaviour_return"] == meta["behaviour_return"]


def test_medium_is_the_checkpoint_closest_to_a_third_of_the_expert(made):
    medium = next(m for m in made["datasets"] if m["level"] == "medium")
    table = medium["checkpoints"]
    assert [c["step"] for c in table] == [100, 200, 300]
    target = table[-1]["eval_return"] / 3
    best = min(table[:-1], key=lambda c: abs(c["eval_return"] - target))
    assert medium["checkpoint_eval_return"] == best["eval_return"]
    assert medium["expert_eval_return"] == table[-1]["eval_return"]


def test_subsampling_keeps_whole_episodes():
    lengths = [5, 9, 3, 12, 7, 4]
    ids = np.repeat(np.arange(len(lengths)), lengths)
    states = np.arange(ids.size + 1, dtype=float)[:, None]
    full = TransitionDataset(states[:-1], np.zeros(ids.size), np.ones(ids.size), states[1:],
                             np.zeros(ids.size, bool), np.zeros(ids.size, bool), ids)
    for size in (1, 10, 20, 40):
        sub = subsample_episodes(full, size, seed=3)
        kept = np.unique(sub.episode_ids)
        assert sub.n >= size
        assert all((sub.episode_ids == e).sum() == lengths[e] for e in kept)
        assert sub.n - min(lengths[e] for e in kept) < size or kept.size == 1
        assert np.all(np.diff(sub.episode_ids) >= 0)          # original order kept
    with pytest.raises(ValueError, match="larger than the collected data"):
        subsample_episodes(full, ids.size + 1, seed=0)


def test_a_second_call_uses_the_cache(made):
    out, root = made["out"], made["root"]
    assert made["first"].trained and not made["replay"].trained
    stamps = {p: p.stat().st_mtime_ns for p in out.glob("*.hdf5")}
    again = make_locomotion_datasets("Hopper-v5", ["random", "medium", "expert"], SIZES, out=out,
                                     minari_root=root, **TINY)
    assert not again.trained and "training" not in again.timings
    assert all(m["cached"] for m in again.datasets) and len(again.datasets) == 6
    assert stamps == {p: p.stat().st_mtime_ns for p in out.glob("*.hdf5")}


@pytest.mark.parametrize(("change", "message"), [
    ({"env_id": "Hopper-v99"}, "unknown environment id 'Hopper-v99'"),
    ({"levels": ["medium", "hard"]}, "unknown level 'hard'"),
    ({"sizes": [100, 0]}, "sizes must be positive ints"),
    ({"levels": ["medium-replay"], "sizes": [1000]}, "larger than the medium-replay data"),
])
def test_bad_inputs_give_clear_errors_before_any_work(tmp_path, change, message):
    args = {"env_id": "Hopper-v5", "levels": ["random"], "sizes": [100], **change}
    with pytest.raises(ValueError, match=message):
        make_locomotion_datasets(out=tmp_path, minari_root=tmp_path / "m", **args, **TINY)
    assert os.listdir(tmp_path) == []


def test_the_command_prints_a_one_line_error(tmp_path, capsys):
    assert main(["--env", "Nope-v0", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: unknown environment id 'Nope-v0'") and "\n" not in err


def test_policy_data_are_the_same_from_a_cached_training_run(made):
    """Remaking ``medium`` from the cached run (no training) gives the same transitions."""
    names = [m["name"] for m in made["datasets"] if m["level"] == "medium"]
    before = [load_dataset(made["out"] / f"{name}.hdf5") for name in names]
    again = make_locomotion_datasets("Hopper-v5", ["medium"], SIZES, out=made["out"],
                                     minari_root=made["root"], overwrite=True, **TINY)
    assert not again.trained and "training run loaded" in again.timings
    for name, old in zip(names, before):
        new = load_dataset(made["out"] / f"{name}.hdf5")
        for a, b in zip(_arrays(old), _arrays(new)):
            np.testing.assert_array_equal(a, b)
