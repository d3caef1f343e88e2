"""Cart-pole: how fitted policies end their evaluation episodes.

Loads the checkpoint of each seed from a results folder (``bandwidth_study.py`` writes
``<folder>/seed_<s>/checkpoint``), runs the task's evaluation
(:func:`nopg.experiments.cartpole_random.evaluate_cartpole`: 10^4 steps from the task's reset
states of that seed) and prints, per episode, its length,
why it stopped (the pole past the stabilisation limit or the cart at the track limit), the state
where it stopped, and the policy's voltage and position gain at the upright state at rest.
With ``--model-steps N`` and a checkpoint of the anchored model (``successors="anchored"``), it
also prints how long the model's mean rollout lasts from the same starts, up to ``N`` steps
(:meth:`nopg.anchored.AnchoredBellman.episode_lengths`): the model's view of the same episodes,
undiscounted, so an end after the discount's horizon shows.

    python benchmarks/cartpole_failure_modes.py /tmp/study_cartpole-random_xxx --seeds 3 4 5
    python benchmarks/cartpole_failure_modes.py RUN_FOLDER --seeds 8 --steps 3000 --model-steps 3000
"""

from __future__ import annotations

import argparse
import logging

import numpy as np
import torch

from nopg import NOPG
from nopg.anchored import AnchoredBellman
from nopg.checkpoint import load_checkpoint
from nopg.envs.cartpole import STABILIZATION_THETA, state_to_obs
from nopg.experiments.cartpole_random import evaluate_cartpole, evaluation_starts


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
    parser.add_argument("--model-steps", type=int, default=0,
                        help="also the anchored model's episode lengths, up to this many steps")
    args = parser.parse_args()
    logging.disable(logging.INFO)
    torch.set_num_threads(1)
    model_column = " model's episode lengths |" if args.model_steps else ""
    print("| seed | u at upright (V) | du/dx (V/m) | episode lengths | stops (pole / track) "
          f"| final x (m), mean of stops | final theta (rad), mean abs of stops |{model_column}")
    print("|---|---|---|---|---|---|---|" + ("---|" if args.model_steps else ""))
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
        model = model_lengths(algo, seed, args.episodes, args.model_steps)
        print(f"| {seed} | {u0:+.2f} | {gain:+.1f} | {lengths} | {pole} / {int(stopped.sum()) - pole} "
              f"| {x_end:+.3f} | {th_end:.3f} |{model}", flush=True)


def model_lengths(algo: NOPG, seed: int, episodes: int, steps: int) -> str:
    """The anchored model's episode lengths from the evaluation's starts, as a table cell
    (empty without ``steps``)."""
    if not steps:
        return ""
    if not isinstance(algo.model_, AnchoredBellman):
        return " (not the anchored model) |"
    starts = state_to_obs(evaluation_starts(seed, episodes))
    lengths = algo.model_.episode_lengths(algo.policy, starts, steps)
    return " " + ", ".join(str(n) for n in lengths) + " |"


if __name__ == "__main__":
    main()
