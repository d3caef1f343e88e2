"""Does a cross-fitted judge choose among a fit's snapshots better than the in-sample judge?

    OMP_NUM_THREADS=1 python benchmarks/crossfit_snapshots_probe.py \
        --data pendulum-grid-200 pendulum-controller --seeds 0 1 2 3 4 5 6 7 8 9 \
        --out records/crossfit_snapshots.jsonl

The default method keeps one of a fit's policies (the final one and a copy every 100 updates
from update 500 on) by the judge's forecast, the judge being an anchored model of the same data
the fit was made on (in-sample). The cross-fitted alternative (issue "One NOPG", lead
"selection by cross-fitting") splits the data's episodes into two folds at random (the seed),
makes the same fit on each fold's complement, scores that fit's policies at the same updates on
a judge built from the held-out fold only, and keeps, in the fit on all data, the update whose
mean held-out forecast is best (the same preference rule: the final policy first, an earlier
one only where it is better by more than 1%). Both rules choose among the same policies of the
fit on all data, each of which is evaluated with the task's protocol, so their regret@1 and the
rank correlation of their scores with the true returns compare on the same candidates.

One JSON line per data set and seed.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch
from scipy.stats import spearmanr

from nopg import AutoNOPG, MethodConfig
from nopg.select.policy_selection import JudgeScore, best_score, judge_model, score_policy
from nopg.select.snapshots import policy_state
from nopg.select.task_knowledge import with_bounds

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_method_cost import DATA_SETS, task_setup  # noqa: E402


def fit_states(data, s0, knowledge, seed):
    """The default configuration's ``given`` fit on ``data``: the method, its context, the fit
    and its policies (final first, then the snapshots from the latest back) as (update, state)."""
    method = AutoNOPG(MethodConfig(recipes=("given",)), seed=seed)
    ctx = method._context(data, s0, knowledge["action_max"], knowledge["state_bounds"],
                          knowledge["terminal_bounds"], knowledge["horizon"], None, None, 100,
                          False, None, None, False)
    config = method._recipe_config(ctx, "given")
    algo, _, snaps = method._fit_once(ctx, config, "given", 0, config.n_updates, "log.csv", None)
    states = [(algo.update_, policy_state(algo.policy))]
    states += [(s.update, s.state) for s in sorted(snaps.snapshots, key=lambda s: -s.update)
               if s.update != algo.update_]
    return method, ctx, algo, states


def heldout_judge(method, ctx, data):
    """The judge :class:`AutoNOPG` builds, on ``data`` (one fold) with the full data's
    bandwidths."""
    cfg = with_bounds(method.config.replace(**{"nopg.model.successors": "anchored"}),
                      ctx.state_bounds, ctx.terminal_bounds)
    return judge_model(data, ctx.bandwidths, cfg.nopg, method.config.stochastic)


def choose(forecasts: np.ndarray) -> int:
    """The index kept by the snapshot rule (final first, 1% margin, no tie-break)."""
    scores = [JudgeScore(float(f), 0.0, 0, 1, 0.0, 0.0) for f in forecasts]
    return best_score(scores, tie_break=False)


def run_one(name: str, seed: int) -> dict:
    task, config, data, s0, knowledge = task_setup(name, seed)
    start = time.perf_counter()
    method, ctx, algo, states = fit_states(data, s0, knowledge, seed)
    full_s = time.perf_counter() - start
    judge = method.judge(ctx)
    updates = [u for u, _ in states]
    inside, returns = [], []
    for _, state in states:
        algo.load_policy_state(state)
        inside.append(score_policy(judge, algo.policy, ctx.few_starts, ctx.horizon,
                                   seed).episode_return_mean)
        returns.append(float(np.mean(task.evaluate(algo.policy, config, seed,
                                                   config.final_eval_episodes))))
    episodes = data.episodes()
    order = np.random.default_rng(seed).permutation(len(episodes))
    folds = [np.concatenate([episodes[i] for i in order[k::2]]) for k in range(2)]
    start = time.perf_counter()
    cross = np.full((2, len(updates)), np.nan)
    for k, fold in enumerate(folds):
        train = np.setdiff1d(np.arange(len(data)), fold)
        m_k, ctx_k, algo_k, states_k = fit_states(data.subset(train), s0, knowledge, seed)
        judge_k = heldout_judge(method, ctx, data.subset(np.sort(fold)))
        by_update = dict(states_k)
        for j, u in enumerate(updates):
            if u in by_update:
                algo_k.load_policy_state(by_update[u])
                cross[k, j] = score_policy(judge_k, algo_k.policy, ctx.few_starts, ctx.horizon,
                                           seed).episode_return_mean
    cross_s = time.perf_counter() - start
    mean_cross = cross.mean(0)
    i_in, i_cross = choose(np.array(inside)), choose(mean_cross)
    best = max(returns)
    rho = lambda x: None if len(set(np.round(x, 12))) < 2 else float(spearmanr(x, returns)[0])  # noqa: E731
    return {"data": name, "seed": seed, "n": len(data), "episodes": len(episodes),
            "updates": updates, "returns": returns, "forecast_in_sample": inside,
            "forecast_cross": cross.tolist(), "kept_in_sample": updates[i_in],
            "kept_cross": updates[i_cross], "regret_in_sample": best - returns[i_in],
            "regret_cross": best - returns[i_cross], "final_regret": best - returns[0],
            "spearman_in_sample": rho(inside), "spearman_cross": rho(mean_cross),
            "full_fit_s": full_s, "cross_s": cross_s}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", nargs="+", default=["pendulum-grid-200", "pendulum-controller"],
                        choices=list(DATA_SETS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0])
    parser.add_argument("--out", type=Path, default=None, help="append JSON lines here")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    for name in args.data:
        for seed in args.seeds:
            line = json.dumps(run_one(name, seed))
            print(line, flush=True)
            if args.out is not None:
                with args.out.open("a") as f:
                    f.write(line + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
