"""Evaluate a saved NOPG policy: environment returns and the off-policy estimate on other data.

A policy is found in a checkpoint folder (written by :meth:`nopg.NOPG.save`), a seed folder
``seed_<k>/`` holding ``checkpoint/``, or a run folder of ``nopg reproduce``/``nopg fit`` holding
``seed_<k>/checkpoint/`` for every seed. For each checkpoint this module gives

* the undiscounted return of the policy's (mean) action in a gymnasium environment over
  ``episodes`` episodes (reset seeds ``seed, seed + 1, ...``, the same for every checkpoint), with
  a percentile bootstrap interval of the mean return;
* ``J_hat`` of the policy on another data set: the checkpoint's kernel bandwidths and NOPG
  configuration on the new data, with ``J_hat`` the mean value over the data's episode-start
  states, together with the support gap (the share of the policy's discounted visitation where
  the new data are thin; above ``config.support_warning`` the estimate is unreliable).

The ``J_hat`` part imports no gymnasium; the rollouts import it when called.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from ..analysis.statistics import check_bootstrap_options, percentile_ci
from ..bandwidth.selection import Bandwidths
from ..data.dataset import TransitionDataset
from ..train.algorithm import NOPG

__all__ = ["SavedPolicy", "bootstrap_mean_ci", "checkpoint_folders", "evaluate_saved",
           "load_saved", "off_policy_estimate", "rollout_returns"]

_CHECKPOINT_FILES = ("config.json", "meta.json", "policy.pt")
_SEED_DIR = re.compile(r"^seed_(-?\d+)$")
_BATCH_ELEMENTS = 2_000_000


# ----------------------------------------------------------------------------- finding
def _is_checkpoint(path: Path) -> bool:
    return all((path / name).is_file() for name in _CHECKPOINT_FILES)


def _seed_of(folder: Path) -> int | None:
    match = _SEED_DIR.match(folder.name)
    return int(match.group(1)) if match else None


def checkpoint_folders(path: str | os.PathLike[str], seed: int | None = None
                       ) -> list[tuple[int | None, Path]]:
    """The checkpoint folders under ``path`` as ``(seed, folder)`` pairs, ordered by seed.

    Parameters
    ----------
    path : path
        A checkpoint folder, a ``seed_<k>`` folder or a run folder of ``seed_<k>`` folders.
    seed : int, optional
        Keep only this seed's checkpoint.

    Raises
    ------
    ValueError
        If ``path`` does not exist, holds no checkpoint, or has no checkpoint of ``seed``.
    """
    path = Path(path).expanduser()
    if not path.exists():
        raise ValueError(f"{path} does not exist")
    if _is_checkpoint(path):
        found = [(_seed_of(path.parent), path)]
    elif _is_checkpoint(path / "checkpoint"):
        found = [(_seed_of(path), path / "checkpoint")]
    else:
        found = sorted(((_seed_of(d), d / "checkpoint") for d in path.glob("seed_*")
                        if _seed_of(d) is not None and _is_checkpoint(d / "checkpoint")),
                       key=lambda item: item[0])
    if not found:
        raise ValueError(f"{path} is neither a NOPG checkpoint folder (with "
                         f"{', '.join(_CHECKPOINT_FILES)}) nor a run folder with "
                         "seed_<k>/checkpoint/ folders")
    if seed is not None:
        chosen = [item for item in found if item[0] == seed]
        if not chosen:
            seeds = ", ".join(str(s) for s, _ in found if s is not None) or "none"
            raise ValueError(f"{path} has no checkpoint of seed {seed} (seeds: {seeds})")
        found = chosen
    return found


# ----------------------------------------------------------------------------- loading
@dataclass
class SavedPolicy:
    """A loaded checkpoint: the :class:`NOPG` object with its stored bandwidths and seed."""

    algo: NOPG
    bandwidths: Bandwidths | None
    seed: int | None
    path: Path

    @property
    def policy(self) -> nn.Module:
        return self.algo.policy

    @property
    def dims(self) -> tuple[int, int] | None:
        """``(state_dim, action_dim)`` of the policy when the checkpoint tells them."""
        if self.bandwidths is not None:
            return len(self.bandwidths.state), len(self.bandwidths.action)
        kwargs = (getattr(self.policy, "spec", lambda: {})() or {}).get("kwargs", {})
        if "state_dim" in kwargs and "action_dim" in kwargs:
            return int(kwargs["state_dim"]), int(kwargs["action_dim"])
        return None


def load_saved(folder: str | os.PathLike[str], seed: int | None = None) -> SavedPolicy:
    """Load one checkpoint folder with :meth:`NOPG.load` (a custom policy is refused)."""
    folder = Path(folder)
    algo = NOPG.load(folder)
    meta = json.loads((folder / "meta.json").read_text())
    bw = Bandwidths.from_dict(meta["bandwidths"]) if meta.get("bandwidths") else None
    return SavedPolicy(algo, bw, seed, folder)


# ----------------------------------------------------------------------------- statistics
def bootstrap_mean_ci(values: np.ndarray | list[float], confidence: float = 0.95,
                      n_boot: int = 10000, seed: int | None = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of ``values`` (resampled with replacement).

    A single value gives the degenerate interval ``(value, value)``.
    """
    x = np.asarray(values, dtype=np.float64).reshape(-1)
    if x.size == 0:
        raise ValueError("need at least one value for a bootstrap interval")
    check_bootstrap_options(n_boot, confidence)
    rng = np.random.default_rng(seed)
    batch = max(1, min(n_boot, _BATCH_ELEMENTS // x.size))
    means = np.concatenate([x[rng.integers(0, x.size, size=(min(batch, n_boot - start), x.size))]
                            .mean(axis=1) for start in range(0, n_boot, batch)])
    return percentile_ci(means, float(confidence))


def _summary(returns: list[float], confidence: float) -> dict[str, Any]:
    lo, hi = bootstrap_mean_ci(returns, confidence)
    return {"mean": float(np.mean(returns)), "std": float(np.std(returns)), "ci": [lo, hi],
            "confidence": confidence, "n_episodes": len(returns)}


# ----------------------------------------------------------------------------- rollouts
def rollout_returns(policy: nn.Module, env_id: str, episodes: int = 10, seed: int = 0,
                    max_steps: int | None = None, *, dims: tuple[int, int] | None = None,
                    confidence: float = 0.95) -> dict[str, Any]:
    """Undiscounted returns of ``policy`` in ``gymnasium.make(env_id)``.

    Observations are flattened to float states; actions (the mean of a Gaussian policy) are
    clipped to the action space. Episode ``k`` is reset with seed ``seed + k``.

    Returns
    -------
    dict
        ``env_id``, ``returns``, ``lengths``, ``mean``, ``std``, ``ci`` (bootstrap interval of
        the mean at ``confidence``), ``n_episodes``, ``seed``, ``max_steps``.
    """
    from ..envs.evaluation import evaluate_policy, make_env

    if isinstance(episodes, bool) or not isinstance(episodes, int) or episodes < 1:
        raise ValueError(f"the number of episodes must be a positive int. Got {episodes!r}.")
    if max_steps is not None and (isinstance(max_steps, bool) or not isinstance(max_steps, int)
                                  or max_steps < 1):
        raise ValueError(f"the episode length cap must be a positive int. Got {max_steps!r}.")
    env = make_env(env_id, dims=dims)
    result = evaluate_policy(lambda: env, policy, n_episodes=episodes, seed=seed,
                             max_steps=max_steps)
    return {"env_id": env_id, "returns": result["returns"], "lengths": result["lengths"],
            **_summary(result["returns"], confidence), "seed": seed, "max_steps": max_steps}


# ----------------------------------------------------------------------------- J_hat
def off_policy_estimate(saved: SavedPolicy, data: TransitionDataset,
                        initial_states: np.ndarray | None = None) -> dict[str, Any]:
    """``J_hat`` and the support gap of the saved policy on ``data``.

    The checkpoint's bandwidths and configuration define the kernel model of ``data``; a fresh
    :class:`NOPG` (no warm start from the training data) solves it at the saved policy.

    Parameters
    ----------
    saved : SavedPolicy
    data : TransitionDataset
        Any data set with the policy's state and action dimensions.
    initial_states : array of shape (m, d_s), optional
        Default: the states that start the data's episodes.

    Returns
    -------
    dict
        ``J_hat``, ``support_gap``, ``support_warning`` (gap above the configured threshold),
        ``n_transitions``, ``n_initial_states``, ``gamma``.
    """
    if saved.bandwidths is None:
        raise ValueError(f"{saved.path} stores no bandwidths (it was saved before any fit)")
    dims = (len(saved.bandwidths.state), len(saved.bandwidths.action))
    if (data.state_dim, data.action_dim) != dims:
        raise ValueError(f"the data set has {data.state_dim}-dimensional states and "
                         f"{data.action_dim}-dimensional actions; the policy was trained on "
                         f"{dims[0]} and {dims[1]}")
    s0 = data.episode_start_states() if initial_states is None else initial_states
    est = NOPG(saved.policy, saved.algo.config, stochastic=saved.algo.stochastic)
    est.update_ = saved.algo.update_             # the same NOPG-S sigma scale as at the save
    est.setup(data, saved.bandwidths, s0)
    with torch.no_grad():
        solution = est.solution()
    limit = est.config.support_warning
    return {"J_hat": float(solution.J), "support_gap": float(solution.support_gap),
            "initial_gap": float(solution.initial_gap),
            "support_warning": bool(solution.support_gap > limit or solution.initial_gap > limit),
            "support_threshold": est.config.support_warning, "n_transitions": data.n,
            "n_initial_states": int(len(est.initial_states_)), "gamma": est.config.gamma}


# ----------------------------------------------------------------------------- both
def evaluate_saved(path: str | os.PathLike[str], *, env_id: str | None = None,
                   episodes: int = 10, seed: int = 0, max_steps: int | None = None,
                   data: TransitionDataset | None = None, confidence: float = 0.95
                   ) -> dict[str, Any]:
    """Evaluate every checkpoint under ``path`` in ``env_id`` and/or on ``data``.

    Returns
    -------
    dict
        ``path``, ``checkpoints`` (per checkpoint: ``seed``, ``checkpoint``, ``update``,
        ``stochastic`` and ``env``/``data`` results as in :func:`rollout_returns` and
        :func:`off_policy_estimate`) and, over all checkpoints, ``env`` (mean and bootstrap
        interval of all episodes' returns pooled) and ``data`` (mean ``J_hat``).
    """
    if env_id is None and data is None:
        raise ValueError("nothing to evaluate: give an environment id and/or a data set")
    check_bootstrap_options(10000, confidence)
    rows = []
    for seed_k, folder in checkpoint_folders(path):
        saved = load_saved(folder, seed_k)
        row: dict[str, Any] = {"seed": seed_k, "checkpoint": str(folder),
                               "update": saved.algo.update_, "stochastic": saved.algo.stochastic}
        if env_id is not None:
            row["env"] = rollout_returns(saved.policy, env_id, episodes, seed, max_steps,
                                         dims=saved.dims, confidence=confidence)
        if data is not None:
            row["data"] = off_policy_estimate(saved, data)
        rows.append(row)
    out: dict[str, Any] = {"path": str(Path(path)), "checkpoints": rows}
    if env_id is not None:
        pooled = [r for row in rows for r in row["env"]["returns"]]
        out["env"] = {"env_id": env_id, **_summary(pooled, confidence)}
    if data is not None:
        out["data"] = {"J_hat_mean": float(np.mean([row["data"]["J_hat"] for row in rows])),
                       "support_gap_max": max(row["data"]["support_gap"] for row in rows)}
    return out


def format_report(result: dict[str, Any]) -> str:
    """A few lines of text for :func:`evaluate_saved`'s result."""
    lines = []
    for row in result["checkpoints"]:
        name = f"seed {row['seed']}" if row["seed"] is not None else row["checkpoint"]
        parts = [f"{name} (update {row['update']}):"]
        if "env" in row:
            env = row["env"]
            parts.append(f"return {env['mean']:.4g} [{env['ci'][0]:.4g}, {env['ci'][1]:.4g}] "
                         f"over {env['n_episodes']} episodes")
        if "data" in row:
            d = row["data"]
            flag = " (thin data: J_hat unreliable)" if d["support_warning"] else ""
            parts.append(f"J_hat {d['J_hat']:.4g}, support gap {d['support_gap']:.3f}, initial "
                         f"gap {d['initial_gap']:.3f}{flag}")
        lines.append(" ".join(parts[:1]) + " " + "; ".join(parts[1:]))
    if "env" in result and len(result["checkpoints"]) > 1:
        env = result["env"]
        lines.append(f"all seeds: return {env['mean']:.4g} [{env['ci'][0]:.4g}, "
                     f"{env['ci'][1]:.4g}] over {env['n_episodes']} episodes")
    if "env" in result:
        lines.append(f"({100 * result['env']['confidence']:.0f}% bootstrap intervals of the mean "
                     f"return in {result['env']['env_id']})")
    return "\n".join(lines)
