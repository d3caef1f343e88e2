"""How much of the action's effect on the next state the kernel model keeps, per action bandwidth.

    python benchmarks/action_attenuation.py pendulum-random:0 cartpole-random:1 \
        invertedpendulum-random:0 pendulum-controller:0 [--factors 1 0.3 0.1] [--queries 300]

For each data set: the ``auto`` bandwidths; at ``--queries`` data states ``s`` (drawn with seed 0)
the Nadaraya-Watson prediction of the state change ``m(s, a) = sum_j eps_j(s, a) (s'_j - s_j)``
(full softmax over the data, the model's responsibilities) at the two actions ``mean(a) -+ std(a)``,
and its slope in the action; the median over the queries, per state dimension, against the slope
of a least-squares fit of ``s' - s`` on ``(1, s, a)`` over the whole data set. A ratio below 1 is
the share of the action's effect that the model keeps (the wide-kernel attenuation discussed in
``docs/bandwidths.md``). Action dimension 0 only.
"""

from __future__ import annotations

import argparse
import logging

import numpy as np
from scipy.special import softmax

from nopg.bandwidth import select_bandwidths
from nopg.experiments import get_task


def attenuation(task_name: str, seed: int, factors: list[float], n_queries: int) -> list[str]:
    """Lines of the report for one data set."""
    task = get_task(task_name)
    data = task.make_dataset(task.default_config(), seed)
    bw = select_bandwidths(data, "auto")
    S, A, S2 = data.states, data.actions, data.next_states
    n = S.shape[0]
    X = np.hstack([np.ones((n, 1)), S, A])
    coef, *_ = np.linalg.lstsq(X, S2 - S, rcond=None)
    linear = coef[1 + S.shape[1]]                       # slope of action dimension 0
    dim = int(np.argmax(np.abs(linear) / S.std(0)))       # the state dimension it moves most
    queries = np.random.default_rng(0).choice(n, size=min(n_queries, n), replace=False)
    centre, spread = A[:, 0].mean(), A[:, 0].std()
    lines = [f"{task_name} seed {seed}: n = {n}, action bandwidth {bw.action[0]:.3g}, linear "
             f"slope of s'[{dim}] - s[{dim}] per unit action {linear[dim]:.4g}"]
    change = S2[:, dim] - S[:, dim]
    log_s = [-0.5 * (((S[i] - S) / bw.state) ** 2).sum(1) for i in queries]   # per query, once
    for factor in factors:
        h_a = bw.action * factor
        log_a = []                              # the action term at the two actions, per factor
        for a0 in (centre - spread, centre + spread):
            a = A.copy()
            a[:, 0] -= a0
            log_a.append(-0.5 * ((a / h_a) ** 2).sum(1))
        slopes = [(softmax(ls + log_a[1]) @ change - softmax(ls + log_a[0]) @ change) / (2 * spread)
                  for ls in log_s]
        slope = float(np.median(slopes))
        lines.append(f"  action bandwidth x {factor:g} ({h_a[0]:.3g}): kernel-model slope "
                     f"{slope:.4g} = {slope / linear[dim]:.2f} of the linear fit")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("datasets", nargs="+", metavar="TASK:SEED")
    parser.add_argument("--factors", type=float, nargs="+", default=[1.0, 0.3, 0.1])
    parser.add_argument("--queries", type=int, default=300)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    for item in args.datasets:
        name, _, seed = item.partition(":")
        for line in attenuation(name, int(seed or 0), args.factors, args.queries):
            print(line)


if __name__ == "__main__":
    main()
