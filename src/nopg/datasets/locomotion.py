"""Locomotion data sets made here, D4RL/Minari style: a SAC behaviour policy, four levels, two formats.

No download is possible, so this module generates the data sets itself for a gymnasium MuJoCo
task (``Hopper-v5``; ``Walker2d-v5`` and ``HalfCheetah-v5`` work the same way):

1. **Training.** Stable-Baselines3 SAC with its defaults (``MlpPolicy``, learning rate 3e-4,
   batch 256, ``learning_starts=100``, ``train_freq=1``, automatic entropy coefficient) except
   ``device="cpu"`` and ``buffer_size=train_steps`` (nothing is overwritten, as with the default
   of 10^6 for shorter runs, and the whole run's replay is kept). ``seed`` seeds SAC. During
   training ``n_checkpoints`` evenly spaced checkpoints (the last one is the final policy) are
   evaluated with ``eval_episodes`` episodes of the *stochastic* policy, the one that collects.
2. **Levels.**

   ``random``
       Actions drawn uniformly from the action box (no training needed).
   ``medium``
       The checkpoint saved during training whose evaluation return is closest to one third
       of the final policy's (the ``expert`` checkpoint); the final checkpoint is not a
       candidate.
   ``medium-replay``
       SAC's replay buffer up to the ``medium`` checkpoint (the warm-up's random actions and
       every policy up to it; states stored in float32 by SB3, so values are float32-exact).
   ``expert``
       The final policy (ask for it: a policy worth the name needs long training).

   ``random``, ``medium`` and ``expert`` are collected as whole episodes until at least
   ``max(sizes)`` transitions; each size is then a subsample of whole episodes (random order,
   seeded) with at least ``size`` transitions. ``medium-replay`` is subsampled the same way
   from the replay, so its sizes are capped by the replay's length.
3. **Files.** Each data set ``<name>`` (e.g. ``hopper-v5-medium-n10000-t20000-s0``) is written
   as a D4RL-layout HDF5 file ``<out>/<name>.hdf5`` (:func:`nopg.data.hdf5.save_hdf5`), a local
   Minari data set ``nopg/<name>-v0`` (:func:`nopg.data.minari.save_minari`, under
   ``$MINARI_DATASETS_PATH`` or ``minari_root``) and a JSON sidecar ``<out>/<name>.json`` with
   its metadata: ``behaviour_return`` (the mean episode return of the data's episodes) and
   ``n_episodes`` among others; the Minari description holds the same JSON. Episodes are
   chains (``next_states[t] == states[t + 1]``); ``terminals`` mark MuJoCo terminations,
   ``truncations`` the time limit (and the replay's last, unfinished episode).
4. **Cache.** A data set whose three outputs exist is skipped unless ``overwrite``; when every
   requested data set is cached, nothing is trained. The training run is cached too
   (``<out>/sac-<...>.pt``: the checkpoints' actor weights and returns; ``.npz``: the medium
   replay), so new sizes or levels of the same run do not train again.

Command::

    python -m nopg.datasets.locomotion --env Hopper-v5 --levels random medium medium-replay \\
        --sizes 10000 100000 --train-steps 100000 --seed 0 --out ~/.cache/nopg/locomotion

This module imports gymnasium, torch and stable_baselines3 (it is not part of the core).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import logging
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..data.dataset import TransitionDataset
from ..data.minari import minari_dataset_exists

__all__ = ["DEFAULT_OUT", "LEVELS", "LocomotionResult", "TrainingRun", "collect_episodes_until",
           "dataset_name", "main", "make_locomotion_datasets", "replay_dataset",
           "subsample_episodes", "train_behaviour"]

LEVELS = ("random", "medium", "medium-replay", "expert")
"""The data set levels, as in D4RL."""
DEFAULT_OUT = Path("~/.cache/nopg/locomotion")
"""Default output folder (the cache)."""
_TRAINED = ("medium", "medium-replay", "expert")
_SEED_OFFSET = {"random": 1, "medium": 2, "expert": 3}
log = logging.getLogger(__name__)


@dataclass
class TrainingRun:
    """A trained SAC run: the model, its checkpoints and where ``medium`` lies.

    ``checkpoints`` holds dicts ``step``, ``eval_return`` and ``actor`` (a copy of the actor's
    weights); the last one is the final (``expert``) policy. ``replay`` is the replay buffer up
    to the ``medium`` checkpoint (:func:`replay_dataset`).
    """

    model: Any
    checkpoints: list[dict[str, Any]]
    medium_index: int
    replay: TransitionDataset

    def table(self) -> list[dict[str, float]]:
        """Steps and evaluation returns of the checkpoints (JSON-serialisable)."""
        return [{"step": int(c["step"]), "eval_return": float(c["eval_return"])}
                for c in self.checkpoints]


@dataclass
class LocomotionResult:
    """What :func:`make_locomotion_datasets` made: per data set its metadata (plus ``cached``),
    whether SAC was trained, and the ``(wall, cpu)`` seconds of every phase."""

    datasets: list[dict[str, Any]] = field(default_factory=list)
    trained: bool = False
    timings: dict[str, tuple[float, float]] = field(default_factory=dict)


@contextlib.contextmanager
def _phase(name: str, timings: dict[str, tuple[float, float]]) -> Iterator[None]:
    """Record the wall and CPU seconds of a phase (added up over repeats) and log them."""
    wall, cpu = time.perf_counter(), time.process_time()
    log.info("%s ...", name)
    yield
    w, c = time.perf_counter() - wall, time.process_time() - cpu
    old = timings.get(name, (0.0, 0.0))
    timings[name] = (old[0] + w, old[1] + c)
    log.info("%s: %.1f s wall, %.1f s CPU", name, w, c)


def _make_env(env_id: str, max_episode_steps: int | None) -> Any:
    import gymnasium as gym

    kwargs = {} if max_episode_steps is None else {"max_episode_steps": int(max_episode_steps)}
    return gym.make(env_id, **kwargs)


def _check_inputs(env_id: str, levels: Sequence[str], sizes: Sequence[int], train_steps: int,
                  n_checkpoints: int) -> None:
    """One-line ValueErrors for an unknown env id or level, a bad size or a capped size."""
    import gymnasium as gym

    if env_id not in gym.envs.registry:
        raise ValueError(f"unknown environment id {env_id!r} (e.g. Hopper-v5, Walker2d-v5, "
                         "HalfCheetah-v5)")
    if not levels or any(lv not in LEVELS for lv in levels):
        bad = [lv for lv in levels if lv not in LEVELS] or ["(none)"]
        raise ValueError(f"unknown level {bad[0]!r}; choose from {', '.join(LEVELS)}")
    if not sizes or any(isinstance(s, bool) or not isinstance(s, (int, np.integer)) or s <= 0
                        for s in sizes):
        raise ValueError(f"sizes must be positive ints; got {list(sizes)!r}")
    if any(lv in _TRAINED for lv in levels):
        if isinstance(train_steps, bool) or not isinstance(train_steps, (int, np.integer)) \
                or train_steps <= 0:
            raise ValueError(f"train_steps must be a positive int; got {train_steps!r}")
        if n_checkpoints < 2:
            raise ValueError(f"n_checkpoints must be at least 2 (medium is chosen among the "
                             f"checkpoints before the final one); got {n_checkpoints}")
    if "medium-replay" in levels and max(sizes) > train_steps:
        raise ValueError(f"size {max(sizes)} is larger than the medium-replay data can be "
                         f"(at most train_steps={train_steps} transitions)")


def dataset_name(env_id: str, level: str, size: int, train_steps: int, seed: int,
                 max_episode_steps: int | None = None) -> str:
    """File stem of a data set, e.g. ``hopper-v5-medium-n10000-t20000-s0`` (``random`` has no
    ``-t``; a non-default time limit adds ``-h<steps>``)."""
    steps = "" if level == "random" else f"-t{train_steps}"
    horizon = "" if max_episode_steps is None else f"-h{max_episode_steps}"
    return f"{env_id.lower()}-{level}-n{size}{steps}-s{seed}{horizon}"


def _policy_act(model: Any, actor: dict[str, Any] | None) -> Callable[[np.ndarray], np.ndarray]:
    """The stochastic SAC policy with the weights ``actor`` (loaded into ``model`` now)."""
    if actor is not None:
        model.policy.actor.load_state_dict(actor)
    return lambda obs: model.predict(obs, deterministic=False)[0]


def _random_act(env: Any, seed: int) -> Callable[[np.ndarray], np.ndarray]:
    rng = np.random.default_rng([seed, 7])
    low, high = env.action_space.low, env.action_space.high
    return lambda obs: rng.uniform(low, high)


def collect_episodes_until(env: Any, act: Callable[[np.ndarray], np.ndarray], n: int, seed: int,
                           max_episodes: int | None = None) -> TransitionDataset:
    """Whole episodes of ``act`` in ``env`` until at least ``n`` transitions (or ``max_episodes``).

    The first reset is seeded with ``seed``; every episode runs to its end (MuJoCo termination
    or time limit). ``terminals`` where the env said ``terminated``, ``truncations`` where it
    said ``truncated`` only; ``episode_ids`` 0, 1, ...
    """
    rows: dict[str, list[Any]] = {k: [] for k in ("s", "a", "r", "s2", "term", "trunc", "id")}
    obs, _ = env.reset(seed=int(seed))
    episode = 0
    while True:
        action = np.asarray(act(obs), dtype=np.float64).reshape(-1)
        next_obs, reward, terminated, truncated, _ = env.step(action)
        for key, value in zip(rows, (obs, action, reward, next_obs, terminated,
                                     truncated and not terminated, episode)):
            rows[key].append(value)
        obs = next_obs
        if terminated or truncated:
            episode += 1
            if len(rows["s"]) >= n or (max_episodes is not None and episode >= max_episodes):
                break
            obs, _ = env.reset()
    return TransitionDataset(np.array(rows["s"]), np.array(rows["a"]), np.array(rows["r"]),
                             np.array(rows["s2"]), np.array(rows["term"]), np.array(rows["trunc"]),
                             np.array(rows["id"]))


def train_behaviour(env_id: str, train_steps: int, seed: int, *, n_checkpoints: int = 10,
                    eval_episodes: int = 5, max_episode_steps: int | None = None) -> TrainingRun:
    """Train SAC (settings in the module docstring) and pick the ``medium`` checkpoint.

    Parameters
    ----------
    env_id : str
        A gymnasium id, e.g. ``"Hopper-v5"``.
    train_steps : int
        Environment steps of training (also the replay buffer's size).
    seed : int
        Seeds SAC; the evaluations use reset seeds ``seed + 10000 + k``.
    n_checkpoints : int, default=10
        Evenly spaced checkpoints; the last is the final policy.
    eval_episodes : int, default=5
        Episodes of the stochastic policy per checkpoint evaluation.
    max_episode_steps : int, optional
        Time limit (default: the env's registered one).
    """
    from stable_baselines3.common.callbacks import BaseCallback

    eval_env = _make_env(env_id, max_episode_steps)
    steps = sorted({max(1, round(train_steps * (k + 1) / n_checkpoints))
                    for k in range(n_checkpoints)})
    checkpoints: list[dict[str, Any]] = []

    class _Checkpoints(BaseCallback):
        def _on_step(self) -> bool:
            if self.num_timesteps in steps:
                actor = copy.deepcopy(self.model.policy.actor.state_dict())
                ret = float(collect_episodes_until(
                    eval_env, _policy_act(self.model, None), 10**9, seed + 10_000 + len(checkpoints),
                    max_episodes=eval_episodes).episode_returns().mean())
                checkpoints.append({"step": self.num_timesteps, "eval_return": ret, "actor": actor})
                log.info("checkpoint at step %d: return %.1f", self.num_timesteps, ret)
            return True

    model = _new_sac(env_id, train_steps, seed, max_episode_steps)
    model.learn(int(train_steps), callback=_Checkpoints())
    eval_env.close()
    target = checkpoints[-1]["eval_return"] / 3.0
    medium = int(np.argmin([abs(c["eval_return"] - target) for c in checkpoints[:-1]]))
    return TrainingRun(model, checkpoints, medium, replay_dataset(model, checkpoints[medium]["step"]))


def _new_sac(env_id: str, train_steps: int, seed: int, max_episode_steps: int | None) -> Any:
    """SAC with the module's settings (weights are replaced when a cached run is loaded)."""
    from stable_baselines3 import SAC

    return SAC("MlpPolicy", _make_env(env_id, max_episode_steps), device="cpu", seed=seed,
               buffer_size=int(train_steps), verbose=0)


def _trained_run(folder: Path, env_id: str, train_steps: int, seed: int,
                 max_episode_steps: int | None, **options: int) -> tuple[TrainingRun, bool]:
    """The training run from the cache ``<folder>/sac-<...>.pt`` (+ ``.npz``, the medium replay,
    no pickle), or a new one (then cached); the flag says whether SAC was trained."""
    import torch

    horizon = "" if max_episode_steps is None else f"-h{max_episode_steps}"
    stem = folder / f"sac-{env_id.lower()}-t{train_steps}-s{seed}{horizon}"
    pt, npz = stem.with_suffix(".pt"), stem.with_suffix(".npz")
    if pt.is_file() and npz.is_file():
        state = torch.load(pt, weights_only=True)
        model = _new_sac(env_id, train_steps, seed, max_episode_steps)
        log.info("training run loaded from the cache %s", pt)
        return TrainingRun(model, state["checkpoints"], state["medium_index"],
                           TransitionDataset.load(npz)), False
    run = train_behaviour(env_id, train_steps, seed, max_episode_steps=max_episode_steps, **options)
    run.replay.save(npz)
    torch.save({"checkpoints": run.checkpoints, "medium_index": run.medium_index}, pt)
    return run, True


def replay_dataset(model: Any, steps: int) -> TransitionDataset:
    """The first ``steps`` transitions of ``model``'s replay buffer (actions in the env's units).

    ``terminals`` are SB3's ``dones`` that were not time-outs, ``truncations`` its time-outs and
    the last transition when its episode is unfinished.
    """
    rb = model.replay_buffer
    if steps > rb.size():
        raise ValueError(f"the replay holds {rb.size()} transitions, fewer than {steps}")
    space = model.action_space
    scaled = rb.actions[:steps, 0].astype(np.float64)
    actions = space.low + 0.5 * (scaled + 1.0) * (space.high - space.low)
    dones = rb.dones[:steps, 0].astype(bool)
    timeouts = rb.timeouts[:steps, 0].astype(bool) & dones
    truncations = timeouts.copy()
    truncations[-1] |= not dones[-1]
    ids = np.concatenate([[0], np.cumsum(dones[:-1])])
    return TransitionDataset(rb.observations[:steps, 0], actions, rb.rewards[:steps, 0],
                             rb.next_observations[:steps, 0], dones & ~timeouts, truncations, ids)


def subsample_episodes(data: TransitionDataset, size: int, seed: int) -> TransitionDataset:
    """Whole episodes in a seeded random order until at least ``size`` transitions, kept in
    their original order.

    Raises
    ------
    ValueError
        If ``size`` is larger than the data.
    """
    if size > data.n:
        raise ValueError(f"size {size} is larger than the collected data ({data.n} transitions)")
    episodes = data.episodes()
    order = np.random.default_rng([seed, size]).permutation(len(episodes))
    lengths = np.array([episodes[j].size for j in order])
    count = int(np.searchsorted(np.cumsum(lengths), size) + 1)
    chosen = np.sort(order[:count])
    return data.subset(np.concatenate([episodes[j] for j in chosen]))


def _check_replay(run: TrainingRun, wanted: Sequence[tuple[int, str]]) -> None:
    """A one-line error if a medium-replay size exceeds the replay up to the medium checkpoint."""
    step = run.checkpoints[run.medium_index]["step"]
    if wanted and max(s for s, _ in wanted) > run.replay.n:
        raise ValueError(f"size {max(s for s, _ in wanted)} is larger than the medium-replay data "
                         f"({run.replay.n} transitions: the replay up to the medium checkpoint at "
                         f"step {step}; the training run is cached, choose a smaller size)")


def _write(data: TransitionDataset, meta: dict[str, Any], out: Path, env_id: str,
           minari_root: str | os.PathLike[str] | None) -> None:
    """The HDF5 file, the Minari data set and the JSON sidecar of one data set."""
    from ..data.hdf5 import save_hdf5
    from ..data.minari import save_minari

    name = meta["name"]
    save_hdf5(data, out / f"{name}.hdf5")
    save_minari(data, meta["minari_id"], env_id=env_id, overwrite=True, datasets_path=minari_root,
                description=json.dumps(meta, sort_keys=True))
    (out / f"{name}.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")


def _metadata(data: TransitionDataset, name: str, level: str, size: int,
              settings: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    returns = data.episode_returns()
    return {"name": name, "minari_id": f"nopg/{name}-v0", "level": level, "size": int(size),
            "n_transitions": data.n, "n_episodes": int(returns.size),
            "behaviour_return": float(returns.mean()),
            "behaviour_return_std": float(returns.std()), **settings, **extra}


def _level_data(level: str, run: TrainingRun | None, env_id: str, n: int, seed: int,
                max_episode_steps: int | None) -> tuple[TransitionDataset, dict[str, Any]]:
    """The full collection of one level and its level-specific metadata."""
    if level == "medium-replay":
        assert run is not None
        step = run.checkpoints[run.medium_index]["step"]
        return run.replay, {"policy": f"SAC replay up to step {step}", "mixed_policies": True,
                            "checkpoints": run.table()}
    env = _make_env(env_id, max_episode_steps)
    try:
        if level == "random":
            act, extra = _random_act(env, seed), {"policy": "uniform random actions"}
        else:
            assert run is not None
            k = run.medium_index if level == "medium" else len(run.checkpoints) - 1
            ckpt = run.checkpoints[k]
            act = _policy_act(run.model, ckpt["actor"])
            extra = {"policy": f"SAC checkpoint at step {ckpt['step']} (stochastic)",
                     "checkpoint_eval_return": ckpt["eval_return"],
                     "expert_eval_return": run.checkpoints[-1]["eval_return"], "checkpoints": run.table()}
        import torch

        with torch.random.fork_rng():            # the policy's sampling: same with a cached run
            torch.manual_seed(seed * 1000 + _SEED_OFFSET[level])
            data = collect_episodes_until(env, act, n, seed * 1000 + _SEED_OFFSET[level])
    finally:
        env.close()
    extra["collected"] = {"n_transitions": data.n, "n_episodes": data.n_episodes,
                          "mean_return": float(data.episode_returns().mean())}
    return data, {"mixed_policies": False, **extra}


def make_locomotion_datasets(env_id: str = "Hopper-v5",
                             levels: Sequence[str] = ("random", "medium", "medium-replay"),
                             sizes: Sequence[int] = (10_000,), train_steps: int = 100_000,
                             seed: int = 0, out: str | os.PathLike[str] = DEFAULT_OUT, *,
                             overwrite: bool = False, max_episode_steps: int | None = None,
                             n_checkpoints: int = 10, eval_episodes: int = 5,
                             minari_root: str | os.PathLike[str] | None = None) -> LocomotionResult:
    """Make (or find in the cache) the data sets ``levels x sizes`` of ``env_id``.

    Parameters are those of :func:`train_behaviour` and the command's flags; ``out`` is the
    folder of the HDF5 and JSON files (created), ``minari_root`` the Minari root (default
    ``$MINARI_DATASETS_PATH`` or ``~/.minari/datasets``).

    Raises
    ------
    ValueError
        On an unknown env id or level, a size <= 0 or a size larger than the data can be.
    """
    levels = list(dict.fromkeys(levels))
    _check_inputs(env_id, levels, list(sizes), train_steps, n_checkpoints)
    folder = Path(out).expanduser()
    folder.mkdir(parents=True, exist_ok=True)
    result = LocomotionResult()
    todo = {}
    for level in levels:
        for size in sizes:
            name = dataset_name(env_id, level, int(size), train_steps, seed, max_episode_steps)
            if not overwrite and (folder / f"{name}.hdf5").is_file() and \
                    (folder / f"{name}.json").is_file() and \
                    minari_dataset_exists(f"nopg/{name}-v0", minari_root):
                meta = json.loads((folder / f"{name}.json").read_text())
                result.datasets.append({**meta, "cached": True})
                log.info("cached: %s", name)
            else:
                todo.setdefault(level, []).append((int(size), name))
    run = None
    if any(level in _TRAINED for level in todo):
        with _phase("training", result.timings):
            run, result.trained = _trained_run(folder, env_id, train_steps, seed, max_episode_steps,
                                               n_checkpoints=n_checkpoints,
                                               eval_episodes=eval_episodes)
        if not result.trained:
            result.timings["training run loaded"] = result.timings.pop("training")
        _check_replay(run, todo.get("medium-replay", []))
    settings = {"env_id": env_id, "seed": seed, "train_steps": train_steps,
                "max_episode_steps": max_episode_steps, "sac": "SB3 defaults, device=cpu, "
                "buffer_size=train_steps"}
    for level, wanted in todo.items():
        with _phase(f"collection {level}", result.timings):
            full, extra = _level_data(level, run, env_id, max(s for s, _ in wanted), seed,
                                      max_episode_steps)
        for size, name in wanted:
            data = subsample_episodes(full, size, seed)
            meta = _metadata(data, name, level, size, settings, extra)
            with _phase("writing", result.timings):
                _write(data, meta, folder, env_id, minari_root)
            result.datasets.append({**meta, "cached": False})
    return result


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m nopg.datasets.locomotion",
                                description="Make D4RL-style locomotion data sets (HDF5 + Minari).")
    p.add_argument("--env", default="Hopper-v5", help="gymnasium id (default Hopper-v5)")
    p.add_argument("--levels", nargs="+", default=["random", "medium", "medium-replay"],
                   help=f"levels among {', '.join(LEVELS)}")
    for flag, default, text in (("--sizes", [10_000], "transitions per data set"),
                                ("--train-steps", 100_000, "SAC environment steps"),
                                ("--seed", 0, "seed"), ("--max-episode-steps", None, "time limit"),
                                ("--checkpoints", 10, "evaluated SAC checkpoints"),
                                ("--eval-episodes", 5, "episodes per evaluation"),
                                ("--threads", 1, "torch threads")):
        p.add_argument(flag, type=int, default=default, help=text,
                       nargs="+" if flag == "--sizes" else None)
    p.add_argument("--out", default=str(DEFAULT_OUT), help="folder of the HDF5 and JSON files")
    p.add_argument("--minari-root", help="Minari root (default $MINARI_DATASETS_PATH or ~/.minari/datasets)")
    p.add_argument("--overwrite", action="store_true", help="remake cached data sets")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """The command (see the module docstring); 0 on success, 2 with a one-line error."""
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    import torch

    torch.set_num_threads(max(1, args.threads))
    try:
        result = make_locomotion_datasets(
            args.env, args.levels, args.sizes, args.train_steps, args.seed, args.out,
            overwrite=args.overwrite, max_episode_steps=args.max_episode_steps,
            n_checkpoints=args.checkpoints, eval_episodes=args.eval_episodes,
            minari_root=args.minari_root)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    for meta in result.datasets:
        print(f"{meta['name']}: {meta['n_transitions']} transitions, {meta['n_episodes']} episodes,"
              f" behaviour return {meta['behaviour_return']:.1f}{' (cached)' if meta['cached'] else ''}")
    for phase, (wall, cpu) in result.timings.items():
        print(f"time {phase}: {wall:.1f} s wall, {cpu:.1f} s CPU")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
