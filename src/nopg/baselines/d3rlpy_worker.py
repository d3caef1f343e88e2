"""Train one d3rlpy algorithm on a transition file; run *inside* the isolated d3rlpy environment.

This file is executed as a script by :mod:`nopg.baselines.d3rlpy_bridge` with the interpreter of
the isolated environment (d3rlpy 2.8.1 pins ``gymnasium==1.0.0``, which the project's other
extras conflict with). It imports only the standard library, numpy, torch and d3rlpy, never
``nopg``. The file contract:

``job.json`` (one or more, trained in turn)
    ``algorithm`` (one of :data:`ALGORITHMS`), ``n_steps``, ``seed``, ``action_low`` and
    ``action_high`` (lists), ``kwargs`` (extra fields of the d3rlpy ``Config``), ``data`` (the
    ``.npz`` below), ``out_dir``.
``data.npz``
    The transitions as handed to every algorithm (``states``, ``actions``, ``rewards``,
    ``next_states``, ``terminals``; float64) and their d3rlpy episode layout (``observations``,
    ``episode_actions``, ``episode_rewards``, ``episode_terminals``, ``episode_timeouts``,
    ``order``: the transition index of every d3rlpy transition, in d3rlpy's order).

Outputs in ``out_dir``: ``policy.pt`` (d3rlpy's TorchScript policy: observations in, actions in
the environment's units out) and ``result.json`` (the SHA-256 of the transitions received, the
number of transitions d3rlpy's episodes hold and checked against them, training seconds, the
last logged losses, versions).
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from pathlib import Path

import numpy as np

ALGORITHMS = ("BC", "TD3+BC", "IQL", "CQL", "BCQ", "BEAR")
TRANSITION_KEYS = ("states", "actions", "rewards", "next_states", "terminals")


def transitions_sha256(arrays: dict[str, np.ndarray]) -> str:
    """SHA-256 of the transition arrays (float64, C order, in :data:`TRANSITION_KEYS` order)."""
    digest = hashlib.sha256()
    for key in TRANSITION_KEYS:
        arr = np.ascontiguousarray(np.asarray(arrays[key], dtype=np.float64))
        digest.update(key.encode())
        digest.update(str(arr.shape).encode())
        digest.update(arr.tobytes())
    return digest.hexdigest()


def _config(d3rlpy, name: str, kwargs: dict, n_steps: int, low: np.ndarray, high: np.ndarray):
    scalers = {"observation_scaler": d3rlpy.preprocessing.StandardObservationScaler(),
               "action_scaler": d3rlpy.preprocessing.MinMaxActionScaler(minimum=low, maximum=high)}
    algos = d3rlpy.algos
    classes = {"BC": algos.BCConfig, "TD3+BC": algos.TD3PlusBCConfig, "IQL": algos.IQLConfig,
               "CQL": algos.CQLConfig, "BCQ": algos.BCQConfig, "BEAR": algos.BEARConfig}
    kwargs = dict(kwargs)
    if name == "BEAR" and "warmup_steps" not in kwargs:
        # d3rlpy's default of 40 000 behaviour-cloning warm-up steps exceeds short budgets.
        kwargs["warmup_steps"] = max(1, n_steps // 5)
    return classes[name](**scalers, **kwargs)


def _check_layout(dataset, data: dict[str, np.ndarray]) -> int:
    """Rebuild every transition from d3rlpy's episodes and compare with the data (float32)."""
    order = data["order"]
    rows = {k: [] for k in TRANSITION_KEYS}
    for ep in dataset.episodes:
        obs = np.asarray(ep.observations)
        count = ep.transition_count
        for t in range(count):
            last = t == len(obs) - 1
            rows["states"].append(obs[t])
            rows["actions"].append(np.asarray(ep.actions)[t])
            rows["rewards"].append(np.asarray(ep.rewards)[t].reshape(-1)[0])
            rows["terminals"].append(float(bool(ep.terminated) and last))
            rows["next_states"].append(np.zeros_like(obs[t]) if last else obs[t + 1])
    if len(rows["states"]) != len(order):
        raise RuntimeError(f"d3rlpy holds {len(rows['states'])} transitions; "
                           f"{len(order)} were sent")
    for key in TRANSITION_KEYS:
        got = np.asarray(rows[key], dtype=np.float32).reshape(len(order), -1)
        want = np.asarray(data[key], dtype=np.float32)[order].reshape(len(order), -1)
        if key == "next_states":   # after a terminal d3rlpy stores no next state
            keep = np.asarray(data["terminals"])[order] == 0
            got, want = got[keep], want[keep]
        if not np.array_equal(got, want):
            raise RuntimeError(f"d3rlpy's {key} differ from the transitions sent")
    return len(order)


def main(job_paths: list[str]) -> int:
    for path in job_paths:
        train(json.loads(Path(path).read_text()))
    return 0


def train(job: dict) -> None:
    """Train one job and write its ``policy.pt`` and ``result.json``."""
    out_dir = Path(job["out_dir"])
    import d3rlpy
    import torch
    from d3rlpy.logging import NoopAdapterFactory

    torch.set_num_threads(int(job.get("threads", 1)))
    name = job["algorithm"]
    if name not in ALGORITHMS:
        raise SystemExit(f"unknown algorithm {name!r}; known: {', '.join(ALGORITHMS)}")
    with np.load(job["data"]) as f:
        data = {key: f[key] for key in f.files}
    received = transitions_sha256(data)
    dataset = d3rlpy.dataset.MDPDataset(
        observations=data["observations"].astype(np.float32),
        actions=data["episode_actions"].astype(np.float32),
        rewards=data["episode_rewards"].astype(np.float32),
        terminals=data["episode_terminals"].astype(np.float32),
        timeouts=data["episode_timeouts"].astype(np.float32),
        action_space=d3rlpy.ActionSpace.CONTINUOUS)
    checked = _check_layout(dataset, data)
    d3rlpy.seed(int(job["seed"]))
    low = np.asarray(job["action_low"], dtype=np.float32)
    high = np.asarray(job["action_high"], dtype=np.float32)
    n_steps = int(job["n_steps"])
    algo = _config(d3rlpy, name, job.get("kwargs", {}), n_steps, low, high).create(device="cpu:0")
    start = time.perf_counter()
    metrics: dict[str, float] = {}
    steps_per_epoch = min(n_steps, int(job.get("steps_per_epoch", 1000)))
    for epoch, epoch_metrics in algo.fitter(dataset, n_steps=n_steps, n_steps_per_epoch=steps_per_epoch,
                                            logger_adapter=NoopAdapterFactory(), show_progress=False,
                                            save_interval=10**9):
        metrics = {k: float(v) for k, v in epoch_metrics.items()}
        print(json.dumps({"epoch": epoch, **metrics}), file=sys.stderr, flush=True)
    seconds = time.perf_counter() - start
    algo.save_policy(str(out_dir / "policy.pt"))
    result = {"algorithm": name, "n_steps": n_steps, "seed": int(job["seed"]),
              "sha256": received, "n_transitions": checked, "train_seconds": seconds,
              "metrics": metrics, "d3rlpy": d3rlpy.__version__, "torch": torch.__version__}
    (out_dir / "result.json").write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    if len(sys.argv) < 2:
        raise SystemExit("usage: python d3rlpy_worker.py JOB.json [JOB.json ...]")
    sys.exit(main(sys.argv[1:]))
