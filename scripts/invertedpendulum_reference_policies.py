"""Inverted pendulum: the model's ``J_hat`` of fixed linear controllers, and how its chain spreads.

Is the model of ``invertedpendulum-random``'s data (5000 random-force transitions) right about
which policies balance? The script fits a linear model ``s' = A s + B a + c`` to the data's
transitions that went on (least squares), designs a discrete LQR on it (``Q = diag(1, 10, 0.1,
0.1)`` on ``(x, theta, x_dot, theta_dot)``, ``R = 0.1``) and variants with gains removed or
flipped, and reports for each

* its real return (mean of 5 episodes of the task's evaluation, at most 1000);
* its ``J_hat`` and support gap under the task's model of one seed's data (``--set`` changes the
  model, e.g. ``--set 'successors="local-linear"'``);
* with ``--chain``: the spread (standard deviation over sampled paths) of the state along the
  model's own Markov chain (paths drawn from ``eps0`` and the rows of ``P``, each step landing on a
  data next state), against the spread over real episodes, at steps 10, 25, 50 and 100.

Every policy outputs ``3 tanh(-K s / 3)`` (the task's force range). No fitting of the policy.

    python scripts/invertedpendulum_reference_policies.py --seeds 0 [--chain] \\
        [--set 'successors="local-linear"' --set 'unsupported="penalty"']
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging

import numpy as np
import scipy.linalg
import torch
from torch import nn

from nopg import NOPG
from nopg.data.dataset import TransitionDataset
from nopg.envs.evaluation import evaluate_episodes
from nopg.experiments import get_task
from nopg.select.bandwidth_report import bandwidth_report

FORCE = 3.0
STEPS = (10, 25, 50, 100)


class LinearForce(nn.Module):
    """``3 tanh(-K s / 3)`` from the observation ``[x, theta, x_dot, theta_dot]``."""

    def __init__(self, gain: np.ndarray) -> None:
        super().__init__()
        self.register_buffer("gain", torch.as_tensor(gain, dtype=torch.float64))
        self.unused = nn.Parameter(torch.zeros(1, dtype=torch.float64))  # NOPG wants parameters

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        u = -(obs.to(torch.float64) @ self.gain) / FORCE
        return FORCE * torch.tanh(u)[..., None] + 0.0 * self.unused


def lqr_from_data(data: TransitionDataset) -> np.ndarray:
    """The LQR gain ``K`` (``a = -K s``) of a linear model fitted to the transitions that went on."""
    going = ~np.asarray(data.terminals, bool)
    inputs = np.hstack([data.states, data.actions, np.ones((data.n, 1))])[going]
    coef, *_ = np.linalg.lstsq(inputs, data.next_states[going], rcond=None)
    a, b = coef[:4].T, coef[4:5].T
    q, r = np.diag([1.0, 10.0, 0.1, 0.1]), np.array([[0.1]])
    p = scipy.linalg.solve_discrete_are(a, b, q, r)
    return np.linalg.solve(r + b.T @ p @ b, b.T @ p @ a)[0]


def variants(k: np.ndarray) -> dict[str, np.ndarray]:
    return {"LQR": k, "x gain 0": k * [0, 1, 1, 1], "x and x_dot gains 0": k * [0, 1, 0, 1],
            "x gain flipped": k * [-1, 1, 1, 1], "half gain": 0.5 * k, "zero": 0 * k}


def chain_spread(P: np.ndarray, eps0: np.ndarray, next_states: np.ndarray, paths: int,
                 rng: np.random.Generator) -> dict[int, np.ndarray]:
    """Standard deviation of the state at ``STEPS`` over paths of the model's chain (each step
    draws a data next state from its row of ``P``; a row without mass ends the path)."""
    seen: dict[int, list[np.ndarray]] = {t: [] for t in STEPS}
    for _ in range(paths):
        j = rng.choice(len(eps0), p=eps0 / eps0.sum())
        for t in range(1, max(STEPS) + 1):
            row = P[j]
            if row.sum() <= 0:
                break
            j = rng.choice(len(row), p=row / row.sum())
            if t in seen:
                seen[t].append(next_states[j])
    return {t: np.std(v, 0) if v else np.full(4, np.nan) for t, v in seen.items()}


def real_spread(env_fn, policy: nn.Module, episodes: int, seed: int) -> dict[int, np.ndarray]:
    """Standard deviation of the state at ``STEPS`` over real episodes that have not ended."""
    seen: dict[int, list[np.ndarray]] = {t: [] for t in STEPS}
    env = env_fn()
    for e in range(episodes):
        obs, _ = env.reset(seed=seed + e)
        for t in range(1, max(STEPS) + 1):
            with torch.no_grad():
                act = policy(torch.as_tensor(obs[None])).numpy()[0]
            obs, _, terminated, _, _ = env.step(act.astype(np.float32))
            if terminated:
                break
            if t in seen:
                seen[t].append(np.asarray(obs, float))
    env.close()
    return {t: np.std(v, 0) if v else np.full(4, np.nan) for t, v in seen.items()}


def task_inputs(task, config, seed: int) -> tuple[TransitionDataset, object, np.ndarray]:
    """A seed's data set, its bandwidths (the task's rule) and the objective's initial states."""
    data = task.make_dataset(config, seed)
    bw = bandwidth_report(data, method=config.bandwidth_method,
                          state_factor=np.asarray(config.state_factor, float),
                          action_factor=np.asarray(config.action_factor, float), seed=seed,
                          max_action_effect=config.max_action_effect).bandwidths
    return data, bw, task.initial_states(data, config, seed)


def report_seed(task, config, seed: int, changes: dict, chain: bool, paths: int) -> None:
    data, bw, s0 = task_inputs(task, config, seed)
    k = lqr_from_data(data)
    print(f"seed {seed}: LQR gain K {np.round(k, 3).tolist()}", flush=True)
    rng = np.random.default_rng(seed)
    for name, gain in variants(k).items():
        policy = LinearForce(gain)
        real = evaluate_episodes(task.env_fn(config)(), policy, 5, seed=1_000_000 + 1000 * seed)
        algo = NOPG(policy, dataclasses.replace(config.nopg, seed=seed, **changes))
        algo.setup(data, bw, s0)
        print(f"| {seed} | {name} | {np.mean(real['returns']):.1f} | {algo.J_hat():.2f} | "
              f"{algo.support_gap_:.3f} |", flush=True)
        if chain:
            with torch.no_grad():
                sol = algo.model_.solution(policy, s0)
            model = chain_spread(sol.P.to_dense().numpy(), sol.eps0.detach().numpy(),
                                 np.asarray(data.next_states, float), paths, rng)
            truth = real_spread(task.env_fn(config), policy, 20, 1_000_000 + 1000 * seed)
            for t in STEPS:
                print(f"|   | step {t} | model sd {np.round(model[t], 4).tolist()} | "
                      f"real sd {np.round(truth[t], 4).tolist()} |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a NOPGConfig field and its JSON value")
    parser.add_argument("--chain", action="store_true", help="sample the model's chain")
    parser.add_argument("--paths", type=int, default=400)
    args = parser.parse_args()
    logging.disable(logging.INFO)
    torch.set_num_threads(1)
    changes = {key: json.loads(value) for key, value in (s.split("=", 1) for s in args.set)}
    task = get_task("invertedpendulum-random")
    config = task.default_config()
    print("| seed | policy | real return | J_hat | support gap |\n|---|---|---|---|---|")
    for seed in args.seeds:
        report_seed(task, config, seed, changes, args.chain, args.paths)


if __name__ == "__main__":
    main()
