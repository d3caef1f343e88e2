"""Cart-pole: how fitted policies end their evaluation episodes.

Loads the checkpoint of each seed from a results folder (``bandwidth_study.py`` writes
``<folder>/seed_<s>/checkpoint``), runs the task's evaluation
(:func:`nopg.experiments.cartpole_random.evaluate_cartpole`: 10^4 steps from the task's reset
states of that seed) and prints, per episode, its length,
why it stopped (the pole past the stabilisation limit or the cart at the track limit), the state
where it stopped, and the policy's voltage and position gain at the upright state at rest.

    python benchmarks/cartpole_failure_modes.py /tmp/study_cartpole-random_xxx --seeds 3 4 5
"""

from __future__ import annotations

import argparse
import logging

import numpy as np
import torch

from nopg import NOPG
from nopg.checkpoint import load_checkpoint
from nopg.envs.cartpole import STABILIZATION_THETA, state_to_obs
from nopg.experiments.cartpole_random import evaluate_cartpole


def upright_response(policy: torch.nn.Module, dx: float = 0.05) -> tuple[float, float]:
    """The policy's voltage at the upright state at rest and its central difference in ``x``."""
    states = np.array([[0.0, 0, 0, 0], [dx, 0, 0, 0], [-dx, 0, 0, 0]])
    with torch.no_grad():
        u = policy(torch.as_tensor(state_to_obs(states), dtype=torch.float64)).reshape(-1)
    return float(u[0]), float((u[1] - u[2]) / (2 * dx))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder")
    parser.add_argument("--seeds", type=int, nargs="+", required=True)
    parser.add_argument("--episodes", type=int, default=10)
    parser.add_argument("--steps", type=int, default=10_000)
    args = parser.parse_args()
    logging.disable(logging.INFO)
    torch.set_num_threads(1)
    print("| seed | u at upright (V) | du/dx (V/m) | episode lengths | stops (pole / track) "
          "| final x (m), mean of stops | final theta (rad), mean abs of stops |")
    print("|---|---|---|---|---|---|---|")
    for seed in args.seeds:
        algo = load_checkpoint(NOPG, f"{args.folder}/seed_{seed}/checkpoint")
        u0, gain = upright_response(algo.policy)
        out = evaluate_cartpole(algo.policy, args.episodes, seed, args.steps)
        stopped = out["terminated"]
        theta = (out["final_states"][:, 1] + np.pi) % (2 * np.pi) - np.pi   # wrapped
        pole = int(np.sum(stopped & (np.abs(theta) > STABILIZATION_THETA)))  # the rest: the track
        x_end = out["final_states"][stopped, 0].mean() if stopped.any() else float("nan")
        th_end = np.abs(theta[stopped]).mean() if stopped.any() else float("nan")
        lengths = ", ".join(str(n) for n in out["lengths"])
        print(f"| {seed} | {u0:+.2f} | {gain:+.1f} | {lengths} | {pole} / {int(stopped.sum()) - pole} "
              f"| {x_end:+.3f} | {th_end:.3f} |", flush=True)


if __name__ == "__main__":
    main()
