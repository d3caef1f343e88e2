"""Online baselines: Stable-Baselines3 DDPG, TD3 and SAC, evaluated at environment-step budgets.

One training run per seed goes to the largest budget; whenever the environment-step count
reaches a budget, the deterministic policy is evaluated by the caller's function (the task's own
evaluation protocol), so one run gives a point per budget, as a learning curve against
environment steps. Hyper-parameters are the paper's (appendix, "Pendulum with Random Agent" and
"Cart-pole with Random Agent"): gamma 0.99, an actor with one hidden layer of 50 ReLU units, a
critic with two, batch size 64, soft update 5e-3, replay of 5e5 transitions, 128 initial
transitions. Deviations: SB3 uses one learning rate for actor and critic; the paper's actor rate
``1e-3`` is used for both (the paper's critic rates are 1e-2 for DDPG/TD3 and 5e-3 for SAC).
DDPG and TD3 explore with Gaussian action noise of 0.1 times the action bound (the paper does not
state its noise; SB3 adds none by default).

Needs ``pip install stable-baselines3`` (the ``baselines`` extra).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

__all__ = ["ONLINE_ALGORITHMS", "SB3Policy", "paper_hyperparameters", "silence_sb3_logger",
           "train_online"]

logger = logging.getLogger(__name__)

ONLINE_ALGORITHMS = ("DDPG", "TD3", "SAC")


def paper_hyperparameters(algorithm: str) -> dict[str, Any]:
    """The paper's settings as SB3 keyword arguments."""
    if algorithm not in ONLINE_ALGORITHMS:
        raise ValueError(f"unknown online algorithm {algorithm!r}; known: "
                         f"{', '.join(ONLINE_ALGORITHMS)}")
    return {"gamma": 0.99, "learning_rate": 1e-3, "batch_size": 64, "tau": 5e-3,
            "buffer_size": 500_000, "learning_starts": 128,
            "policy_kwargs": {"net_arch": {"pi": [50], "qf": [50, 50]}}}


def silence_sb3_logger(model: Any) -> Any:
    """Give an SB3 model a logger without outputs, and return the model.

    SB3's own logger with ``verbose=0`` still creates a folder ``SB3-<date>`` in the system's
    temporary directory at every ``learn`` (``stable_baselines3.common.logger.configure``), one
    per baseline run; the baselines log through :mod:`logging` instead.
    """
    from stable_baselines3.common.logger import Logger

    model.set_logger(Logger(folder=None, output_formats=[]))
    return model


class SB3Policy(nn.Module):
    """An SB3 model's deterministic action as a module: states (b, d_s) -> actions (b, d_a).

    The actions are in the environment's units (SB3 unscales its ``[-1, 1]`` output).
    """

    def __init__(self, model: Any) -> None:
        super().__init__()
        self.sb3_policy = model.policy   # registers its parameters (dtype and device for callers)
        self._model = model

    def forward(self, states: torch.Tensor) -> torch.Tensor:
        obs = states.detach().cpu().numpy().astype(np.float32)
        actions, _ = self._model.predict(obs, deterministic=True)
        return torch.as_tensor(np.asarray(actions), dtype=states.dtype).reshape(len(obs), -1)


def train_online(algorithm: str, env_fn: Callable[[], Any], budgets: Sequence[int], seed: int,
                 evaluate: Callable[[nn.Module], float], hyperparameters: dict[str, Any] | None = None,
                 ) -> list[dict[str, Any]]:
    """Train ``algorithm`` online up to ``max(budgets)`` steps, evaluating at every budget.

    Parameters
    ----------
    algorithm : {"DDPG", "TD3", "SAC"}
    env_fn : callable
        Makes the gymnasium training environment.
    budgets : sequence of int
        Environment-step counts at which the policy is evaluated.
    seed : int
    evaluate : callable
        ``policy -> return`` (the task's evaluation).
    hyperparameters : dict, optional
        Overrides of :func:`paper_hyperparameters`.

    Returns
    -------
    list of dict
        Per budget: ``env_steps``, ``return``, ``wall_time_s`` (training time up to the budget,
        evaluations excluded).
    """
    try:
        import stable_baselines3 as sb3
        from stable_baselines3.common.callbacks import BaseCallback
    except ImportError as err:
        raise ValueError("the online baselines need Stable-Baselines3: "
                         "pip install stable-baselines3 (or nopg[baselines])") from err
    budgets = sorted({int(b) for b in budgets})
    if not budgets or budgets[0] < 1:
        raise ValueError(f"budgets must be positive ints. Got {budgets!r}.")
    kwargs = {**paper_hyperparameters(algorithm), **(hyperparameters or {})}
    env = env_fn()
    if algorithm != "SAC" and "action_noise" not in kwargs:
        from stable_baselines3.common.noise import NormalActionNoise

        high = np.asarray(env.action_space.high, dtype=np.float64)
        kwargs["action_noise"] = NormalActionNoise(np.zeros_like(high), 0.1 * high)
    model = silence_sb3_logger(getattr(sb3, algorithm)("MlpPolicy", env, seed=int(seed),
                                                       verbose=0, device="cpu", **kwargs))
    rows: list[dict[str, Any]] = []
    start = time.perf_counter()
    excluded = [0.0]

    class _Checkpoints(BaseCallback):
        def _on_step(self) -> bool:
            if rows and rows[-1]["env_steps"] >= budgets[-1]:
                return False
            if self.num_timesteps in budgets:
                now = time.perf_counter()
                trained = now - start - excluded[0]
                value = float(evaluate(SB3Policy(self.model)))
                excluded[0] += time.perf_counter() - now
                rows.append({"env_steps": int(self.num_timesteps), "return": value,
                             "wall_time_s": trained})
                logger.info("%s seed %d: %d env steps, return %.2f", algorithm, seed,
                            self.num_timesteps, value)
            return True

    try:
        model.learn(total_timesteps=budgets[-1], callback=_Checkpoints(), progress_bar=False)
    finally:
        env.close()
    return rows
