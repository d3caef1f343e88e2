"""Policy evaluation by simulation (Monte-Carlo returns in a gymnasium environment).

This module runs episodes of a policy in a gymnasium environment and reports undiscounted
returns, which is how the NOPG paper reports performance. It imports gymnasium but no plotting
and no task (the pendulum's evaluation from the bottom is in :mod:`nopg.envs.pendulum`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import torch

__all__ = [
    "PolicyLike",
    "make_env",
    "policy_actions",
    "evaluate_policy",
    "rollout",
    "rollouts",
]

PolicyLike = torch.nn.Module | Callable[[np.ndarray], Any]
"""A ``torch.nn.Module`` mapping ``(1, d_s)`` tensors to ``(1, d_a)`` actions, or a callable
mapping a numpy observation of shape ``(d_s,)`` to an action."""


def make_env(env_id: str, *, dims: tuple[int, int] | None = None, fits: str = "the policy",
             max_episode_steps: int | None = None) -> gym.Env:
    """``gymnasium.make(env_id)``, checked: Box observations, Box or Discrete actions, and with
    ``dims = (state_dim, action_dim)`` those sizes (``fits`` names what they belong to).

    Raises
    ------
    ValueError
        If the id is unknown or the environment does not fit, naming the problem.
    """
    kwargs = {} if max_episode_steps is None else {"max_episode_steps": int(max_episode_steps)}
    try:
        env = gym.make(env_id, **kwargs)
    except gym.error.Error as err:
        raise ValueError(f"cannot make the gymnasium environment {env_id!r}: {err}") from None
    obs, act = env.observation_space, env.action_space
    problem = None
    if not isinstance(obs, gym.spaces.Box):
        problem = f"its observations are {type(obs).__name__}, not a Box of floats"
    elif not isinstance(act, (gym.spaces.Box, gym.spaces.Discrete)):
        problem = f"its actions are {type(act).__name__}, not a Box or Discrete space"
    elif dims is not None:
        d_obs = int(np.prod(obs.shape))
        d_act = int(np.prod(act.shape)) if isinstance(act, gym.spaces.Box) else 1
        if (d_obs, d_act) != dims:
            problem = (f"it has {d_obs}-D observations and {d_act}-D actions, {fits} "
                       f"{dims[0]}-D states and {dims[1]}-D actions")
    if problem is not None:
        env.close()
        raise ValueError(f"environment {env_id!r} does not fit {fits}: {problem}")
    return env


def policy_actions(policy: torch.nn.Module, states: np.ndarray) -> np.ndarray:
    """A module's actions at ``states`` (m, d_s) under ``torch.no_grad()``, in the dtype and on
    the device of its first parameter; shape (m, d_a), float64 (a tuple output's first item,
    e.g. a Gaussian policy's mean)."""
    param = next(policy.parameters(), None)
    dtype = param.dtype if param is not None else torch.get_default_dtype()
    device = param.device if param is not None else torch.device("cpu")
    states = np.asarray(states)
    with torch.no_grad():
        # torch.tensor copies: torch.as_tensor would share a read-only array (a data set's
        # states are read-only) and warn that torch does not support non-writable tensors.
        out = policy(torch.tensor(states, dtype=dtype, device=device).reshape(len(states), -1))
    if isinstance(out, (tuple, list)):
        out = out[0]
    return out.detach().cpu().double().numpy().reshape(len(states), -1)


def _policy_action(policy: PolicyLike, obs: np.ndarray) -> np.ndarray:
    """Evaluate ``policy`` at one observation and return a flat float64 action."""
    if isinstance(policy, torch.nn.Module):
        return policy_actions(policy, np.asarray(obs).reshape(1, -1)).reshape(-1)
    if not callable(policy):
        raise ValueError(
            "The 'policy' must be a torch.nn.Module or a callable obs -> action. "
            f"Got {type(policy).__name__}."
        )
    out = policy(obs)
    if isinstance(out, torch.Tensor):
        out = out.detach().cpu().double().numpy()
    return np.asarray(out, dtype=np.float64).reshape(-1)


def _prepare_action(action: np.ndarray, space: gym.Space) -> np.ndarray | int:
    """Clip (Box) or round (Discrete) a flat action to the environment's action space."""
    if not np.all(np.isfinite(action)):
        raise ValueError(f"The policy returned a non-finite action: {action}.")
    if isinstance(space, gym.spaces.Box):
        if action.size != int(np.prod(space.shape)):
            raise ValueError(
                f"The policy returned an action of size {action.size}; the action space "
                f"has shape {space.shape}."
            )
        action = action.reshape(space.shape)
        return np.clip(action, space.low, space.high).astype(space.dtype)
    if isinstance(space, gym.spaces.Discrete):
        if action.size != 1:
            raise ValueError(
                f"The policy returned an action of size {action.size} for a Discrete space."
            )
        return int(np.clip(np.rint(action[0]), space.start, space.start + space.n - 1))
    raise ValueError(f"Unsupported action space {space!r}; expected Box or Discrete.")


def rollout(
    env: gym.Env,
    policy: PolicyLike,
    initial_state_setter: Callable[[gym.Env], np.ndarray] | None = None,
    seed: int | None = None,
    max_steps: int | None = None,
) -> dict[str, Any]:
    """Run one episode of ``policy`` in ``env``.

    The episode starts with ``env.reset(seed=seed)``; ``initial_state_setter(env)`` may then
    overwrite the simulator state and return the corresponding observation.  Actions are
    clipped to the action space (as gymnasium's pendulum also does internally).

    Parameters
    ----------
    env : gymnasium.Env
        The environment (its ``TimeLimit`` wrapper bounds the episode length).
    policy : torch.nn.Module or callable
        A module is called under ``torch.no_grad()`` with a tensor of shape ``(1, d_s)`` in
        the dtype and device of its first parameter and must return ``(1, d_a)`` actions (or
        a tuple whose first item is the action mean).  Any other callable receives the numpy
        observation of shape ``(d_s,)`` and returns an action.
    initial_state_setter : callable, optional
        ``initial_state_setter(env) -> obs`` applied after the reset.
    seed : int, optional
        Seed passed to ``env.reset``.
    max_steps : int, optional
        Additional cap on the number of steps (the env's time limit still applies).

    Returns
    -------
    dict
        ``return`` (float, undiscounted sum of rewards), ``length`` (int, T), ``states``
        (array of shape (T + 1, d_s)), ``actions`` (array (T, d_a), the clipped actions
        applied), ``rewards`` (array (T,)), ``terminated`` and ``truncated`` (bool flags of
        the last step; ``truncated`` is also ``True`` when ``max_steps`` stopped the episode).

    Raises
    ------
    ValueError
        If ``max_steps`` is not a positive int, or the policy returns a non-finite or
        wrongly sized action.
    """
    if max_steps is not None and (
        isinstance(max_steps, bool) or not isinstance(max_steps, (int, np.integer)) or max_steps < 1
    ):
        raise ValueError(f"The 'max_steps' parameter must be a positive int. Got {max_steps!r}.")
    obs, _ = env.reset(seed=seed)
    if initial_state_setter is not None:
        obs = initial_state_setter(env)
    obs = np.asarray(obs, dtype=np.float64).reshape(-1)

    states = [obs]
    actions: list[np.ndarray] = []
    rewards: list[float] = []
    terminated = truncated = False
    while not (terminated or truncated):
        action = _prepare_action(_policy_action(policy, obs), env.action_space)
        obs, reward, terminated, truncated, _ = env.step(action)
        obs = np.asarray(obs, dtype=np.float64).reshape(-1)
        states.append(obs)
        actions.append(np.atleast_1d(np.asarray(action, dtype=np.float64)))
        rewards.append(float(reward))
        terminated, truncated = bool(terminated), bool(truncated)
        if max_steps is not None and len(rewards) >= max_steps and not terminated:
            truncated = True

    d_a = actions[0].size if actions else 0
    return {
        "return": float(np.sum(rewards)),
        "length": len(rewards),
        "states": np.stack(states),
        "actions": np.asarray(actions, dtype=np.float64).reshape(len(actions), d_a),
        "rewards": np.asarray(rewards, dtype=np.float64),
        "terminated": terminated,
        "truncated": truncated,
    }


def rollouts(env: gym.Env, policy: PolicyLike, episodes: int, seed: int, **options: Any
             ) -> list[dict[str, Any]]:
    """:func:`rollout` of ``episodes`` episodes from reset seeds ``seed + k`` (``options``: its
    ``initial_state_setter`` and ``max_steps``); the env is closed at the end."""
    try:
        return [rollout(env, policy, seed=int(seed) + k, **options) for k in range(int(episodes))]
    finally:
        env.close()


def evaluate_policy(
    env_fn: Callable[[], gym.Env],
    policy: PolicyLike,
    n_episodes: int = 1,
    initial_state_setter: Callable[[gym.Env], np.ndarray] | None = None,
    seed: int = 0,
    max_steps: int | None = None,
) -> dict[str, Any]:
    """Average undiscounted return of ``policy`` over several episodes.

    Episode ``k`` is reset with seed ``seed + k`` in a fresh environment from ``env_fn``.

    Parameters
    ----------
    env_fn : callable
        Zero-argument factory returning a gymnasium environment.
    policy : torch.nn.Module or callable
        See :func:`rollout`.
    n_episodes : int, default=1
        Number of episodes.
    initial_state_setter : callable, optional
        See :func:`rollout`.
    seed : int, default=0
        Seed of the first episode.
    max_steps : int, optional
        See :func:`rollout`.

    Returns
    -------
    dict
        ``returns`` (list of float), ``mean`` and ``std`` (float, population std) of the
        returns, ``lengths`` (list of int).

    Raises
    ------
    ValueError
        If ``n_episodes`` is not a positive int or ``env_fn`` is not callable.
    """
    if isinstance(n_episodes, bool) or not isinstance(n_episodes, (int, np.integer)):
        raise ValueError(f"The 'n_episodes' parameter must be a positive int. Got {n_episodes!r}.")
    if n_episodes < 1:
        raise ValueError(f"The 'n_episodes' parameter must be a positive int. Got {n_episodes}.")
    if not callable(env_fn):
        raise ValueError("The 'env_fn' parameter must be a zero-argument environment factory.")
    episodes = rollouts(env_fn(), policy, n_episodes, seed,
                        initial_state_setter=initial_state_setter, max_steps=max_steps)
    returns = [ep["return"] for ep in episodes]
    return {
        "returns": returns,
        "mean": float(np.mean(returns)),
        "std": float(np.std(returns)),
        "lengths": [ep["length"] for ep in episodes],
    }


def collect_episodes(env: gym.Env, n_samples: int, act: Callable[[np.ndarray], np.ndarray],
                     seed: int) -> Any:
    """``n_samples`` transitions of ``act(obs) -> action`` in ``env``, episode after episode.

    The first reset is seeded with ``seed`` (later resets continue its generator); the env is
    closed at the end. ``terminals`` where the env said ``terminated``, ``truncations`` where it
    said ``truncated`` only, and on the last transition when the data end mid-episode.
    """
    from nopg.data.dataset import TransitionDataset

    n = int(n_samples)
    d_s = env.observation_space.shape[0]
    states, next_states = np.empty((n, d_s)), np.empty((n, d_s))
    actions: np.ndarray | None = None
    rewards = np.empty(n)
    terminals, truncations = np.zeros(n, dtype=bool), np.zeros(n, dtype=bool)
    episode_ids = np.empty(n, dtype=np.int64)
    try:
        obs, _ = env.reset(seed=int(seed))
        episode = 0
        for i in range(n):
            action = np.asarray(act(obs), dtype=np.float64).reshape(-1)
            if actions is None:
                actions = np.empty((n, action.shape[0]))
            next_obs, reward, terminated, truncated, _ = env.step(action)
            states[i], actions[i], rewards[i], next_states[i] = obs, action, reward, next_obs
            terminals[i], truncations[i] = terminated, truncated and not terminated
            episode_ids[i] = episode
            if terminated or truncated:
                obs, _ = env.reset()
                episode += 1
            else:
                obs = next_obs
    finally:
        env.close()
    if not terminals[-1]:
        truncations[-1] = True
    return TransitionDataset(states=states, actions=actions, rewards=rewards,
                             next_states=next_states, terminals=terminals,
                             truncations=truncations, episode_ids=episode_ids)


def evaluate_episodes(env: gym.Env, policy: PolicyLike, episodes: int, seed: int
                      ) -> dict[str, list]:
    """Returns, lengths and ``terminated`` flags of ``episodes`` rollouts (reset seeds
    ``seed + k``); the env is closed at the end."""
    done = rollouts(env, policy, episodes, seed)
    return {"returns": [ep["return"] for ep in done], "lengths": [ep["length"] for ep in done],
            "fell": [ep["terminated"] for ep in done]}
