"""Data of the pre-registered unseen tasks: the first registration (``docs/preregistration.md``,
:data:`TASKS`, written after it) and the second (``docs/preregistration2.md``, :data:`TASKS_2`).

Imports nothing of the method: numpy and gymnasium, ``nopg.TransitionDataset`` to write the
``.npz`` files and task 2's controller ``nopg.experiments.user_data_pendulum.swingup_action``,
as the protocol allows.

Protocol, the same for every task:

* episodes from ``env.reset(seed=k)`` for ``k = 0, 1, ...`` until the size is reached; the last
  episode is cut there and its last transition flagged as a truncation;
* ``terminals`` where the environment said ``terminated``; ``truncations`` where it said
  ``truncated`` (its time limit) and not ``terminated``, and on the cut last transition; the two
  are never both set; ``episode_ids`` is ``k``;
* data seed 0: the behaviour's random numbers all come from one generator
  ``rng = np.random.default_rng(seed)`` (``seed = 0``) made once per data set and drawn in step
  order across episodes. Per step: uniform behaviours draw ``rng.uniform(low, high)`` (one call,
  shape ``(d_a,)``); noisy controllers draw ``rng.normal(0, std, size=d_a)``. Task 2 draws
  nothing per episode (swing-up on even ``k``, uniform on odd ``k``: "interleaved"); task 6 draws
  ``rng.random() < 0.5`` once at the start of every episode (True: the PD controller), then its
  per-step numbers. The environment's own randomness is its reset seed ``k``.

The second registration's behaviours follow the same rules: ``mc-mixed`` draws
``rng.random() < 0.5`` at the start of every episode (True: the push heuristic of task 3);
``pendulum-bangbang`` draws ``rng.random() < 0.7`` at every step (True: ``2 sign(theta_dot)``,
else a uniform torque drawn with one more call).

Run ``python benchmarks/preregistered_data.py --out DIR [--registration 2]`` to write the ``.npz`` files and
``DIR/manifest.json`` (the files' SHA-256, a content hash of the arrays that does not depend on
the zip timestamps, sizes, episode and terminal/truncation counts, the behaviour's returns).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import platform
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

__all__ = ["REGISTRATIONS", "TASKS", "TASKS_2", "TaskSpec", "collect", "content_sha256", "make_dataset",
           "make_env"]

Behaviour = Callable[[np.ndarray, np.random.Generator], np.ndarray]


@dataclass(frozen=True)
class TaskSpec:
    number: int
    name: str
    env_id: str
    env_kwargs: dict[str, Any]
    size: int
    behaviour: str          # a key of BEHAVIOURS
    description: str


TASKS: dict[str, TaskSpec] = {t.name: t for t in [
    TaskSpec(1, "pendulum-strong-gravity", "Pendulum-v1", {"g": 14.0}, 2000, "uniform",
             "uniform random torques in [-2, 2]"),
    TaskSpec(2, "pendulum-mixed", "Pendulum-v1", {}, 2000, "pendulum-mixed",
             "even episodes k: swingup_action(theta, theta_dot) + N(0, 0.5^2) clipped to [-2, 2]; "
             "odd k: uniform random torques in [-2, 2]"),
    TaskSpec(3, "mountaincar-push-heuristic", "MountainCarContinuous-v0", {}, 3000, "push",
             "a = clip(sign(velocity) + N(0, 0.5^2), -1, 1), np.sign (sign(0) = 0)"),
    TaskSpec(4, "invertedpendulum-small", "InvertedPendulum-v5", {}, 500, "uniform",
             "uniform random actions in [-3, 3]"),
    TaskSpec(5, "reacher-random", "Reacher-v5", {}, 5000, "uniform",
             "uniform random actions in [-1, 1]^2"),
    TaskSpec(6, "invertedpendulum-mixed", "InvertedPendulum-v5", {}, 5000, "ip-mixed",
             "per episode rng.random() < 0.5: a = clip(-(10 th + 2 th_dot + 1 x + 1 x_dot) + "
             "N(0, 0.3^2), -3, 3) with obs [x, th, x_dot, th_dot]; else uniform in [-3, 3]"),
    TaskSpec(7, "inverteddoublependulum-random", "InvertedDoublePendulum-v5", {}, 5000, "uniform",
             "uniform random actions in [-1, 1]"),
]}


TASKS_2: dict[str, TaskSpec] = {t.name: t for t in [
    TaskSpec(1, "pendulum-random-small", "Pendulum-v1", {}, 800, "uniform",
             "uniform random torques in [-2, 2] (4 episodes)"),
    TaskSpec(2, "pendulum-swingup-noisy", "Pendulum-v1", {}, 2000, "pendulum-swingup-noisy",
             "swingup_action(theta, theta_dot) + N(0, 1.0^2) clipped to [-2, 2] in every episode"),
    TaskSpec(3, "invertedpendulum-pd-noisy", "InvertedPendulum-v5", {}, 3000, "ip-pd-noisy",
             "a = clip(1 x + 10 th + 1 x_dot + 2 th_dot + N(0, 1.0^2), -3, 3) with obs "
             "[x, th, x_dot, th_dot]"),
    TaskSpec(4, "mountaincar-mixed", "MountainCarContinuous-v0", {}, 4000, "mc-mixed",
             "per episode rng.random() < 0.5: task 3's push heuristic "
             "clip(sign(velocity) + N(0, 0.5^2), -1, 1); else uniform in [-1, 1]"),
    TaskSpec(5, "mountaincar-random", "MountainCarContinuous-v0", {}, 5000, "uniform",
             "uniform random actions in [-1, 1]"),
    TaskSpec(6, "swimmer-random", "Swimmer-v5", {}, 5000, "uniform",
             "uniform random actions in [-1, 1]^2 (8-D observations, 1000-step episodes)"),
    TaskSpec(7, "pendulum-bangbang", "Pendulum-v1", {}, 2000, "pendulum-bangbang",
             "per step rng.random() < 0.7: 2 sign(theta_dot); else uniform in [-2, 2]"),
]}
"""The second registration's tasks (``docs/preregistration2.md``)."""

