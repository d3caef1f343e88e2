"""Time per update of ``NOPGConfig()`` (the ``auto`` settings) against the fastest explicit setting.

For every size the same Pendulum-like data (:func:`bench_scale.pendulum_data`), Silverman
bandwidths, deterministic 3-50-1 MLP (NOPG-D), Adam at 1e-2 and float64 are fitted with the
default configuration and with each explicit candidate setting, all in this one process, one
after the other: a fresh policy (same seed), ``--warmup`` untimed updates (they build the
neighbour candidates and the ILU preconditioner), then ``--updates`` timed updates (``--large-
updates`` from ``--large-n`` samples on). The ratio of every mean time per update to the best
candidate's is printed and written to ``--csv``; the target is a ratio of at most 1.5 for the
defaults. The candidates: dense ``P`` with the dense LU or BiCGSTAB, ``top_k=10`` with the dense LU
or BiCGSTAB (ILU-preconditioned, as in ``bench_scale.py``), unpreconditioned, and with exact
k-NN rows; each only up to the size where it is feasible (``MAX_N``).

    OMP_NUM_THREADS=1 python benchmarks/bench_defaults.py              # 2000, 10 000, 100 000
    OMP_NUM_THREADS=1 python benchmarks/bench_defaults.py --sizes 250 500 1000 --updates 30
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

import numpy as np
import torch
from _harness import Stopwatch, add_out_arg, median, write_csv
from bench_scale import pendulum_data

from nopg import NOPG, ModelConfig, NOPGConfig
from nopg.bandwidth.selection import select_bandwidths
from nopg.policies.networks import DeterministicMLPPolicy

DEFAULTS = "defaults"
CANDIDATES: dict[str, dict[str, Any]] = {
    "dense P + dense LU": dict(top_k=None, solver="dense"),
    "dense P + bicgstab": dict(top_k=None, solver="bicgstab"),
    "top_k=10 + dense LU": dict(top_k=10, solver="dense"),
    "top_k=10 + bicgstab": dict(top_k=10, solver="bicgstab"),
    "top_k=10 + bicgstab, no preconditioner": dict(top_k=10, solver="bicgstab",
                                                   preconditioner="none"),
    "top_k=10 + bicgstab, knn rows": dict(top_k=10, solver="bicgstab", neighbors="knn"),
}
MAX_N = {                      # largest n each candidate is timed at (memory, O(n^2) or O(n^3) time)
    "dense P + dense LU": 5000,
    "dense P + bicgstab": 5000,
    "top_k=10 + dense LU": 5000,
}
FIELDS = ("n", "setting", "top_k", "solver", "neighbors", "preconditioner", "updates",
          "update_ms_mean", "update_ms_median", "ratio_to_best", "J_hat", "iters_q", "iters_mu",
          "threads")


def time_setting(data: Any, bw: Any, config: NOPGConfig, warmup: int, updates: int
                 ) -> dict[str, Any]:
    """``warmup`` untimed updates, then ``updates`` timed ones, of a fresh policy."""
    torch.manual_seed(0)
    policy = DeterministicMLPPolicy(3, 1, action_max=2.0, hidden=(50,))
    algo = NOPG(policy, config)
    algo.setup(data, bw, np.array([[-1.0, 0.0, 0.0]]))
    for _ in range(warmup):
        algo.step()
    times = []
    for _ in range(updates):
        with Stopwatch() as watch:
            metrics = algo.step()
        times.append(watch.wall_s)
    return {"update_ms_mean": 1e3 * float(np.mean(times)),
            "update_ms_median": 1e3 * median(times), "J_hat": metrics["J_hat"],
            "iters_q": metrics["solver_iters_q"], "iters_mu": metrics["solver_iters_mu"]}


def one_size(n: int, args: argparse.Namespace) -> list[dict[str, Any]]:
    data = pendulum_data(n)
    bw = select_bandwidths(data, "silverman")
    updates = args.large_updates if n >= args.large_n else args.updates
    settings = {DEFAULTS: {}} | {name: kw for name, kw in CANDIDATES.items()
                                 if n <= MAX_N.get(name, n)}
    rows = []
    for name, kw in settings.items():
        config = NOPGConfig(model=ModelConfig(**kw))
        resolved = config.resolved(n).model
        row = {"n": n, "setting": name, "top_k": resolved.top_k, "solver": resolved.solver,
               "neighbors": resolved.neighbors, "preconditioner": resolved.preconditioner,
               "updates": updates, "threads": torch.get_num_threads()}
        row.update(time_setting(data, bw, config, args.warmup, updates))
        rows.append(row)
        print(f"  {name:40s} {row['update_ms_mean']:10.1f} ms  (top_k={row['top_k']}, "
              f"solver={row['solver']}, J_hat={row['J_hat']:.6f})", flush=True)
    best = min(r["update_ms_mean"] for r in rows if r["setting"] != DEFAULTS)
    for r in rows:
        r["ratio_to_best"] = r["update_ms_mean"] / best
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[2000, 10000, 100000])
    p.add_argument("--updates", type=int, default=20, help="timed updates per setting")
    p.add_argument("--large-updates", type=int, default=10, help="timed updates from --large-n on")
    p.add_argument("--large-n", type=int, default=50000)
    p.add_argument("--warmup", type=int, default=2, help="untimed updates before timing")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--target", type=float, default=1.5, help="largest acceptable defaults ratio")
    add_out_arg(p, "--csv", default="records/bench_defaults.csv", help="write the rows (CSV) here")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    print(f"# NOPGConfig() vs the best explicit setting: NOPG-D, float64, cpu, "
          f"{torch.get_num_threads()} thread(s), {os.cpu_count()} cores, mean of the timed updates")
    rows: list[dict[str, Any]] = []
    ok = True
    for n in args.sizes:
        print(f"n = {n}", flush=True)
        size_rows = one_size(n, args)
        rows += size_rows
        default = next(r for r in size_rows if r["setting"] == DEFAULTS)
        best = min((r for r in size_rows if r["setting"] != DEFAULTS),
                   key=lambda r: r["update_ms_mean"])
        ok &= default["ratio_to_best"] <= args.target
        print(f"  defaults / best ({best['setting']}): {default['ratio_to_best']:.2f}", flush=True)
    path = write_csv(args.out, rows, FIELDS, float_format=".6g")
    print(f"wrote {path}; defaults within {args.target}x of the best at every size: {ok}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
