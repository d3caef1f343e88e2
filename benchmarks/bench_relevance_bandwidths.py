"""Relevance bandwidths against ``auto`` on Hopper's random data (issue 61: NOPG beyond ten dimensions).

    OMP_NUM_THREADS=1 python benchmarks/bench_relevance_bandwidths.py --n 10000 --updates 100 \
        --out records/relevance_bandwidths.jsonl

One process, one thread. The data: ``--n`` Hopper-v5 transitions under uniform random actions
(:func:`nopg.envs.hopper.collect_hopper`, seed 0; 11-D state, 3-D action) to select and fit on,
and ``--n-test`` more (seed 1) that no selection sees. Per rule (``auto``: the ``auto``
bandwidths; ``relevance``: :func:`nopg.bandwidth.relevance.relevance_fit` from them, its
defaults, seed 0; ``relevance-state``: a diagnostic, the fitted state bandwidths with the
``auto`` action bandwidths), one JSON line with:

- ``select_s``: wall seconds to select (``relevance`` includes its ``auto`` start);
- ``heldout``: the one-step prediction error of the kernel regression on all ``--n`` fitting
  transitions at the ``--n-test`` others (:func:`nopg.bandwidth.relevance.one_step_prediction_error`:
  mean squared error of the standardised ``s' - s`` columns, of the reward, of all);
- ``relevance``: each state and action dimension's standard deviation over its bandwidth, and
  for ``relevance`` the fit's own held-out (leave-one-out) error before and after;
- a short NOPG fit with those bandwidths (the settings of ``bench_highdim_knn.py``: ``top_k = 10``,
  a deterministic MLP with one hidden layer of 50, gradient ascent 1e-2, kernel-mean next states,
  BiCGSTAB, seed 0; the data's episode starts as start states): ``J_hat`` after the first and the
  last of ``--updates`` updates, seconds per update, and the return of the final policy over
  ``--episodes`` evaluation episodes of Hopper-v5 (1000-step limit, reset seeds 0, 1, ...).
"""

from __future__ import annotations

import argparse
import os
import sys

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from nopg import NOPG, GradientAscent, ModelConfig, NOPGConfig, TransitionDataset  # noqa: E402
from nopg.bandwidth.relevance import one_step_prediction_error, relevance_fit  # noqa: E402
from nopg.bandwidth.selection import Bandwidths, select_bandwidths  # noqa: E402
from nopg.policies.networks import DeterministicMLPPolicy  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _harness import Stopwatch, add_out_arg, append_jsonl, machine_line, timed  # noqa: E402


def short_fit(data: TransitionDataset, bw: Bandwidths, updates: int, lr: float, k: int,
              episodes: int) -> dict:
    """``updates`` NOPG updates with ``bw``, then the final policy's return on Hopper-v5."""
    from nopg.envs.evaluation import evaluate_policy
    from nopg.envs.hopper import make_hopper_env

    torch.manual_seed(0)
    policy = DeterministicMLPPolicy(data.state_dim, data.action_dim,
                                    action_max=float(np.abs(data.actions).max()), hidden=(50,))
    algo = NOPG(policy, NOPGConfig(optimizer=GradientAscent(learning_rate=lr),
                                   model=ModelConfig(top_k=k, n_mc_next=None, solver="bicgstab")))
    _, setup = timed(algo.setup, data, bw, data.episode_start_states())
    J, seconds = [], []
    for i in range(updates):
        with Stopwatch() as watch:
            m = algo.step()
        J.append(float(m["J_hat"]))
        seconds.append(watch.wall_s)
        if (i + 1) % 10 == 0 or i == 0:
            print(f"  update {i + 1}: J_hat {J[-1]:.4f} ({watch.wall_s:.2f} s)", file=sys.stderr, flush=True)
    evaluation = evaluate_policy(lambda: make_hopper_env(), algo.policy, n_episodes=episodes, seed=0)
    return {"setup_s": setup.wall_s, "updates": updates, "update_s": float(np.mean(seconds)),
            "J_hat_first": J[0], "J_hat_last": J[-1], "J_hat_max": max(J),
            "return_mean": evaluation["mean"], "return_std": evaluation["std"],
            "returns": evaluation["returns"], "lengths": evaluation["lengths"]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=10_000, help="transitions to select and fit on")
    p.add_argument("--n-test", type=int, default=2000, help="held-out transitions (seed 1)")
    p.add_argument("--updates", type=int, default=100, help="NOPG updates per rule (0: no fit)")
    p.add_argument("--episodes", type=int, default=5, help="evaluation episodes of the final policy")
    p.add_argument("--k", type=int, default=10)
    p.add_argument("--lr", type=float, default=1e-2)
    add_out_arg(p, help="append one JSON line per rule to this file")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    from nopg.envs.hopper import collect_hopper

    data, data_watch = timed(collect_hopper, args.n, seed=0)
    test = collect_hopper(args.n_test, seed=1)
    std = np.hstack([data.states, data.actions]).std(0, ddof=1)
    common = {"data": "hopper-uniform", "n": data.n, "n_test": test.n, "data_s": data_watch.wall_s,
              "threads": torch.get_num_threads(), "machine": machine_line()}
    auto, auto_watch = timed(select_bandwidths, data, "auto")
    fit, fit_watch = timed(relevance_fit, data, seed=0)
    rows = [("auto", auto, auto_watch.wall_s, {}),
            ("relevance", fit.bandwidths, fit_watch.wall_s,
             {"fit_loss_start": fit.loss_start, "fit_loss": fit.loss, "fit_loss_mean": fit.loss_mean,
              "iterations": fit.iterations, "evaluations": fit.evaluations,
              "n_queries": fit.n_queries, "n_support": fit.n_support,
              "start_equals_auto": fit.start == auto}),
            ("relevance-state", Bandwidths(fit.bandwidths.state, auto.action), fit_watch.wall_s, {})]
    for name, bw, seconds, extra in rows:
        out = {**common, "method": name, "select_s": seconds,
               "heldout": one_step_prediction_error(data, test, bw),
               "relevance": (std / np.concatenate([bw.state, bw.action])).tolist(),
               "bandwidths": bw.to_dict(), **extra}
        print(f"{name}: select {seconds:.2f} s, held-out error {out['heldout']}", file=sys.stderr, flush=True)
        if args.updates > 0:
            out["fit"] = short_fit(data, bw, args.updates, args.lr, args.k, args.episodes)
        print(out, flush=True)
        if args.out:
            append_jsonl(args.out, out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
