"""Does a cross-fitted model value rank NOPG policies? (issue 10: policy-level validation)

    python benchmarks/crossfit_probe.py cartpole-random --seeds 0 1 2 3 4 5 6 7 8 9 \
        --configs auto action=2.5 --out docs/runs/crossfit_probe.csv --workers 2

For every seed the task's data set is split at random into two halves A and B (transitions,
seeded). For every configuration (``auto``: the task's defaults; ``action=F`` / ``state=F``: the
``auto`` bandwidths times F) and every fold (fit on A, score on B; and, with ``--folds 2``, fit
on B, score on A) the script

1. fits NOPG on the fitting half with the task's settings (its updates, policy, NOPG config);
2. evaluates the policy on the task (its final evaluation: ``final_eval_episodes``);
3. records ``J_own``, the fitting model's ``J_hat``, and ``J_cross``, the policy's value under a
   model of the other half with that half's own ``auto`` bandwidths (the same scoring model for
   every configuration, so scores compare across configurations).

One CSV row per fit. The summary gives the Spearman rank correlation of ``J_own`` and of
``J_cross`` with the return over all fits, and, per seed, whether the configuration with the
higher mean ``J_cross`` is the one with the higher mean return.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
from scipy.stats import spearmanr

FIELDS = ("task", "seed", "config", "fold", "n_fit", "return", "J_own", "J_cross", "fit_time_s")


def _factors(name: str, action_dim: int, state_dim: int) -> tuple[np.ndarray, np.ndarray]:
    state, action = np.ones(state_dim), np.ones(action_dim)
    if name != "auto":
        for part in name.split(","):
            key, value = part.split("=")
            if key == "action":
                action = action * float(value)
            elif key == "state":
                state = state * float(value)
            else:
                raise ValueError(f"unknown configuration part {part!r}: use action=F or state=F")
    return state, action


def _one(job: tuple[str, int, str, int, int | None]) -> dict:
    task_name, seed, cfg_name, fold, n_updates = job
    import warnings

    import torch

    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    from nopg import NOPG, select_bandwidths
    from nopg.bandwidth_report import bandwidth_report
    from nopg.experiments import get_task
    from nopg.experiments.runner import make_policy

    task = get_task(task_name)
    config = task.default_config()
    data = task.make_dataset(config, seed)
    perm = np.random.default_rng([seed, 77]).permutation(data.n)
    halves = (np.sort(perm[: data.n // 2]), np.sort(perm[data.n // 2:]))
    fit_data, score_data = data.subset(halves[fold]), data.subset(halves[1 - fold])
    s0 = task.initial_states(data, config, seed)
    sf, af = _factors(cfg_name, data.action_dim, data.state_dim)
    bw = bandwidth_report(fit_data, method=config.bandwidth_method, state_factor=sf,
                          action_factor=af, seed=seed).bandwidths
    torch.manual_seed(seed)
    policy = make_policy(task, config, fit_data)
    nopg_cfg = dataclasses.replace(config.nopg, seed=seed)
    algo = NOPG(policy, nopg_cfg, stochastic=config.stochastic)
    t = time.perf_counter()
    algo.fit(fit_data, bw, s0, n_updates or config.n_updates, progress=False)
    fit_time = time.perf_counter() - t
    ret = float(np.mean(task.evaluate(algo.policy, config, seed, config.final_eval_episodes)))
    scorer = NOPG(algo.policy, nopg_cfg, stochastic=config.stochastic)
    scorer.setup(score_data, select_bandwidths(score_data), s0)
    with torch.no_grad():
        j_cross = scorer.model_.solution(algo.policy, scorer.initial_states_,
                                         torch.Generator().manual_seed(seed)).J
    return {"task": task_name, "seed": seed, "config": cfg_name, "fold": fold, "n_fit": fit_data.n,
            "return": ret, "J_own": algo.J_hat(), "J_cross": float(j_cross),
            "fit_time_s": round(fit_time, 1)}


def _spearman(x: np.ndarray, y: np.ndarray) -> float:
    return float(spearmanr(x, y).statistic) if len(x) > 2 else float("nan")


def summarize(rows: list[dict]) -> str:
    ret = np.array([float(r["return"]) for r in rows])
    lines = [f"{len(rows)} fits: Spearman(J_own, return) = "
             f"{_spearman(np.array([float(r['J_own']) for r in rows]), ret):.2f}, "
             f"Spearman(J_cross, return) = "
             f"{_spearman(np.array([float(r['J_cross']) for r in rows]), ret):.2f}"]
    seeds = sorted({int(r["seed"]) for r in rows})
    agree = total = 0
    for s in seeds:
        per = {}
        for r in rows:
            if int(r["seed"]) == s:
                per.setdefault(r["config"], []).append((float(r["J_cross"]), float(r["return"])))
        if len(per) < 2:
            continue
        by_cross = max(per, key=lambda c: np.mean([v[0] for v in per[c]]))
        by_return = max(per, key=lambda c: np.mean([v[1] for v in per[c]]))
        total += 1
        agree += by_cross == by_return
        lines.append(f"seed {s}: " + ", ".join(
            f"{c}: return {np.mean([v[1] for v in per[c]]):.1f}, J_cross "
            f"{np.mean([v[0] for v in per[c]]):.3f}" for c in per)
            + f" -> J_cross picks {by_cross}, best is {by_return}")
    if total:
        lines.append(f"J_cross picks the configuration with the higher return on {agree} of {total} seeds")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("task")
    p.add_argument("--seeds", type=int, nargs="+", default=list(range(10)))
    p.add_argument("--configs", nargs="+", default=["auto"])
    p.add_argument("--folds", type=int, default=1, choices=[1, 2])
    p.add_argument("--updates", type=int, default=None, help="default: the task's n_updates")
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--summary-only", action="store_true", help="summarise --out and stop")
    args = p.parse_args(argv)
    if not args.summary_only:
        jobs = [(args.task, s, c, f, args.updates) for s in args.seeds for c in args.configs
                for f in range(args.folds)]
        new = not args.out.exists()
        with ProcessPoolExecutor(args.workers) as pool, open(args.out, "a", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=FIELDS)
            if new:
                writer.writeheader()
            for row in pool.map(_one, jobs):
                writer.writerow(row)
                fh.flush()
                print({k: (round(v, 4) if isinstance(v, float) else v) for k, v in row.items()},
                      flush=True)
    with open(args.out) as fh:
        rows = [r for r in csv.DictReader(fh) if r["task"] == args.task]
    print(summarize(rows))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.exit(main())
