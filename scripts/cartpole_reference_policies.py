"""Cart-pole: the model's ``J_hat`` of fixed linear controllers against their real returns.

Is the kernel model of ``cartpole-random``'s data right about which policies balance? This
script linearises the cart-pole at the upright equilibrium, designs a discrete LQR controller
(``Q = diag(1, 10, 0.1, 0.1)`` on ``(x, theta, x_dot, theta_dot)``, ``R = 0.1``) and variants
of it with gains removed or flipped, and reports for each

* its real return (10-episode mean of the task's evaluation: 10^4 steps from the reset
  distribution) and the cart's final distance from the centre;
* its ``J_hat`` and support gap under the task's default model of one seed's data, with the
  action bandwidth at several multiples of the action spread (``--action-factors``; 1 is the
  ``auto`` rule without its action guard, about 0.5 what the guard chooses on this task).

With ``--chain`` it also reports, for the LQR and its flipped-``x`` variant under the task's
default model (``auto`` with its guard), the spread of ``(x, theta, x_dot, theta_dot)`` along
the model's own Markov chain against real episodes (as
``scripts/invertedpendulum_reference_policies.py --chain``).

Every policy outputs ``5 tanh(-K s / 5)`` volts, the range of the task's policies. No fitting.

    python scripts/cartpole_reference_policies.py --seeds 0 1 --action-factors 1 0.5 0.25 0.1
    python scripts/cartpole_reference_policies.py --seeds 1 --chain
"""

from __future__ import annotations

import argparse
import dataclasses
import logging

import numpy as np
import scipy.linalg
import torch
from invertedpendulum_reference_policies import STEPS, chain_spread, task_inputs
from torch import nn

from nopg import NOPG
from nopg.bandwidth.selection import knn_bandwidths
from nopg.envs.cartpole import INIT_THETA_MAX, cartpole_step, sample_initial_states, simulate_cartpole
from nopg.experiments import get_task


def lqr_gain(q: tuple[float, ...] = (1.0, 10.0, 0.1, 0.1), r: float = 0.1) -> np.ndarray:
    """The discrete LQR gain ``K`` (``u = -K s``) of the cart-pole linearised at upright."""
    eps = 1e-6

    def step(state: np.ndarray, volts: float) -> np.ndarray:
        return cartpole_step(state, volts, wrap=False)

    zero = np.zeros(4)
    a = np.zeros((4, 4))
    for i in range(4):
        d = np.zeros(4)
        d[i] = eps
        a[:, i] = (step(zero + d, 0.0) - step(zero - d, 0.0)) / (2 * eps)
    b = ((step(zero, eps) - step(zero, -eps)) / (2 * eps))[:, None]
    p = scipy.linalg.solve_discrete_are(a, b, np.diag(q), np.array([[r]]))
    return np.linalg.solve(r + b.T @ p @ b, b.T @ p @ a)[0]


class LinearPolicy(nn.Module):
    """``5 tanh(-K s / 5)`` volts from the observation ``[x, sin th, cos th, x_dot, th_dot]``."""

    def __init__(self, gain: np.ndarray) -> None:
        super().__init__()
        self.register_buffer("gain", torch.as_tensor(gain, dtype=torch.float64))
        self.unused = nn.Parameter(torch.zeros(1, dtype=torch.float64))  # NOPG wants parameters

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        obs = obs.to(torch.float64)
        theta = torch.atan2(obs[..., 1], obs[..., 2])
        s = torch.stack([obs[..., 0], theta, obs[..., 3], obs[..., 4]], -1)
        return 5.0 * torch.tanh(-(s @ self.gain) / 5.0)[..., None] + 0.0 * self.unused


def variants(k: np.ndarray) -> dict[str, np.ndarray]:
    return {"LQR": k, "x gain 0": k * [0, 1, 1, 1], "x gain flipped": k * [-1, 1, 1, 1],
            "x and x_dot gains 0": k * [0, 1, 0, 1], "x and x_dot flipped": k * [-1, 1, -1, 1],
            "zero": 0 * k}


