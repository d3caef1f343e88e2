"""One run of the sample-efficiency sweep: train an algorithm on a task's data and evaluate it.

:func:`run_job` is what :func:`nopg.analysis.parallel.parallel_map` calls (a module-level function,
picklable for processes and Ray). Every algorithm builds its data with ``task.make_dataset`` at
the same size and seed, records the data's SHA-256, and is scored by ``task.evaluate`` with the
seed's evaluation settings. Times exclude the final evaluation.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from .runner import ExperimentConfig
from .sample_efficiency import (
    D3RLPY_ALGORITHMS,
    MODEL_BASED,
    NOPG_ALGORITHMS,
    ONLINE,
    SampleEfficiencyConfig,
)

__all__ = ["experiment_config", "online_env", "run_job"]

logger = logging.getLogger("nopg.experiments")


def experiment_config(cfg: SampleEfficiencyConfig, size: int | None, stochastic: bool = False
                ) -> tuple[Any, ExperimentConfig]:
    """The task and its experiment config at data size ``size`` (with the sweep's settings)."""
    from . import get_task

    task = get_task(cfg.task)
    changes: dict[str, Any] = dict(cfg.settings)
    if size is not None:
        changes.update({f"task.{k}": v for k, v in cfg.spec.task_settings(size).items()})
    if cfg.nopg_updates is not None:
        changes["n_updates"] = cfg.nopg_updates
    changes["stochastic"] = stochastic
    return task, task.default_config().replace(**changes)


def _evaluate(task: Any, exp: ExperimentConfig, seed: int) -> Callable[[torch.nn.Module], float]:
    def evaluate(policy: torch.nn.Module) -> float:
        return float(np.mean(task.evaluate(policy, exp, seed, exp.final_eval_episodes)))
    return evaluate


def _row(cfg: SampleEfficiencyConfig, algorithm: str, size: int, seed: int, **values: Any
         ) -> dict[str, Any]:
    online = algorithm in ONLINE
    return {"task": cfg.task, "algorithm": algorithm, "kind": "online" if online else "offline",
            "size": int(size), "size_unit": "env steps" if online else cfg.spec.unit,
            "seed": int(seed), "J_hat": None, "env_steps": None, "data_sha256": None,
            "error": None, **values}


def _nopg_run(cfg: SampleEfficiencyConfig, algorithm: str, size: int, seed: int) -> dict[str, Any]:
    """The default method (:class:`nopg.AutoNOPG`, as ``nopg reproduce`` runs it with the
    task's knowledge), evaluated once at the end."""
    from ..baselines.d3rlpy_bridge import dataset_sha256
    from .runner import fit_method

    task, exp = experiment_config(cfg, size, stochastic=algorithm == "NOPG-S")
    data = task.make_dataset(exp, seed)
    start = time.perf_counter()
    s0 = task.initial_states(data, exp, seed)
    method = fit_method(task, exp, data, s0, seed, progress=False, evaluate=False)
    seconds = time.perf_counter() - start
    return _row(cfg, algorithm, size, seed, n_transitions=data.n,
                **{"return": _evaluate(task, exp, seed)(method.policy_)},
                J_hat=float(method.J_hat_), wall_time_s=seconds, train_steps=exp.n_updates,
                data_sha256=dataset_sha256(data))


def _d3rlpy_run(cfg: SampleEfficiencyConfig, algorithm: str, size: int, seed: int, work_dir: str
                ) -> dict[str, Any]:
    from ..baselines.d3rlpy_bridge import train_d3rlpy

    task, exp = experiment_config(cfg, size)
    data = task.make_dataset(exp, seed)
    box = np.full(task.action_dim, float(task.action_max))
    result = train_d3rlpy(algorithm, data, cfg.offline_steps, seed, -box, box, work_dir,
                          kwargs=cfg.d3rlpy.get(algorithm))
    logger.info("%s n=%d seed %d: %.1f s (%s)", algorithm, size, seed, result.wall_seconds,
                ", ".join(f"{k} {v:.4g}" for k, v in result.metrics.items() if "loss" in k))
    return _row(cfg, algorithm, size, seed, n_transitions=data.n,
                **{"return": _evaluate(task, exp, seed)(result.policy)},
                wall_time_s=result.wall_seconds, train_steps=cfg.offline_steps,
                data_sha256=result.sha256)


def _model_based_run(cfg: SampleEfficiencyConfig, algorithm: str, size: int, seed: int
                     ) -> dict[str, Any]:
    from ..baselines.d3rlpy_bridge import dataset_sha256
    from ..baselines.model_based import train_model_based

    task, exp = experiment_config(cfg, size)
    data = task.make_dataset(exp, seed)
    box = np.full(task.action_dim, float(task.action_max))
    result = train_model_based(algorithm, data, cfg.model_based_steps, seed, -box, box)
    logger.info("%s n=%d seed %d: %.1f s (ensemble %.1f s)", algorithm, size, seed,
                result.wall_seconds, result.model_seconds)
    return _row(cfg, algorithm, size, seed, n_transitions=data.n,
                **{"return": _evaluate(task, exp, seed)(result.policy)},
                wall_time_s=result.wall_seconds, train_steps=cfg.model_based_steps,
                data_sha256=dataset_sha256(data))


def _behaviour_log_prob(cfg: SampleEfficiencyConfig, exp: ExperimentConfig) -> Any:
    from ..baselines.pwis import gaussian_mixture_log_prob, uniform_log_prob

    if cfg.spec.behaviour == "pendulum-mixture":
        return gaussian_mixture_log_prob((-2.0, 2.0), 1.0)
    limit = float(exp.task["behaviour_action_max"])
    return uniform_log_prob(-limit, limit)


def _pwis_run(cfg: SampleEfficiencyConfig, size: int, seed: int) -> dict[str, Any]:
    from ..baselines.d3rlpy_bridge import dataset_sha256
    from ..baselines.pwis import train_pwis
    from .runner import make_policy

    task, exp = experiment_config(cfg, size, stochastic=True)
    data = task.make_dataset(exp, seed)
    start = time.perf_counter()
    torch.manual_seed(seed)
    result = train_pwis(make_policy(task, exp, data), data, _behaviour_log_prob(cfg, exp),
                        exp.nopg.gamma, cfg.pwis_updates, exp.nopg.optimizer.learning_rate)
    seconds = time.perf_counter() - start
    return _row(cfg, "PWIS", size, seed, n_transitions=data.n,
                **{"return": _evaluate(task, exp, seed)(result.policy)}, J_hat=result.J_hat,
                wall_time_s=seconds, train_steps=cfg.pwis_updates, data_sha256=dataset_sha256(data))


def online_env(task_name: str, exp: ExperimentConfig) -> Callable[[], Any] | None:
    if task_name.startswith("pendulum"):
        from ..envs.pendulum import make_pendulum_env

        return lambda: make_pendulum_env(int(exp.task["eval_steps"]))
    if task_name == "cartpole-random":
        from ..envs.cartpole import make_cartpole_env

        return lambda: make_cartpole_env(int(exp.task["eval_steps"]))
    if task_name.startswith("mountaincar"):
        from ..envs.mountaincar import make_mountaincar_env

        return make_mountaincar_env
    return None


def _online_run(cfg: SampleEfficiencyConfig, algorithm: str, seed: int) -> list[dict[str, Any]]:
    from ..baselines.online import train_online

    task, exp = experiment_config(cfg, None)
    env_fn = online_env(cfg.task, exp)
    if env_fn is None:
        raise ValueError(f"no online environment for {cfg.task}")
    points = train_online(algorithm, env_fn, cfg.budgets(), seed, _evaluate(task, exp, seed))
    return [_row(cfg, algorithm, p["env_steps"], seed, n_transitions=p["env_steps"],
                 **{"return": p["return"]}, wall_time_s=p["wall_time_s"],
                 train_steps=p["env_steps"], env_steps=p["env_steps"]) for p in points]


def run_job(job: dict[str, Any]) -> list[dict[str, Any]]:
    """One job of the sweep (module level, for :func:`parallel_map`): its rows.

    A job that raises gives one row with no return and the error's text in ``error`` (logged),
    so a long sweep keeps the other runs; the sweep reports how many failed.
    """
    cfg, algorithm, seed = job["config"], job["algorithm"], job["seed"]
    try:
        return _run(cfg, algorithm, seed, job)
    except Exception as err:  # noqa: BLE001 -- recorded in the row and logged, not swallowed
        logger.exception("%s n=%s seed %d failed", algorithm, job["size"], seed)
        return [_row(cfg, algorithm, job["size"], seed, n_transitions=None, wall_time_s=None,
                     train_steps=None, error=f"{type(err).__name__}: {err}",
                     **{"return": None})]


def _run(cfg: SampleEfficiencyConfig, algorithm: str, seed: int, job: dict[str, Any]
         ) -> list[dict[str, Any]]:
    if algorithm in NOPG_ALGORITHMS:
        return [_nopg_run(cfg, algorithm, job["size"], seed)]
    if algorithm in D3RLPY_ALGORITHMS:
        return [_d3rlpy_run(cfg, algorithm, job["size"], seed, job["work_dir"])]
    if algorithm in MODEL_BASED:
        return [_model_based_run(cfg, algorithm, job["size"], seed)]
    if algorithm == "PWIS":
        return [_pwis_run(cfg, job["size"], seed)]
    return _online_run(cfg, algorithm, seed)
