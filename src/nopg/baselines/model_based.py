"""Model-based offline baselines MOPO and MOReL, written here on Stable-Baselines3's SAC.

No maintained MOPO/MOReL implementation installs with this project's dependencies (checked
2026-11-24: ``mbrl`` 0.2.0 pins ``gymnasium==0.26.3`` and ``hydra-core==1.0.3`` and has no MOPO
or MOReL; ``offlinerl`` 0.0.2 pulls the old ``gym`` 0.26 and pins ``ray==2.9.0``; OfflineRL-Kit
is not on PyPI), so both are implemented in this module, on the ensemble of
:mod:`nopg.baselines.dynamics_ensemble` and SB3's SAC as the policy optimiser.

* **MOPO** (Yu et al. 2020): SAC in the learned model with the penalised reward
  ``r - lambda max_k ||sigma_k(s, a)||`` (``sigma_k``: member k's standard deviations of
  ``(s' - s, r)`` in the data's units), rollouts of ``horizon`` steps from data states (the
  episode is truncated after ``horizon`` steps; the next state is drawn from a random elite's
  Gaussian), and each SAC batch holds a fraction ``real_ratio`` of real transitions.
* **MOReL** (Kidambi et al. 2020): SAC (the paper used natural policy gradient) in the
  pessimistic MDP: a step whose ensemble disagreement ``max_{i,j} ||mu_i - mu_j||`` (the
  members' mean state changes, in standardised units) exceeds the threshold halts the episode
  (terminal) with reward ``r_min - kappa``, ``kappa = max(|r_min|, |r_max|, r_max - r_min) /
  (1 - gamma)`` (``r_min``, ``r_max`` the data's rewards: halting costs more than any reward
  stream in the data's range); the threshold is the ``threshold_quantile`` quantile of the
  disagreement on the data's own ``(s, a)``. The next state is a random member's mean (MOReL's
  models are deterministic); no real transitions in SAC's batches.

Hyper-parameters (one configuration for every task, :func:`default_config`): those of the NOPG
paper's appendix where it gives them (pendulum random agent), otherwise the MOPO/MOReL papers':
MOPO ensemble of 7 members (5 elites, MOPO's code), hidden (64, 64) SiLU, at most 100 epochs with
a 10% hold-out and early stopping, ``horizon`` 5, ``lambda`` 1, ``real_ratio`` 0.05 (MOPO's
code); MOReL ensemble of 4 members, hidden (128, 128) ReLU, 25 epochs, no hold-out, rollouts of
at most 100 steps, threshold quantile 0.99. Both: Adam at 1e-3 with batch 256 for the models;
SAC with gamma 0.99, learning rate 3e-4, batch 256, tau 5e-3, an actor of one hidden layer of 50
ReLU units and critics of two (the paper's online SAC), 100 random-action steps in the model
before learning. ``n_steps`` is SAC's gradient steps (one model step each).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field, fields, replace
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from ..data.dataset import TransitionDataset
from ..validation import check_positive_int
from .dynamics_ensemble import DynamicsEnsemble, EnsembleConfig, fit_ensemble
from .online import SB3Policy, silence_sb3_logger

__all__ = ["MODEL_BASED_ALGORITHMS", "LearnedModelEnv", "ModelBasedConfig", "ModelBasedResult",
           "default_config", "halt_reward", "mixed_replay_buffer_class", "mopo_reward",
           "morel_disagreement", "morel_threshold", "real_transitions", "train_model_based"]

logger = logging.getLogger(__name__)

MODEL_BASED_ALGORITHMS = ("MOPO", "MOReL")
LEARNING_STARTS = 100


@dataclass(frozen=True)
class ModelBasedConfig:
    """Settings of MOPO or MOReL (module docstring; :func:`default_config` gives the defaults).

    Attributes
    ----------
    algorithm : {"MOPO", "MOReL"}
    ensemble : EnsembleConfig
    horizon : int
        Steps of a model rollout before it is truncated.
    penalty : float
        MOPO's ``lambda``.
    real_ratio : float
        Fraction of real transitions in every SAC batch.
    threshold_quantile : float
        MOReL: quantile of the data's disagreement used as the halting threshold.
    sac : dict
        Stable-Baselines3 SAC keyword arguments.
    """

    algorithm: str
    ensemble: EnsembleConfig
    horizon: int
    penalty: float = 1.0
    real_ratio: float = 0.0
    threshold_quantile: float = 0.99
    sac: dict[str, Any] = field(default_factory=lambda: {
        "gamma": 0.99, "learning_rate": 3e-4, "batch_size": 256, "tau": 5e-3,
        "policy_kwargs": {"net_arch": {"pi": [50], "qf": [50, 50]}}})

    def __post_init__(self) -> None:
        if self.algorithm not in MODEL_BASED_ALGORITHMS:
            raise ValueError(f"unknown model-based algorithm {self.algorithm!r}; known: "
                             f"{', '.join(MODEL_BASED_ALGORITHMS)}")
        check_positive_int("horizon", self.horizon)
        if not 0 <= self.real_ratio <= 1 or not 0 < self.threshold_quantile <= 1 or \
                not self.penalty >= 0:
            raise ValueError(f"need 0 <= real_ratio <= 1, 0 < threshold_quantile <= 1 and "
                             f"penalty >= 0. Got {self.real_ratio!r}, "
                             f"{self.threshold_quantile!r}, {self.penalty!r}.")


def default_config(algorithm: str) -> ModelBasedConfig:
    """The one configuration of ``algorithm`` used on every task (module docstring)."""
    if algorithm == "MOPO":
        return ModelBasedConfig("MOPO", EnsembleConfig(), horizon=5, penalty=1.0, real_ratio=0.05)
    if algorithm == "MOReL":
        ensemble = EnsembleConfig(n_models=4, n_elites=4, hidden=(128, 128), activation="relu",
                                  max_epochs=25, holdout=0.0)
        return ModelBasedConfig("MOReL", ensemble, horizon=100, threshold_quantile=0.99)
    raise ValueError(f"unknown model-based algorithm {algorithm!r}; known: "
                     f"{', '.join(MODEL_BASED_ALGORITHMS)}")


def mopo_reward(rewards: np.ndarray, std: np.ndarray, penalty: float) -> np.ndarray:
    """MOPO's ``r - lambda max_k ||sigma_k||``: ``rewards`` (B,), ``std`` (K, B, D) -> (B,)."""
    return np.asarray(rewards) - penalty * np.linalg.norm(std, axis=2).max(axis=0)


