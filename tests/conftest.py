"""Shared small, seeded, float64 fixtures for the NOPG core-math tests."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import nopg

torch.set_num_threads(1)

N_SAMPLES = 40
STATE_DIM = 2
ACTION_DIM = 1
TERMINAL_INDICES = (5, 17)


def perturbed(policy: torch.nn.Module, scale: float, seed: int = 9) -> torch.nn.Module:
    """A copy of ``policy`` with every parameter moved by ``scale`` * N(0, 1)."""
    import copy
    other = copy.deepcopy(policy)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in other.parameters():
            p.add_(scale * torch.randn(p.shape, generator=gen, dtype=p.dtype))
    return other


def sparse_chain(n: int, gamma: float, seed: int = 0, entries: int = 4, reach: int = 3,
                 reward_shift: float = -1.0) -> tuple[np.ndarray, np.ndarray, np.random.Generator]:
    """A slowly mixing sparse sub-stochastic matrix (row ``i`` puts ``entries`` random weights on
    ``i .. i + reach - 1``, rows summing to ``gamma``), rewards ``N(0, 1) + reward_shift`` and the
    generator, for further draws."""
    rng = np.random.default_rng(seed)
    P = np.zeros((n, n))
    for i in range(n):
        cols = (i + rng.integers(0, reach, entries)) % n
        np.add.at(P[i], cols, rng.random(entries))
    P = gamma * P / P.sum(1, keepdims=True)
    return P, rng.normal(size=n) + reward_shift, rng


def make_arrays(n: int = N_SAMPLES, seed: int = 0, terminals=TERMINAL_INDICES) -> dict:
    """Random transitions near the origin; rewards depend on state and action."""
    rng = np.random.default_rng(seed)
    states = rng.normal(scale=0.8, size=(n, STATE_DIM))
    actions = rng.uniform(-1.0, 1.0, size=(n, ACTION_DIM))
    next_states = states + 0.3 * actions + 0.15 * rng.normal(size=(n, STATE_DIM))
    rewards = -(states ** 2).sum(1) - 0.5 * (actions[:, 0] - 0.3) ** 2 + 0.1 * rng.normal(size=n)
    term = np.zeros(n, dtype=bool)
    term[list(terminals)] = True
    return dict(states=states, actions=actions, rewards=rewards, next_states=next_states,
                terminals=term)


@pytest.fixture(autouse=True)
def _default_recipes_fit_given_alone(request: pytest.FixtureRequest,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The default recipes (``auto``) fit ``given`` and ``stabilise`` where episodes end in
    failures and may escalate to ``anchored`` on data without terminals. Outside the tests
    marked ``auto_recipes`` (those of the recipes themselves), ``auto`` resolves to ``given``
    alone, so that the runner tests fit what they test and not also 50 CMA-ES generations or an
    anchored fit each."""
    if request.node.get_closest_marker("auto_recipes") is None:
        from nopg.select import recipes

        resolve, escalate = recipes.resolve_recipes, recipes.escalation

        def given_alone(names, data, gamma, restarts=1):
            resolved = resolve(names, data, gamma, restarts)
            return ("given",) if tuple(names) == (recipes.AUTO,) else resolved

        def no_escalation(names, data, restarts=1):
            escalate(names, data, restarts)          # its checks of the recipe list still run
            return None

        monkeypatch.setattr("nopg.select.auto.resolve_recipes", given_alone)
        monkeypatch.setattr("nopg.select.auto.escalation", no_escalation)


@pytest.fixture
def dataset() -> nopg.TransitionDataset:
    """40 random transitions, two of which (5 and 17) are terminal."""
    return nopg.TransitionDataset(**make_arrays())


@pytest.fixture
def dataset_no_terminals() -> nopg.TransitionDataset:
    return nopg.TransitionDataset(**make_arrays(seed=1, terminals=()))


@pytest.fixture
def bandwidths() -> nopg.Bandwidths:
    # Anisotropic per-dimension bandwidths (so broadcasting or a swapped dimension would show).
    return nopg.Bandwidths(state=[0.5, 0.7], action=[0.4])


@pytest.fixture
def initial_states() -> np.ndarray:
    rng = np.random.default_rng(123)
    return rng.normal(scale=0.5, size=(3, STATE_DIM))


@pytest.fixture
def det_policy() -> nopg.DeterministicMLPPolicy:
    torch.manual_seed(0)
    return nopg.DeterministicMLPPolicy(STATE_DIM, ACTION_DIM, action_max=1.0, hidden=(8,),
                                       activation="tanh").double()


@pytest.fixture
def gauss_policy() -> nopg.GaussianMLPPolicy:
    torch.manual_seed(1)
    return nopg.GaussianMLPPolicy(STATE_DIM, ACTION_DIM, action_max=1.0, sigma_max=0.5,
                                  hidden=(8,), activation="tanh").double()


@pytest.fixture
def linear_policy() -> nopg.LinearPolicy:
    policy = nopg.LinearPolicy(STATE_DIM, ACTION_DIM).double()
    with torch.no_grad():
        policy.linear.weight.copy_(torch.tensor([[0.4, -0.3]], dtype=torch.float64))
        policy.linear.bias.fill_(0.1)
    return policy


def pendulum_episodes(seeds: range, steps: int, rng_seed: int = 0) -> nopg.TransitionDataset:
    """Episodes of ``steps`` uniformly random torques in gymnasium's Pendulum-v1, one per reset
    seed in ``seeds``."""
    import gymnasium as gym

    env = gym.make("Pendulum-v1")
    rng = np.random.default_rng(rng_seed)
    episodes = []
    for k in seeds:
        obs, _ = env.reset(seed=k)
        ep = {"states": [], "actions": [], "rewards": [], "next_states": [], "terminals": []}
        for _ in range(steps):
            action = rng.uniform(-2.0, 2.0, size=1)
            nxt, reward, terminated, _, _ = env.step(action)
            for key, value in zip(ep, (obs, action, reward, nxt, terminated)):
                ep[key].append(value)
            obs = nxt
        episodes.append({key: np.asarray(value, dtype=float) for key, value in ep.items()})
    env.close()
    return nopg.TransitionDataset.from_episodes(episodes)


def save_pendulum_episodes(path, steps: int) -> str:
    """Three :func:`pendulum_episodes` of ``steps`` steps saved as ``.npz`` at ``path``."""
    pendulum_episodes(range(3), steps).save(path)
    return str(path)
