"""Cart-pole: how fitted policies end their evaluation episodes.

Loads the checkpoint of each seed from a results folder (``bandwidth_study.py`` writes
``<folder>/seed_<s>/checkpoint``), runs the task's evaluation (10^4 steps from the reset
distribution, ``--episodes`` starts drawn as in the task) and prints, per episode, its length,
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
from nopg.envs.cartpole import (
    DT,
    INIT_THETA_MAX,
    STABILIZATION_THETA,
    X_LIMIT,
    cartpole_step,
    sample_initial_states,
    state_to_obs,
)


def upright_response(policy: torch.nn.Module, dx: float = 0.05) -> tuple[float, float]:
    """The policy's voltage at the upright state at rest and its central difference in ``x``."""
    states = np.array([[0.0, 0, 0, 0], [dx, 0, 0, 0], [-dx, 0, 0, 0]])
    with torch.no_grad():
        u = policy(torch.as_tensor(state_to_obs(states), dtype=torch.float64)).reshape(-1)
    return float(u[0]), float((u[1] - u[2]) / (2 * dx))


def episode_end(policy: torch.nn.Module, start: np.ndarray, n_steps: int) -> dict[str, float]:
    """Run one episode; return its length, cause of the stop and final state."""
    s = start.copy()
    for t in range(n_steps):
        with torch.no_grad():
            u = float(policy(torch.as_tensor(state_to_obs(s)[None], dtype=torch.float64))
                      .reshape(-1)[0])
        s = cartpole_step(s[None], np.array([u]), DT)[0]
        theta = (s[1] + np.pi) % (2 * np.pi) - np.pi
        cause = ("pole" if abs(theta) > STABILIZATION_THETA else
                 "track" if abs(s[0]) > X_LIMIT else "")
        if cause:
            return {"length": t + 1, "cause": cause, "x": s[0], "theta": theta, "x_dot": s[2]}
    return {"length": n_steps, "cause": "none", "x": s[0], "theta": s[1], "x_dot": s[2]}


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
        starts = sample_initial_states(np.random.default_rng([seed, 2]), args.episodes,
                                       INIT_THETA_MAX)
        ends = [episode_end(algo.policy, s, args.steps) for s in starts]
        stops = [e for e in ends if e["cause"] != "none"]
        pole = sum(e["cause"] == "pole" for e in stops)
        x_end = np.mean([e["x"] for e in stops]) if stops else float("nan")
        th_end = np.mean([abs(e["theta"]) for e in stops]) if stops else float("nan")
        lengths = ", ".join(str(e["length"]) for e in ends)
        print(f"| {seed} | {u0:+.2f} | {gain:+.1f} | {lengths} | {pole} / {len(stops) - pole} "
              f"| {x_end:+.3f} | {th_end:.3f} |", flush=True)


if __name__ == "__main__":
    main()