def morel_disagreement(means: np.ndarray) -> np.ndarray:
    """``max_{i,j} ||mu_i - mu_j||`` over members: ``means`` (K, B, D) -> (B,)."""
    diff = means[:, None] - means[None, :]
    return np.linalg.norm(diff, axis=3).max(axis=(0, 1))


def morel_threshold(ensemble: DynamicsEnsemble, data: TransitionDataset, quantile: float
                    ) -> float:
    """The ``quantile`` of the disagreement on the data's ``(s, a)`` pairs."""
    pred = ensemble.predict(data.states, data.actions)
    return float(np.quantile(morel_disagreement(pred.mean_standardised[..., :-1]), quantile))


def halt_reward(rewards: np.ndarray, gamma: float) -> float:
    """MOReL's halting reward ``r_min - kappa`` (module docstring)."""
    r_min, r_max = float(np.min(rewards)), float(np.max(rewards))
    return r_min - max(abs(r_min), abs(r_max), r_max - r_min) / (1.0 - gamma)


class LearnedModelEnv(gym.Env):
    """The learned MDP of MOPO (penalised reward) or MOReL (halting), started from data states.

    Parameters
    ----------
    ensemble : DynamicsEnsemble
    start_states : ndarray of shape (n, d_s)
        Reset draws one of them uniformly.
    action_low, action_high : ndarray of shape (d_a,)
    config : ModelBasedConfig
    threshold, halt : float
        MOReL's disagreement threshold and halting reward (unused by MOPO).
    """

    def __init__(self, ensemble: DynamicsEnsemble, start_states: np.ndarray,
                 action_low: np.ndarray, action_high: np.ndarray, config: ModelBasedConfig,
                 threshold: float = np.inf, halt: float = 0.0) -> None:
        super().__init__()
        self.ensemble, self.config = ensemble, config
        self.start_states = np.asarray(start_states, dtype=np.float64)
        d_s = self.start_states.shape[1]
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (d_s,), np.float32)
        self.action_space = gym.spaces.Box(np.asarray(action_low, np.float32),
                                           np.asarray(action_high, np.float32))
        self.threshold, self.halt = float(threshold), float(halt)
        self.state = self.start_states[0]
        self.t = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self.state = self.start_states[self.np_random.integers(len(self.start_states))]
        self.t = 0
        return self.state.astype(np.float32), {}

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        action = np.clip(np.asarray(action, np.float64).reshape(1, -1), self.action_space.low,
                         self.action_space.high)
        pred = self.ensemble.predict(self.state[None], action)
        member = self.np_random.integers(pred.mean.shape[0])
        change = pred.mean[member, 0]
        if self.config.algorithm == "MOPO":
            change = change + pred.std[member, 0] * self.np_random.standard_normal(len(change))
        reward, info = float(change[-1]), {}
        terminated = bool(pred.terminal_prob[0] > 0.5)
        if self.config.algorithm == "MOPO":
            reward = float(mopo_reward(np.array([reward]), pred.std, self.config.penalty)[0])
        elif morel_disagreement(pred.mean_standardised[..., :-1])[0] > self.threshold:
            reward, terminated, info = self.halt, True, {"halted": True}
        self.state = self.state + change[:-1]
        self.t += 1
        truncated = self.t >= self.config.horizon and not terminated
        return self.state.astype(np.float32), reward, terminated, truncated, info


@dataclass
class ModelBasedResult:
    """A trained MOPO/MOReL policy, its model and diagnostics."""

    policy: SB3Policy
    ensemble: DynamicsEnsemble
    model_seconds: float       # training the ensemble
    wall_seconds: float        # the ensemble and SAC
    threshold: float | None    # MOReL's halting threshold
    n_steps: int


