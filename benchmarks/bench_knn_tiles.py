"""Full k-NN queries at 10^6 points: tile sizes of the torch back end against the KD-tree.

    python benchmarks/bench_knn_tiles.py --device cuda --n 1000000 --queries 200000
    OMP_NUM_THREADS=1 python benchmarks/bench_knn_tiles.py --n 100000 --queries 20000

The points are the benchmark's Pendulum-like (state, action) pairs scaled by their bandwidths
(``bench_scale.pendulum_data``, 4-D); the queries are next states with perturbed actions, as a
policy's rows are. This is the query that builds NOPG's candidate sets (``k = 41``: ``n_candidates``
plus one). Each variant answers the same queries (one untimed warm-up first on a GPU); the index
sets must agree with the KD-tree's (ties aside: the fraction of equal index sets is reported).
Times are wall-clock seconds of one run, reported with their ratio to the KD-tree with one worker
measured in the same run.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).parent))
from _harness import ratio, timed  # noqa: E402
from bench_scale import pendulum_data  # noqa: E402

from nopg import select_bandwidths  # noqa: E402
from nopg.model.neighbors import NeighborIndex  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=1_000_000)
    p.add_argument("--queries", type=int, default=200_000)
    p.add_argument("--k", type=int, default=41)
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    p.add_argument("--blocks", type=int, nargs="+", default=[24, 26, 27, 28],
                   help="log2 of block_elements of the torch back end")
    p.add_argument("--workers", type=int, nargs="+", default=[1, os.cpu_count() or 1],
                   help="KD-tree worker counts")
    args = p.parse_args(argv)
    data = pendulum_data(args.n)
    bw = select_bandwidths(data)
    rng = np.random.default_rng(1)
    pts = np.hstack([data.states / bw.state, data.actions / bw.action])
    rows = rng.choice(args.n, args.queries, replace=False)
    qa = data.actions[rows] + bw.action * rng.normal(size=(args.queries, data.action_dim))
    qry = np.hstack([data.next_states[rows] / bw.state, qa / bw.action])
    dtype = getattr(torch, args.dtype)
    print(f"# n={args.n} queries={args.queries} k={args.k} device={args.device} dtype={args.dtype}")
    ref = None
    base = None
    for w in args.workers:
        torch.set_num_threads(w)
        index = NeighborIndex(torch.tensor(pts, dtype=torch.float64), backend="kdtree")
        q = torch.tensor(qry, dtype=torch.float64)
        idx, watch = timed(index.query_index, q, args.k)
        secs = watch.wall_s
        base = base or secs
        ref = idx.sort(1).values if ref is None else ref
        print(f"kdtree   workers={w:<3} {secs:8.2f} s  ratio {ratio(secs, base):6.3f}", flush=True)
    torch.set_num_threads(1)
    P = torch.tensor(pts, dtype=dtype, device=args.device)
    Q = torch.tensor(qry, dtype=dtype, device=args.device)
    for b in args.blocks:
        index = NeighborIndex(P, backend="torch", block_elements=1 << b)
        if args.device.startswith("cuda"):
            index.query_index(Q[:1024], args.k)
        idx, watch = timed(index.query_index, Q, args.k, device=args.device)   # synchronised
        secs = watch.wall_s
        same = (idx.cpu().sort(1).values == ref).all(1).double().mean().item()
        print(f"torch    block=2^{b:<3} rows/tile={max(1, (1 << b) // args.n):<6} {secs:8.2f} s  "
              f"ratio {ratio(secs, base):6.3f}  same sets {same:.4f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
