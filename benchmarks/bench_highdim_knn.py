"""NOPG updates on high-dimensional pairs: the exact k-NN path against the graph search or state pools.

    OMP_NUM_THREADS=1 python benchmarks/bench_highdim_knn.py --data hopper --n 100000 --updates 20
    OMP_NUM_THREADS=1 python benchmarks/bench_highdim_knn.py --path pool --updates 100 --exact-updates 10
    OMP_NUM_THREADS=1 python benchmarks/bench_highdim_knn.py --data walker --n 100000 --updates 20 \
        --exact-updates 3
    ... --graph beam=16 pool=48 restart_every=50      # GraphSearch settings of the graph path

One process, one thread. The data: ``--n`` MuJoCo transitions under uniform random actions,
``hopper`` (Hopper-v5: 11-D state, 3-D action, 14-D pairs) or ``walker`` (Walker2d-v5: 17-D
state, 6-D action, 23-D pairs), with the ``auto`` bandwidths. Both fits use the settings of
``bench_scale.py`` (``top_k = 10``, a deterministic MLP with one hidden layer of 50, Adam 1e-2,
kernel-mean next states, BiCGSTAB with ``solver_tol="auto"``, seed 0) and differ only in
``neighbors``: ``knn`` (the exact k-NN query of every row at every update: what ``auto`` runs at
this size once the candidates lose their certificates) and ``--path``: ``graph``
(:mod:`nopg.model.graph_search`, approximate) or ``pool`` (:mod:`nopg.model.state_pools`, exact;
``--pool`` states in a first-tier pool, default 64; the rows it moved up a tier and the pairs it
answered by exact queries are counted per update).

Reported per path: ``setup`` seconds, the first update, the mean over all updates (the first
included: it builds the graph and the warm pools, or the state pools), the mean of the others, and
the seconds of each spent in the top-k selection. For the second path, after its last update and
at its policy: (graph) recall@top_k of the rows of ``P`` against the exact query of the same
pairs, and ``J_hat`` and the policy gradient of its model against a fresh exact (``knn``) model at
the same policy (relative ``J_hat`` error, gradient cosine, norm ratio: what ``nopg tune-k``
reports for ``top_k``). Times are wall-clock; compare the ratios (second path / exact, same run).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from nopg import NOPG, GradientAscent, ModelConfig, NOPGConfig, TransitionDataset  # noqa: E402
from nopg.bandwidth.selection import select_bandwidths  # noqa: E402
from nopg.model.bellman import NonparametricBellman  # noqa: E402
from nopg.policies.networks import DeterministicMLPPolicy  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _harness import Stopwatch, add_out_arg, time_calls, timed, write_json  # noqa: E402


def walker_data(n: int, seed: int = 0) -> TransitionDataset:
    """``n`` Walker2d-v5 transitions under uniform random actions (17-D state, 6-D action)."""
    import gymnasium as gym

    env = gym.make("Walker2d-v5")
    rng = np.random.default_rng([seed, 1])
    obs, _ = env.reset(seed=seed)
    S, A, R, SN, T = [], [], [], [], []
    while len(S) < n:
        a = rng.uniform(-1.0, 1.0, env.action_space.shape[0])
        nxt, r, term, trunc, _ = env.step(a)
        S.append(obs), A.append(a), R.append(r), SN.append(nxt), T.append(term)
        obs = env.reset()[0] if term or trunc else nxt
    env.close()
    return TransitionDataset(np.array(S), np.array(A), np.array(R), np.array(SN), np.array(T))


def make_data(kind: str, n: int) -> TransitionDataset:
    if kind == "hopper":
        from nopg.envs.hopper import collect_hopper

        return collect_hopper(n, seed=0)
    return walker_data(n)


def fit(data: TransitionDataset, neighbors: str, updates: int, lr: float, k: int,
        graph_options: dict | None = None, pool: int | None = None) -> tuple[dict, NOPG]:
    """``setup``, then ``updates`` timed updates of NOPG with ``neighbors`` (``graph_options``:
    settings of :class:`nopg.model.graph_search.GraphSearch` other than the model's)."""
    bw = select_bandwidths(data, "auto")
    torch.manual_seed(0)
    policy = DeterministicMLPPolicy(data.state_dim, data.action_dim,
                                    action_max=float(np.abs(data.actions).max()), hidden=(50,))
    algo = NOPG(policy,
                NOPGConfig(optimizer=GradientAscent(learning_rate=lr),
                           model=ModelConfig(top_k=k, neighbors=neighbors, n_mc_next=None,
                                             solver="bicgstab",
                                             n_candidates=pool if neighbors == "pool" else None)))
    _, setup_watch = timed(algo.setup, data, bw, data.states[:1])
    setup = setup_watch.wall_s
    if graph_options:
        from nopg.model.graph_search import DEFAULT_BEAM, DEFAULT_POOL, GraphSearch

        sel = algo.model_.selector
        options = {"pool": max(DEFAULT_POOL, 2 * k), "beam": max(DEFAULT_BEAM, k), **graph_options}
        sel._graph_search = GraphSearch(sel.states, sel.actions, index=sel.joint_index(), **options)
    select_log: list[float] = []
    time_calls(algo.model_.selector, "select", select_log)
    times, select, J, uncertified, promoted = [], [], [], [], []
    pools = algo.model_.selector.state_pools
    for i in range(updates):
        select_log.clear()
        with Stopwatch() as watch:
            m = algo.step()
        times.append(watch.wall_s)
        select.append(sum(select_log))
        J.append(m["J_hat"])
        if pools is not None:
            uncertified.append(pools.uncertified)
            promoted.append(pools.promoted)
            pools.uncertified = pools.promoted = 0
        print(f"{neighbors} update {i + 1}: {times[-1]:.2f} s (select {select[-1]:.2f} s), "
              f"J_hat {m['J_hat']:.5f}", file=sys.stderr, flush=True)
    rest = times[1:] or times
    return {"neighbors": neighbors, "updates": updates, "setup_s": setup, "first_s": times[0],
            "mean_s": float(np.mean(times)), "mean_after_first_s": float(np.mean(rest)),
            "select_mean_s": float(np.mean(select)),
            "select_after_first_s": float(np.mean(select[1:] or select)),
            "J_hat": J, "uncertified_pairs": uncertified, "promoted_rows": promoted}, algo


def accuracy(algo: NOPG, data: TransitionDataset, k: int) -> dict:
    """Recall of the second path's rows of ``P`` and its ``J_hat`` and gradient against a fresh
    exact model at the same policy."""
    model = algo.model_
    sel = model.selector
    found: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []
    inner = sel.select

    def record(states, actions, sets=None):
        idx = inner(states, actions, sets)
        if sets is not None and states.shape[0] == model.n:
            found.append((states, actions, idx))
        return idx

    sel.select = record

    def estimate(m: NonparametricBellman) -> tuple[float, np.ndarray]:
        sol = m.solution(algo.policy, algo.initial_states_, torch.Generator().manual_seed(0))
        grads = torch.autograd.grad(sol.surrogate(), list(algo.policy.parameters()))
        return sol.J, torch.cat([g.reshape(-1) for g in grads]).double().cpu().numpy()

    J_g, g_g = estimate(model)
    sel.select = inner
    out: dict = {}
    if found:
        states, actions, idx = found[-1]                             # (n, d_s), (n, 1, d_a), (n, 1, k)
        exact = sel.joint_index().query_index(torch.cat([states, actions[:, 0]], 1), k)
        a, b = np.sort(idx.reshape(model.n, k).numpy(), 1), exact.numpy()
        hits = sum(int(np.isin(b[i], a[i]).sum()) for i in range(model.n))
        out["recall"] = hits / b.size
        out["rows_exact"] = float(np.mean([np.array_equal(a[i], np.sort(b[i])) for i in range(model.n)]))
    exact_model = NonparametricBellman(data, model.bandwidths, algo.config.gamma,
                                       config=_with(model.config, neighbors="knn"))
    J_e, g_e = estimate(exact_model)
    out.update({"J_graph": J_g, "J_exact": J_e, "J_rel_err": abs(J_g - J_e) / abs(J_e),
                "grad_cos": float(g_g @ g_e / (np.linalg.norm(g_g) * np.linalg.norm(g_e))),
                "grad_norm_ratio": float(np.linalg.norm(g_g) / np.linalg.norm(g_e))})
    return out


def _with(config, **changes):
    from dataclasses import replace

    return replace(config, **changes)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", default="hopper", choices=["hopper", "walker"])
    p.add_argument("--n", type=int, default=100_000)
    p.add_argument("--updates", type=int, default=20, help="updates of the graph path")
    p.add_argument("--exact-updates", type=int, default=None,
                   help="updates of the exact path (default: --updates)")
    p.add_argument("--k", type=int, default=10)
    p.add_argument("--lr", type=float, default=1e-2)
    p.add_argument("--path", default="graph", choices=["graph", "pool"],
                   help="the path compared with the exact one")
    p.add_argument("--pool", type=int, default=None, help="states per pool (--path pool)")
    p.add_argument("--graph", nargs="*", default=[], metavar="NAME=INT",
                   help="GraphSearch settings of the graph path, e.g. beam=16 restart_every=50")
    add_out_arg(p, "--json", help="also write the results (one JSON document) to this file")
    args = p.parse_args(argv)
    graph_options = {key: int(value) for key, value in (item.split("=") for item in args.graph)}
    torch.set_num_threads(1)
    data, data_watch = timed(make_data, args.data, args.n)
    out: dict = {"data": args.data, "n": data.n, "dims": data.state_dim + data.action_dim,
                 "data_s": data_watch.wall_s, "threads": torch.get_num_threads()}
    exact_updates = args.exact_updates or args.updates
    out["exact"], _ = fit(data, "knn", exact_updates, args.lr, args.k)
    out["graph_options"], out["pool"] = graph_options, args.pool
    out[args.path], algo = fit(data, args.path, args.updates, args.lr, args.k,
                               graph_options if args.path == "graph" else None, args.pool)
    out["accuracy"] = accuracy(algo, data, args.k)
    e, g = out["exact"], out[args.path]
    out["ratio_mean"] = g["mean_s"] / e["mean_s"]
    out["ratio_after_first"] = g["mean_after_first_s"] / e["mean_after_first_s"]
    out["ratio_select_after_first"] = g["select_after_first_s"] / e["select_after_first_s"]
    print(json.dumps(out, indent=1))
    if args.out:
        write_json(args.out, out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
