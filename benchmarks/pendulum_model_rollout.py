"""A pendulum policy in the anchored model against the real pendulum (research script).

For a checkpoint of a pendulum fit (``nopg reproduce pendulum-uniform ... --set
'nopg.successors="anchored"'`` writes ``seed_<k>/checkpoint``), the script prints

* the model's mean rollout (the anchors of :mod:`nopg.anchored`) beside the real Pendulum-v1
  trajectory of the same policy from the bottom at rest: angle (degrees, 0 = up) and speed;
* the largest state the rollout reaches, against the data's speed limit of 8;
* the real discounted return over the rollout's horizon and the model's ``J_hat`` from the same
  start;
* with ``--draws K``: ``J_hat`` from ``K`` starts drawn around the bottom,
  ``z + scale * h_s * xi`` (what ``NOPGConfig(start_draws=K, start_draw_scale=scale)`` averages),
  each alone and all together, and the real discounted return from each.

    python benchmarks/pendulum_model_rollout.py CHECKPOINT [--draws 8] [--scale 2] [--seed 0]

A policy whose swing-up is caught in the model but overshoots in reality shows it here: the two
trajectories agree to the top and part there.
"""

from __future__ import annotations

import argparse

import gymnasium as gym
import numpy as np
import torch

from nopg import NOPG

BOTTOM = np.array([-1.0, 0.0, 0.0])
STEPS_SHOWN = (0, 10, 20, 30, 40, 50, 55, 60, 70, 80, 100, 150, 200)


def real_trajectory(policy: torch.nn.Module, start: np.ndarray, steps: int, gamma: float
                    ) -> tuple[np.ndarray, float]:
    """States after each of ``steps`` real steps from ``start`` (cos, sin, speed) and the
    discounted return."""
    env = gym.make("Pendulum-v1")
    env.reset(seed=0)
    env.unwrapped.state = np.array([np.arctan2(start[1], start[0]), start[2]])
    obs, states, ret = start.copy(), [], 0.0
    for t in range(steps):
        with torch.no_grad():
            action = policy(torch.tensor(obs[None], dtype=torch.float64)).numpy()[0]
        obs, reward, *_ = env.step(action)
        states.append(obs)
        ret += gamma ** t * float(reward)
    return np.array(states), ret


def angle(states: np.ndarray) -> np.ndarray:
    return np.degrees(np.arctan2(states[..., 1], states[..., 0]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoint")
    parser.add_argument("--draws", type=int, default=0)
    parser.add_argument("--scale", type=float, default=2.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    algo = NOPG.load(args.checkpoint)
    model, policy, gamma = algo.model_, algo.policy, algo.config.gamma
    if not hasattr(model, "rollout"):
        raise SystemExit("the checkpoint's model has no rollout: fit with successors='anchored'")
    z = BOTTOM[None]
    path = model.rollout(policy, z).numpy()[:, 0]
    real, real_return = real_trajectory(policy, BOTTOM, len(path), gamma)
    print("step | model angle, speed | real angle, speed")
    for t in STEPS_SHOWN:
        if t < len(path):
            print(f"{t:4d} | {angle(path[t]):7.1f} {path[t, 2]:7.2f} | "
                  f"{angle(real[t]):7.1f} {real[t, 2]:7.2f}")
    print(f"largest |state| of the rollout per dimension: {np.abs(path).max(0).round(3)}")
    with torch.no_grad():
        j_hat = model.solution(policy, z).J
    print(f"real discounted return ({len(path)} steps) {real_return:.1f}; J_hat {j_hat:.1f}")

    if args.draws:
        h = np.asarray(model.bandwidths.state, float)
        rng = np.random.default_rng(args.seed)
        starts = BOTTOM + args.scale * h * rng.standard_normal((args.draws, 3))
        with torch.no_grad():
            each = [model.solution(policy, s[None]).J for s in starts]
            joint = model.solution(policy, starts).J
        truth = [real_trajectory(policy, s, len(path), gamma)[1] for s in starts]
        print(f"{args.draws} starts at scale {args.scale}: J_hat each {np.round(each, 1)}, "
              f"mean {np.mean(each):.1f}, together {joint:.1f}")
        print(f"  real discounted return each {np.round(truth, 1)}, mean {np.mean(truth):.1f}")


if __name__ == "__main__":
    main()
