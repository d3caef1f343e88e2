"""Offline baselines from d3rlpy, run in an isolated virtual environment through files.

d3rlpy 2.8.1 pins ``gymnasium==1.0.0`` (and pulls the old ``gym``), which conflicts with the
project's own extras, so it lives in a virtual environment of its own (by default
``$XDG_CACHE_HOME/nopg/d3rlpy-2.8.1``, else ``~/.cache/nopg/d3rlpy-2.8.1``; the environment
variable ``NOPG_D3RLPY_PYTHON`` may name another interpreter). Create it once with::

    python -m nopg.baselines.d3rlpy_bridge setup

which installs this environment's torch version (so the TorchScript policies load here) and then
``d3rlpy==2.8.1``. :func:`train_d3rlpy` writes the transitions and their d3rlpy episode layout to
``data.npz`` and the job to ``job.json``, runs :mod:`nopg.baselines.d3rlpy_worker` with the
isolated interpreter, checks that the worker received the very same transitions (SHA-256) and
loads the trained policy (d3rlpy's TorchScript export, actions in the environment's units) as a
``torch.nn.Module`` that any task's own evaluation accepts.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from ..data.dataset import TransitionDataset
from .d3rlpy_worker import ALGORITHMS, transitions_sha256

__all__ = ["ALGORITHMS", "D3RLPY_VERSION", "D3rlpyResult", "TorchScriptPolicy", "d3rlpy_layout",
           "dataset_sha256", "isolated_python", "setup_isolated_env", "train_d3rlpy",
           "train_d3rlpy_many"]

D3RLPY_VERSION = "2.8.1"
_WORKER = Path(__file__).with_name("d3rlpy_worker.py")


def default_env_dir() -> Path:
    """Where :func:`setup_isolated_env` puts the environment by default."""
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "nopg" / f"d3rlpy-{D3RLPY_VERSION}"


def isolated_python() -> Path:
    """The isolated environment's interpreter (``NOPG_D3RLPY_PYTHON`` or the default folder).

    Raises
    ------
    ValueError
        If it does not exist, with the command that creates it.
    """
    named = os.environ.get("NOPG_D3RLPY_PYTHON")
    python = Path(named) if named else default_env_dir() / "bin" / "python"
    if not python.is_file():
        raise ValueError(f"the isolated d3rlpy environment is missing ({python} does not exist); "
                         "create it with: python -m nopg.baselines.d3rlpy_bridge setup")
    return python


def setup_isolated_env(env_dir: str | os.PathLike[str] | None = None, quiet: bool = True) -> Path:
    """Create the isolated environment (a venv with this torch version and d3rlpy 2.8.1).

    Returns the interpreter's path; an existing environment with d3rlpy importable is kept.
    """
    env_dir = Path(env_dir) if env_dir is not None else default_env_dir()
    python = env_dir / "bin" / "python"
    if python.is_file() and subprocess.run([str(python), "-c", "import d3rlpy"],
                                           capture_output=True).returncode == 0:
        return python
    env_dir.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "venv", str(env_dir)], check=True)
    flags = ["--quiet"] if quiet else []
    torch_version = torch.__version__.split("+")[0]
    for spec in (f"torch=={torch_version}", f"d3rlpy=={D3RLPY_VERSION}"):
        subprocess.run([str(python), "-m", "pip", "install", *flags, spec], check=True)
    return python


def dataset_sha256(data: TransitionDataset) -> str:
    """SHA-256 of the transitions ``(s, a, r, s', terminal)`` of ``data`` (float64, in order)."""
    return transitions_sha256({"states": data.states, "actions": data.actions,
                               "rewards": data.rewards, "next_states": data.next_states,
                               "terminals": data.terminals})


def _segments(data: TransitionDataset) -> list[np.ndarray]:
    """Runs of consecutive transitions (``s'_i == s_{i+1}``), cut after every terminal."""
    out = []
    for idx in data.episodes():
        cut = (data.terminals[idx[:-1]]
               | np.any(data.next_states[idx[:-1]] != data.states[idx[1:]], axis=1))
        out.extend(np.split(idx, np.flatnonzero(cut) + 1))
    return out


def d3rlpy_layout(data: TransitionDataset) -> dict[str, np.ndarray]:
    """The transitions as d3rlpy episodes (observations, actions, rewards, terminals, timeouts).

    d3rlpy takes the next state of a step from the following observation. Each run of
    consecutive transitions becomes one episode; one that ends without a terminal gets its final
    next state appended as an extra observation (zero action and reward) flagged as a timeout,
    which d3rlpy does not train on as a transition. ``order`` gives the data index of every
    transition in d3rlpy's order, so the episodes hold exactly the ``n`` transitions of ``data``.
    """
    obs, act, rew, term, tout, order = [], [], [], [], [], []
    for idx in _segments(data):
        obs.append(data.states[idx])
        act.append(data.actions[idx])
        rew.append(data.rewards[idx])
        order.append(idx)
        ended = np.zeros(len(idx))
        if data.terminals[idx[-1]]:
            ended[-1] = 1.0
            term.append(ended)
            tout.append(np.zeros(len(idx)))
        else:
            obs.append(data.next_states[idx[-1]][None])
            act.append(np.zeros((1, data.action_dim)))
            rew.append(np.zeros(1))
            term.append(np.zeros(len(idx) + 1))
            tout.append(np.append(ended, 1.0))
    return {"observations": np.concatenate(obs), "episode_actions": np.concatenate(act),
            "episode_rewards": np.concatenate(rew), "episode_terminals": np.concatenate(term),
            "episode_timeouts": np.concatenate(tout), "order": np.concatenate(order)}


class TorchScriptPolicy(nn.Module):
    """A d3rlpy TorchScript policy as a module: states (b, d_s) -> actions (b, d_a), float32."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        super().__init__()
        with warnings.catch_warnings():   # torch 2.13 deprecates TorchScript; d3rlpy exports it
            warnings.simplefilter("ignore", DeprecationWarning)
            self.scripted = torch.jit.load(str(path), map_location="cpu")
        self.scripted.eval()

    def forward(self, states: torch.Tensor) -> torch.Tensor:
        out = self.scripted(states.to(torch.float32))
        return out[0] if isinstance(out, (tuple, list)) else out


@dataclass
class D3rlpyResult:
    """A trained d3rlpy policy and what the worker reported."""

    policy: TorchScriptPolicy
    sha256: str              # of the transitions the worker received (equal to the data's)
    train_seconds: float     # the fit inside the worker
    wall_seconds: float      # including the subprocess's start and d3rlpy's import
    metrics: dict[str, float]


def train_d3rlpy(algorithm: str, data: TransitionDataset, n_steps: int, seed: int,
                 action_low: np.ndarray, action_high: np.ndarray, work_dir: str | os.PathLike[str],
                 kwargs: dict[str, Any] | None = None, timeout: float | None = None
                 ) -> D3rlpyResult:
    """Train a d3rlpy algorithm on ``data`` in the isolated environment.

    Parameters
    ----------
    algorithm : {"BC", "TD3+BC", "IQL", "CQL", "BCQ", "BEAR"}
    data : TransitionDataset
    n_steps : int
        Gradient steps.
    seed : int
    action_low, action_high : array of shape (d_a,)
        The action box (d3rlpy's min-max action scaler).
    work_dir : path
        Folder for the files: ``data.npz``, and ``<algorithm>/`` with ``job.json``,
        ``policy.pt`` and ``result.json``; ``worker.log``.
    kwargs : dict, optional
        Extra fields of the algorithm's d3rlpy ``Config`` (JSON values).
    timeout : float, optional
        Seconds before the worker is stopped.

    Raises
    ------
    ValueError
        For an unknown algorithm or bad budget; RuntimeError if the worker fails or received
        other transitions than ``data``.
    """
    return train_d3rlpy_many([algorithm], data, n_steps, seed, action_low, action_high, work_dir,
                             {algorithm: kwargs or {}}, timeout)[algorithm]


def train_d3rlpy_many(algorithms: Sequence[str], data: TransitionDataset, n_steps: int, seed: int,
                      action_low: np.ndarray, action_high: np.ndarray,
                      work_dir: str | os.PathLike[str],
                      kwargs: dict[str, dict[str, Any]] | None = None,
                      timeout: float | None = None, keep_data: bool = False
                      ) -> dict[str, D3rlpyResult]:
    """:func:`train_d3rlpy` for several algorithms on one data set, in one worker process
    (d3rlpy is imported once); ``wall_seconds`` is then the whole call's. Keyed by algorithm.

    ``data.npz`` is removed after a successful run unless ``keep_data`` (the data are the task's
    at a seed, and their SHA-256 is in every result).
    """
    unknown = [a for a in algorithms if a not in ALGORITHMS]
    if unknown or not algorithms:
        raise ValueError(f"unknown d3rlpy algorithm {unknown[0] if unknown else None!r}; "
                         f"known: {', '.join(ALGORITHMS)}")
    if isinstance(n_steps, bool) or not isinstance(n_steps, int) or n_steps < 1:
        raise ValueError(f"n_steps must be a positive int. Got {n_steps!r} instead.")
    python = isolated_python()
    work = Path(work_dir).resolve()
    work.mkdir(parents=True, exist_ok=True)
    np.savez(work / "data.npz", states=data.states, actions=data.actions, rewards=data.rewards,
             next_states=data.next_states, terminals=data.terminals.astype(np.float64),
             **d3rlpy_layout(data))
    jobs = []
    for algorithm in algorithms:
        out = work / algorithm.replace("+", "p")
        out.mkdir(exist_ok=True)
        job = {"algorithm": algorithm, "n_steps": n_steps, "seed": int(seed), "threads": 1,
               "action_low": np.asarray(action_low, float).reshape(-1).tolist(),
               "action_high": np.asarray(action_high, float).reshape(-1).tolist(),
               "kwargs": (kwargs or {}).get(algorithm) or {}, "data": str(work / "data.npz"),
               "out_dir": str(out)}
        (out / "job.json").write_text(json.dumps(job, indent=2))
        jobs.append(out)
    start = time.perf_counter()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    with open(work / "worker.log", "w") as log:
        proc = subprocess.run([str(python), str(_WORKER), *(str(j / "job.json") for j in jobs)],
                              stdout=log, stderr=subprocess.STDOUT, env=env, timeout=timeout)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        tail = (work / "worker.log").read_text()[-2000:]
        raise RuntimeError(f"the d3rlpy worker ({', '.join(algorithms)}) failed with exit code "
                           f"{proc.returncode}:\n{tail}")
    expected = dataset_sha256(data)
    results = {}
    for algorithm, out in zip(algorithms, jobs):
        result = json.loads((out / "result.json").read_text())
        if result["sha256"] != expected or result["n_transitions"] != data.n:
            raise RuntimeError(f"the d3rlpy worker received other transitions (sha256 "
                               f"{result['sha256'][:12]}, n {result['n_transitions']}) than the "
                               f"data (sha256 {expected[:12]}, n {data.n})")
        results[algorithm] = D3rlpyResult(TorchScriptPolicy(out / "policy.pt"), result["sha256"],
                                          float(result["train_seconds"]), wall, result["metrics"])
    if not keep_data:
        (work / "data.npz").unlink()
    return results


def _main(argv: list[str]) -> int:
    if argv[:1] != ["setup"] or len(argv) > 2:
        print("usage: python -m nopg.baselines.d3rlpy_bridge setup [ENV_DIR]", file=sys.stderr)
        return 2
    python = setup_isolated_env(argv[1] if len(argv) == 2 else None, quiet=False)
    print(python)
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
