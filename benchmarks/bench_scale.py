"""Time NOPG policy updates against the number of transitions (issue: scale).

Pendulum-like data (state ``[cos th, sin th, th_dot]``, one action in [-2, 2], next states from
the Pendulum-v1 equations, vectorised here in NumPy so that 10^6 samples take a second), the
library's default ``auto`` bandwidths (``--bandwidth silverman``: Silverman's rule, the reference
of the earlier tables), ``top_k = 10``, a deterministic 3-50-1 MLP, kernel-mean next states by
default (``--mc-next none``; ``--mc-next auto`` is the library's default, which draws 3 next states per
transition afresh at every update below 10^5 samples, and ``--mc-next N`` draws N), BiCGSTAB with warm
starts and the library's default ``solver_tol="auto"`` (``--tol`` sets a relative residual). Every
size runs in its own subprocess so that its peak memory (max RSS) is its own.

For each ``n`` the script times ``NOPG.setup`` (``setup s``) and then ``--updates`` policy
updates (default 100) of the sparse path (default ``neighbors="auto"``: candidates, with runs of exact k-NN
queries after updates that re-centre most rows) from the start. It
reports the first update (which also builds the candidate sets), the mean over all of them (what
a user pays for a fit of that length), the mean over the first 5 and the steady state (the mean
over the last 20), the time spent selecting the top-k entries (``nbr ms``, mean and steady), the
rows re-centred per update (first 5 / steady) and, where it fits (``n <= --dense-max``), the
paper's dense top-k path (``neighbors="dense"`` with the unpreconditioned BiCGSTAB of the core
issue) on the same data in the same run: the speed-up and the accuracy of the sparse model
(after its updates, so its candidates were built at earlier policies) against a dense top-k
model at the same policy. Up to ``--paper-max`` it also times the paper's method as the issue
describes it (full transition matrix, every row sorted, top k kept, dense solves). ``--progress N``
prints the elapsed time and ``J_hat`` every N updates (and keeps them in the JSON's ``trace``), for
long fits such as 1500 updates at 10^6.

    OMP_NUM_THREADS=1 python benchmarks/bench_scale.py --sizes 1000 3000 10000 100000 1000000
    OMP_NUM_THREADS=1 python benchmarks/bench_scale.py --data hopper --sizes 100000 --dense-max 0
    python benchmarks/bench_scale.py --device cuda --dtype float32 --sizes 100000 1000000
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

import numpy as np
import torch
from _harness import Stopwatch, add_out_arg, median, peak_rss_mb, time_calls, timed, write_json

import nopg
from nopg import NOPG, GradientAscent, ModelConfig, NOPGConfig, TransitionDataset
from nopg.bandwidth.selection import select_bandwidths
from nopg.model.defaults import check_auto_count
from nopg.policies.networks import DeterministicMLPPolicy


def pendulum_data(n: int, seed: int = 0) -> TransitionDataset:
    """``n`` uniformly random one-step transitions of the gymnasium Pendulum-v1 dynamics."""
    rng = np.random.default_rng(seed)
    th = rng.uniform(-np.pi, np.pi, n)
    thdot = rng.uniform(-8.0, 8.0, n)
    u = rng.uniform(-2.0, 2.0, n)
    g, m, length, dt = 10.0, 1.0, 1.0, 0.05
    norm_th = ((th + np.pi) % (2 * np.pi)) - np.pi
    reward = -(norm_th ** 2 + 0.1 * thdot ** 2 + 0.001 * u ** 2)
    new_thdot = np.clip(thdot + (3 * g / (2 * length) * np.sin(th) + 3.0 / (m * length ** 2) * u) * dt,
                        -8.0, 8.0)
    new_th = th + new_thdot * dt
    obs = np.stack([np.cos(th), np.sin(th), thdot], 1)
    nxt = np.stack([np.cos(new_th), np.sin(new_th), new_thdot], 1)
    return TransitionDataset(obs, u[:, None], reward, nxt, np.zeros(n, bool))


def hopper_data(n: int, seed: int = 0) -> TransitionDataset:
    """``n`` Hopper-v5 transitions under uniform random actions (11-D state, 3-D action)."""
    from nopg.envs.hopper import collect_hopper

    return collect_hopper(n, seed=seed)


def fitted_defaults(n: int, updates: int, n_mc_next: int | None) -> NOPG:
    """NOPG with the library's defaults (``top_k=10``, Adam 1e-2, ``auto`` bandwidths, the 3-50-1
    MLP of this benchmark, seed 0) after ``updates`` updates on :func:`pendulum_data` of size ``n``
    from the hanging state; ``n_mc_next`` draws per transition (``None``: the kernel mean)."""
    data = pendulum_data(n)
    torch.manual_seed(0)
    policy = DeterministicMLPPolicy(3, 1, action_max=2.0, hidden=(50,))
    algo = NOPG(policy,
                NOPGConfig(optimizer=GradientAscent(learning_rate=1e-2),
                           model=ModelConfig(top_k=10, n_mc_next=n_mc_next)))
    algo.setup(data, select_bandwidths(data, "auto"), np.array([[-1.0, 0.0, 0.0]]))
    for _ in range(updates):
        algo.step()
    return algo


def time_path(data: TransitionDataset, neighbors: str, args: argparse.Namespace, updates: int,
              preconditioner: str = "auto") -> tuple[dict, NOPG]:
    """``algo.setup`` (timed as ``setup_s``), then ``updates`` timed updates from the start.

    ``mean_s`` is the mean over all of them, the first included (what a user pays for a fit of
    that many updates: the first update builds the candidate sets); ``steady_s`` the mean over
    the last ``min(20, updates // 2)``; ``neighbor_s`` the share of each spent selecting the top-k
    entries (``nopg.model.candidates.TopKSelector.select``); ``refined`` the rows re-centred per update.
    """
    bw = select_bandwidths(data, args.bandwidth,
                           action_factor=np.full(data.action_dim, args.action_factor))
    torch.manual_seed(0)
    policy = DeterministicMLPPolicy(data.state_dim, data.action_dim,
                                    action_max=float(np.abs(data.actions).max()), hidden=(50,))
    config = NOPGConfig(optimizer=GradientAscent(learning_rate=args.lr),
                        model=ModelConfig(top_k=args.k, neighbors=neighbors, n_candidates=args.candidates,
                                          n_mc_next=args.mc_next, solver="bicgstab", solver_tol=args.tol,
                                          solver_error=args.error, dtype=args.dtype, device=args.device,
                                          preconditioner=preconditioner))
    algo = NOPG(policy, config)
    s0 = np.array([[-1.0, 0.0, 0.0]]) if args.data == "pendulum" else data.states[:1]
    _, setup_watch = timed(algo.setup, data, bw, s0, device=args.device)
    setup = setup_watch.wall_s
    select_log: list[float] = []
    time_calls(algo.model_.selector, "select", select_log)
    times, cpu, its, refined, neighbor, trace = [], [], [], [], [], []
    every = args.progress
    for i in range(updates):
        select_log.clear()
        with Stopwatch(args.device) as watch:
            m = algo.step()
        times.append(watch.wall_s)
        cpu.append(watch.cpu_s)
        neighbor.append(sum(select_log))
        its.append((m["solver_iters_q"], m["solver_iters_mu"]))
        refined.append(m["refined_rows"])
        if every and ((i + 1) % every == 0 or i + 1 == updates):
            trace.append({"update": i + 1, "elapsed_s": float(np.sum(times)), "J_hat": m["J_hat"]})
            print(f"update {i + 1}: {np.sum(times):.1f} s since setup, "
                  f"{1e3 * np.mean(times[-every:]):.1f} ms per update over the last {every}, "
                  f"J_hat {m['J_hat']:.4f}", file=sys.stderr, flush=True)
    tail = slice(updates - max(1, min(20, updates // 2)), None)
    return {"neighbors": neighbors, "preconditioner": preconditioner, "updates": updates,
            "setup_s": setup, "first_s": times[0], "first_neighbor_s": neighbor[0],
            "mean_s": float(np.mean(times)), "mean_neighbor_s": float(np.mean(neighbor)),
            "first5_s": float(np.mean(times[:5])),
            "steady_s": float(np.mean(times[tail])),
            "steady_neighbor_s": float(np.mean(neighbor[tail])),
            "update_s": float(np.median(times[tail])),
            "refined_first5": float(np.mean(refined[:5])),
            "refined_steady": float(np.mean(refined[tail])),
            "total_s": float(np.sum(times)), "total_cpu_s": float(np.sum(cpu)),
            "iters": its[-1], "residual": max(m["residual_q"], m["residual_mu"]),
            "J_hat": m["J_hat"], "trace": trace}, algo


def time_paper_path(data: TransitionDataset, args: argparse.Namespace, updates: int) -> dict:
    """The paper's method, as the issue describes it: the full (n, n) transition matrix,
    every row sorted, the top k kept and renormalised, dense solves; one Adam update each."""
    bw = select_bandwidths(data, args.bandwidth,
                           action_factor=np.full(data.action_dim, args.action_factor))
    torch.manual_seed(0)
    policy = DeterministicMLPPolicy(data.state_dim, data.action_dim,
                                    action_max=float(np.abs(data.actions).max()), hidden=(50,)).double()
    opt = torch.optim.Adam(policy.parameters(), lr=args.lr)
    t = {k: torch.tensor(v, dtype=torch.float64) for k, v in
         dict(s=data.states / bw.state, a=data.actions / bw.action, sn=data.next_states / bw.state,
              r=data.rewards, g=data.discounts(0.99)).items()}
    s0 = torch.tensor([[-1.0, 0.0, 0.0]] if args.data == "pendulum" else data.states[:1],
                      dtype=torch.float64)
    h_s, h_a = torch.tensor(bw.state), torch.tensor(bw.action)
    eye = torch.eye(data.n, dtype=torch.float64)

    def responsibilities(states: torch.Tensor) -> torch.Tensor:
        a = policy(states * h_s) / h_a
        d2 = torch.cdist(states, t["s"]) ** 2 + torch.cdist(a, t["a"]) ** 2
        full = torch.softmax(-0.5 * d2, dim=1)
        vals, idx = torch.sort(full, dim=1, descending=True)
        kept = vals[:, :args.k] / vals[:, :args.k].sum(1, keepdim=True)
        return torch.zeros_like(full).scatter(1, idx[:, :args.k], kept)

    times = []
    for i in range(updates + 1):
        with Stopwatch() as watch:
            P = responsibilities(t["sn"]) * t["g"][:, None]
            eps0 = responsibilities(s0).mean(0)
            lam = (eye - P).detach()
            q = torch.linalg.solve(lam, t["r"])
            mu = torch.linalg.solve(lam.T, eps0.detach())
            loss = -(eps0 @ q + mu @ (P @ q))
            opt.zero_grad()
            loss.backward()
            opt.step()
        if i:
            times.append(watch.wall_s)
    return {"update_s": median(times)}


def accuracy(algo: NOPG, data: TransitionDataset, args: argparse.Namespace) -> dict:
    """J_hat and gradient of the trained sparse model against a fresh dense top-k model at the
    same policy (the sparse model's candidates were built at earlier policies). With Monte-Carlo
    next states both models draw the same states (generators of one seed)."""
    from nopg.model.bellman import NonparametricBellman

    def estimate(model: NonparametricBellman) -> tuple[float, np.ndarray]:
        sol = model.solution(algo.policy, algo.initial_states_, torch.Generator().manual_seed(0))
        grads = torch.autograd.grad(sol.surrogate(), list(algo.policy.parameters()))
        return sol.J, torch.cat([g.reshape(-1) for g in grads]).double().cpu().numpy()

    J_s, g_s = estimate(algo.model_)
    dense = nopg.bellman_model(data, algo.model_.bandwidths, algo.config.gamma, top_k=args.k,
                                 neighbors="dense", dtype=algo.model_.dtype, device=algo.device,
                                 solver="bicgstab", solver_tol=args.tol,
                                 n_mc_next=algo.model_.n_mc_next)
    J_d, g_d = estimate(dense)
    return {"J_rel_err": abs(J_s - J_d) / abs(J_d),
            "grad_cos": float(g_s @ g_d / (np.linalg.norm(g_s) * np.linalg.norm(g_d)))}


def _tolerance(text: str) -> str | float:
    return text if text == "auto" else float(text)


def one_size(args: argparse.Namespace) -> dict:
    torch.set_num_threads(args.threads)
    n = args.n
    data, data_watch = timed(pendulum_data if args.data == "pendulum" else hopper_data, n)
    out = {"n": n, "data": args.data, "data_s": data_watch.wall_s, "threads": torch.get_num_threads(),
           "device": args.device, "dtype": args.dtype, "k": args.k}
    out["sparse"], algo = time_path(data, args.neighbors, args, args.updates,
                                    preconditioner=args.preconditioner)
    if n <= args.dense_max:
        # The core issue's dense top-k path: (n, n) log-weights, unpreconditioned BiCGSTAB.
        out["dense"], _ = time_path(data, "dense", args, max(1, min(args.updates, args.dense_updates)),
                                    preconditioner="none")
        out["speedup"] = out["dense"]["update_s"] / out["sparse"]["update_s"]
        out["accuracy"] = accuracy(algo, data, args)
    if n <= args.paper_max:
        out["paper"] = time_paper_path(data, args, max(1, min(args.updates, args.dense_updates)))
        out["speedup_paper"] = out["paper"]["update_s"] / out["sparse"]["update_s"]
    out["peak_rss_mb"] = peak_rss_mb()
    if args.device.startswith("cuda"):
        out["peak_cuda_mb"] = torch.cuda.max_memory_allocated() / 2**20
    return out


def _mc_next(text: str) -> str | int | None:
    value = None if text == "none" else int(text) if text.lstrip("-").isdigit() else text
    if not check_auto_count(value):                  # the library's rule for n_mc_next
        raise argparse.ArgumentTypeError(f"--mc-next must be 'none', 'auto' or a positive int. "
                                         f"Got {text!r}.")
    return value


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[1000, 3000, 10000, 100000, 1000000])
    p.add_argument("--n", type=int, help=argparse.SUPPRESS)   # internal: one size in this process
    p.add_argument("--data", default="pendulum", choices=["pendulum", "hopper"],
                   help="Pendulum-like data (3-D state, 1-D action) or Hopper-v5 random-action "
                        "data (11-D, 3-D; needs the envs extra)")
    p.add_argument("--k", type=int, default=10)
    p.add_argument("--candidates", type=int, default=None)
    p.add_argument("--neighbors", default="auto", choices=["auto", "candidates", "knn"])
    p.add_argument("--updates", type=int, default=100,
                   help="timed updates from the start (the issue's figure: the mean over 100)")
    p.add_argument("--dense-updates", type=int, default=3)
    p.add_argument("--dense-max", type=int, default=10000)
    p.add_argument("--paper-max", type=int, default=3000,
                   help="largest n for the paper-style baseline (full P, sorted rows)")
    p.add_argument("--preconditioner", default="auto", choices=["auto", "ilu", "aggregation", "none"],
                   help="BiCGSTAB preconditioner of the sparse path (NOPGConfig.preconditioner)")
    p.add_argument("--error", type=float, default=None,
                   help="solver_error: the error target of solver_tol='auto' (default: the "
                        "library's rule, nopg.model.bellman_solver.auto_error)")
    p.add_argument("--tol", type=_tolerance, default="auto",
                   help="solver_tol: 'auto' (the library's default) or a relative residual")
    p.add_argument("--lr", type=float, default=1e-2, help="Adam step (the policy moves each update)")
    p.add_argument("--bandwidth", default="auto", choices=["silverman", "auto"],
                   help="bandwidth rule: the library's default 'auto' (k-NN state spacing, action "
                        "spread) or Silverman's (the reference of the earlier tables)")
    p.add_argument("--action-factor", type=float, default=1.0, help="multiplies h_a")
    p.add_argument("--mc-next", type=_mc_next, default=None,
                   help="next states per transition: 'none' (kernel mean, the default here), "
                        "'auto' (the library's default) or N Monte-Carlo draws per update")
    p.add_argument("--dtype", default="float64", choices=["float64", "float32"])
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--progress", type=int, default=0,
                   help="print the elapsed time and J_hat every N updates (to stderr)")
    add_out_arg(p, "--json", help="also write the results (one JSON document) to this file")
    args = p.parse_args(argv)
    if args.n is not None:
        print(json.dumps(one_size(args)))
        return 0
    rows = []
    print(f"# NOPG update time vs n: data={args.data}, k={args.k}, neighbors={args.neighbors}, "
          f"device={args.device}, dtype={args.dtype}, threads={args.threads}, "
          f"n_mc_next={args.mc_next or 'none'}, bandwidth={args.bandwidth}, "
          f"preconditioner={args.preconditioner}")
    print(f"{'n':>9} {'upd':>4} {'setup s':>8} {'first s':>8} {'mean ms':>9} {'nbr ms':>8} "
          f"{'first5 ms':>9} {'steady ms':>9} {'nbr ms':>8} {'refined 5/st':>14} {'iters q/mu':>11} "
          f"{'peak MB':>8} {'dense ms':>10} {'speed-up':>9} {'J rel err':>10} {'grad cos':>10} "
          f"{'paper ms':>9} {'speed-up':>9}")
    for n in args.sizes:
        cmd = [sys.executable, __file__, "--n", str(n)]
        for key, value in vars(args).items():
            if key not in ("sizes", "n", "out") and value is not None:
                cmd += [f"--{key.replace('_', '-')}", str(value)]
        # With --progress the child's stderr (its progress lines) goes straight to the terminal.
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True,
                              stderr=None if args.progress else subprocess.PIPE)
        if proc.returncode != 0:
            err = (proc.stderr or "").strip().splitlines()
            print(f"{n:>9} failed: {err[-1] if err else proc.returncode}")
            print("\n".join(err[-25:]), file=sys.stderr)
            continue
        r = json.loads(proc.stdout.strip().splitlines()[-1])
        rows.append(r)
        s = r["sparse"]
        dense = (f"{1e3 * r['dense']['update_s']:10.1f} {r['speedup']:8.0f}x "
                 f"{r['accuracy']['J_rel_err']:10.1e} {r['accuracy']['grad_cos']:10.7f}"
                 if "dense" in r else f"{'-':>10} {'-':>9} {'-':>10} {'-':>10}")
        if "paper" in r:
            dense += f" {1e3 * r['paper']['update_s']:9.0f} {r['speedup_paper']:8.0f}x"
        refined = f"{s['refined_first5']:.0f}/{s['refined_steady']:.0f}"
        print(f"{n:>9} {s['updates']:>4} {s['setup_s']:8.2f} {s['first_s']:8.2f} "
              f"{1e3 * s['mean_s']:9.1f} {1e3 * s['mean_neighbor_s']:8.1f} "
              f"{1e3 * s['first5_s']:9.1f} {1e3 * s['steady_s']:9.1f} "
              f"{1e3 * s['steady_neighbor_s']:8.1f} {refined:>14} "
              f"{s['iters'][0]:>5}/{s['iters'][1]:<5} {r['peak_rss_mb']:8.0f} {dense}",
              flush=True)
    if args.out:
        write_json(args.out, rows, indent=2)
    return 0 if rows else 1


if __name__ == "__main__":
    sys.exit(main())