def real_transitions(data: TransitionDataset, low: np.ndarray, high: np.ndarray
                      ) -> dict[str, np.ndarray]:
    """The data in SB3's replay layout: float32, actions scaled to [-1, 1] (clipped)."""
    scaled = np.clip(2.0 * (data.actions - low) / (high - low) - 1.0, -1.0, 1.0)
    return {"observations": data.states.astype(np.float32), "actions": scaled.astype(np.float32),
            "next_observations": data.next_states.astype(np.float32),
            "dones": data.terminals.astype(np.float32).reshape(-1, 1),
            "rewards": data.rewards.astype(np.float32).reshape(-1, 1)}


def mixed_replay_buffer_class() -> type:
    """An SB3 replay buffer class whose batches hold a fixed fraction of real transitions.

    Its constructor takes SB3's arguments plus ``real`` (:func:`real_transitions`) and
    ``real_ratio``; a batch of ``b`` holds ``round(real_ratio b)`` real rows first (all of them
    while the model part is empty), drawn with replacement.
    """
    from stable_baselines3.common.buffers import ReplayBuffer
    from stable_baselines3.common.type_aliases import ReplayBufferSamples

    class MixedReplayBuffer(ReplayBuffer):
        def __init__(self, *args: Any, real: dict[str, np.ndarray], real_ratio: float,
                     **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.real, self.real_ratio = real, real_ratio

        def sample(self, batch_size: int, env: Any = None) -> Any:
            n_real = int(round(self.real_ratio * batch_size)) if self.size() else batch_size
            if n_real == 0:
                return super().sample(batch_size, env)
            # the global NumPy generator, as SB3's own buffers draw (SAC's seed sets it)
            idx = np.random.randint(0, len(self.real["rewards"]), size=n_real)  # noqa: NPY002
            real = [self.to_torch(self.real[k][idx]) for k in
                    ("observations", "actions", "next_observations", "dones", "rewards")]
            if n_real == batch_size:
                return ReplayBufferSamples(*real)
            model = super().sample(batch_size - n_real, env)
            return ReplayBufferSamples(*(torch.cat([a, b]) for a, b in zip(real, model[:5])))

    return MixedReplayBuffer


def train_model_based(algorithm: str, data: TransitionDataset, n_steps: int, seed: int,
                      action_low: np.ndarray, action_high: np.ndarray,
                      config: ModelBasedConfig | None = None, **changes: Any) -> ModelBasedResult:
    """Train MOPO or MOReL on ``data`` (module docstring).

    Parameters
    ----------
    algorithm : {"MOPO", "MOReL"}
    data : TransitionDataset
    n_steps : int
        SAC gradient steps (one model step each, after 100 random-action steps).
    seed : int
        Seeds the ensemble, SAC and the model environment.
    action_low, action_high : array of shape (d_a,)
        The action box.
    config : ModelBasedConfig, optional
        Default: :func:`default_config`; ``changes`` replace its fields.
    """
    unknown = sorted(set(changes) - {f.name for f in fields(ModelBasedConfig)})
    if unknown:
        raise ValueError(f"unknown {algorithm} setting(s) {unknown}; known: "
                         f"{', '.join(f.name for f in fields(ModelBasedConfig))}")
    config = replace(config or default_config(algorithm), **changes)
    if config.algorithm != algorithm:
        raise ValueError(f"the config is {config.algorithm}'s, not {algorithm}'s")
    if isinstance(n_steps, bool) or not isinstance(n_steps, int) or n_steps < 1:
        raise ValueError(f"n_steps must be a positive int. Got {n_steps!r} instead.")
    from stable_baselines3 import SAC

    low = np.asarray(action_low, np.float64).reshape(-1)
    high = np.asarray(action_high, np.float64).reshape(-1)
    start = time.perf_counter()
    ensemble = fit_ensemble(data, config.ensemble, seed)
    model_seconds = time.perf_counter() - start
    threshold, halt = None, 0.0
    if algorithm == "MOReL":
        threshold = morel_threshold(ensemble, data, config.threshold_quantile)
        halt = halt_reward(data.rewards, config.sac.get("gamma", 0.99))
    env = LearnedModelEnv(ensemble, data.states, low, high, config,
                          np.inf if threshold is None else threshold, halt)
    buffer = {"replay_buffer_class": mixed_replay_buffer_class(),
              "replay_buffer_kwargs": {"real": real_transitions(data, low, high),
                                       "real_ratio": config.real_ratio}}
    sac = silence_sb3_logger(SAC("MlpPolicy", env, seed=int(seed), verbose=0, device="cpu",
                                 learning_starts=LEARNING_STARTS,
                                 buffer_size=n_steps + LEARNING_STARTS, **buffer, **config.sac))
    sac.learn(total_timesteps=n_steps + LEARNING_STARTS, progress_bar=False)
    wall = time.perf_counter() - start
    logger.info("%s: ensemble %.1f s, SAC %d steps, %.1f s in all", algorithm, model_seconds,
                n_steps, wall)
    return ModelBasedResult(SB3Policy(sac), ensemble, model_seconds, wall, threshold, n_steps)