def _angles(obs: np.ndarray) -> np.ndarray:
    """``(x, theta, x_dot, theta_dot)`` from observations ``[x, sin, cos, x_dot, theta_dot]``."""
    return np.stack([obs[:, 0], np.arctan2(obs[:, 1], obs[:, 2]), obs[:, 3], obs[:, 4]], 1)


def real_spread(policy: nn.Module, starts: np.ndarray) -> dict[int, np.ndarray]:
    """Standard deviation of the state over episodes from ``starts`` at ``STEPS`` (no limits)."""
    s, seen = np.array(starts, float), {}
    for t in range(1, max(STEPS) + 1):
        obs = np.stack([s[:, 0], np.sin(s[:, 1]), np.cos(s[:, 1]), s[:, 2], s[:, 3]], 1)
        with torch.no_grad():
            u = policy(torch.as_tensor(obs)).numpy()[:, 0]
        s = np.stack([cartpole_step(si, ui, wrap=False) for si, ui in zip(s, u)])
        if t in STEPS:
            seen[t] = s.std(0)
    return seen


def chain_report(task, config, seed: int, k: np.ndarray) -> None:
    """The spread of the model's chain against real episodes (the ``--chain`` table)."""
    data, bw, s0 = task_inputs(task, config, seed)
    nxt = _angles(np.asarray(data.next_states, float))
    print(f"seed {seed}: the data's next states' sd {np.round(nxt.std(0), 4).tolist()}")
    rng = np.random.default_rng(seed)
    starts = sample_initial_states(np.random.default_rng([seed, 2]), 20, INIT_THETA_MAX)
    for name in ("LQR", "x gain flipped"):
        policy = LinearPolicy(variants(k)[name])
        algo = NOPG(policy, dataclasses.replace(config.nopg, seed=seed))
        algo.setup(data, bw, s0)
        with torch.no_grad():
            sol = algo.model_.solution(policy, s0)
        model = chain_spread(sol.P.to_dense().numpy(), sol.eps0.detach().numpy(), nxt, 400, rng)
        truth = real_spread(policy, starts)
        print(f"| {seed} | {name} | J_hat {sol.J:.2f} |")
        for t in STEPS:
            print(f"|   | step {t} | model sd {np.round(model[t], 4).tolist()} | "
                  f"real sd {np.round(truth[t], 4).tolist()} |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--action-factors", type=float, nargs="+", default=[1.0, 0.5, 0.25, 0.1])
    parser.add_argument("--chain", action="store_true", help="sample the model's chain instead")
    args = parser.parse_args()
    logging.disable(logging.INFO)
    torch.set_num_threads(1)
    task = get_task("cartpole-random")
    config = task.default_config()
    k = lqr_gain()
    if args.chain:
        for seed in args.seeds:
            chain_report(task, config, seed, k)
        return
    print(f"LQR gain K (u = -K s, s = (x, theta, x_dot, theta_dot)): {np.round(k, 3).tolist()}")
    header = " | ".join(f"J_hat (gap), action x{f:g}" for f in args.action_factors)
    print(f"| seed | policy | real return | final abs x (m) | {header} |")
    print("|" + "---|" * (4 + len(args.action_factors)))
    for seed in args.seeds:
        data = task.make_dataset(config, seed)
        spread = knn_bandwidths(data, max_action_effect=None)   # action bandwidth = spread
        s0 = task.initial_states(data, config, seed)
        starts = sample_initial_states(np.random.default_rng([seed, 2]), 10, INIT_THETA_MAX)
        for name, gain in variants(k).items():
            policy = LinearPolicy(gain)
            with torch.no_grad():
                real = simulate_cartpole(lambda o, p=policy: p(torch.as_tensor(o)).numpy(), starts)
            cells = []
            for f in args.action_factors:
                algo = NOPG(policy, dataclasses.replace(config.nopg, seed=seed))
                algo.setup(data, dataclasses.replace(spread, action=spread.action * f), s0)
                cells.append(f"{algo.J_hat():.2f} ({algo.support_gap_:.2f})")
            print(f"| {seed} | {name} | {real['returns'].mean():.1f} | "
                  f"{np.abs(real['final_states'][:, 0]).mean():.3f} | " + " | ".join(cells) + " |",
                  flush=True)


if __name__ == "__main__":
    main()