REGISTRATIONS: dict[int, dict[str, TaskSpec]] = {1: TASKS, 2: TASKS_2}


DROPPED: dict[str, str] = {
    "invertedpendulum-mixed": (
        "the PD controller as written, a = clip(-(10 th + 2 th_dot + 1 x + 1 x_dot) + "
        "N(0, 0.3^2), -3, 3), does not balance InvertedPendulum-v5: made with data seed 0, its "
        "420 episodes last 5.4 steps on average (the 429 uniform-random ones 6.4), and without "
        "noise from reset seeds 0-9 it lasts 5-9 steps (the sign of its feedback pushes the cart "
        "away from under the pole). The protocol drops such a task (one of the seven) rather "
        "than change it; the controller is not corrected."),
}
"""Tasks that cannot be made as written, with the reason (the protocol allows dropping one)."""


def make_env(spec: TaskSpec) -> gym.Env:
    """``gym.make(env_id, **env_kwargs)`` (its own time limit)."""
    return gym.make(spec.env_id, **spec.env_kwargs)


def _uniform(space: gym.spaces.Box) -> Behaviour:
    low, high = np.asarray(space.low, float), np.asarray(space.high, float)
    return lambda obs, rng: rng.uniform(low, high)


def _pendulum_swingup(obs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    from nopg.experiments.user_data_pendulum import swingup_action

    theta = float(np.arctan2(obs[1], obs[0]))       # obs = [cos th, sin th, th_dot]
    a = swingup_action(theta, float(obs[2])) + rng.normal(0.0, 0.5, size=1)
    return np.clip(a, -2.0, 2.0)


def _push(obs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    return np.clip(np.sign(obs[1]) + rng.normal(0.0, 0.5, size=1), -1.0, 1.0)


def _ip_pd(obs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    x, th, x_dot, th_dot = (float(v) for v in obs[:4])
    u = -(10.0 * th + 2.0 * th_dot + 1.0 * x + 1.0 * x_dot) + rng.normal(0.0, 0.3, size=1)
    return np.clip(u, -3.0, 3.0)


def _pendulum_swingup_noisy(obs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    from nopg.experiments.user_data_pendulum import swingup_action

    theta = float(np.arctan2(obs[1], obs[0]))
    return np.clip(swingup_action(theta, float(obs[2])) + rng.normal(0.0, 1.0, size=1), -2.0, 2.0)


def _ip_pd_noisy(obs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    x, th, x_dot, th_dot = (float(v) for v in obs[:4])
    u = 1.0 * x + 10.0 * th + 1.0 * x_dot + 2.0 * th_dot + rng.normal(0.0, 1.0, size=1)
    return np.clip(u, -3.0, 3.0)


def _bangbang(obs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    if rng.random() < 0.7:
        return np.array([2.0 * np.sign(obs[2])])
    return rng.uniform(-2.0, 2.0, size=1)


def _episode_behaviour(spec: TaskSpec, env: gym.Env) -> Callable[[int, np.random.Generator],
                                                                  tuple[Behaviour, str]]:
    """``choose(k, rng) -> (behaviour, label)`` at the start of episode ``k``."""
    uniform = _uniform(env.action_space)
    if spec.behaviour == "uniform":
        return lambda k, rng: (uniform, "uniform")
    if spec.behaviour == "pendulum-mixed":
        return lambda k, rng: (_pendulum_swingup, "swingup") if k % 2 == 0 else (uniform, "uniform")
    if spec.behaviour == "push":
        return lambda k, rng: (_push, "push")
    if spec.behaviour == "ip-mixed":
        return lambda k, rng: (_ip_pd, "pd") if rng.random() < 0.5 else (uniform, "uniform")
    if spec.behaviour == "pendulum-swingup-noisy":
        return lambda k, rng: (_pendulum_swingup_noisy, "swingup-noisy")
    if spec.behaviour == "ip-pd-noisy":
        return lambda k, rng: (_ip_pd_noisy, "pd-noisy")
    if spec.behaviour == "mc-mixed":
        return lambda k, rng: (_push, "push") if rng.random() < 0.5 else (uniform, "uniform")
    if spec.behaviour == "pendulum-bangbang":
        return lambda k, rng: (_bangbang, "bangbang")
    raise ValueError(f"unknown behaviour {spec.behaviour!r}")


def collect(spec: TaskSpec, size: int | None = None, seed: int = 0
            ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """The task's transitions (``size`` of them, default the protocol's) as arrays, and
    ``{"labels": the behaviour of every episode, "cut": whether the data cut the last one}``."""
    n = int(spec.size if size is None else size)
    rng = np.random.default_rng(seed)
    env = make_env(spec)
    choose = _episode_behaviour(spec, env)
    d_s = int(np.prod(env.observation_space.shape))
    d_a = int(np.prod(env.action_space.shape))
    out = {"states": np.empty((n, d_s)), "actions": np.empty((n, d_a)), "rewards": np.empty(n),
           "next_states": np.empty((n, d_s)), "terminals": np.zeros(n, bool),
           "truncations": np.zeros(n, bool), "episode_ids": np.empty(n, np.int64)}
    labels: list[str] = []
    i, k, done = 0, 0, True
    try:
        while i < n:
            obs, _ = env.reset(seed=k)
            obs = np.asarray(obs, float).reshape(-1)
            behaviour, label = choose(k, rng)
            labels.append(label)
            done = False
            while not done and i < n:
                action = np.asarray(behaviour(obs, rng), float).reshape(d_a)
                nxt, reward, terminated, truncated, _ = env.step(action.astype(env.action_space.dtype))
                nxt = np.asarray(nxt, float).reshape(-1)
                out["states"][i], out["actions"][i], out["rewards"][i] = obs, action, float(reward)
                out["next_states"][i], out["episode_ids"][i] = nxt, k
                out["terminals"][i] = bool(terminated)
                out["truncations"][i] = bool(truncated) and not bool(terminated)
                done = bool(terminated) or bool(truncated)
                obs, i = nxt, i + 1
            if not done:                      # cut at the size: a truncation
                out["truncations"][i - 1] = True
            k += 1
    finally:
        env.close()
    return out, {"labels": labels, "cut": not done}


def make_dataset(spec: TaskSpec, size: int | None = None, seed: int = 0) -> Any:
    """:func:`collect` as a ``nopg.TransitionDataset``."""
    from nopg import TransitionDataset

    arrays, _ = collect(spec, size, seed)
    return TransitionDataset(**arrays)


def content_sha256(arrays: dict[str, np.ndarray]) -> str:
    """SHA-256 of the arrays (name, dtype, shape, bytes; sorted by name)."""
    digest = hashlib.sha256()
    for key in sorted(arrays):
        arr = np.ascontiguousarray(arrays[key])
        digest.update(f"{key}|{arr.dtype.str}|{arr.shape}".encode())
        digest.update(arr.tobytes())
    return digest.hexdigest()


def episode_stats(arrays: dict[str, np.ndarray], info: dict[str, Any]) -> dict[str, Any]:
    labels, cut = info["labels"], bool(info["cut"])
    ids = arrays["episode_ids"]
    keys = np.unique(ids)
    returns = np.array([arrays["rewards"][ids == k].sum() for k in keys])
    lengths = np.array([(ids == k).sum() for k in keys])
    per_label = {}
    for lab in sorted(set(labels)):
        sel = np.array([lb == lab for lb in labels])
        per_label[lab] = {"episodes": int(sel.sum()), "return_mean": float(returns[sel].mean()),
                          "length_mean": float(lengths[sel].mean())}
    return {"n_episodes": int(len(keys)), "n_terminals": int(arrays["terminals"].sum()),
            "n_truncations": int(arrays["truncations"].sum()),
            "behaviour_return_mean": float(returns.mean()),
            "behaviour_return_mean_complete_episodes":
                float(returns[:-1].mean()) if cut and len(keys) > 1 else float(returns.mean()),
            "last_episode_cut": cut, "episode_length_mean": float(lengths.mean()),
            "episode_length_min": int(lengths.min()), "episode_length_max": int(lengths.max()),
            "per_behaviour": per_label}


def write_all(out: Path, names: list[str] | None = None, seed: int = 0,
              registration: int = 1) -> dict[str, Any]:
    from nopg import TransitionDataset

    tasks = REGISTRATIONS[registration]
    protocol = "docs/preregistration.md" if registration == 1 else \
        f"docs/preregistration{registration}.md"
    out.mkdir(parents=True, exist_ok=True)
    manifest: dict[str, Any] = {
        "protocol": protocol, "registration": registration, "data_seed": seed,
        "seeding": "rng = np.random.default_rng(0) once per data set, drawn in step order; "
                   "env.reset(seed=k) for episode k = 0, 1, ...; see the module docstring",
        "generator": "benchmarks/preregistered_data.py",
        "versions": {"python": platform.python_version(), "numpy": np.__version__,
                     "gymnasium": gym.__version__},
        "tasks": {}, "dropped": {}}
    try:
        import mujoco
        manifest["versions"]["mujoco"] = mujoco.__version__
    except ImportError:
        pass
    for name in names or list(tasks):
        spec = tasks[name]
        if name in DROPPED:
            arrays, info = collect(spec, seed=seed)
            manifest["dropped"][name] = {"number": spec.number, "reason": DROPPED[name],
                                         "content_sha256_of_the_unused_data": content_sha256(arrays),
                                         **episode_stats(arrays, info)}
            print(f"{name}: dropped ({DROPPED[name][:60]}...)", flush=True)
            continue
        arrays, info = collect(spec, seed=seed)
        path = out / f"{spec.number}_{name}.npz"
        TransitionDataset(**arrays).save(path)
        entry = {"number": spec.number, "file": path.name, "env_id": spec.env_id,
                 "env_kwargs": spec.env_kwargs, "behaviour": spec.description,
                 "size": int(len(arrays["rewards"])), "state_dim": int(arrays["states"].shape[1]),
                 "action_dim": int(arrays["actions"].shape[1]),
                 "file_sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
                 "file_bytes": path.stat().st_size,
                 "content_sha256": content_sha256(arrays), **episode_stats(arrays, info)}
        manifest["tasks"][name] = entry
        print(f"{name}: n={entry['size']} episodes={entry['n_episodes']} "
              f"terminals={entry['n_terminals']} truncations={entry['n_truncations']} "
              f"return={entry['behaviour_return_mean']:.2f} {entry['per_behaviour']}", flush=True)
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return manifest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="/tmp/prereg/data")
    parser.add_argument("--tasks", nargs="*", default=None)
    parser.add_argument("--registration", type=int, choices=sorted(REGISTRATIONS), default=1)
    args = parser.parse_args()
    write_all(Path(args.out), args.tasks, registration=args.registration)


if __name__ == "__main__":
    main()
