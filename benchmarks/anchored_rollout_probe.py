"""The anchored model's optimum on the inverted pendulum, by Powell's method (research script).

The library's anchored model (``successors="anchored"``, :mod:`nopg.anchored`) began here as a
probe; this script keeps its two measurements, now on the library's model.

    python benchmarks/anchored_rollout_probe.py search SEED [HORIZON] [--penalty]

``search`` fits a linear controller ``3 tanh(-K s / 3)`` (the four gains ``K``, from 0) to the
inverted pendulum's anchored model (``anchor_horizon=HORIZON``, 400 by default) by Powell's
derivative-free method (``scipy.optimize.minimize``, at most 400 evaluations of ``J_hat``, fixed
next-state draws), and prints the real return (5 episodes), ``J_hat``, the gains, the
evaluations and the seconds. ``--penalty`` adds ``unsupported="penalty"`` (a successor pays for
its thinness against the data's next states). The library's own derivative-free search is
``optimizer="cma-es"`` (:mod:`nopg.search`).

    python benchmarks/anchored_rollout_probe.py rank STUDY_DIR invertedpendulum-random

``rank`` scores the final policy of every ``seed_<k>/checkpoint`` of a ``bandwidth_study.py``
folder (any model) by its ``J_hat`` under the anchored model (rollout of 150 steps) and prints
it beside the fit's own ``J_hat``, the return, and both Spearman rank correlations with the
return.

Earlier versions also differentiated the rollout (``--differentiable``, ``ascend``): Adam on
the anchored ``J_hat`` stalled (``docs/bandwidths.md``); the library's model holds the anchors
fixed in the gradient.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch


def quiet() -> None:
    """One torch thread, no info logs, no warnings (the modes' output is their table)."""
    import logging
    import warnings

    logging.disable(logging.INFO)
    warnings.simplefilter("ignore")
    torch.set_num_threads(1)


def anchored_algorithm(policy: torch.nn.Module, config, seed: int, inputs, horizon: int,
                       **changes):
    """``NOPG`` on the anchored model (``successors="anchored"``, ``solver="auto"``), set up
    on ``inputs`` (``task_inputs``'s data, bandwidths and initial states)."""
    import dataclasses

    from nopg import NOPG

    algo = NOPG(policy, dataclasses.replace(config.nopg, seed=seed, successors="anchored",
                                            anchor_horizon=horizon, solver="auto", **changes))
    algo.setup(*inputs)
    return algo


def real_return(task, config, policy: torch.nn.Module, seed: int, episodes: int) -> float:
    """Mean return of ``episodes`` real episodes (the seeds the reference scripts use)."""
    from nopg.evaluation import evaluate_episodes

    return float(np.mean(evaluate_episodes(task.env_fn(config)(), policy, episodes,
                                           seed=1_000_000 + 1000 * seed)["returns"]))


def rank(study: Path, task_name: str) -> None:
    """The ``rank`` table (module docstring)."""
    import json

    from invertedpendulum_reference_policies import task_inputs
    from scipy.stats import spearmanr

    from nopg import NOPG
    from nopg.checkpoint import load_checkpoint
    from nopg.experiments import get_task

    quiet()
    task = get_task(task_name)
    config = task.default_config()
    rows = []
    for seed_dir in sorted(study.glob("seed_*"), key=lambda p: int(p.name[5:])):
        seed = int(seed_dir.name[5:])
        policy = load_checkpoint(NOPG, seed_dir / "checkpoint").policy
        algo = anchored_algorithm(policy, config, seed, task_inputs(task, config, seed), 150)
        result = json.loads((seed_dir / "evaluation.json").read_text())
        fit_j = float((seed_dir / "log.csv").read_text().strip().splitlines()[-1].split(",")[1])
        rows.append((seed, result["return_mean"], fit_j, algo.J_hat()))
        print(f"| {seed} | {rows[-1][1]:.1f} | {fit_j:.2f} | {rows[-1][3]:.2f} |", flush=True)
    ret, fit_j, anchored = (np.array(c) for c in list(zip(*rows))[1:])
    print(f"Spearman with the return: the fit's J_hat {spearmanr(fit_j, ret).statistic:.2f}, "
          f"anchored J_hat {spearmanr(anchored, ret).statistic:.2f}")


def search(seed: int, horizon: int, penalty: bool = False) -> None:
    """The ``search`` fit (module docstring): Powell over a linear controller's four gains."""
    import time

    import scipy.optimize
    from invertedpendulum_reference_policies import LinearForce, task_inputs

    from nopg.experiments import get_task

    quiet()
    task = get_task("invertedpendulum-random")
    config = task.default_config()
    inputs = task_inputs(task, config, seed)
    s0 = inputs[2]
    policy = LinearForce(np.zeros(4))
    extra = {"unsupported": "penalty"} if penalty else {}
    algo = anchored_algorithm(policy, config, seed, inputs, horizon, **extra)

    def minus_j(gain: np.ndarray) -> float:
        policy.gain.copy_(torch.as_tensor(gain))
        with torch.no_grad():
            return -float(algo.model_.solution(policy, s0, torch.Generator().manual_seed(1234)).J)

    start = time.perf_counter()
    found = scipy.optimize.minimize(minus_j, np.zeros(4), method="Powell", options={"maxfev": 400})
    seconds = time.perf_counter() - start
    policy.gain.copy_(torch.as_tensor(found.x))
    print(f"| {seed} | {real_return(task, config, policy, seed, 5):.1f} | {-found.fun:.2f} | "
          f"{np.round(found.x, 3).tolist()} | {found.nfev} | {seconds:.0f} |", flush=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["search"]:
        numbers = [a for a in sys.argv[2:] if a != "--penalty"]
        search(int(numbers[0]), int(numbers[1]) if len(numbers) > 1 else 400,
               "--penalty" in sys.argv)
    elif sys.argv[1:2] == ["rank"]:
        rank(Path(sys.argv[2]), sys.argv[3])
    else:
        sys.exit(__doc__)
